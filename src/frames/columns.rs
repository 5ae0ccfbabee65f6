//! Column builders for the contract's dtypes, in polars' own layout.

use std::sync::LazyLock;

use polars::prelude::*;

use crate::model::fields::ScalarType;
use crate::model::value::Typed;
use crate::model::{Interval, INTERVALS};

/// `pl.Enum(["5m", "15m", "1h", "4h", "24h", "1w"])`, the same in every frame.
pub static INTERVAL_DTYPE: LazyLock<DataType> = LazyLock::new(|| {
    let categories = FrozenCategories::new(INTERVALS.iter().copied()).expect("six categories fit any Enum");
    DataType::from_frozen_categories(categories)
});

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
            ScalarType::ListStr => Self::List(ListStringChunkedBuilder::new(name(column), capacity, capacity * 2)),
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

/// A `Datetime(ms, UTC)` column of the given values (the Sandbox's candles).
#[cfg(feature = "sandbox")]
pub fn millis_column(column: &str, values: Vec<Option<i64>>) -> Column {
    Int64Chunked::from_iter_options(name(column), values.into_iter())
        .into_datetime(TimeUnit::Milliseconds, Some(TimeZone::UTC))
        .into_column()
}

/// An `interval` column: the physical Enum indices, filled only from `Interval`s.
pub struct IntervalColumn {
    name: PlSmallStr,
    indices: Vec<u8>,
}

impl IntervalColumn {
    pub fn new(column: &str, capacity: usize) -> Self {
        Self { name: name(column), indices: Vec::with_capacity(capacity) }
    }

    #[inline]
    pub fn push(&mut self, interval: Interval) {
        self.indices.push(interval.index());
    }

    pub fn reserve(&mut self, additional: usize) {
        self.indices.reserve(additional);
    }

    pub fn finish(self) -> Column {
        let physical = UInt8Chunked::from_vec(self.name, self.indices);
        // SAFETY: every index came from an `Interval`, whose index is < INTERVALS.len(), the
        // number of categories of INTERVAL_DTYPE.
        unsafe {
            CategoricalChunked::<Categorical8Type>::from_cats_and_dtype_unchecked(physical, INTERVAL_DTYPE.clone())
        }
        .into_column()
    }
}

pub fn str_builder(column: &str, capacity: usize) -> StringChunkedBuilder {
    StringChunkedBuilder::new(name(column), capacity)
}

pub fn list_builder(column: &str, capacity: usize) -> ListStringChunkedBuilder {
    ListStringChunkedBuilder::new(name(column), capacity, capacity * 2)
}

pub fn finish_list(mut builder: ListStringChunkedBuilder) -> Column {
    builder.finish().into_column()
}

pub fn frame(columns: Vec<Column>) -> DataFrame {
    let height = columns.first().map_or(0, |c| c.len());
    DataFrame::new(height, columns).expect("frame columns have equal lengths and unique names")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_enum_keeps_order() {
        let mut column = IntervalColumn::new("interval", 3);
        for suffix in ["1w", "5m", "4h"] {
            column.push(Interval::from_suffix(suffix).unwrap());
        }
        let column = column.finish();
        assert_eq!(column.dtype(), &*INTERVAL_DTYPE);
        let strings = column.cast(&DataType::String).unwrap();
        let values: Vec<_> = strings.str().unwrap().iter().collect();
        assert_eq!(values, vec![Some("1w"), Some("5m"), Some("4h")]);
    }
}
