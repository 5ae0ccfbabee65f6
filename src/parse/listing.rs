//! Listing bodies into the listing frames.
//!
//! A body is read twice at most. First by the byte scanner (`scanner.rs`), which handles the
//! shape nearly every body has; if it declines anything, by serde visitors, which read every
//! valid body and say where an invalid one goes wrong. Both look at each key once and route it
//! by the field catalogue in `read_routed_field`: scalar fields converted to their column type,
//! interval-suffixed fields routed by the JSON type of their value into the long frames,
//! everything else skipped without being built (the scanner's two shortcuts in
//! `scan_data_field` write the rows it would, held equal by the differential tests). The
//! rows of one body are collected first (borrowing strings from the body) and appended only
//! when the whole body parsed, so a malformed body leaves no partial rows behind.

use std::borrow::Cow;
use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};

use super::document::{parse_document, seed_from_visitor, DecodeContext};
use super::general_info::{scan_general_info, GeneralInfo};
use super::pending::PendingListing;
use super::scanner::Scanner;
use crate::error::Error;
use crate::frames::listing::Name;
use crate::frames::{DriftRow, ListingColumns, ListingFrames, ListingRows};
use crate::model::fields::{
    classify_data_key, unknown_pattern_family, DataKey, FamilyKind, ScalarType, SuffixedKey, SNAPSHOT_FIELDS,
};
use crate::model::value::{convert, excerpt, parse_number_text, BorrowedStr, Mismatch, Typed, Value};
use crate::model::Endpoint;
use crate::model::Interval;
use polars::prelude::PlHashMap;

/// One listing response body and what is known about it.
#[derive(Clone, Copy, Debug)]
pub struct ListingBody<'a> {
    pub body: &'a [u8],
    /// The id the caller asked for; `None` takes the body's `data.id`.
    pub token: Option<&'a str>,
    pub fetched_at: Option<i64>,
}

struct ListingDocument<'a, 'de>(&'a mut PendingListing<'de>);

seed_from_visitor!(ListingDocument, deserialize_map);

impl<'de> Visitor<'de> for ListingDocument<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object with `data` and `generalInfo`")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            match key.as_ref() {
                "data" => {
                    pending.field = Some(("", key));
                    map.next_value_seed(ListingData(pending))?;
                    pending.saw_data = true;
                }
                "generalInfo" => {
                    pending.field = Some(("", key));
                    map.next_value_seed(GeneralInfo(pending))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            pending.field = None;
        }
        Ok(())
    }
}

struct ListingData<'a, 'de>(&'a mut PendingListing<'de>);

seed_from_visitor!(ListingData, deserialize_map);

impl<'de> Visitor<'de> for ListingData<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the token listing object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            read_data_field(pending, key, &mut SerdeValues(&mut map))?;
        }
        Ok(())
    }
}

/// Where the value of a `data` field is read from: serde_json's map, or the scanner.
trait FieldValues<'de> {
    type Error;
    fn value(&mut self) -> Result<Value<'de>, Self::Error>;
    fn skip(&mut self) -> Result<(), Self::Error>;
}

struct SerdeValues<'a, A>(&'a mut A);

impl<'de, A: MapAccess<'de>> FieldValues<'de> for SerdeValues<'_, A> {
    type Error = A::Error;
    fn value(&mut self) -> Result<Value<'de>, A::Error> {
        self.0.next_value()
    }
    fn skip(&mut self) -> Result<(), A::Error> {
        self.0.next_value::<IgnoredAny>().map(drop)
    }
}

/// The scanner's "not mine": the body goes to serde_json.
struct LeftToSerde;

impl<'de> FieldValues<'de> for Scanner<'de> {
    type Error = LeftToSerde;
    fn value(&mut self) -> Result<Value<'de>, LeftToSerde> {
        Scanner::value(self).ok_or(LeftToSerde)
    }
    fn skip(&mut self) -> Result<(), LeftToSerde> {
        Scanner::skip(self).ok_or(LeftToSerde)
    }
}

/// Where the value of a `data` key goes, decided from the key alone (and detached from it, so
/// the key can move into `PendingListing::field`).
enum FieldRoute {
    Snapshot(usize),
    Suffixed(OwnedSuffixed),
    /// A known family on an interval that is not one of `INTERVALS`: the drift row's `found`.
    UnknownInterval(String),
    Ignored,
}

