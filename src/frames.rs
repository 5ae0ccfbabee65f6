//! Column builders and the contract's frames: names, column order and dtypes live here.

use std::sync::LazyLock;

use polars::prelude::*;

use crate::model::{ScalarType, INTERVALS, MARKET_FIELDS};
use crate::value::Typed;

/// `pl.Enum(["5m", "15m", "1h", "4h", "24h", "1w"])`, the same in every frame.
pub static INTERVAL_DTYPE: LazyLock<DataType> = LazyLock::new(|| {
    let categories = FrozenCategories::new(INTERVALS.iter().copied())
        .expect("six categories fit any Enum");
    DataType::from_frozen_categories(categories)
});

pub fn datetime_utc() -> DataType {
    DataType::Datetime(TimeUnit::Milliseconds, Some(TimeZone::UTC))
}

fn name(text: &str) -> PlSmallStr {
    PlSmallStr::from_str(text)
}

/// A growable column of one of the contract's dtypes, in polars' own layout (values plus a
/// validity bitmap), so finishing it moves the buffers instead of copying them.
pub enum ColumnBuilder {
    Str(StringChunkedBuilder),
    F64(PrimitiveChunkedBuilder<Float64Type>),
    I64(PrimitiveChunkedBuilder<Int64Type>),
    Bool(BooleanChunkedBuilder),
    Millis(PrimitiveChunkedBuilder<Int64Type>),
    List(ListStringChunkedBuilder),
}

impl ColumnBuilder {
    pub fn new(column: &str, ty: ScalarType, capacity: usize) -> Self {
        match ty {
            ScalarType::Str => Self::Str(StringChunkedBuilder::new(name(column), capacity)),
            ScalarType::F64 => Self::F64(f64_builder(column, capacity)),
            ScalarType::I64 => Self::I64(i64_builder(column, capacity)),
            ScalarType::Bool => Self::Bool(BooleanChunkedBuilder::new(name(column), capacity)),
            ScalarType::Datetime => Self::Millis(i64_builder(column, capacity)),
            ScalarType::ListStr => {
                Self::List(ListStringChunkedBuilder::new(name(column), capacity, capacity * 2))
            }
        }
    }

    /// Appends a value already converted to this column's type (`value::convert`); anything
    /// else appends a null.
    pub fn push(&mut self, value: &Typed<'_>) {
        match (self, value) {
            (Self::Str(b), Typed::Str(s)) => b.append_value(s.as_ref()),
            (Self::Str(b), _) => b.append_null(),
            (Self::F64(b), Typed::F64(x)) => b.append_value(*x),
            (Self::F64(b), _) => b.append_null(),
            (Self::I64(b), Typed::I64(x)) => b.append_value(*x),
            (Self::I64(b), _) => b.append_null(),
            (Self::Bool(b), Typed::Bool(x)) => b.append_value(*x),
            (Self::Bool(b), _) => b.append_null(),
            (Self::Millis(b), Typed::Millis(x)) => b.append_value(*x),
            (Self::Millis(b), _) => b.append_null(),
            (Self::List(b), Typed::List(items)) => push_list(b, items),
            (Self::List(b), _) => b.append_null(),
        }
    }

    pub fn finish(self) -> Column {
        match self {
            Self::Str(b) => b.finish().into_column(),
            Self::F64(b) => finish_primitive(b).into_column(),
            Self::I64(b) => finish_primitive(b).into_column(),
            Self::Bool(b) => b.finish().into_column(),
            Self::Millis(b) => finish_millis(b),
            Self::List(mut b) => b.finish().into_column(),
        }
    }
}

pub fn f64_builder(column: &str, capacity: usize) -> PrimitiveChunkedBuilder<Float64Type> {
    PrimitiveChunkedBuilder::new(name(column), capacity)
}

pub fn i64_builder(column: &str, capacity: usize) -> PrimitiveChunkedBuilder<Int64Type> {
    PrimitiveChunkedBuilder::new(name(column), capacity)
}

/// Capacity hints can overshoot; the frame keeps only what was filled.
pub fn finish_primitive<T: PolarsNumericType>(mut builder: PrimitiveChunkedBuilder<T>) -> ChunkedArray<T> {
    builder.shrink_to_fit();
    builder.finish()
}

/// A `Datetime(ms, UTC)` column from milliseconds since the epoch.
pub fn finish_millis(builder: PrimitiveChunkedBuilder<Int64Type>) -> Column {
    finish_primitive(builder).into_datetime(TimeUnit::Milliseconds, Some(TimeZone::UTC)).into_column()
}

