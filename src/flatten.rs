//! Response bodies straight into column builders.
//!
//! A body is read by serde visitors that look at each key once: scalar fields are converted to
//! their column type, interval-suffixed fields are routed by the JSON type of their value into
//! the long frames, everything else is skipped without being built. The rows of one body are
//! collected first (borrowing strings from the body) and appended only when the whole body
//! parsed, so a malformed body leaves no partial rows behind.

use std::borrow::Cow;
use std::fmt;

use polars::prelude::*;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::error::{Endpoint, Error};
use crate::frames::{
    f64_builder, finish_millis, finish_primitive, frame, i64_builder, interval_column, list_builder,
    push_list, str_builder, ColumnBuilder, ListingFrames,
};
use crate::model::{
    self, parse_suffixed_key, split_market_pair, FamilyKind, ScalarType, SuffixedKey,
    COMMUNITY_KEYS, MARKET_FIELDS, MARKET_PAIR_INDEX, SNAPSHOT_FIELDS,
};
use crate::value::{convert, parse_number_text, BorrowedStr, Typed, Value};

/// One listing response body and what is known about it.
#[derive(Clone, Copy, Debug)]
pub struct ListingBody<'a> {
    pub body: &'a [u8],
    /// The id the caller asked for; `None` takes the body's `data.id`.
    pub token: Option<&'a str>,
    pub fetched_at: Option<i64>,
}

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

// ---------------------------------------------------------------------------------------------
// Rows of one body

type Name = Cow<'static, str>;

#[derive(Default)]
struct PendingListing<'de> {
    saw_data: bool,
    scalars: Vec<Typed<'de>>,
    indicators: Vec<(u8, Name, Option<f64>)>,
    signals: Vec<(u8, Name, Option<Cow<'de, str>>)>,
    patterns: Vec<(u8, Name, Option<Cow<'de, str>>)>,
    ta_updated: Vec<(u8, Option<i64>)>,
    info: PendingInfo<'de>,
    /// The field being read, for error messages: (section, key).
    field: Option<(&'static str, Cow<'de, str>)>,
}

#[derive(Default)]
struct PendingInfo<'de> {
    description: Typed<'de>,
    websites: Typed<'de>,
    explorers: Typed<'de>,
    community: [Option<Cow<'de, str>>; 5],
    chains: Option<Vec<String>>,
    categories: Typed<'de>,
}

impl Default for Typed<'_> {
    fn default() -> Self {
        Typed::Null
    }
}