fn route_of(key: &str) -> FieldRoute {
    match classify_data_key(key) {
        DataKey::Snapshot(index) => FieldRoute::Snapshot(index),
        DataKey::Suffixed(suffixed) => FieldRoute::Suffixed(own_suffixed(suffixed)),
        DataKey::UnknownInterval(interval) => FieldRoute::UnknownInterval(format!("the interval {interval:?}")),
        DataKey::Other => FieldRoute::Ignored,
    }
}

/// One field of `data`, whichever reader reads it: the catalogue decides where its value goes.
fn read_data_field<'de, V: FieldValues<'de>>(
    pending: &mut PendingListing<'de>,
    key: Cow<'de, str>,
    values: &mut V,
) -> Result<(), V::Error> {
    let route = route_of(&key);
    read_routed_field(pending, route, key, values)
}

fn read_routed_field<'de, V: FieldValues<'de>>(
    pending: &mut PendingListing<'de>,
    route: FieldRoute,
    key: Cow<'de, str>,
    values: &mut V,
) -> Result<(), V::Error> {
    match route {
        FieldRoute::Snapshot(index) => {
            pending.field = Some(("data", key));
            let value = values.value()?;
            match convert(value, SNAPSHOT_FIELDS[index].1) {
                Ok(typed) => Typed::store(&mut pending.rows.scalars[index], typed),
                Err(mismatch) => pending.drifted(mismatch),
            }
        }
        FieldRoute::Suffixed(suffixed) => {
            pending.field = Some(("data", key));
            let value = values.value()?;
            if let Err(mismatch) = route_suffixed(&mut pending.rows, suffixed, value) {
                pending.drifted(mismatch);
            }
        }
        FieldRoute::UnknownInterval(found) => {
            pending.field = Some(("data", key));
            values.skip()?;
            pending.drifted(Mismatch { expected: INTERVAL_NAMES, found });
        }
        FieldRoute::Ignored => values.skip()?,
    }
    // Between keys the error still belongs to `data`.
    pending.field = Some(("", Cow::Borrowed("data")));
    Ok(())
}

/// The keys the fast path has met, in the order it first met them, with their routes: bodies
/// of one service list the same keys in the same order, so a key is usually recognised by
/// comparing it with the key that followed the previous one, without hashing it. When that
/// fails (a field missing, keys in another order) the key is looked up in `positions`, and the
/// comparisons go on from there, so one missing field costs one lookup, not one per key after it.
#[derive(Default)]
pub(super) struct KeyShape {
    /// Each key's bytes followed by `":`, as `Scanner::key_if` compares them.
    keys: Vec<(Box<[u8]>, CachedRoute)>,
    /// Each key's bytes -> its index in `keys`.
    positions: PlHashMap<Box<[u8]>, usize>,
    /// The index in `keys` of the key expected next in the body being read.
    cursor: usize,
}

/// Keys remembered at most: a service's catalogue is about 300; a body of thousands of made-up
/// keys must not grow the shape without end.
const MAX_SHAPE_KEYS: usize = 2048;

/// A `FieldRoute` that borrows nothing from a body: the catalogue's routes.
#[derive(Clone, Copy)]
enum CachedRoute {
    Snapshot(usize),
    Family { name: &'static str, kind: FamilyKind, interval: Interval },
    TaUpdated(Interval),
    Ignored,
}

impl CachedRoute {
    fn of(route: &FieldRoute) -> Option<Self> {
        Some(match route {
            FieldRoute::Snapshot(index) => Self::Snapshot(*index),
            FieldRoute::Suffixed(OwnedSuffixed::Family { name: Cow::Borrowed(name), kind: Some(kind), interval }) => {
                Self::Family { name, kind: *kind, interval: *interval }
            }
            FieldRoute::Suffixed(OwnedSuffixed::TaUpdated(interval)) => Self::TaUpdated(*interval),
            FieldRoute::Ignored => Self::Ignored,
            _ => return None,
        })
    }

    fn route(self) -> FieldRoute {
        match self {
            Self::Snapshot(index) => FieldRoute::Snapshot(index),
            Self::Family { name, kind, interval } => {
                FieldRoute::Suffixed(OwnedSuffixed::Family { name: Cow::Borrowed(name), kind: Some(kind), interval })
            }
            Self::TaUpdated(interval) => FieldRoute::Suffixed(OwnedSuffixed::TaUpdated(interval)),
            Self::Ignored => FieldRoute::Ignored,
        }
    }
}

impl KeyShape {
    /// Starts reading the keys of a new `data` object.
    fn restart(&mut self) {
        self.cursor = 0;
    }

