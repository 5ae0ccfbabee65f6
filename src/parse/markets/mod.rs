//! Markets bodies into the markets frame, read by the byte scanner as listings are (an entry
//! of the wrong type, a value that does not fit its column: drift rows; a body that is not
//! JSON: an error worded by serde_json).

use std::borrow::Cow;

use crate::error::Error;
use crate::frames::{DriftRow, MarketRow, MarketsColumns, MarketsFrames};
use crate::model::fields::{market_field_index, ScalarType, MARKET_FIELDS};
use crate::model::value::{convert, Mismatch, Typed, Value};
use crate::model::Endpoint;
use crate::parse::document::{DecodeContext, FieldPath};
use crate::parse::scanner::{Scanner, Unit};
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

/// One body on its way through the reader.
#[derive(Default)]
pub(super) struct PendingMarkets<'de> {
    saw_data: bool,
    entries: Vec<MarketRow<'de>>,
    total: Option<i64>,
    field: FieldPath<'de>,
    drift: Vec<DriftRow>,
}

impl<'de> PendingMarkets<'de> {
    fn drifted(&mut self, field: String, mismatch: Mismatch) {
        self.drift.push(DriftRow { field, mismatch });
    }

    /// Reading failed in `field`, unless a reader inside it said where first.
    #[cold]
    fn failed_in<T>(&mut self, field: impl Into<Cow<'de, str>>) -> Option<T> {
        if self.field.is_none() {
            self.field = Some(("", field.into()));
        }
        None
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

/// A markets body read by the scanner into `pending`. `None` if it is not JSON (the scanner's
/// failure and `pending.field` say where); `pending` is then thrown away.
fn read_markets<'de>(scanner: &mut Scanner<'de>, pending: &mut PendingMarkets<'de>, keys: &[Box<[u8]>]) -> Option<()> {
    scanner.unit(Unit::Document("a JSON object with `data` and `total`"), |scanner| {
        scanner.object(|scanner, key| {
            match key.as_ref() {
                "data" => {
                    if scanner.colon().and_then(|()| read_entries(scanner, pending, keys)).is_none() {
                        return pending.failed_in(key);
                    }
                    pending.saw_data = true;
                }
                "total" => {
                    let Some(value) = scanner.colon().and_then(|()| scanner.unit(Unit::Value, Scanner::value)) else {
                        return pending.failed_in(key);
                    };
                    read_total(pending, value);
                }
                _ => scanner.skip_member()?,
            }
            Some(())
        })?;
        scanner.finish()
    })
}

/// `data`: an array of market entries.
fn read_entries<'de>(scanner: &mut Scanner<'de>, pending: &mut PendingMarkets<'de>, keys: &[Box<[u8]>]) -> Option<()> {
    // The element being read, or the next one (a failure between elements is the next one's).
    let mut index = 0;
    let mut opened = false;
    let read = scanner.unit(Unit::Array("an array of market entries"), |scanner| {
        if !scanner.at_array() {
            return None;
        }
        opened = true;
        scanner.array(|scanner| {
            read_entry(scanner, pending, keys, index)?;
            index += 1;
            Some(())
        })
    });
    if read.is_none() && opened {
        return pending.failed_in(format!("data[{index}]"));
    }
    read
}

/// Each market field's wire key followed by `":`, as `Scanner::key_if` compares them.
fn keys_with_colon() -> Vec<Box<[u8]>> {
    MARKET_FIELDS.iter().map(|(wire, _, _)| [wire.as_bytes(), b"\":"].concat().into_boxed_slice()).collect()
}

/// One element of `data`: a market entry object, or (a drift row) anything else.
fn read_entry<'de>(
    scanner: &mut Scanner<'de>,
    pending: &mut PendingMarkets<'de>,
    keys: &[Box<[u8]>],
    index: usize,
) -> Option<()> {
    scanner.unit(Unit::Any, |scanner| {
        if !scanner.at_object() {
            let found = if scanner.at_array() {
                scanner.array(Scanner::skip)?;
                "an array".into()
            } else {
                scanner.value()?.excerpt()
            };
            pending.drifted(format!("data[{index}]"), Mismatch { expected: "a market entry object", found });
            return Some(());
        }
        let mut row = MarketsColumns::new_row();
        // Entries list their keys in one order: the key after the last is tried first, in place
        // with its colon.
        let mut expected = 0;
        scanner.members(|scanner, _| {
            let column = match keys.get(expected).and_then(|key| scanner.key_if(key)) {
                Some(_) => expected,
                None => {
                    let key = scanner.key()?;
                    let column = match MARKET_FIELDS.get(expected) {
                        Some((wire, _, _)) if same_bytes(wire.as_bytes(), key.as_bytes()) => Some(expected),
                        _ => market_field_index(&key),
                    };
                    let Some(column) = column else {
                        scanner.colon()?;
                        return scanner.unit(Unit::Ignored, Scanner::skip);
                    };
                    if scanner.colon().is_none() {
                        return pending.failed_in(format!("data[{index}].{}", MARKET_FIELDS[column].0));
                    }
                    column
                }
            };
            expected = column + 1;
            if read_entry_field(scanner, pending, &mut row, column, index).is_none() {
                return pending.failed_in(format!("data[{index}].{}", MARKET_FIELDS[column].0));
            }
            Some(())
        })?;
        pending.entries.push(row);
        Some(())
    })
}