fn field_label(field: &Option<(&'static str, Cow<'_, str>)>) -> Option<String> {
    field.as_ref().map(|(section, key)| {
        if section.is_empty() {
            key.to_string()
        } else {
            format!("{section}.{key}")
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Listing visitors

struct ListingDocument<'a, 'de>(&'a mut PendingListing<'de>);

impl<'de> DeserializeSeed<'de> for ListingDocument<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

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

impl<'de> DeserializeSeed<'de> for ListingData<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListingData<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the token listing object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            if let Some(index) = model::snapshot_field_index(&key) {
                pending.field = Some(("data", key));
                let value: Value<'de> = map.next_value()?;
                pending.scalars[index] =
                    convert(value, SNAPSHOT_FIELDS[index].1).map_err(de::Error::custom)?;
            } else if let Some(suffixed) = parse_suffixed_key(&key) {
                let suffixed = own_suffixed(suffixed);
                pending.field = Some(("data", key));
                let value: Value<'de> = map.next_value()?;
                route_suffixed(pending, suffixed, value).map_err(de::Error::custom)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
            // Between keys the error still belongs to `data`.
            pending.field = Some(("", Cow::Borrowed("data")));
        }
        Ok(())
    }
}

/// A suffixed key detached from the key's lifetime, so the key can move into `field`.
enum OwnedSuffixed {
    TaUpdated(u8),
    Family { name: Name, kind: Option<FamilyKind>, interval: u8 },
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
/// indicator) and strictly (a boolean or object where a known family belongs is an error);
/// values of unknown families that fit no frame are left to `Frames.raw`.
fn route_suffixed<'de>(
    pending: &mut PendingListing<'de>,
    key: OwnedSuffixed,
    value: Value<'de>,
) -> Result<(), String> {
    let (name, kind, interval) = match key {
        OwnedSuffixed::TaUpdated(interval) => {
            let millis = match convert(value, ScalarType::Datetime)? {
                Typed::Millis(ms) => Some(ms),
                _ => None,
            };
            pending.ta_updated.push((interval, millis));
            return Ok(());
        }
        OwnedSuffixed::Family { name, kind, interval } => (name, kind, interval),
    };
    match value {
        Value::Null => match kind {
            Some(FamilyKind::Text) => pending.signals.push((interval, name, None)),
            Some(FamilyKind::Patterns) => pending.patterns.push((interval, name, None)),
            Some(FamilyKind::Numeric) | None => pending.indicators.push((interval, name, None)),
        },
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => {
            if kind == Some(FamilyKind::Patterns) {
                return Err(format!("expected an array of pattern names, found {}", value.type_name()));
            }
            pending.indicators.push((interval, name, value.as_f64()));
        }
        Value::Str(text) => match kind {
            Some(FamilyKind::Numeric) => match parse_number_text(&text) {
                Ok(number) => pending.indicators.push((interval, name, number)),
                Err(_) => pending.signals.push((interval, name, Some(text))),
            },
            Some(FamilyKind::Patterns) => {
                if !text.trim().is_empty() {
                    pending.patterns.push((interval, name, Some(text)));
                }
            }
            Some(FamilyKind::Text) | None => pending.signals.push((interval, name, Some(text))),
        },
        Value::StrList(items) => {
            if matches!(kind, Some(FamilyKind::Numeric | FamilyKind::Text)) {
                return Err(format!("expected a {}, found an array", if kind == Some(FamilyKind::Numeric) { "number" } else { "string" }));
            }
            let family: Name = match (kind, name) {
                (None, Cow::Owned(n)) => Cow::Owned(model::unknown_pattern_family(&n).to_owned()),
                (_, n) => n,
            };
            for item in items.into_iter().flatten() {
                pending.patterns.push((interval, family.clone(), Some(item)));
            }
        }
        Value::Bool(_) | Value::Other(_) => {
            if kind.is_some() {
                return Err(format!("unexpected {}", value.type_name()));
            }
        }
    }
    Ok(())
}

struct GeneralInfo<'a, 'de>(&'a mut PendingListing<'de>);

impl<'de> DeserializeSeed<'de> for GeneralInfo<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for GeneralInfo<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the generalInfo object or null")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            let target = match key.as_ref() {
                "description" => Some((ScalarType::Str, 0)),
                "websites" => Some((ScalarType::ListStr, 1)),
                "explorers" => Some((ScalarType::ListStr, 2)),
                "categories" => Some((ScalarType::ListStr, 3)),
                _ => None,
            };
            let is_community = key == "community";
            let is_chains = key == "chains";
            pending.field = Some(("generalInfo", key));
            if let Some((ty, slot)) = target {
                let value: Value<'de> = map.next_value()?;
                let typed = convert(value, ty).map_err(de::Error::custom)?;
                let info = &mut pending.info;
                *[&mut info.description, &mut info.websites, &mut info.explorers, &mut info.categories][slot] = typed;
            } else if is_community {
                map.next_value_seed(Community(&mut pending.info.community))?;
            } else if is_chains {
                let chains: Option<Vec<serde_json::Value>> = map.next_value()?;
                pending.info.chains = chains.map(|c| c.iter().map(|v| v.to_string()).collect());
            } else {
                map.next_value::<IgnoredAny>()?;
            }
            pending.field = Some(("", Cow::Borrowed("generalInfo")));
        }
        Ok(())
    }
}

struct Community<'a, 'de>(&'a mut [Option<Cow<'de, str>>; 5]);

