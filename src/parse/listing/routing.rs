//! Where each field of `data` goes: the catalogue decides from the key alone (`route_of`), and
//! `route_suffixed` puts an interval-suffixed field's value in its long frame by its JSON type.

use std::borrow::Cow;

use crate::frames::listing::Name;
use crate::frames::ListingRows;
use crate::model::fields::{classify_data_key, unknown_pattern_family, DataKey, FamilyKind, ScalarType, SuffixedKey};
use crate::model::value::{convert, parse_number_text, Mismatch, Typed, Value};
use crate::model::Interval;

/// Where the value of a `data` key goes, decided from the key alone (and detached from it, so
/// the key can move into `PendingListing::field`).
pub(super) enum FieldRoute {
    Snapshot(usize),
    Suffixed(OwnedSuffixed),
    /// A known family on an interval that is not one of `INTERVALS`: the drift row's `found`.
    UnknownInterval(String),
    Ignored,
}

pub(super) fn route_of(key: &str) -> FieldRoute {
    match classify_data_key(key) {
        DataKey::Snapshot(index) => FieldRoute::Snapshot(index),
        DataKey::Suffixed(suffixed) => FieldRoute::Suffixed(own_suffixed(suffixed)),
        DataKey::UnknownInterval(interval) => FieldRoute::UnknownInterval(format!("the interval {interval:?}")),
        DataKey::Other => FieldRoute::Ignored,
    }
}

/// What an interval suffix must be, for drift rows.
pub(super) const INTERVAL_NAMES: &str = "an interval of 5m, 15m, 1h, 4h, 24h or 1w";

/// A suffixed key detached from the key's lifetime, so the key can move into `field`.
pub(super) enum OwnedSuffixed {
    TaUpdated(Interval),
    Family { name: Name, kind: Option<FamilyKind>, interval: Interval },
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
/// indicator) and strictly (a boolean or object where a known family belongs does not fit, and
/// becomes a drift row); values of unknown families that fit no frame are left to `Frames.raw`.
pub(super) fn route_suffixed<'de>(
    rows: &mut ListingRows<'de>,
    key: OwnedSuffixed,
    value: Value<'de>,
) -> Result<(), Mismatch> {
    let (name, kind, interval) = match key {
        OwnedSuffixed::TaUpdated(interval) => {
            let millis = match convert(value, ScalarType::Datetime) {
                Ok(Typed::Millis(ms)) => Some(ms),
                Ok(_) => None,
                Err(mismatch) => {
                    // The row says the interval was updated at an unknown time.
                    rows.ta_updated.push((interval, None));
                    return Err(mismatch);
                }
            };
            rows.ta_updated.push((interval, millis));
            return Ok(());
        }
        OwnedSuffixed::Family { name, kind, interval } => (name, kind, interval),
    };
    let mismatch = |expected: &'static str, value: &Value| Mismatch { expected, found: value.excerpt() };
    match value {
        Value::Null => match kind {
            Some(FamilyKind::Text) => rows.signals.push((interval, name, None)),
            Some(FamilyKind::Patterns) => rows.patterns.push((interval, name, None)),
            Some(FamilyKind::Numeric) | None => rows.indicators.push((interval, name, None)),
        },
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => {
            if kind == Some(FamilyKind::Patterns) {
                return Err(mismatch("an array of pattern names", &value));
            }
            rows.indicators.push((interval, name, value.as_f64()));
        }
        Value::Str(text) => match kind {
            Some(FamilyKind::Numeric) => match parse_number_text(&text) {
                Ok(number) => rows.indicators.push((interval, name, number)),
                Err(_) => rows.signals.push((interval, name, Some(text))),
            },
            Some(FamilyKind::Patterns) => {
                if !text.trim().is_empty() {
                    rows.patterns.push((interval, name, Some(text)));
                }
            }
            Some(FamilyKind::Text) | None => rows.signals.push((interval, name, Some(text))),
        },
        Value::StrList(items) => {
            match kind {
                Some(FamilyKind::Numeric) => return Err(mismatch("a number", &Value::StrList(items))),
                Some(FamilyKind::Text) => return Err(mismatch("a string", &Value::StrList(items))),
                _ => {}
            }
            let family: Name = match (kind, name) {
                (None, Cow::Owned(n)) => Cow::Owned(unknown_pattern_family(&n).to_owned()),
                (_, n) => n,
            };
            for item in items.into_iter().flatten() {
                rows.patterns.push((interval, family.clone(), Some(item)));
            }
        }
        Value::Bool(_) | Value::Other(_) => {
            let expected = match kind {
                Some(FamilyKind::Numeric) => "a number",
                Some(FamilyKind::Text) => "a string",
                Some(FamilyKind::Patterns) => "an array of pattern names",
                None => return Ok(()),
            };
            return Err(mismatch(expected, &value));
        }
    }
    Ok(())
}