    /// The next key of `data` and its route: a catalogue route (`Ok`), or one that borrows
    /// from this key (`Err`).
    #[inline]
    fn read_key<'de>(&mut self, scanner: &mut Scanner<'de>) -> Option<(&'de str, Result<CachedRoute, FieldRoute>)> {
        if let Some((expected, route)) = self.keys.get(self.cursor) {
            let route = *route;
            if let Some(key) = scanner.key_if(expected) {
                self.cursor += 1;
                return Some((key, Ok(route)));
            }
        }
        let key = scanner.key()?;
        if let Some(&index) = self.positions.get(key.as_bytes()) {
            self.cursor = index + 1;
            return Some((key, Ok(self.keys[index].1)));
        }
        let route = route_of(key);
        let Some(cached) = CachedRoute::of(&route) else {
            return Some((key, Err(route)));
        };
        if self.keys.len() < MAX_SHAPE_KEYS {
            self.positions.insert(key.as_bytes().into(), self.keys.len());
            self.keys.push(([key.as_bytes(), b"\":"].concat().into_boxed_slice(), cached));
            self.cursor = self.keys.len();
        }
        Some((key, Ok(cached)))
    }
}

/// A field of `data` on the fast path. The two commonest cases, a number in a numeric family
/// or a snapshot number column and an array of pattern names, are written straight to their
/// rows, exactly as `route_suffixed` and `convert` would write them (the differential tests in
/// `proptests.rs` hold the two paths equal); the rest goes through `read_routed_field`.
fn scan_data_field<'de>(
    pending: &mut PendingListing<'de>,
    route: Result<CachedRoute, FieldRoute>,
    key: &'de str,
    scanner: &mut Scanner<'de>,
) -> Option<()> {
    let route = match route {
        Ok(route) => route,
        Err(route) => return read_routed_field(pending, route, Cow::Borrowed(key), scanner).ok(),
    };
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
        _ => return read_routed_field(pending, route.route(), Cow::Borrowed(key), scanner).ok(),
    }
    Some(())
}

/// The fast path over a whole body (see `scanner`): `None` leaves the body to serde_json, and
/// `pending` must then be thrown away.
fn scan_listing<'de>(body: &'de [u8], pending: &mut PendingListing<'de>, shape: &mut KeyShape) -> Option<()> {
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

/// What an interval suffix must be, for drift rows.
const INTERVAL_NAMES: &str = "an interval of 5m, 15m, 1h, 4h, 24h or 1w";

/// A suffixed key detached from the key's lifetime, so the key can move into `field`.
enum OwnedSuffixed {
    TaUpdated(Interval),
    Family { name: Name, kind: Option<FamilyKind>, interval: Interval },
}

fn own_suffixed(key: SuffixedKey<'_>) -> OwnedSuffixed {
    match key {
        SuffixedKey::TaUpdated { interval } => OwnedSuffixed::TaUpdated(interval),
        SuffixedKey::Known { name, kind, interval } => {
            OwnedSuffixed::Family { name: Cow::Borrowed(name), kind: Some(kind), interval }
        }
        SuffixedKey::Unknown { name, interval } => {
            OwnedSuffixed::Family { name: Cow::Owned(name.to_owned()), kind: None, interval }
        }
    }
}