impl<'de> DeserializeSeed<'de> for Community<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Community<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of community links or null")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(BorrowedStr(key)) = map.next_key()? {
            match COMMUNITY_KEYS.iter().position(|k| *k == key) {
                Some(slot) => {
                    let value: Value<'de> = map.next_value()?;
                    self.0[slot] = match convert(value, ScalarType::Str).map_err(de::Error::custom)? {
                        Typed::Str(s) if !s.is_empty() => Some(s),
                        _ => None,
                    };
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Listing builder

/// Columns of all the listing frames, filled body by body.
pub struct ListingBuilder {
    snapshot_token: StringChunkedBuilder,
    snapshot_fetched_at: PrimitiveChunkedBuilder<Int64Type>,
    snapshot_fields: Vec<ColumnBuilder>,
    indicators: LongColumns,
    indicator_values: PrimitiveChunkedBuilder<Float64Type>,
    signals: LongColumns,
    signal_values: StringChunkedBuilder,
    patterns: LongColumns,
    pattern_values: StringChunkedBuilder,
    ta_token: StringChunkedBuilder,
    ta_interval: Vec<u8>,
    ta_updated_at: PrimitiveChunkedBuilder<Int64Type>,
    info_token: StringChunkedBuilder,
    info_description: StringChunkedBuilder,
    info_websites: ListStringChunkedBuilder,
    info_explorers: ListStringChunkedBuilder,
    info_community: Vec<StringChunkedBuilder>,
    info_chains: ListStringChunkedBuilder,
    info_categories: ListStringChunkedBuilder,
}

/// The token, interval and name columns of a long frame; its value column is kept beside.
struct LongColumns {
    token: StringChunkedBuilder,
    interval: Vec<u8>,
    name: StringChunkedBuilder,
}

impl LongColumns {
    fn new(name_column: &str, capacity: usize) -> Self {
        Self {
            token: str_builder("token", capacity),
            interval: Vec::with_capacity(capacity),
            name: str_builder(name_column, capacity),
        }
    }

    fn push(&mut self, token: &str, interval: u8, name: &str) {
        self.token.append_value(token);
        self.interval.push(interval);
        self.name.append_value(name);
    }

    fn finish(self, value_column: Column) -> DataFrame {
        frame(vec![
            self.token.finish().into_column(),
            interval_column("interval", self.interval),
            self.name.finish().into_column(),
            value_column,
        ])
    }
}

impl ListingBuilder {
    /// `tokens` is a capacity hint: the number of bodies expected.
    pub fn new(tokens: usize) -> Self {
        let long = tokens * 48;
        Self {
            snapshot_token: str_builder("token", tokens),
            snapshot_fetched_at: i64_builder("fetched_at", tokens),
            snapshot_fields: SNAPSHOT_FIELDS.iter().map(|(n, ty)| ColumnBuilder::new(n, *ty, tokens)).collect(),
            indicators: LongColumns::new("indicator", long),
            indicator_values: f64_builder("value", long),
            signals: LongColumns::new("indicator", tokens * 6),
            signal_values: str_builder("value", tokens * 6),
            patterns: LongColumns::new("family", tokens * 8),
            pattern_values: str_builder("pattern", tokens * 8),
            ta_token: str_builder("token", tokens * 5),
            ta_interval: Vec::with_capacity(tokens * 5),
            ta_updated_at: i64_builder("updated_at", tokens * 5),
            info_token: str_builder("token", tokens),
            info_description: str_builder("description", tokens),
            info_websites: list_builder("websites", tokens),
            info_explorers: list_builder("explorers", tokens),
            info_community: COMMUNITY_KEYS.iter().map(|k| str_builder(k, tokens)).collect(),
            info_chains: list_builder("chains", tokens),
            info_categories: list_builder("categories", tokens),
        }
    }

    /// Parses one listing body and appends its rows. Returns the token the rows carry.
    /// On error nothing is appended.
    pub fn append(&mut self, input: &ListingBody<'_>) -> Result<String, Error> {
        let mut pending = PendingListing {
            scalars: vec![Typed::Null; SNAPSHOT_FIELDS.len()],
            ..Default::default()
        };
        let decode_error = |field: Option<String>, offset: Option<usize>, message: String| Error::Decode {
            token: input.token.map(str::to_owned),
            endpoint: Endpoint::Listing,
            field,
            offset,
            message,
        };
        let parsed = parse_document(input.body, ListingDocument(&mut pending));
        if let Err(err) = parsed {
            let (message, offset) = describe_json_error(&err, input.body);
            return Err(decode_error(field_label(&pending.field), offset, message));
        }
        if !pending.saw_data {
            return Err(decode_error(None, None, "the response has no `data` object".into()));
        }
        let token: Cow<'_, str> = match (input.token, &pending.scalars[0]) {
            (Some(token), _) => Cow::Borrowed(token),
            (None, Typed::Str(id)) if !id.is_empty() => id.clone(),
            (None, _) => {
                return Err(decode_error(
                    Some("data.id".into()),
                    None,
                    "the body has no `data.id`, so pass token_id= to name the token".into(),
                ))
            }
        };
        self.flush(&token, input.fetched_at, pending);
        Ok(token.into_owned())
    }

    fn flush(&mut self, token: &str, fetched_at: Option<i64>, pending: PendingListing<'_>) {
        self.snapshot_token.append_value(token);
        self.snapshot_fetched_at.append_option(fetched_at);
        for (column, value) in self.snapshot_fields.iter_mut().zip(&pending.scalars) {
            column.push(value);
        }
        for (interval, name, value) in pending.indicators {
            self.indicators.push(token, interval, &name);
            self.indicator_values.append_option(value);
        }
        for (interval, name, value) in pending.signals {
            self.signals.push(token, interval, &name);
            self.signal_values.append_option(value.as_deref());
        }
        for (interval, family, pattern) in pending.patterns {
            self.patterns.push(token, interval, &family);
            self.pattern_values.append_option(pattern.as_deref());
        }
        for (interval, millis) in pending.ta_updated {
            self.ta_token.append_value(token);
            self.ta_interval.push(interval);
            self.ta_updated_at.append_option(millis);
        }
        let info = pending.info;
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
        let mut snapshot = vec![
            self.snapshot_token.finish().into_column(),
            finish_millis(self.snapshot_fetched_at),
        ];
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
            patterns: self.patterns.finish(self.pattern_values.finish().into_column()),
            ta_updated: frame(vec![
                self.ta_token.finish().into_column(),
                interval_column("interval", self.ta_interval),
                finish_millis(self.ta_updated_at),
            ]),
            info: frame(info),
        }
    }
}

