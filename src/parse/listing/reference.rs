//! The reference the reader is held to, in tests only: a listing body read by serde_json part
//! by part (each value a serde_json `Value`, what is skipped a `RawValue`) and routed by the
//! same catalogue, so the property tests compare the scanner's reading with serde_json's.

use std::borrow::Cow;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::general_info::{community_link, plain_field, plain_slot, PLAIN_FIELDS};
use super::routing::{route_of, route_suffixed, FieldRoute, INTERVAL_NAMES};
use crate::frames::{DriftRow, ListingRows};
use crate::model::fields::{ScalarType, COMMUNITY_KEYS, SNAPSHOT_FIELDS};
use crate::model::value::{convert, Mismatch, Value};
use crate::parse::document::compact_json;

/// An object's members in order, duplicates kept, values unread.
pub(crate) struct Members<'a>(pub(crate) Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    members.push((key, map.next_value()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

fn value(raw: &RawValue) -> Option<Value<'_>> {
    serde_json::from_str(raw.get()).ok()
}

fn drift(rows: &mut ListingRows<'_>, field: String, mismatch: Mismatch) {
    rows.drift.push(DriftRow { field, mismatch });
}

/// What a part that should be an object (or null) holds instead, for its drift row.
fn found(raw: &RawValue) -> Option<String> {
    if raw.get().starts_with('[') {
        serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok()?;
        return Some("an array".into());
    }
    Some(value(raw)?.excerpt())
}

/// A UTF-8 listing body as serde_json reads it: whether it has `data`, and its rows; `None`
/// where serde_json fails it.
pub(crate) fn read(body: &str) -> Option<(bool, ListingRows<'_>)> {
    let mut rows = ListingRows::default();
    let mut saw_data = false;
    let top: Members<'_> = serde_json::from_str(body).ok()?;
    for (key, raw) in top.0 {
        match key.as_ref() {
            "data" => {
                let data: Members<'_> = serde_json::from_str(raw.get()).ok()?;
                for (key, raw) in data.0 {
                    data_field(&mut rows, &key, raw)?;
                }
                saw_data = true;
            }
            "generalInfo" => general_info(&mut rows, raw)?,
            _ => {}
        }
    }
    Some((saw_data, rows))
}

fn data_field<'a>(rows: &mut ListingRows<'a>, key: &str, raw: &'a RawValue) -> Option<()> {
    let field = format!("data.{key}");
    match route_of(key) {
        FieldRoute::Snapshot(index) => match convert(value(raw)?, SNAPSHOT_FIELDS[index].1) {
            Ok(typed) => rows.scalars[index] = typed,
            Err(mismatch) => drift(rows, field, mismatch),
        },
        FieldRoute::Suffixed(suffixed) => {
            if let Err(mismatch) = route_suffixed(rows, suffixed, value(raw)?) {
                drift(rows, field, mismatch);
            }
        }
        FieldRoute::UnknownInterval(found) => drift(rows, field, Mismatch { expected: INTERVAL_NAMES, found }),
        FieldRoute::Ignored => {}
    }
    Some(())
}

/// The members of the object at `field`: none for `null`, none and a drift row (`expected`) for
/// another value; `None` when the body is not JSON.
fn object_at<'a>(
    rows: &mut ListingRows<'a>,
    raw: &'a RawValue,
    field: &str,
    expected: &'static str,
) -> Option<Vec<(Cow<'a, str>, &'a RawValue)>> {
    let text = raw.get();
    if text == "null" {
        return Some(Vec::new());
    }
    if !text.starts_with('{') {
        drift(rows, field.into(), Mismatch { expected, found: found(raw)? });
        return Some(Vec::new());
    }
    let members: Members<'a> = serde_json::from_str(text).ok()?;
    Some(members.0)
}

fn general_info<'a>(rows: &mut ListingRows<'a>, raw: &'a RawValue) -> Option<()> {
    for (key, raw) in object_at(rows, raw, "generalInfo", "the generalInfo object")? {
        if let Some(field) = plain_field(&key) {
            match convert(value(raw)?, PLAIN_FIELDS[field].1) {
                Ok(typed) => *plain_slot(&mut rows.info, field) = typed,
                Err(mismatch) => drift(rows, format!("generalInfo.{key}"), mismatch),
            }
            continue;
        }
        match key.as_ref() {
            "community" => community(rows, raw)?,
            "chains" => chains(rows, raw)?,
            _ => {}
        }
    }
    Some(())
}

fn community<'a>(rows: &mut ListingRows<'a>, raw: &'a RawValue) -> Option<()> {
    for (key, raw) in object_at(rows, raw, "generalInfo.community", "an object of community links")? {
        if let Some(slot) = COMMUNITY_KEYS.iter().position(|k| *k == key) {
            rows.info.community[slot] = match convert(value(raw)?, ScalarType::Str) {
                Ok(typed) => community_link(typed),
                Err(mismatch) => {
                    drift(rows, format!("generalInfo.community.{key}"), mismatch);
                    None
                }
            };
        }
    }
    Some(())
}

fn chains(rows: &mut ListingRows<'_>, raw: &RawValue) -> Option<()> {
    let text = raw.get();
    let expected = "an array of chain objects";
    if text == "null" {
        return Some(());
    }
    if text.starts_with('[') {
        let chains: Vec<&RawValue> = serde_json::from_str(text).ok()?;
        rows.info.chains = Some(chains.iter().map(|chain| compact_json(chain.get())).collect());
    } else if text.starts_with('{') {
        serde_json::from_str::<Members<'_>>(text).ok()?;
        drift(rows, "generalInfo.chains".into(), Mismatch { expected, found: "an object".into() });
    } else {
        let mismatch = Mismatch { expected, found: value(raw)?.excerpt() };
        drift(rows, "generalInfo.chains".into(), mismatch);
    }
    Some(())
}