/// The JSON-type rule of the contract: numbers -> indicators, strings -> signals, string
/// arrays -> patterns. Known families are read tolerantly (a number in a string is still an
/// indicator) and strictly (a boolean or object where a known family belongs does not fit, and
/// becomes a drift row); values of unknown families that fit no frame are left to `Frames.raw`.
fn route_suffixed<'de>(rows: &mut ListingRows<'de>, key: OwnedSuffixed, value: Value<'de>) -> Result<(), Mismatch> {
    let (name, kind, interval) = match key {
        OwnedSuffixed::TaUpdated(interval) => {
            let millis = match convert(value, ScalarType::Datetime) {
                Ok(Typed::Millis(ms)) => Some(ms),
                Ok(_) => None,
                Err(mismatch) => {
                    // The row says the interval was updated at an unknown time.
                    rows.ta_updated.push((interval, None));
                    return Err(mismatch);
                }
            };
            rows.ta_updated.push((interval, millis));
            return Ok(());
        }
        OwnedSuffixed::Family { name, kind, interval } => (name, kind, interval),
    };
    let mismatch = |expected: &'static str, value: &Value| Mismatch { expected, found: value.excerpt() };
    match value {
        Value::Null => match kind {
            Some(FamilyKind::Text) => rows.signals.push((interval, name, None)),
            Some(FamilyKind::Patterns) => rows.patterns.push((interval, name, None)),
            Some(FamilyKind::Numeric) | None => rows.indicators.push((interval, name, None)),
        },
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => {
            if kind == Some(FamilyKind::Patterns) {
                return Err(mismatch("an array of pattern names", &value));
            }
            rows.indicators.push((interval, name, value.as_f64()));
        }
        Value::Str(text) => match kind {
            Some(FamilyKind::Numeric) => match parse_number_text(&text) {
                Ok(number) => rows.indicators.push((interval, name, number)),
                Err(_) => rows.signals.push((interval, name, Some(text))),
            },
            Some(FamilyKind::Patterns) => {
                if !text.trim().is_empty() {
                    rows.patterns.push((interval, name, Some(text)));
                }
            }
            Some(FamilyKind::Text) | None => rows.signals.push((interval, name, Some(text))),
        },
        Value::StrList(items) => {
            match kind {
                Some(FamilyKind::Numeric) => return Err(mismatch("a number", &Value::StrList(items))),
                Some(FamilyKind::Text) => return Err(mismatch("a string", &Value::StrList(items))),
                _ => {}
            }
            let family: Name = match (kind, name) {
                (None, Cow::Owned(n)) => Cow::Owned(unknown_pattern_family(&n).to_owned()),
                (_, n) => n,
            };
            for item in items.into_iter().flatten() {
                rows.patterns.push((interval, family.clone(), Some(item)));
            }
        }
        Value::Bool(_) | Value::Other(_) => {
            let expected = match kind {
                Some(FamilyKind::Numeric) => "a number",
                Some(FamilyKind::Text) => "a string",
                Some(FamilyKind::Patterns) => "an array of pattern names",
                None => return Ok(()),
            };
            return Err(mismatch(expected, &value));
        }
    }
    Ok(())
}

/// Parses listing bodies into the columns of the listing frames.
pub struct ListingBuilder {
    columns: ListingColumns,
    /// The row buffers of the last body, emptied, for the next.
    spare_rows: Option<ListingRows<'static>>,
    shape: KeyShape,
    /// See `misrouted`.
    misrouted: Option<String>,
}

impl ListingBuilder {
    /// `tokens` is a capacity hint: the number of bodies expected.
    pub fn new(tokens: usize) -> Self {
        Self { columns: ListingColumns::new(tokens), spare_rows: None, shape: KeyShape::default(), misrouted: None }
    }

    /// Parses one listing body and appends its rows. Returns the token the rows carry.
    /// On error nothing is appended.
    pub fn append(&mut self, input: &ListingBody<'_>) -> Result<String, Error> {
        self.read_and_append(input, true)
    }

    /// `append`, with the fast scanner tried first or not at all.
    fn read_and_append(&mut self, input: &ListingBody<'_>, scan_first: bool) -> Result<String, Error> {
        let context = DecodeContext { endpoint: Endpoint::Listing, token: input.token, body: input.body };
        let rows = self.spare_rows.take().map_or_else(ListingRows::default, ListingRows::recycle);
        let mut pending = PendingListing::new(rows);
        if !scan_first || scan_listing(input.body, &mut pending, &mut self.shape).is_none() {
            pending = PendingListing::new(pending.rows.recycle());
            if let Err(err) = parse_document(input.body, ListingDocument(&mut pending)) {
                return Err(context.json_error(&err, &pending.field));
            }
        }
        self.finish_body(&context, input, pending)
    }

