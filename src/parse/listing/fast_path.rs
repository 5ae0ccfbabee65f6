//! The fast path: a listing body read by the byte scanner (`scanner.rs`), keys recognised by
//! comparing them with the key that followed the last one (`KeyShape`), the commonest values
//! written straight to their rows. `None` anywhere leaves the body to the serde reader.

use std::borrow::Cow;

use super::routing::{read_routed_field, route_of, FieldRoute, FieldValues, OwnedSuffixed};
use crate::model::fields::{FamilyKind, ScalarType, SNAPSHOT_FIELDS};
use crate::model::value::{Typed, Value};
use crate::model::Interval;
use super::general_info::scan_general_info;
use super::pending::PendingListing;
use crate::parse::scanner::Scanner;
use crate::short_bytes::{same_bytes, slot_of, text_bits};
use polars::prelude::PlHashMap;

/// The scanner's "not mine": the body goes to serde_json.
pub(super) struct LeftToSerde;

impl<'de> FieldValues<'de> for Scanner<'de> {
    type Error = LeftToSerde;
    fn value(&mut self) -> Result<Value<'de>, LeftToSerde> {
        Scanner::value(self).ok_or(LeftToSerde)
    }
    fn skip(&mut self) -> Result<(), LeftToSerde> {
        Scanner::skip(self).ok_or(LeftToSerde)
    }
}

/// The keys the fast path has met, in the order it first met them, with their routes: bodies
/// of one service list the same keys in the same order, so a key is usually recognised by
/// comparing it with the key that followed the previous one, without hashing it. When that
/// fails (a field missing, keys in another order) the key is looked up in `positions`, and the
/// comparisons go on from there, so one missing field costs one lookup, not one per key after it.
/// A lookup tries `recent` first, a direct-mapped table with no hashing of the whole key and no
/// call to `memcmp`, and `positions` only when that slot holds another key; bodies whose keys
/// come in any order are then read nearly as fast as those in the remembered order.
#[derive(Default)]
pub(super) struct KeyShape {
    /// Each key's bytes followed by `":`, as `Scanner::key_if` compares them, and its route.
    keys: Vec<(Box<[u8]>, CachedRoute)>,
    /// Each key's bytes -> its index in `keys`.
    positions: PlHashMap<Box<[u8]>, usize>,
    /// A key's slot -> 1 + the index in `keys` of the last key looked up there (0: none);
    /// empty until the first lookup. A guess, always checked: a collision only costs the
    /// lookup in `positions`, however the keys were chosen.
    recent: Vec<u16>,
    /// The index in `keys` of the key expected next in the body being read.
    cursor: usize,
}

/// Keys remembered at most: a service's catalogue is about 300; a body of thousands of made-up
/// keys must not grow the shape without end.
const MAX_SHAPE_KEYS: usize = 2048;
const _: () = assert!(MAX_SHAPE_KEYS < u16::MAX as usize);

/// Slots of `KeyShape::recent`, a power of two: about four per key of a service's catalogue.
const RECENT_SLOTS_LOG2: u32 = 10;

/// A `FieldRoute` that borrows nothing from a body: the catalogue's routes, or a mark that the
/// route is worked out from the key each time.
#[derive(Clone, Copy)]
enum CachedRoute {
    Snapshot(usize),
    Family {
        name: &'static str,
        kind: FamilyKind,
        interval: Interval,
    },
    TaUpdated(Interval),
    Ignored,
    /// A route that holds text of its key (a family the catalogue does not know, say).
    FromKey,
}

impl CachedRoute {
    fn of(route: &FieldRoute) -> Self {
        match route {
            FieldRoute::Snapshot(index) => Self::Snapshot(*index),
            FieldRoute::Suffixed(OwnedSuffixed::Family { name: Cow::Borrowed(name), kind: Some(kind), interval }) => {
                Self::Family { name, kind: *kind, interval: *interval }
            }
            FieldRoute::Suffixed(OwnedSuffixed::TaUpdated(interval)) => Self::TaUpdated(*interval),
            FieldRoute::Ignored => Self::Ignored,
            _ => Self::FromKey,
        }
    }

    fn route(self, key: &str) -> FieldRoute {
        match self {
            Self::Snapshot(index) => FieldRoute::Snapshot(index),
            Self::Family { name, kind, interval } => {
                FieldRoute::Suffixed(OwnedSuffixed::Family { name: Cow::Borrowed(name), kind: Some(kind), interval })
            }
            Self::TaUpdated(interval) => FieldRoute::Suffixed(OwnedSuffixed::TaUpdated(interval)),
            Self::Ignored => FieldRoute::Ignored,
            Self::FromKey => route_of(key),
        }
    }
}

