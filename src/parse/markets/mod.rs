//! Markets bodies into the markets frame: read by the byte scanner (`scanner.rs`) first, as
//! listings are, and by serde visitors when it declines anything (every error is theirs).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::parse::document::{drift_on_non_objects, parse_document, seed_from_visitor, DecodeContext, FieldPath};
use crate::parse::scanner::Scanner;
use crate::error::Error;
use crate::frames::{DriftRow, MarketRow, MarketsColumns, MarketsFrames};
use crate::model::fields::{market_field_index, ScalarType, MARKET_FIELDS};
use crate::model::value::{convert, BorrowedStr, Mismatch, Typed, Value};
use crate::model::Endpoint;
use crate::short_bytes::same_bytes;

/// One markets response body.
#[derive(Clone, Copy, Debug)]
pub struct MarketsBody<'a> {
    pub body: &'a [u8],
    pub token: &'a str,
    pub fetched_at: Option<i64>,
}

/// What a markets body said besides its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarketsSummary {
    pub entries: usize,
    pub total: Option<i64>,
    /// Values that did not fit their columns (rows of `drift`).
    pub drifted: usize,
}

#[derive(Default)]
struct PendingMarkets<'de> {
    saw_data: bool,
    entries: Vec<MarketRow<'de>>,
    total: Option<i64>,
    field: FieldPath<'de>,
    drift: Vec<DriftRow>,
}

impl PendingMarkets<'_> {
    fn drifted(&mut self, field: String, mismatch: Mismatch) {
        self.drift.push(DriftRow { field, mismatch });
    }
}

struct MarketsDocument<'a, 'de>(&'a mut PendingMarkets<'de>);

seed_from_visitor!(MarketsDocument, deserialize_map);

impl<'de> Visitor<'de> for MarketsDocument<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object with `data` and `total`")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            match key.as_ref() {
                "data" => {
                    pending.field = Some(("", key));
                    map.next_value_seed(MarketEntries(pending))?;
                    pending.saw_data = true;
                }
                "total" => {
                    pending.field = Some(("", key));
                    let value: Value<'de> = map.next_value()?;
                    read_total(pending, value);
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

struct MarketEntries<'a, 'de>(&'a mut PendingMarkets<'de>);

seed_from_visitor!(MarketEntries, deserialize_seq);

impl<'de> Visitor<'de> for MarketEntries<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of market entries")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let pending = self.0;
        let mut index = 0usize;
        loop {
            let mut entry =
                MarketEntry { index, row: MarketsColumns::new_row(), field: None, drift: Vec::new(), is_object: false };
            let element = seq.next_element_seed(&mut entry);
            pending.drift.append(&mut entry.drift);
            match element {
                Ok(Some(())) if entry.is_object => pending.entries.push(entry.row),
                Ok(Some(())) => {}
                Ok(None) => return Ok(()),
                Err(err) => {
                    let label = match entry.field {
                        Some(key) => format!("data[{index}].{key}"),
                        None => format!("data[{index}]"),
                    };
                    pending.field = Some(("", Cow::Owned(label)));
                    return Err(err);
                }
            }
            index += 1;
        }
    }
}

/// One element of `data`: a market entry object, or (drift) anything else.
struct MarketEntry<'de> {
    index: usize,
    row: MarketRow<'de>,
    /// The key being read, for errors.
    field: Option<Cow<'de, str>>,
    drift: Vec<DriftRow>,
    is_object: bool,
}

impl<'de> DeserializeSeed<'de> for &mut MarketEntry<'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl MarketEntry<'_> {
    fn unexpected(&mut self, found: String) {
        let field = format!("data[{}]", self.index);
        self.drift.push(DriftRow { field, mismatch: Mismatch { expected: "a market entry object", found } });
    }
}

