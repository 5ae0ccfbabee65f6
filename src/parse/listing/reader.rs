//! A listing body read by the scanner: the top level, and `data`, whose keys are recognised by
//! comparing them with the key that followed the last one (`KeyShape`), its commonest values
//! written straight to their rows and the rest routed by the catalogue (`routing.rs`).
//! `generalInfo` has its own file.

use std::borrow::Cow;

use super::general_info::read_general_info;
use super::pending::PendingListing;
use super::routing::{route_of, route_suffixed, FieldRoute, OwnedSuffixed, INTERVAL_NAMES};
use crate::model::fields::{FamilyKind, ScalarType, SNAPSHOT_FIELDS};
use crate::model::value::{convert, Mismatch, Typed};
use crate::model::Interval;
use crate::parse::scanner::{Scanner, Unit};
use crate::short_bytes::{same_bytes, slot_of, text_bits};
use polars::prelude::PlHashMap;

/// The keys the reader has met, in the order it first met them, with their routes: bodies
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

    /// The next key of `data` and its route, and whether its colon was read with it. (A small
    /// value: the hot loop passes it in registers.) `Escaped` for a key with escapes, which is
    /// routed each time and not remembered.
    #[inline]
    fn read_key<'de>(&mut self, scanner: &mut Scanner<'de>) -> Option<DataKey<'de>> {
        if let Some((expected, route)) = self.keys.get(self.cursor) {
            let route = *route;
            if let Some(key) = scanner.key_if(expected) {
                self.cursor += 1;
                return Some(DataKey::Plain(key, route, true));
            }
        }
        let key = match scanner.key()? {
            Cow::Borrowed(key) => key,
            Cow::Owned(key) => return Some(DataKey::Escaped(key)),
        };
        if let Some(index) = self.look_up(key.as_bytes()) {
            self.cursor = index + 1;
            return Some(DataKey::Plain(key, self.keys[index].1, false));
        }
        let cached = CachedRoute::of(&route_of(key));
        if self.keys.len() < MAX_SHAPE_KEYS {
            self.positions.insert(key.as_bytes().into(), self.keys.len());
            self.keys.push(([key.as_bytes(), b"\":"].concat().into_boxed_slice(), cached));
            self.cursor = self.keys.len();
        }
        Some(DataKey::Plain(key, cached, false))
    }
}

/// A key of `data` as `KeyShape::read_key` reads it.
enum DataKey<'de> {
    /// The key, its route, and whether its colon was read.
    Plain(&'de str, CachedRoute, bool),
    Escaped(String),
}

/// A field of `data`. The commonest cases, a number in a numeric family or a snapshot number
/// column, an array of pattern names and a string in a snapshot text column, are written
/// straight to their rows, exactly as `route_suffixed` and `convert` would write them (the
/// property tests hold them equal to the reference); the rest goes through `read_routed_field`.
#[inline]
fn read_data_field<'de>(
    pending: &mut PendingListing<'de>,
    route: CachedRoute,
    key: &'de str,
    scanner: &mut Scanner<'de>,
) -> Option<()> {
    let read = match route {
        CachedRoute::Family { name, kind: FamilyKind::Numeric, interval } if scanner.at_number() => scanner
            .unit(Unit::Value, Scanner::number_as_f64)
            .map(|number| pending.rows.indicators.push((interval, Cow::Borrowed(name), Some(number)))),
        CachedRoute::Family { name, kind: FamilyKind::Patterns, interval } if scanner.at_array() => {
            let start = scanner.position();
            let written = pending.rows.patterns.len();
            // Nulls in the array carry no pattern.
            let patterns = &mut pending.rows.patterns;
            let read = scanner.strings(|pattern| patterns.push((interval, Cow::Borrowed(name), Some(pattern))));
            if read.is_some() {
                read
            } else {
                // Not an array of strings and nulls (or not JSON): read again as a value.
                pending.rows.patterns.truncate(written);
                scanner.rewind(start);
                read_routed_field(pending, route.route(key), key, scanner)
            }
        }
        CachedRoute::Snapshot(index) if SNAPSHOT_FIELDS[index].1 == ScalarType::F64 && scanner.at_number() => scanner
            .unit(Unit::Value, Scanner::number_as_f64)
            .map(|number| Typed::store(&mut pending.rows.scalars[index], Typed::F64(number))),
        CachedRoute::Snapshot(index) if SNAPSHOT_FIELDS[index].1 == ScalarType::Str && scanner.at_string() => scanner
            .unit(Unit::Value, Scanner::string)
            .map(|text| Typed::store(&mut pending.rows.scalars[index], Typed::Str(text))),
        _ => read_routed_field(pending, route.route(key), key, scanner),
    };
    if read.is_none() {
        return failed_in_field(pending, matches!(route, CachedRoute::Ignored), key);
    }
    read
}

