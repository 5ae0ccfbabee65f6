//! The listing frames (snapshot, indicators, signals, patterns, ta_updated, info): one body's
//! rows, and the columns they are appended to.

use std::borrow::Cow;

use polars::prelude::*;

use super::columns::{
    f64_builder, finish_list, finish_millis, finish_primitive, frame, i64_builder, list_builder, push_list,
    str_builder, ColumnBuilder, IntervalColumn,
};
use super::drift::{DriftColumns, DriftRow};
use super::string_views::StringViews;
use super::ListingFrames;
use crate::model::fields::{COMMUNITY_KEYS, ID_FIELD, SNAPSHOT_FIELDS, SYMBOL_ID_FIELD};
use crate::model::value::Typed;
use crate::model::Endpoint;
use crate::model::Interval;

/// An indicator or pattern family name: one of the catalogue's, or one the service added.
pub type Name = Cow<'static, str>;

/// The rows of one listing body, borrowing strings from it.
pub struct ListingRows<'de> {
    /// One value per `SNAPSHOT_FIELDS` entry, in its order.
    pub scalars: Vec<Typed<'de>>,
    pub indicators: Vec<(Interval, Name, Option<f64>)>,
    pub signals: Vec<(Interval, Name, Option<Cow<'de, str>>)>,
    pub patterns: Vec<(Interval, Name, Option<Cow<'de, str>>)>,
    pub ta_updated: Vec<(Interval, Option<i64>)>,
    pub info: InfoRow<'de>,
    pub drift: Vec<DriftRow>,
}

impl Default for ListingRows<'_> {
    fn default() -> Self {
        Self {
            scalars: vec![Typed::Null; SNAPSHOT_FIELDS.len()],
            indicators: Vec::new(),
            signals: Vec::new(),
            patterns: Vec::new(),
            ta_updated: Vec::new(),
            info: InfoRow::default(),
            drift: Vec::new(),
        }
    }
}

impl<'de> ListingRows<'de> {
    /// The body's `data.id`.
    pub fn id(&self) -> &Typed<'de> {
        &self.scalars[ID_FIELD]
    }

    /// The body's `data.symbol_id`.
    pub fn symbol_id(&self) -> &Typed<'de> {
        &self.scalars[SYMBOL_ID_FIELD]
    }
}

impl ListingRows<'_> {
    /// The same buffers, emptied, for the rows of another body (no allocation: collecting an
    /// emptied vector into one of the same layout reuses its memory).
    pub fn recycle<'b>(mut self) -> ListingRows<'b> {
        fn emptied<T, U>(mut items: Vec<T>) -> Vec<U> {
            items.clear();
            items.into_iter().map(|_| unreachable!("the vector was emptied")).collect()
        }
        // Most values own nothing (numbers, nulls, borrowed text): only the others are dropped,
        // and the slots are refilled without a clone each.
        for value in self.scalars.iter_mut().filter(|value| value.owns_memory()) {
            *value = Typed::Null;
        }
        self.scalars.drain(..).for_each(std::mem::forget);
        let mut scalars: Vec<Typed<'b>> = emptied(self.scalars);
        scalars.extend(std::iter::repeat_with(|| Typed::Null).take(SNAPSHOT_FIELDS.len()));
        self.indicators.clear();
        self.ta_updated.clear();
        self.drift.clear();
        ListingRows {
            scalars,
            indicators: self.indicators,
            signals: emptied(self.signals),
            patterns: emptied(self.patterns),
            ta_updated: self.ta_updated,
            info: InfoRow::default(),
            drift: self.drift,
        }
    }
}

/// The `info` row of one body.
#[derive(Default)]
pub struct InfoRow<'de> {
    pub description: Typed<'de>,
    pub websites: Typed<'de>,
    pub explorers: Typed<'de>,
    /// One per `COMMUNITY_KEYS` entry.
    pub community: [Option<Cow<'de, str>>; 5],
    /// Each chain object as JSON text.
    pub chains: Option<Vec<String>>,
    pub categories: Typed<'de>,
}

/// Columns of all the listing frames, filled body by body.
pub struct ListingColumns {
    snapshot_token: StringChunkedBuilder,
    snapshot_fetched_at: PrimitiveChunkedBuilder<Int64Type>,
    snapshot_fields: Vec<ColumnBuilder>,
    indicators: LongColumns,
    indicator_values: PrimitiveChunkedBuilder<Float64Type>,
    signals: LongColumns,
    signal_values: StringChunkedBuilder,
    patterns: LongColumns,
    pattern_values: StringViews,
    ta_token: StringChunkedBuilder,
    ta_interval: IntervalColumn,
    ta_updated_at: PrimitiveChunkedBuilder<Int64Type>,
    info_token: StringChunkedBuilder,
    info_description: StringChunkedBuilder,
    info_websites: ListStringChunkedBuilder,
    info_explorers: ListStringChunkedBuilder,
    info_community: Vec<StringChunkedBuilder>,
    info_chains: ListStringChunkedBuilder,
    info_categories: ListStringChunkedBuilder,
    drift: DriftColumns,
}

/// The token, interval and name columns of a long frame; its value column is kept beside.
struct LongColumns {
    token: StringViews,
    interval: IntervalColumn,
    name: StringViews,
}

impl LongColumns {
    fn new(name_column: &str, capacity: usize) -> Self {
        Self {
            token: StringViews::new("token", capacity),
            interval: IntervalColumn::new("interval", capacity),
            name: StringViews::new(name_column, capacity),
        }
    }