impl<'de> Visitor<'de> for &mut MarketEntry<'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a market entry object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.unexpected("null".into());
        Ok(())
    }
    drift_on_non_objects!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.is_object = true;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            match market_field_index(&key) {
                Some(index) => {
                    self.field = Some(key);
                    let value: Value<'de> = map.next_value()?;
                    match convert(value, MARKET_FIELDS[index].2) {
                        Ok(typed) => self.row[index] = typed,
                        Err(mismatch) => {
                            let key = self.field.as_deref().unwrap_or_default();
                            let field = format!("data[{}].{key}", self.index);
                            self.drift.push(DriftRow { field, mismatch });
                        }
                    }
                    self.field = None;
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `total` converted as the documented integer, or a drift row.
fn read_total<'de>(pending: &mut PendingMarkets<'de>, value: Value<'de>) {
    pending.total = match convert(value, ScalarType::I64) {
        Ok(Typed::I64(total)) => Some(total),
        Ok(_) => None,
        Err(mismatch) => {
            pending.drifted("total".into(), mismatch);
            None
        }
    };
}

/// The fast path (the listing's byte scanner) over a markets body: `data` an array of entry
/// objects of scalar values. `None` at anything else (an element that is not an object, a
/// nested value, an escaped key, invalid JSON) leaves the body to serde_json, and `pending`
/// must then be thrown away. It writes the rows and drift rows the visitors would, held equal
/// by the property tests.
fn scan_markets<'de>(body: &'de [u8], pending: &mut PendingMarkets<'de>) -> Option<()> {
    let mut scanner = Scanner::new(body);
    scanner.object(|scanner, key| {
        match key {
            "data" => {
                scanner.array(|scanner| {
                    if !scanner.at_object() {
                        return None;
                    }
                    let index = pending.entries.len();
                    let mut row = MarketsColumns::new_row();
                    // Entries list their keys in one order: the key after the last is tried first.
                    let mut expected = 0;
                    scanner.object(|scanner, key| {
                        let column = match MARKET_FIELDS.get(expected) {
                            Some((wire, _, _)) if same_bytes(wire.as_bytes(), key.as_bytes()) => Some(expected),
                            _ => market_field_index(key),
                        };
                        let Some(column) = column else {
                            return scanner.skip();
                        };
                        expected = column + 1;
                        // The commonest values straight to their cells, as `convert` would store them
                        // (held equal by the property tests); the rest through `convert`.
                        match MARKET_FIELDS[column].2 {
                            ScalarType::F64 if scanner.at_number() => {
                                row[column] = Typed::F64(scanner.number_as_f64()?);
                            }
                            ScalarType::Str if scanner.at_string() => {
                                row[column] = Typed::Str(scanner.string()?);
                            }
                            target => match convert(scanner.value()?, target) {
                                Ok(typed) => row[column] = typed,
                                Err(mismatch) => pending.drifted(format!("data[{index}].{key}"), mismatch),
                            },
                        }
                        Some(())
                    })?;
                    pending.entries.push(row);
                    Some(())
                })?;
                pending.saw_data = true;
            }
            "total" => {
                let value = scanner.value()?;
                read_total(pending, value);
            }
            _ => scanner.skip()?,
        }
        Some(())
    })?;
    scanner.finish()
}

/// Parses markets bodies into the columns of the markets frame.
pub struct MarketsBuilder {
    columns: MarketsColumns,
}

impl MarketsBuilder {
    /// `entries` is a capacity hint.
    pub fn new(entries: usize) -> Self {
        Self { columns: MarketsColumns::new(entries) }
    }

    /// Parses one markets body and appends its entries. On error nothing is appended.
    pub fn append(&mut self, input: &MarketsBody<'_>) -> Result<MarketsSummary, Error> {
        self.read_and_append(input, true)
    }

    /// `append` without the fast scanner: what the scanner's results must equal.
    #[cfg(test)]
    pub(super) fn append_with_serde_only(&mut self, input: &MarketsBody<'_>) -> Result<MarketsSummary, Error> {
        self.read_and_append(input, false)
    }

    fn read_and_append(&mut self, input: &MarketsBody<'_>, scan_first: bool) -> Result<MarketsSummary, Error> {
        let context = DecodeContext { endpoint: Endpoint::Markets, token: Some(input.token), body: input.body };
        let mut pending = PendingMarkets::default();
        if !scan_first || scan_markets(input.body, &mut pending).is_none() {
            pending = PendingMarkets::default();
            if let Err(err) = parse_document(input.body, MarketsDocument(&mut pending)) {
                return Err(context.json_error(&err, &pending.field));
            }
        }
        if !pending.saw_data {
            return Err(context.error(None, None, "the response has no `data` array"));
        }
        let summary =
            MarketsSummary { entries: pending.entries.len(), total: pending.total, drifted: pending.drift.len() };
        for entry in &pending.entries {
            self.columns.append(input.token, input.fetched_at, entry);
        }
        self.columns.append_drift(input.token, input.fetched_at, &pending.drift);
        Ok(summary)
    }