/// A known field of a market entry, after its colon: the commonest values straight to their
/// cells, as `convert` would store them (held equal by the property tests); the rest through
/// `convert`.
#[inline]
fn read_entry_field<'de>(
    scanner: &mut Scanner<'de>,
    pending: &mut PendingMarkets<'de>,
    row: &mut MarketRow<'de>,
    column: usize,
    index: usize,
) -> Option<()> {
    match MARKET_FIELDS[column].2 {
        ScalarType::F64 if scanner.at_number() => {
            row[column] = Typed::F64(scanner.unit(Unit::Value, Scanner::number_as_f64)?);
        }
        ScalarType::Str if scanner.at_string() => row[column] = Typed::Str(scanner.unit(Unit::Value, Scanner::string)?),
        target => match convert(scanner.unit(Unit::Value, Scanner::value)?, target) {
            Ok(typed) => row[column] = typed,
            Err(mismatch) => pending.drifted(format!("data[{index}].{}", MARKET_FIELDS[column].0), mismatch),
        },
    }
    Some(())
}

/// The reference the reader is held to, in tests only: a markets body read by serde_json part
/// by part (each value a `Value`, what is skipped a `RawValue`); `None` where serde_json fails it.
#[cfg(test)]
pub(super) fn reference(body: &str) -> Option<PendingMarkets<'_>> {
    use serde_json::value::RawValue;

    use crate::parse::listing::reference::Members;

    fn value(raw: &RawValue) -> Option<Value<'_>> {
        serde_json::from_str(raw.get()).ok()
    }
    let mut pending = PendingMarkets::default();
    let top: Members<'_> = serde_json::from_str(body).ok()?;
    for (key, raw) in top.0 {
        match key.as_ref() {
            "data" => {
                let elements: Vec<&RawValue> = serde_json::from_str(raw.get()).ok()?;
                for (index, element) in elements.into_iter().enumerate() {
                    let text = element.get();
                    if !text.starts_with('{') {
                        let found = if text.starts_with('[') { "an array".into() } else { value(element)?.excerpt() };
                        pending
                            .drifted(format!("data[{index}]"), Mismatch { expected: "a market entry object", found });
                        continue;
                    }
                    let members: Members<'_> = serde_json::from_str(text).ok()?;
                    let mut row = MarketsColumns::new_row();
                    for (key, raw) in members.0 {
                        if let Some(column) = market_field_index(&key) {
                            match convert(value(raw)?, MARKET_FIELDS[column].2) {
                                Ok(typed) => row[column] = typed,
                                Err(mismatch) => pending.drifted(format!("data[{index}].{key}"), mismatch),
                            }
                        }
                    }
                    pending.entries.push(row);
                }
                pending.saw_data = true;
            }
            "total" => read_total(&mut pending, value(raw)?),
            _ => {}
        }
    }
    Some(pending)
}

/// Parses markets bodies into the columns of the markets frame.
pub struct MarketsBuilder {
    columns: MarketsColumns,
    /// `keys_with_colon`, made once.
    keys: Vec<Box<[u8]>>,
}

impl MarketsBuilder {
    /// `entries` is a capacity hint.
    pub fn new(entries: usize) -> Self {
        Self { columns: MarketsColumns::new(entries), keys: keys_with_colon() }
    }

    /// Parses one markets body and appends its entries. On error nothing is appended.
    pub fn append(&mut self, input: &MarketsBody<'_>) -> Result<MarketsSummary, Error> {
        let context = DecodeContext { endpoint: Endpoint::Markets, token: Some(input.token), body: input.body };
        let mut pending = PendingMarkets::default();
        let mut scanner = Scanner::new(input.body);
        if read_markets(&mut scanner, &mut pending, &self.keys).is_none() {
            return Err(context.invalid(scanner.failure(), &pending.field));
        }
        self.append_pending(&context, input, pending)
    }

    /// Appends rows read another way (the reference of the property tests), as `append` would.
    #[cfg(test)]
    pub(super) fn append_read(
        &mut self,
        input: &MarketsBody<'_>,
        pending: PendingMarkets<'_>,
    ) -> Result<MarketsSummary, Error> {
        let context = DecodeContext { endpoint: Endpoint::Markets, token: Some(input.token), body: input.body };
        self.append_pending(&context, input, pending)
    }

    fn append_pending(
        &mut self,
        context: &DecodeContext<'_>,
        input: &MarketsBody<'_>,
        pending: PendingMarkets<'_>,
    ) -> Result<MarketsSummary, Error> {
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