    /// The rows of one body, all carrying `token`: each row's interval and name here, its value
    /// handed to `push_value` (the value column is kept beside).
    #[inline]
    fn push_body<V>(&mut self, token: &str, rows: &[(Interval, Name, V)], mut push_value: impl FnMut(&V)) {
        if rows.is_empty() {
            return;
        }
        // The token's bytes once per frame and body; each row a view of them.
        let token = self.token.store(token);
        self.token.push_repeated(token, rows.len());
        self.interval.reserve(rows.len());
        for (interval, name, value) in rows {
            self.interval.push(*interval);
            match name {
                Cow::Borrowed(name) => self.name.push_static(name),
                Cow::Owned(name) => self.name.push_remembered(name),
            }
            push_value(value);
        }
    }

    fn finish(self, value_column: Column) -> DataFrame {
        frame(vec![self.token.finish(), self.interval.finish(), self.name.finish(), value_column])
    }
}

impl ListingColumns {
    /// `tokens` is a capacity hint: the number of bodies expected.
    pub fn new(tokens: usize) -> Self {
        // Capacity is only address space until it is written; a Sandbox body has 45 indicator and
        // about 33 pattern rows, so the columns seldom grow (each growth copies them whole).
        let long = tokens * 48;
        Self {
            snapshot_token: str_builder("token", tokens),
            snapshot_fetched_at: i64_builder("fetched_at", tokens),
            snapshot_fields: SNAPSHOT_FIELDS.iter().map(|(n, ty)| ColumnBuilder::new(n, *ty, tokens)).collect(),
            indicators: LongColumns::new("indicator", long),
            indicator_values: f64_builder("value", long),
            signals: LongColumns::new("indicator", tokens * 6),
            signal_values: str_builder("value", tokens * 6),
            patterns: LongColumns::new("family", tokens * 40),
            pattern_values: StringViews::new("pattern", tokens * 40),
            ta_token: str_builder("token", tokens * 5),
            ta_interval: IntervalColumn::new("interval", tokens * 5),
            ta_updated_at: i64_builder("updated_at", tokens * 5),
            info_token: str_builder("token", tokens),
            info_description: str_builder("description", tokens),
            info_websites: list_builder("websites", tokens),
            info_explorers: list_builder("explorers", tokens),
            info_community: COMMUNITY_KEYS.iter().map(|k| str_builder(k, tokens)).collect(),
            info_chains: list_builder("chains", tokens),
            info_categories: list_builder("categories", tokens),
            drift: DriftColumns::new(0),
        }
    }

    /// Appends the rows of one body, all of them carrying `token`.
    pub fn append<'de>(&mut self, token: &str, fetched_at: Option<i64>, rows: &mut ListingRows<'de>) {
        self.snapshot_token.append_value(token);
        self.snapshot_fetched_at.append_option(fetched_at);
        for (column, value) in self.snapshot_fields.iter_mut().zip(&rows.scalars) {
            column.push(value);
        }
        // The long rows stay in `rows` until `ListingRows::recycle` empties them.
        self.indicators.push_body(token, &rows.indicators, |value| self.indicator_values.append_option(*value));
        self.signals.push_body(token, &rows.signals, |value| self.signal_values.append_option(value.as_deref()));
        self.patterns
            .push_body(token, &rows.patterns, |pattern| self.pattern_values.push_option_remembered(pattern.as_deref()));
        for (interval, millis) in rows.ta_updated.drain(..) {
            self.ta_token.append_value(token);
            self.ta_interval.push(interval);
            self.ta_updated_at.append_option(millis);
        }
        self.drift.append(token, Endpoint::Listing, fetched_at, &rows.drift);
        let info = std::mem::take(&mut rows.info);
        self.info_token.append_value(token);
        match &info.description {
            Typed::Str(s) => self.info_description.append_value(s.as_ref()),
            _ => self.info_description.append_null(),
        }
        for (builder, value) in [
            (&mut self.info_websites, &info.websites),
            (&mut self.info_explorers, &info.explorers),
            (&mut self.info_categories, &info.categories),
        ] {
            match value {
                Typed::List(items) => push_list(builder, items),
                _ => builder.append_null(),
            }
        }
        for (builder, value) in self.info_community.iter_mut().zip(&info.community) {
            builder.append_option(value.as_deref());
        }
        match &info.chains {
            Some(chains) => self.info_chains.append_values_iter(chains.iter().map(String::as_str)),
            None => self.info_chains.append_null(),
        }
    }

    pub fn finish(self) -> ListingFrames {
        let mut snapshot = vec![self.snapshot_token.finish().into_column(), finish_millis(self.snapshot_fetched_at)];
        snapshot.extend(self.snapshot_fields.into_iter().map(ColumnBuilder::finish));
        let mut info = vec![
            self.info_token.finish().into_column(),
            self.info_description.finish().into_column(),
            finish_list(self.info_websites),
            finish_list(self.info_explorers),
        ];
        info.extend(self.info_community.into_iter().map(|b| b.finish().into_column()));
        info.push(finish_list(self.info_chains));
        info.push(finish_list(self.info_categories));
        ListingFrames {
            snapshot: frame(snapshot),
            indicators: self.indicators.finish(finish_primitive(self.indicator_values).into_column()),
            signals: self.signals.finish(self.signal_values.finish().into_column()),
            patterns: self.patterns.finish(self.pattern_values.finish()),
            ta_updated: frame(vec![
                self.ta_token.finish().into_column(),
                self.ta_interval.finish(),
                finish_millis(self.ta_updated_at),
            ]),
            info: frame(info),
            drift: self.drift.finish(),
        }
    }
}