impl KeyShape {
    /// Starts reading the keys of a new `data` object.
    fn restart(&mut self) {
        self.cursor = 0;
    }

    /// The index in `keys` of a key met before.
    #[inline]
    fn look_up(&mut self, key: &[u8]) -> Option<usize> {
        if self.recent.is_empty() {
            self.recent = vec![0; 1 << RECENT_SLOTS_LOG2];
        }
        let slot = slot_of(text_bits(key), RECENT_SLOTS_LOG2);
        if let Some(index) = usize::from(self.recent[slot]).checked_sub(1) {
            let stored = &self.keys[index].0;
            if same_bytes(&stored[..stored.len() - 2], key) {
                return Some(index);
            }
        }
        let index = *self.positions.get(key)?;
        // MAX_SHAPE_KEYS keeps every index + 1 within u16.
        self.recent[slot] = (index + 1) as u16;
        Some(index)
    }

    /// The next key of `data` and its route. (A small value: the hot loop passes it in registers.)
    #[inline]
    fn read_key<'de>(&mut self, scanner: &mut Scanner<'de>) -> Option<(&'de str, CachedRoute)> {
        if let Some((expected, route)) = self.keys.get(self.cursor) {
            let route = *route;
            if let Some(key) = scanner.key_if(expected) {
                self.cursor += 1;
                return Some((key, route));
            }
        }
        let key = scanner.key()?;
        if let Some(index) = self.look_up(key.as_bytes()) {
            self.cursor = index + 1;
            return Some((key, self.keys[index].1));
        }
        let cached = CachedRoute::of(&route_of(key));
        if self.keys.len() < MAX_SHAPE_KEYS {
            self.positions.insert(key.as_bytes().into(), self.keys.len());
            self.keys.push(([key.as_bytes(), b"\":"].concat().into_boxed_slice(), cached));
            self.cursor = self.keys.len();
        }
        Some((key, cached))
    }
}

/// A field of `data` on the fast path. The commonest cases, a number in a numeric family or a
/// snapshot number column, an array of pattern names and a string in a snapshot text column,
/// are written straight to their rows, exactly as `route_suffixed` and `convert` would write
/// them (the differential tests in `proptests.rs` hold the two paths equal); the rest goes
/// through `read_routed_field`.
fn scan_data_field<'de>(
    pending: &mut PendingListing<'de>,
    route: CachedRoute,
    key: &'de str,
    scanner: &mut Scanner<'de>,
) -> Option<()> {
    match route {
        CachedRoute::Family { name, kind: FamilyKind::Numeric, interval } if scanner.at_number() => {
            let number = scanner.number_as_f64()?;
            pending.rows.indicators.push((interval, Cow::Borrowed(name), Some(number)));
        }
        CachedRoute::Family { name, kind: FamilyKind::Patterns, interval } if scanner.at_array() => {
            // Nulls in the array carry no pattern; any other element is left to serde_json.
            scanner.strings(|pattern| {
                pending.rows.patterns.push((interval, Cow::Borrowed(name), Some(pattern)));
            })?;
        }
        CachedRoute::Snapshot(index) if SNAPSHOT_FIELDS[index].1 == ScalarType::F64 && scanner.at_number() => {
            Typed::store(&mut pending.rows.scalars[index], Typed::F64(scanner.number_as_f64()?));
        }
        CachedRoute::Snapshot(index) if SNAPSHOT_FIELDS[index].1 == ScalarType::Str && scanner.at_string() => {
            Typed::store(&mut pending.rows.scalars[index], Typed::Str(scanner.string()?));
        }
        _ => return read_routed_field(pending, route.route(key), Cow::Borrowed(key), scanner).ok(),
    }
    Some(())
}

/// The fast path over a whole body (see `scanner`): `None` leaves the body to serde_json, and
/// `pending` must then be thrown away.
pub(super) fn scan_listing<'de>(
    body: &'de [u8],
    pending: &mut PendingListing<'de>,
    shape: &mut KeyShape,
) -> Option<()> {
    let mut scanner = Scanner::new(body);
    scanner.object(|scanner, key| {
        match key {
            "data" => {
                if !scanner.at_object() {
                    return None;
                }
                pending.field = Some(("", Cow::Borrowed(key)));
                shape.restart();
                scanner.members(|scanner, _| {
                    let (key, route) = shape.read_key(scanner)?;
                    scan_data_field(pending, route, key, scanner)
                })?;
                pending.saw_data = true;
            }
            "generalInfo" => scan_general_info(scanner, pending)?,
            _ => scanner.skip()?,
        }
        pending.field = None;
        Some(())
    })?;
    scanner.finish()
}