fn finish_list(mut builder: ListStringChunkedBuilder) -> Column {
    builder.finish().into_column()
}

/// Runs `document` over the whole of `body`.
fn parse_document<'de, S: DeserializeSeed<'de, Value = ()>>(body: &'de [u8], document: S) -> Result<(), serde_json::Error> {
    match std::str::from_utf8(body) {
        // Checked once for the whole body, so the parser need not check each string again.
        Ok(text) => parse_with(serde_json::Deserializer::from_str(text), document),
        // Not UTF-8: the byte reader finds where, and skipped fields may still hold anything.
        Err(_) => parse_with(serde_json::Deserializer::from_slice(body), document),
    }
}

fn parse_with<'de, R, S>(mut deserializer: serde_json::Deserializer<R>, document: S) -> Result<(), serde_json::Error>
where
    R: serde_json::de::Read<'de>,
    S: DeserializeSeed<'de, Value = ()>,
{
    document.deserialize(&mut deserializer).and_then(|()| deserializer.end())
}

/// serde_json's message without its position suffix, and the byte offset of that position.
fn describe_json_error(err: &serde_json::Error, body: &[u8]) -> (String, Option<usize>) {
    let text = err.to_string();
    let message = match text.rfind(" at line ") {
        Some(cut) if err.line() > 0 => text[..cut].to_string(),
        _ => text,
    };
    let offset = (err.line() > 0).then(|| {
        let line_start = body
            .split_inclusive(|&b| b == b'\n')
            .take(err.line() - 1)
            .map(<[u8]>::len)
            .sum::<usize>();
        (line_start + err.column().saturating_sub(1)).min(body.len())
    });
    (message, offset)
}

// ---------------------------------------------------------------------------------------------
// Markets

#[derive(Default)]
struct PendingMarkets<'de> {
    saw_data: bool,
    entries: Vec<Vec<Typed<'de>>>,
    total: Option<i64>,
    field: Option<(&'static str, Cow<'de, str>)>,
}

struct MarketsDocument<'a, 'de>(&'a mut PendingMarkets<'de>);

impl<'de> DeserializeSeed<'de> for MarketsDocument<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

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

impl<'de> DeserializeSeed<'de> for MarketEntries<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for MarketEntries<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of market entries")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let pending = self.0;
        let mut index = 0usize;
        loop {
            let mut entry = vec![Typed::Null; MARKET_FIELDS.len()];
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
    entry: &'a mut Vec<Typed<'de>>,
    field: &'a mut Option<Cow<'de, str>>,
}

