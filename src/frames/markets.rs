//! The `markets` frame: one row per exchange market.

use polars::prelude::*;

use super::columns::{finish_millis, frame, i64_builder, str_builder, ColumnBuilder};
use super::drift::{DriftColumns, DriftRow};
use super::MarketsFrames;
use crate::model::fields::{split_market_pair, MARKET_FIELDS, MARKET_PAIR_INDEX};
use crate::model::value::Typed;
use crate::model::Endpoint;

/// One market entry: a value per `MARKET_FIELDS` entry, in its order (an array, so a body of
/// many entries allocates nothing per entry).
pub type MarketRow<'de> = [Typed<'de>; MARKET_FIELDS.len()];

/// Columns of the markets frame, filled body by body.
pub struct MarketsColumns {
    token: StringChunkedBuilder,
    fields: Vec<ColumnBuilder>,
    base: StringChunkedBuilder,
    quote: StringChunkedBuilder,
    fetched_at: PrimitiveChunkedBuilder<Int64Type>,
    drift: DriftColumns,
}

impl MarketsColumns {
    /// `entries` is a capacity hint.
    pub fn new(entries: usize) -> Self {
        Self {
            token: str_builder("token", entries),
            fields: MARKET_FIELDS.iter().map(|(_, column, ty)| ColumnBuilder::new(column, *ty, entries)).collect(),
            base: str_builder("base", entries),
            quote: str_builder("quote", entries),
            fetched_at: i64_builder("fetched_at", entries),
            drift: DriftColumns::new(0),
        }
    }

    /// An empty row to fill.
    pub fn new_row<'de>() -> MarketRow<'de> {
        std::array::from_fn(|_| Typed::Null)
    }

    /// Appends one entry; `base` and `quote` are split from its market pair.
    pub fn append(&mut self, token: &str, fetched_at: Option<i64>, row: &MarketRow<'_>) {
        self.token.append_value(token);
        for (column, value) in self.fields.iter_mut().zip(row) {
            column.push(value);
        }
        match &row[MARKET_PAIR_INDEX] {
            Typed::Str(pair) => {
                let (base, quote) = split_market_pair(pair);
                self.base.append_value(base);
                self.quote.append_option(quote);
            }
            _ => {
                self.base.append_null();
                self.quote.append_null();
            }
        }
        self.fetched_at.append_option(fetched_at);
    }

    /// Values of one body that did not fit their columns.
    pub fn append_drift(&mut self, token: &str, fetched_at: Option<i64>, rows: &[DriftRow]) {
        self.drift.append(token, Endpoint::Markets, fetched_at, rows);
    }

    /// The markets frame (`token`, the fields up to the market pair, `base`, `quote`, the
    /// other fields, `fetched_at`) and the drift rows.
    pub fn finish(self) -> MarketsFrames {
        let mut columns = vec![self.token.finish().into_column()];
        let mut fields = self.fields.into_iter().map(ColumnBuilder::finish);
        columns.extend(fields.by_ref().take(MARKET_PAIR_INDEX + 1));
        columns.push(self.base.finish().into_column());
        columns.push(self.quote.finish().into_column());
        columns.extend(fields);
        columns.push(finish_millis(self.fetched_at));
        MarketsFrames { markets: frame(columns), drift: self.drift.finish() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markets_columns_follow_the_contract() {
        let frame = MarketsColumns::new(0).finish().markets;
        let names: Vec<_> = frame.get_column_names().iter().map(|s| s.to_string()).collect();
        let expected = [
            "token",
            "id",
            "exchange_name",
            "exchange_image",
            "market_pair",
            "base",
            "quote",
            "market_url",
            "price",
            "volume_usd",
            "liquidity_score",
            "depth_usd_positive_two",
            "depth_usd_negative_two",
            "volume_percent",
            "market_reputation",
            "fetched_at",
        ];
        assert_eq!(names, expected);
    }
}