    pub fn finish(self) -> MarketsFrames {
        self.columns.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::test_columns::{floats, strings};

    /// The differential tests would pass vacuously if the scanner declined every body.
    #[test]
    fn the_scanner_reads_realistic_bodies_whole() {
        #[cfg_attr(not(feature = "sandbox"), allow(unused_mut))]
        let mut bodies = vec![br#"{"data": [{"id": "1", "exchangeName": "Binance", "marketPair": "BTC/USDT", "price": 64000.1, "extra": [1, {"a": null}]}], "total": 5}"#.to_vec()];
        #[cfg(feature = "sandbox")]
        bodies.extend(["bitcoin", "token-7"].iter().map(|token| {
            crate::sandbox::body(3, crate::model::Endpoint::Markets, token, 1_795_392_000_000).into_bytes()
        }));
        for body in &bodies {
            let mut pending = PendingMarkets::default();
            assert!(scan_markets(body, &mut pending).is_some());
            assert!(pending.saw_data && !pending.entries.is_empty());
        }
    }

    #[test]
    fn markets_split_pairs_and_report_total() {
        let body = r#"{"data": [
            {"id": "1", "exchangeName": "Binance", "marketPair": "BTC/USDT", "price": 64000.1,
             "volumeUsd": 1e9, "liquidity_score": 950, "marketReputation": 1, "extra": [1]},
            {"id": "2", "exchangeName": "Kraken", "marketPair": "XBT", "price": "64001"}
        ], "total": 5}"#;
        let mut builder = MarketsBuilder::new(2);
        let summary =
            builder.append(&MarketsBody { body: body.as_bytes(), token: "bitcoin", fetched_at: None }).unwrap();
        assert_eq!(summary, MarketsSummary { entries: 2, total: Some(5), drifted: 0 });
        let frame = builder.finish().markets;
        assert_eq!(strings(&frame, "base"), vec![Some("BTC".into()), Some("XBT".into())]);
        assert_eq!(strings(&frame, "quote"), vec![Some("USDT".into()), None]);
        assert_eq!(floats(&frame, "price"), vec![Some(64000.1), Some(64001.0)]);
        assert_eq!(frame.column("liquidity_score").unwrap().i64().unwrap().get(0), Some(950));
        let names: Vec<_> = frame.get_column_names().iter().map(|s| s.to_string()).collect();
        let empty = MarketsBuilder::new(0).finish().markets;
        let empty: Vec<_> = empty.get_column_names().iter().map(|s| s.to_string()).collect();
        assert_eq!(names, empty);
    }

    #[test]
    fn values_that_do_not_fit_become_drift_rows_and_the_rest_lands() {
        let body = r#"{"data": [{"id": "1", "liquidity_score": 229.0}, {"id": "2", "price": [1], "liquidity_score": 933.5},
                                 7, null, {"id": "3", "volumeUsd": "N/A"}], "total": "many"}"#;
        let mut builder = MarketsBuilder::new(2);
        let summary = builder.append(&MarketsBody { body: body.as_bytes(), token: "t", fetched_at: Some(9) }).unwrap();
        assert_eq!(summary, MarketsSummary { entries: 3, total: None, drifted: 6 });
        let frames = builder.finish();
        assert_eq!(strings(&frames.markets, "id"), ["1", "2", "3"].map(|s| Some(s.into())).to_vec());
        let scores: Vec<_> = frames.markets.column("liquidity_score").unwrap().i64().unwrap().iter().collect();
        assert_eq!(scores, vec![Some(229), None, None]);
        assert_eq!(floats(&frames.markets, "price"), vec![None, None, None]);
        let drift = &frames.drift;
        assert_eq!(
            strings(drift, "field"),
            ["data[1].price", "data[1].liquidity_score", "data[2]", "data[3]", "data[4].volumeUsd", "total"]
                .map(|s| Some(s.into()))
                .to_vec()
        );
        assert_eq!(strings(drift, "found")[1].as_deref(), Some("933.5"));
        assert_eq!(strings(drift, "expected")[1].as_deref(), Some("an integer"));
        assert_eq!(strings(drift, "endpoint")[0].as_deref(), Some("markets"));
    }

    #[test]
    fn bodies_that_are_not_the_documented_shape_are_errors() {
        let mut builder = MarketsBuilder::new(2);
        for body in [r#"{"data": {"id": "1"}}"#, r#"{"total": 3}"#, r#"{"data": [{"id": "1", "price": 1"#, "[]"] {
            let error = builder.append(&MarketsBody { body: body.as_bytes(), token: "t", fetched_at: None });
            assert!(matches!(error, Err(Error::Decode { .. })), "{body}");
        }
        let error = builder
            .append(&MarketsBody {
                body: br#"{"data": [{"id": "1"}, {"id": "2", "price": tru}]}"#,
                token: "t",
                fetched_at: None,
            })
            .unwrap_err();
        assert!(matches!(&error, Error::Decode { field: Some(f), .. } if f == "data[1].price"), "{error:?}");
        let frames = builder.finish();
        assert_eq!((frames.markets.height(), frames.drift.height()), (0, 0));
    }
}