    /// The rows of a body that was read whole, appended.
    fn finish_body(
        &mut self,
        context: &DecodeContext<'_>,
        input: &ListingBody<'_>,
        mut pending: PendingListing<'_>,
    ) -> Result<String, Error> {
        if !pending.saw_data {
            return Err(context.error(None, None, "the response has no `data` object"));
        }
        let token: Cow<'_, str> = match (input.token, &pending.rows.scalars[0]) {
            (Some(token), _) => Cow::Borrowed(token),
            (None, Typed::Str(id)) if !id.is_empty() => id.clone(),
            (None, _) => {
                return Err(context.error(
                    Some("data.id".into()),
                    None,
                    "the body has no `data.id`, so pass token_id= to name the token",
                ))
            }
        };
        let token = token.into_owned();
        self.misrouted = None;
        if let (Some(asked), Typed::Str(id)) = (input.token, &pending.rows.scalars[0]) {
            // The body names another token than the one asked for (a proxy or cache answered
            // for the wrong path): the rows are kept under the id asked for, and a drift row and
            // the log say so, so it is never recorded silently under the wrong token.
            let same = |other: &Typed<'_>| matches!(other, Typed::Str(text) if text.eq_ignore_ascii_case(asked));
            if !id.is_empty() && !same(&pending.rows.scalars[0]) && !same(&pending.rows.scalars[1]) {
                self.misrouted = Some(id.to_string());
                let mismatch = Mismatch { expected: "the id that was asked for", found: excerpt(id) };
                pending.rows.drift.push(DriftRow { field: "data.id".into(), mismatch });
            }
        }
        self.columns.append(&token, input.fetched_at, &mut pending.rows);
        self.spare_rows = Some(pending.rows.recycle());
        Ok(token)
    }

    pub fn finish(self) -> ListingFrames {
        self.columns.finish()
    }

    /// The `data.id` of the body just appended when it names another token than the one asked
    /// for (its rows went under the id asked for, with a drift row).
    pub fn misrouted(&self) -> Option<&str> {
        self.misrouted.as_deref()
    }

    /// `append` without the fast scanner: what the scanner's results must equal.
    #[cfg(test)]
    pub(super) fn append_with_serde_only(&mut self, input: &ListingBody<'_>) -> Result<String, Error> {
        self.read_and_append(input, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::test_columns::{floats, strings};

    /// The differential tests compare the scanner with serde_json; they would pass vacuously if
    /// the scanner declined every body, so realistic bodies must be read by the scanner alone.
    #[test]
    fn the_scanner_reads_realistic_bodies_whole() {
        // Each has a generalInfo with chains (the sample's empty).
        #[cfg(feature = "sandbox")]
        let sandbox: Vec<Vec<u8>> = ["bitcoin", "token-7"]
            .iter()
            .map(|token| {
                crate::sandbox::body(3, crate::model::Endpoint::Listing, token, 1_795_392_000_000).into_bytes()
            })
            .collect();
        #[cfg(not(feature = "sandbox"))]
        let sandbox: Vec<Vec<u8>> = Vec::new();
        for body in std::iter::once(crate::model::samples::LISTING).chain(sandbox.iter().map(Vec::as_slice)) {
            let mut pending = PendingListing::new(ListingRows::default());
            assert!(scan_listing(body, &mut pending, &mut KeyShape::default()).is_some());
            assert!(pending.rows.info.chains.is_some());
        }
        // Escaped strings (a name with quotes, a description in \u escapes) stay on the fast path.
        let escaped = br#"{"data":{"id":"x","name":"The \"X\" coin","categories":["Z\u00fcrich"]},"generalInfo":{"description":"\u2713 caf\u00e9 \ud83d\ude00","chains":[]}}"#;
        let mut pending = PendingListing::new(ListingRows::default());
        assert!(scan_listing(escaped, &mut pending, &mut KeyShape::default()).is_some());
    }

    const LISTING: &str = r#"{
      "data": {
        "id": "bitcoin", "symbol": "BTC", "name": "Bitcoin",
        "categories": ["Layer 1", "PoW"], "is_active": true,
        "last_updated": "2024-05-01T12:34:56.789Z", "ohlc_updated_time": "",
        "current_price": "64000.5", "market_cap_rank": 1, "number_of_holders": null,
        "price_percent_change_1h": 0.25, "open_interest_change_4h": -1.5,
        "rsi14_1h": 55.5, "rsi7_5m": null, "sma20_24h": "63000",
        "macd_1h": "Cross Above", "macd_5m": 0.5,
        "tripple_pattern_1h": ["three_white_soldiers"], "single_pattern_1h": [],
        "wedge_pattern_4h": ["Wedge Up", null, "Falling Wedge"],
        "ta_1h_updated_at": "2024-05-01 12:00:00+00",
        "ema50_1h": 61000.0, "trend_1w": "up", "flag_pattern_15m": ["Bull Flag"],
        "mystery_1h": true, "something_else": {"nested": [1, 2]}
      },
      "generalInfo": {
        "description": "Digital gold.", "websites": ["https://bitcoin.org"],
        "explorers": [], "community": {"twitter": "https://x.com/bitcoin", "reddit": null},
        "chains": [{"name": "bitcoin"}], "categories": ["Layer 1"]
      }
    }"#;

    fn parse(body: &str, token: Option<&str>) -> Result<ListingFrames, Error> {
        let mut builder = ListingBuilder::new(1);
        builder.append(&ListingBody { body: body.as_bytes(), token, fetched_at: Some(7) })?;
        Ok(builder.finish())
    }

    #[test]
    fn snapshot_holds_typed_scalars_and_market_figures() {
        let frames = parse(LISTING, None).unwrap();
        let snapshot = &frames.snapshot;
        assert_eq!(snapshot.height(), 1);
        assert_eq!(strings(snapshot, "token"), vec![Some("bitcoin".into())]);
        assert_eq!(floats(snapshot, "current_price"), vec![Some(64000.5)]);
        assert_eq!(floats(snapshot, "price_percent_change_1h"), vec![Some(0.25)]);
        assert_eq!(floats(snapshot, "open_interest_change_4h"), vec![Some(-1.5)]);
        assert_eq!(floats(snapshot, "number_of_holders"), vec![None]);
        assert_eq!(snapshot.column("market_cap_rank").unwrap().i64().unwrap().get(0), Some(1));
        let updated = snapshot.column("last_updated").unwrap().datetime().unwrap().physical().get(0);
        assert_eq!(updated, Some(1_714_566_896_789));
        assert_eq!(snapshot.column("ohlc_updated_time").unwrap().null_count(), 1);
        assert_eq!(snapshot.column("fetched_at").unwrap().datetime().unwrap().physical().get(0), Some(7));
        assert_eq!(snapshot.width(), 2 + SNAPSHOT_FIELDS.len());
    }

    #[test]
    fn suffixed_fields_are_routed_by_json_type() {
        let frames = parse(LISTING, Some("btc")).unwrap();
        let indicators = &frames.indicators;
        assert_eq!(
            strings(indicators, "indicator"),
            ["rsi14", "rsi7", "sma20", "macd", "ema50"].map(|s| Some(s.to_string())).to_vec()
        );
        assert_eq!(
            strings(indicators, "interval"),
            ["1h", "5m", "24h", "5m", "1h"].map(|s| Some(s.to_string())).to_vec()
        );
        assert_eq!(floats(indicators, "value"), vec![Some(55.5), None, Some(63000.0), Some(0.5), Some(61000.0)]);
        assert_eq!(strings(indicators, "token")[0].as_deref(), Some("btc"));

        let signals = &frames.signals;
        assert_eq!(strings(signals, "indicator"), vec![Some("macd".into()), Some("trend".into())]);
        assert_eq!(strings(signals, "value"), vec![Some("Cross Above".into()), Some("up".into())]);

        let patterns = &frames.patterns;
        assert_eq!(
            strings(patterns, "family"),
            ["triple", "wedge", "wedge", "flag"].map(|s| Some(s.to_string())).to_vec()
        );
        assert_eq!(
            strings(patterns, "pattern"),
            ["three_white_soldiers", "Wedge Up", "Falling Wedge", "Bull Flag"].map(|s| Some(s.to_string())).to_vec()
        );
        assert_eq!(strings(&frames.ta_updated, "interval"), vec![Some("1h".into())]);
    }

    #[test]
    fn info_has_one_row_with_links_and_compact_chains() {
        let frames = parse(LISTING, None).unwrap();
        let info = &frames.info;
        assert_eq!(info.height(), 1);
        assert_eq!(strings(info, "twitter"), vec![Some("https://x.com/bitcoin".into())]);
        assert_eq!(strings(info, "reddit"), vec![None]);
        assert_eq!(strings(info, "telegram"), vec![None]);
        let chains = info.column("chains").unwrap().list().unwrap().get_as_series(0).unwrap();
        assert_eq!(chains.str().unwrap().get(0), Some(r#"{"name":"bitcoin"}"#));
    }

    #[test]
    fn malformed_bodies_name_the_field_and_leave_no_rows() {
        let mut builder = ListingBuilder::new(2);
        let bad = r#"{"data": {"id": "x", "rsi14_1h": 50, "current_price": tru}}"#;
        let error = builder.append(&ListingBody { body: bad.as_bytes(), token: None, fetched_at: None }).unwrap_err();
        match &error {
            Error::Decode { field, offset, .. } => {
                assert_eq!(field.as_deref(), Some("data.current_price"));
                assert!(offset.is_some());
            }
            other => panic!("unexpected {other:?}"),
        }
        let truncated = &LISTING[..LISTING.len() / 2];
        assert!(builder
            .append(&ListingBody { body: truncated.as_bytes(), token: Some("t"), fetched_at: None })
            .is_err());
        for body in ["[]", "null", "{}", r#"{"data": null}"#, r#"{"data": []}"#, r#"{"data": "bitcoin"}"#] {
            assert!(
                builder.append(&ListingBody { body: body.as_bytes(), token: Some("t"), fetched_at: None }).is_err(),
                "{body}"
            );
        }
        let frames = builder.finish();
        assert_eq!(frames.snapshot.height(), 0);
        assert_eq!(frames.indicators.height(), 0);
    }

    #[test]
    fn values_that_do_not_fit_become_drift_rows_and_the_rest_lands() {
        let body = r#"{"data": {"id": "x", "current_price": "N/A", "github_commit": 12.5, "market_cap_rank": 933.0,
            "categories": "Layer 1", "last_updated": "yesterday", "rsi14_1h": true, "rsi7_1h": 55,
            "single_pattern_1h": [3, "doji"], "macd_1h": ["a"], "rsi14_1m": 40, "ta_2h_updated_at": "x",
            "ta_1h_updated_at": 5},
            "generalInfo": {"description": 5, "community": "none", "chains": {"a": 1}, "websites": ["w"]}}"#;
        let frames = parse(body, None).unwrap();
        assert_eq!(frames.snapshot.height(), 1);
        assert_eq!(floats(&frames.snapshot, "current_price"), vec![None]);
        assert_eq!(frames.snapshot.column("market_cap_rank").unwrap().i64().unwrap().get(0), Some(933));
        assert_eq!(frames.snapshot.column("github_commit").unwrap().null_count(), 1);
        assert_eq!(floats(&frames.indicators, "value"), vec![Some(55.0)]);
        assert_eq!(frames.ta_updated.height(), 1);
        // A number where text belongs is kept as its text: nothing is lost.
        assert_eq!(strings(&frames.info, "description"), vec![Some("5".into())]);
        assert_eq!(frames.info.column("websites").unwrap().list().unwrap().get_as_series(0).unwrap().len(), 1);
        let fields: Vec<_> = strings(&frames.drift, "field").into_iter().flatten().collect();
        assert_eq!(
            fields,
            [
                "data.current_price",
                "data.github_commit",
                "data.categories",
                "data.last_updated",
                "data.rsi14_1h",
                "data.single_pattern_1h",
                "data.macd_1h",
                "data.rsi14_1m",
                "data.ta_2h_updated_at",
                "data.ta_1h_updated_at",
                "generalInfo.community",
                "generalInfo.chains",
            ]
        );
        let found: Vec<_> = strings(&frames.drift, "found").into_iter().flatten().collect();
        assert_eq!(&found[..3], ["\"N/A\"", "12.5", "\"Layer 1\""]);
        assert_eq!(found[7], "the interval \"1m\"");
        assert_eq!(strings(&frames.drift, "token")[0].as_deref(), Some("x"));
        let fetched_at = frames.drift.column("fetched_at").unwrap().datetime().unwrap().physical().get(0);
        assert_eq!(fetched_at, Some(7));
    }

    #[test]
    fn chains_keep_the_services_text_and_key_order() {
        let body = r#"{"data": {"id": "x"}, "generalInfo": {"chains": [{"z": 1, "a": "b c"}, {"name": "eth"}]}}"#;
        let frames = parse(body, None).unwrap();
        let chains = frames.info.column("chains").unwrap().list().unwrap().get_as_series(0).unwrap();
        let chains: Vec<_> = chains.str().unwrap().iter().flatten().collect();
        assert_eq!(chains, [r#"{"z":1,"a":"b c"}"#, r#"{"name":"eth"}"#]);
    }

    #[test]
    fn a_body_without_id_needs_a_token() {
        let body = r#"{"data": {"rsi14_1h": 50}}"#;
        assert!(parse(body, None).is_err());
        assert_eq!(parse(body, Some("x")).unwrap().indicators.height(), 1);
    }
}