/// A field of `data` by its route: its value read, converted and stored, or a drift row.
fn read_routed_field<'de>(
    pending: &mut PendingListing<'de>,
    route: FieldRoute,
    key: &str,
    scanner: &mut Scanner<'de>,
) -> Option<()> {
    match route {
        FieldRoute::Snapshot(index) => {
            let value = scanner.unit(Unit::Value, Scanner::value)?;
            match convert(value, SNAPSHOT_FIELDS[index].1) {
                Ok(typed) => Typed::store(&mut pending.rows.scalars[index], typed),
                Err(mismatch) => pending.drifted("data", key, mismatch),
            }
        }
        FieldRoute::Suffixed(suffixed) => {
            let value = scanner.unit(Unit::Value, Scanner::value)?;
            if let Err(mismatch) = route_suffixed(&mut pending.rows, suffixed, value) {
                pending.drifted("data", key, mismatch);
            }
        }
        FieldRoute::UnknownInterval(found) => {
            scanner.unit(Unit::Ignored, Scanner::skip)?;
            pending.drifted("data", key, Mismatch { expected: INTERVAL_NAMES, found });
        }
        FieldRoute::Ignored => scanner.unit(Unit::Ignored, Scanner::skip)?,
    }
    Some(())
}

/// Reading a field of `data` failed: the error names the field, or `data` for a field nobody
/// reads (as the serde visitors before the one reader named them).
#[cold]
fn failed_in_field<'de>(pending: &mut PendingListing<'de>, ignored: bool, key: impl Into<Cow<'de, str>>) -> Option<()> {
    if ignored {
        pending.failed_in("", "data")
    } else {
        pending.failed_in("data", key)
    }
}

/// A field of `data` whose key holds escapes: routed by its text, not remembered.
#[cold]
fn read_escaped_field<'de>(pending: &mut PendingListing<'de>, key: String, scanner: &mut Scanner<'de>) -> Option<()> {
    let route = route_of(&key);
    let ignored = matches!(route, FieldRoute::Ignored);
    let read = scanner.colon().and_then(|()| read_routed_field(pending, route, &key, scanner));
    if read.is_none() {
        return failed_in_field(pending, ignored, key);
    }
    read
}

/// `data`: an object of fields.
fn read_data<'de>(scanner: &mut Scanner<'de>, pending: &mut PendingListing<'de>, shape: &mut KeyShape) -> Option<()> {
    scanner.unit(Unit::Object("the token listing object"), |scanner| {
        if !scanner.at_object() {
            return None;
        }
        shape.restart();
        scanner.members(|scanner, _| match shape.read_key(scanner)? {
            DataKey::Plain(key, route, colon_read) => {
                if !colon_read && scanner.colon().is_none() {
                    return failed_in_field(pending, matches!(route, CachedRoute::Ignored), key);
                }
                read_data_field(pending, route, key, scanner)
            }
            DataKey::Escaped(key) => read_escaped_field(pending, key, scanner),
        })
    })
}

/// A whole listing body into `pending`. `None` if it is not JSON (the scanner's failure and
/// `pending.field` say where); `pending` is then thrown away.
pub(super) fn read_listing<'de>(
    scanner: &mut Scanner<'de>,
    pending: &mut PendingListing<'de>,
    shape: &mut KeyShape,
) -> Option<()> {
    scanner.unit(Unit::Document("a JSON object with `data` and `generalInfo`"), |scanner| {
        scanner.object(|scanner, key| {
            match key.as_ref() {
                "data" => {
                    if scanner.colon().and_then(|()| read_data(scanner, pending, shape)).is_none() {
                        return pending.failed_in("", key);
                    }
                    pending.saw_data = true;
                }
                "generalInfo" => {
                    if scanner.colon().and_then(|()| read_general_info(scanner, pending)).is_none() {
                        return pending.failed_in("", key);
                    }
                }
                _ => scanner.skip_member()?,
            }
            Some(())
        })?;
        scanner.finish()
    })
}