impl<'de> DeserializeSeed<'de> for MarketEntry<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MarketEntry<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a market entry object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(BorrowedStr(key)) = map.next_key()? {
            match model::market_field_index(&key) {
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

/// Columns of the markets frame, filled body by body.
pub struct MarketsBuilder {
    token: StringChunkedBuilder,
    fields: Vec<ColumnBuilder>,
    base: StringChunkedBuilder,
    quote: StringChunkedBuilder,
    fetched_at: PrimitiveChunkedBuilder<Int64Type>,
}

impl MarketsBuilder {
    /// `entries` is a capacity hint.
    pub fn new(entries: usize) -> Self {
        Self {
            token: str_builder("token", entries),
            fields: MARKET_FIELDS.iter().map(|(_, column, ty)| ColumnBuilder::new(column, *ty, entries)).collect(),
            base: str_builder("base", entries),
            quote: str_builder("quote", entries),
            fetched_at: i64_builder("fetched_at", entries),
        }
    }

    /// Parses one markets body and appends its entries. On error nothing is appended.
    pub fn append(&mut self, input: &MarketsBody<'_>) -> Result<MarketsSummary, Error> {
        let mut pending = PendingMarkets::default();
        let parsed = parse_document(input.body, MarketsDocument(&mut pending));
        let decode_error = |field, offset, message| Error::Decode {
            token: Some(input.token.to_owned()),
            endpoint: Endpoint::Markets,
            field,
            offset,
            message,
        };
        if let Err(err) = parsed {
            let (message, offset) = describe_json_error(&err, input.body);
            return Err(decode_error(field_label(&pending.field), offset, message));
        }
        if !pending.saw_data {
            return Err(decode_error(None, None, "the response has no `data` array".into()));
        }
        let summary = MarketsSummary { entries: pending.entries.len(), total: pending.total };
        for entry in pending.entries {
            self.token.append_value(input.token);
            for (column, value) in self.fields.iter_mut().zip(&entry) {
                column.push(value);
            }
            match &entry[MARKET_PAIR_INDEX] {
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
            self.fetched_at.append_option(input.fetched_at);
        }
        Ok(summary)
    }

    pub fn finish(self) -> DataFrame {
        let mut columns = vec![self.token.finish().into_column()];
        let mut fields = self.fields.into_iter().map(ColumnBuilder::finish);
        columns.extend(fields.by_ref().take(4));
        columns.push(self.base.finish().into_column());
        columns.push(self.quote.finish().into_column());
        columns.extend(fields);
        columns.push(finish_millis(self.fetched_at));
        frame(columns)
    }
}

// ---------------------------------------------------------------------------------------------
// Batches

/// How many threads a batch of `n` bodies is worth: one per core, but never fewer than a few
/// hundred bodies per thread, where spawning would cost more than it saves.
fn batch_threads(n: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    cores.min(n / 256).max(1)
}

fn split_in_chunks<T>(items: &[T], parts: usize) -> impl Iterator<Item = &[T]> {
    let size = items.len().div_ceil(parts.max(1)).max(1);
    items.chunks(size)
}

/// Runs `parse_chunk` over contiguous chunks of `bodies` on scoped threads and merges the
/// results in order, so row order always follows body order.
fn parse_in_parallel<B: Sync, R: Send>(
    bodies: &[B],
    parse_chunk: impl Fn(&[B]) -> R + Sync,
    merge: impl Fn(&mut R, R),
) -> R {
    let threads = batch_threads(bodies.len());
    if threads == 1 {
        return parse_chunk(bodies);
    }
    let parse_chunk = &parse_chunk;
    let parts: Vec<R> = std::thread::scope(|scope| {
        let handles: Vec<_> = split_in_chunks(bodies, threads)
            .map(|chunk| scope.spawn(move || parse_chunk(chunk)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    let mut parts = parts.into_iter();
    let mut merged = parts.next().unwrap_or_else(|| parse_chunk(&[]));
    for part in parts {
        merge(&mut merged, part);
    }
    merged
}

/// Parses many listing bodies into one set of frames, in order, using every core.
/// Each body's result is the token its rows carry, or why it could not be read.
pub fn parse_listings(bodies: &[ListingBody<'_>]) -> (ListingFrames, Vec<Result<String, Error>>) {
    parse_in_parallel(
        bodies,
        |chunk| {
            let mut builder = ListingBuilder::new(chunk.len());
            let results: Vec<_> = chunk.iter().map(|body| builder.append(body)).collect();
            (builder.finish(), results)
        },
        |(frames, results), (more_frames, more_results)| {
            frames.vstack(more_frames);
            results.extend(more_results);
        },
    )
}

/// Parses many markets bodies into one markets frame, in order.
pub fn parse_markets(bodies: &[MarketsBody<'_>]) -> (DataFrame, Vec<Result<MarketsSummary, Error>>) {
    parse_in_parallel(
        bodies,
        |chunk| {
            let mut builder = MarketsBuilder::new(chunk.len() * 16);
            let results: Vec<_> = chunk.iter().map(|body| builder.append(body)).collect();
            (builder.finish(), results)
        },
        |(frame, results), (more_frame, more_results)| {
            frame.vstack_mut_owned(more_frame).expect("frames of one schema");
            results.extend(more_results);
        },
    )
}

pub fn empty_listing_frames() -> ListingFrames {
    ListingBuilder::new(0).finish()
}

pub fn empty_markets_frame() -> DataFrame {
    MarketsBuilder::new(0).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn strings(frame: &DataFrame, column: &str) -> Vec<Option<String>> {
        let column = frame.column(column).unwrap().cast(&DataType::String).unwrap();
        column.str().unwrap().iter().map(|s| s.map(str::to_owned)).collect()
    }

    fn floats(frame: &DataFrame, column: &str) -> Vec<Option<f64>> {
        frame.column(column).unwrap().f64().unwrap().iter().collect()
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
        let bad = r#"{"data": {"id": "x", "rsi14_1h": 50, "current_price": "cheap"}}"#;
        let error = builder.append(&ListingBody { body: bad.as_bytes(), token: None, fetched_at: None }).unwrap_err();
        match &error {
            Error::Decode { field, offset, message, .. } => {
                assert_eq!(field.as_deref(), Some("data.current_price"));
                assert!(message.contains("\"cheap\""), "{message}");
                assert!(offset.is_some());
            }
            other => panic!("unexpected {other:?}"),
        }
        let truncated = &LISTING[..LISTING.len() / 2];
        assert!(builder.append(&ListingBody { body: truncated.as_bytes(), token: Some("t"), fetched_at: None }).is_err());
        for body in ["[]", "null", "{}", r#"{"data": null}"#, r#"{"data": {"rsi14_1h": true}}"#, r#"{"data": {"single_pattern_1h": 3}}"#] {
            assert!(builder.append(&ListingBody { body: body.as_bytes(), token: Some("t"), fetched_at: None }).is_err(), "{body}");
        }
        let frames = builder.finish();
        assert_eq!(frames.snapshot.height(), 0);
        assert_eq!(frames.indicators.height(), 0);
    }

    #[test]
    fn a_body_without_id_needs_a_token() {
        let body = r#"{"data": {"rsi14_1h": 50}}"#;
        assert!(parse(body, None).is_err());
        assert_eq!(parse(body, Some("x")).unwrap().indicators.height(), 1);
    }

    #[test]
    fn markets_split_pairs_and_report_total() {
        let body = r#"{"data": [
            {"id": "1", "exchangeName": "Binance", "marketPair": "BTC/USDT", "price": 64000.1,
             "volumeUsd": 1e9, "liquidity_score": 950, "marketReputation": 1, "extra": [1]},
            {"id": "2", "exchangeName": "Kraken", "marketPair": "XBT", "price": "64001"}
        ], "total": 5}"#;
        let mut builder = MarketsBuilder::new(2);
        let summary = builder.append(&MarketsBody { body: body.as_bytes(), token: "bitcoin", fetched_at: None }).unwrap();
        assert_eq!(summary, MarketsSummary { entries: 2, total: Some(5) });
        let frame = builder.finish();
        assert_eq!(strings(&frame, "base"), vec![Some("BTC".into()), Some("XBT".into())]);
        assert_eq!(strings(&frame, "quote"), vec![Some("USDT".into()), None]);
        assert_eq!(floats(&frame, "price"), vec![Some(64000.1), Some(64001.0)]);
        assert_eq!(frame.column("liquidity_score").unwrap().i64().unwrap().get(0), Some(950));
        let names: Vec<_> = frame.get_column_names().iter().map(|s| s.to_string()).collect();
        assert_eq!(names, crate::frames::markets_columns());
    }

    #[test]
    fn bad_market_entries_are_located() {
        let body = r#"{"data": [{"id": "1"}, {"id": "2", "price": [1]}], "total": 2}"#;
        let mut builder = MarketsBuilder::new(2);
        let error = builder.append(&MarketsBody { body: body.as_bytes(), token: "t", fetched_at: None }).unwrap_err();
        assert!(matches!(&error, Error::Decode { field: Some(f), .. } if f == "data[1].price"), "{error:?}");
        assert_eq!(builder.finish().height(), 0);
    }

    #[test]
    fn parallel_batches_keep_order() {
        let bodies: Vec<String> = (0..1000).map(|i| format!(r#"{{"data": {{"id": "t{i}", "rsi14_1h": {i}}}}}"#)).collect();
        let inputs: Vec<_> = bodies.iter().map(|b| ListingBody { body: b.as_bytes(), token: None, fetched_at: None }).collect();
        let (frames, results) = parse_listings(&inputs);
        assert!(results.iter().all(Result::is_ok));
        let values = floats(&frames.indicators, "value");
        assert_eq!(values, (0..1000).map(|i| Some(i as f64)).collect::<Vec<_>>());
    }
}

/// Property tests: whatever bytes arrive, the parser returns frames or a decode error, never a
/// panic, and a body that fails leaves the builder exactly as it was.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn sample_listing() -> String {
        crate::sandbox_data::listing_body(1, "fuzz")
    }

    fn parse_one(body: &[u8]) -> Result<ListingFrames, Error> {
        let mut builder = ListingBuilder::new(1);
        builder.append(&ListingBody { body, token: Some("fuzz"), fetched_at: None })?;
        Ok(builder.finish())
    }

    fn json_value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            any::<bool>().prop_map(|b| b.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
            "[a-zA-Z0-9 :.+\\-\\\\\"]{0,12}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just("1e999".to_string()),
            Just("123456789012345678901234567890".to_string()),
            Just("\"\\ud800\"".to_string()),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(|items| format!("[{}]", items.join(","))),
                prop::collection::vec(("[a-z_0-9]{1,8}", inner), 0..6).prop_map(|entries| {
                    let body: Vec<String> = entries.iter().map(|(k, v)| format!("{:?}:{v}", k)).collect();
                    format!("{{{}}}", body.join(","))
                }),
            ]
        })
    }

    const KEYS: &[&str] = &[
        "id", "current_price", "market_cap_rank", "is_active", "last_updated", "categories", "rsi14_1h",
        "macd_5m", "tripple_pattern_24h", "ta_1h_updated_at", "ema50_4h", "wedge_pattern_4h", "number_of_holders",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn any_value_in_any_known_field(key in prop::sample::select(KEYS), value in json_value()) {
            let body = format!("{{\"data\": {{\"id\": \"x\", \"{key}\": {value}}}, \"generalInfo\": {{\"description\": {value}}}}}");
            let _ = parse_one(body.as_bytes());
        }

        #[test]
        fn mutated_real_bodies(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12),
                               cut in any::<prop::sample::Index>()) {
            let mut body = sample_listing().into_bytes();
            for (index, byte) in &flips {
                let at = index.index(body.len());
                body[at] = *byte;
            }
            let _ = parse_one(&body);
            let end = cut.index(body.len());
            let prefix_parsed = parse_one(&body[..end]).is_ok();
            prop_assert!(!prefix_parsed || end == body.len() || body[..end].ends_with(b"}"), "a cut body parsed");
        }

        #[test]
        fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let parsed = parse_one(&bytes).is_ok();
            prop_assert!(!parsed || bytes.contains(&b'{'), "bytes without an object parsed");
            let mut builder = MarketsBuilder::new(1);
            let _ = builder.append(&MarketsBody { body: &bytes, token: "fuzz", fetched_at: None });
        }

        #[test]
        fn failures_leave_no_rows(value in json_value()) {
            let mut builder = ListingBuilder::new(2);
            let good = sample_listing();
            builder.append(&ListingBody { body: good.as_bytes(), token: None, fetched_at: None }).unwrap();
            let bad = format!("{{\"data\": {{\"id\": \"y\", \"rsi14_1h\": 1, \"current_price\": {value}, \"x\": ");
            let failed = builder.append(&ListingBody { body: bad.as_bytes(), token: None, fetched_at: None }).is_err();
            prop_assert!(failed, "a truncated body parsed");
            let frames = builder.finish();
            prop_assert_eq!(frames.snapshot.height(), 1);
            prop_assert_eq!(frames.info.height(), 1);
        }
    }
}