pub fn push_list(builder: &mut ListStringChunkedBuilder, items: &[Option<std::borrow::Cow<'_, str>>]) {
    if items.iter().all(Option::is_some) {
        builder.append_values_iter(items.iter().map(|s| s.as_deref().unwrap_or_default()));
    } else {
        let strings: Vec<Option<&str>> = items.iter().map(|s| s.as_deref()).collect();
        builder.append_series(&Series::new(PlSmallStr::EMPTY, strings)).expect("a list of strings");
    }
}

pub fn millis_column(column: &str, values: Vec<Option<i64>>) -> Column {
    Int64Chunked::from_iter_options(name(column), values.into_iter())
        .into_datetime(TimeUnit::Milliseconds, Some(TimeZone::UTC))
        .into_column()
}

pub fn interval_column(column: &str, indices: Vec<u8>) -> Column {
    let physical = UInt8Chunked::from_vec(name(column), indices);
    // SAFETY: every index comes from `model::interval_index`, so it is < INTERVALS.len().
    unsafe {
        CategoricalChunked::<Categorical8Type>::from_cats_and_dtype_unchecked(
            physical,
            INTERVAL_DTYPE.clone(),
        )
    }
    .into_column()
}

pub fn f64_column(column: &str, values: Vec<Option<f64>>) -> Column {
    Float64Chunked::from_iter_options(name(column), values.into_iter()).into_column()
}

pub fn i64_column(column: &str, values: Vec<Option<i64>>) -> Column {
    Int64Chunked::from_iter_options(name(column), values.into_iter()).into_column()
}

pub fn bool_column(column: &str, values: Vec<bool>) -> Column {
    BooleanChunked::from_slice(name(column), &values).into_column()
}

pub fn str_builder(column: &str, capacity: usize) -> StringChunkedBuilder {
    StringChunkedBuilder::new(name(column), capacity)
}

pub fn list_builder(column: &str, capacity: usize) -> ListStringChunkedBuilder {
    ListStringChunkedBuilder::new(name(column), capacity, capacity * 2)
}

pub fn frame(columns: Vec<Column>) -> DataFrame {
    let height = columns.first().map_or(0, |c| c.len());
    DataFrame::new(height, columns).expect("frame columns have equal lengths and unique names")
}

/// The frames built from listing bodies.
pub struct ListingFrames {
    pub snapshot: DataFrame,
    pub indicators: DataFrame,
    pub signals: DataFrame,
    pub patterns: DataFrame,
    pub ta_updated: DataFrame,
    pub info: DataFrame,
}

impl ListingFrames {
    pub fn vstack(&mut self, other: ListingFrames) {
        for (mine, theirs) in [
            (&mut self.snapshot, other.snapshot),
            (&mut self.indicators, other.indicators),
            (&mut self.signals, other.signals),
            (&mut self.patterns, other.patterns),
            (&mut self.ta_updated, other.ta_updated),
            (&mut self.info, other.info),
        ] {
            mine.vstack_mut_owned(theirs).expect("frames of one schema");
        }
    }

    pub fn into_named(self) -> Vec<(&'static str, DataFrame)> {
        vec![
            ("snapshot", self.snapshot),
            ("indicators", self.indicators),
            ("signals", self.signals),
            ("patterns", self.patterns),
            ("ta_updated", self.ta_updated),
            ("info", self.info),
        ]
    }
}

/// Column names of the markets frame, in order.
pub fn markets_columns() -> Vec<&'static str> {
    let mut names = vec!["token"];
    for (_, column, _) in MARKET_FIELDS.iter().take(4) {
        names.push(column);
    }
    names.extend(["base", "quote"]);
    for (_, column, _) in MARKET_FIELDS.iter().skip(4) {
        names.push(column);
    }
    names.push("fetched_at");
    names
}

/// One HTTP exchange as recorded in the `log` frame.
#[derive(Clone, Debug)]
pub struct LogRecord {
    pub token: String,
    pub endpoint: &'static str,
    pub ok: bool,
    pub status: Option<u16>,
    pub kind: Option<&'static str>,
    pub message: Option<String>,
    pub attempts: u32,
    pub elapsed_ms: f64,
    pub total: Option<i64>,
    pub fetched_at: Option<i64>,
}

pub fn log_frame(records: &[LogRecord]) -> DataFrame {
    let n = records.len();
    let mut token = str_builder("token", n);
    let mut endpoint = str_builder("endpoint", n);
    let mut kind = str_builder("kind", n);
    let mut message = str_builder("message", n);
    for r in records {
        token.append_value(&r.token);
        endpoint.append_value(r.endpoint);
        kind.append_option(r.kind);
        message.append_option(r.message.as_deref());
    }
    frame(vec![
        token.finish().into_column(),
        endpoint.finish().into_column(),
        bool_column("ok", records.iter().map(|r| r.ok).collect()),
        i64_column("status", records.iter().map(|r| r.status.map(i64::from)).collect()),
        kind.finish().into_column(),
        message.finish().into_column(),
        i64_column("attempts", records.iter().map(|r| Some(i64::from(r.attempts))).collect()),
        f64_column("elapsed_ms", records.iter().map(|r| Some(r.elapsed_ms)).collect()),
        i64_column("total", records.iter().map(|r| r.total).collect()),
        millis_column("fetched_at", records.iter().map(|r| r.fetched_at).collect()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_enum_keeps_order() {
        let column = interval_column("interval", vec![5, 0, 3]);
        assert_eq!(column.dtype(), &*INTERVAL_DTYPE);
        let strings = column.cast(&DataType::String).unwrap();
        let values: Vec<_> = strings.str().unwrap().iter().collect();
        assert_eq!(values, vec![Some("1w"), Some("5m"), Some("4h")]);
    }

    #[test]
    fn empty_log_has_its_schema() {
        let log = log_frame(&[]);
        assert_eq!(log.height(), 0);
        assert_eq!(log.width(), 10);
        assert_eq!(log.column("fetched_at").unwrap().dtype(), &datetime_utc());
    }
}
