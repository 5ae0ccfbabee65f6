//! The `drift` frame: one row per value that did not fit its column. The cell is null; this row
//! says where, what the column holds, and what came instead.

use polars::prelude::*;

use super::columns::{finish_millis, frame, i64_builder, str_builder};
use crate::model::value::Mismatch;
use crate::model::Endpoint;

/// One value that did not fit, in the body being read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriftRow {
    /// Where in the body, e.g. `data.current_price` or `data[3].liquidity_score`.
    pub field: String,
    pub mismatch: Mismatch,
}

pub struct DriftColumns {
    token: StringChunkedBuilder,
    endpoint: StringChunkedBuilder,
    field: StringChunkedBuilder,
    expected: StringChunkedBuilder,
    found: StringChunkedBuilder,
    fetched_at: PrimitiveChunkedBuilder<Int64Type>,
}

impl DriftColumns {
    pub fn new(capacity: usize) -> Self {
        Self {
            token: str_builder("token", capacity),
            endpoint: str_builder("endpoint", capacity),
            field: str_builder("field", capacity),
            expected: str_builder("expected", capacity),
            found: str_builder("found", capacity),
            fetched_at: i64_builder("fetched_at", capacity),
        }
    }

    pub fn append(&mut self, token: &str, endpoint: Endpoint, fetched_at: Option<i64>, rows: &[DriftRow]) {
        for row in rows {
            self.token.append_value(token);
            self.endpoint.append_value(endpoint.as_str());
            self.field.append_value(&row.field);
            self.expected.append_value(row.mismatch.expected);
            self.found.append_value(&row.mismatch.found);
            self.fetched_at.append_option(fetched_at);
        }
    }

    pub fn finish(self) -> DataFrame {
        frame(vec![
            self.token.finish().into_column(),
            self.endpoint.finish().into_column(),
            self.field.finish().into_column(),
            self.expected.finish().into_column(),
            self.found.finish().into_column(),
            finish_millis(self.fetched_at),
        ])
    }
}
