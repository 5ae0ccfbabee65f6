//! Markets bodies into the markets frame.

use std::borrow::Cow;
use std::fmt;

use polars::prelude::DataFrame;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::document::{parse_document, seed_from_visitor, DecodeContext, FieldPath};
use crate::error::{Endpoint, Error};
use crate::frames::{MarketRow, MarketsColumns};
use crate::model::fields::{market_field_index, ScalarType, MARKET_FIELDS};
use crate::model::value::{convert, BorrowedStr, Typed, Value};

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
}

#[derive(Default)]
struct PendingMarkets<'de> {
    saw_data: bool,
    entries: Vec<MarketRow<'de>>,
    total: Option<i64>,
    field: FieldPath<'de>,
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
                    pending.total = match convert(value, ScalarType::I64).map_err(de::Error::custom)? {
                        Typed::I64(total) => Some(total),
                        _ => None,
                    };
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
            let mut entry = MarketsColumns::new_row();
            let mut field = None;
            match seq.next_element_seed(MarketEntry { entry: &mut entry, field: &mut field }) {
                Ok(Some(())) => pending.entries.push(entry),
                Ok(None) => return Ok(()),
                Err(err) => {
                    let label = match field {
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

struct MarketEntry<'a, 'de> {
    entry: &'a mut MarketRow<'de>,
    field: &'a mut Option<Cow<'de, str>>,
}

seed_from_visitor!(MarketEntry, deserialize_map);

impl<'de> Visitor<'de> for MarketEntry<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a market entry object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(BorrowedStr(key)) = map.next_key()? {
            match market_field_index(&key) {
                Some(index) => {
                    *self.field = Some(key);
                    let value: Value<'de> = map.next_value()?;
                    self.entry[index] = convert(value, MARKET_FIELDS[index].2).map_err(de::Error::custom)?;
                    *self.field = None;
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
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
        let context = DecodeContext { endpoint: Endpoint::Markets, token: Some(input.token), body: input.body };
        let mut pending = PendingMarkets::default();
        if let Err(err) = parse_document(input.body, MarketsDocument(&mut pending)) {
            return Err(context.json_error(&err, &pending.field));
        }
        if !pending.saw_data {
            return Err(context.error(None, None, "the response has no `data` array"));
        }
        let summary = MarketsSummary { entries: pending.entries.len(), total: pending.total };
        for entry in &pending.entries {
            self.columns.append(input.token, input.fetched_at, entry);
        }
        Ok(summary)
    }

    pub fn finish(self) -> DataFrame {
        self.columns.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::test_columns::{floats, strings};

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
        assert_eq!(summary, MarketsSummary { entries: 2, total: Some(5) });
        let frame = builder.finish();
        assert_eq!(strings(&frame, "base"), vec![Some("BTC".into()), Some("XBT".into())]);
        assert_eq!(strings(&frame, "quote"), vec![Some("USDT".into()), None]);
        assert_eq!(floats(&frame, "price"), vec![Some(64000.1), Some(64001.0)]);
        assert_eq!(frame.column("liquidity_score").unwrap().i64().unwrap().get(0), Some(950));
        let names: Vec<_> = frame.get_column_names().iter().map(|s| s.to_string()).collect();
        let empty: Vec<_> = MarketsBuilder::new(0).finish().get_column_names().iter().map(|s| s.to_string()).collect();
        assert_eq!(names, empty);
    }

    #[test]
    fn bad_market_entries_are_located() {
        let body = r#"{"data": [{"id": "1"}, {"id": "2", "price": [1]}], "total": 2}"#;
        let mut builder = MarketsBuilder::new(2);
        let error = builder.append(&MarketsBody { body: body.as_bytes(), token: "t", fetched_at: None }).unwrap_err();
        assert!(matches!(&error, Error::Decode { field: Some(f), .. } if f == "data[1].price"), "{error:?}");
        assert_eq!(builder.finish().height(), 0);
    }
}
