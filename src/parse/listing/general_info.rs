//! `generalInfo`: description, links, community, chains and categories, each value of the wrong
//! type a drift row rather than a failed body.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::parse::document::{compact_json, drift_on_non_objects, drift_on_scalars, seed_from_visitor};
use super::pending::PendingListing;
use crate::parse::scanner::Scanner;
use crate::frames::listing::InfoRow;
use crate::model::fields::{ScalarType, COMMUNITY_KEYS};
use crate::model::value::{convert, BorrowedStr, Mismatch, Typed, Value};

/// The `generalInfo` fields that fill one `info` column each, and their column types (their
/// slots: `plain_slot`).
const PLAIN_FIELDS: [(&str, ScalarType); 4] = [
    ("description", ScalarType::Str),
    ("websites", ScalarType::ListStr),
    ("explorers", ScalarType::ListStr),
    ("categories", ScalarType::ListStr),
];

fn plain_field(key: &str) -> Option<usize> {
    PLAIN_FIELDS.iter().position(|(name, _)| *name == key)
}

fn plain_slot<'a, 'de>(info: &'a mut InfoRow<'de>, field: usize) -> &'a mut Typed<'de> {
    [&mut info.description, &mut info.websites, &mut info.explorers, &mut info.categories][field]
}

/// A community link as the `info` frame holds it: an empty text is no link.
fn community_link(typed: Typed<'_>) -> Option<Cow<'_, str>> {
    match typed {
        Typed::Str(link) if !link.is_empty() => Some(link),
        _ => None,
    }
}

/// A visitor of one part of `generalInfo` that may also be null: the struct over the body's
/// pending rows, its `DeserializeSeed`, and `unexpected`, which turns a value of another JSON
/// type into a drift row saying what was `$expected`.
macro_rules! drifting_part {
    ($(#[$doc:meta])* $vis:vis $visitor:ident, $expected:literal) => {
        $(#[$doc])*
        $vis struct $visitor<'a, 'de>($vis &'a mut PendingListing<'de>);

        seed_from_visitor!($visitor, deserialize_any);

        impl $visitor<'_, '_> {
            fn unexpected(self, found: String) {
                self.0.drifted(Mismatch { expected: $expected, found });
            }
        }
    };
}

drifting_part!(pub(super) GeneralInfo, "the generalInfo object");
drifting_part!(Community, "an object of community links");
drifting_part!(
    /// `generalInfo.chains`: each element kept as the service's JSON text, keys in its order.
    Chains,
    "an array of chain objects"
);

impl<'de> Visitor<'de> for GeneralInfo<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the generalInfo object or null")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    drift_on_non_objects!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            let plain = plain_field(&key);
            let is_community = key == "community";
            let is_chains = key == "chains";
            pending.field = Some(("generalInfo", key));
            if let Some(field) = plain {
                let value: Value<'de> = map.next_value()?;
                match convert(value, PLAIN_FIELDS[field].1) {
                    Ok(typed) => *plain_slot(&mut pending.rows.info, field) = typed,
                    Err(mismatch) => pending.drifted(mismatch),
                }
            } else if is_community {
                map.next_value_seed(Community(pending))?;
            } else if is_chains {
                map.next_value_seed(Chains(pending))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
            pending.field = Some(("", Cow::Borrowed("generalInfo")));
        }
        Ok(())
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
    drift_on_non_objects!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            match COMMUNITY_KEYS.iter().position(|k| *k == key) {
                Some(slot) => {
                    pending.field = Some(("generalInfo.community", key));
                    let value: Value<'de> = map.next_value()?;
                    pending.rows.info.community[slot] = match convert(value, ScalarType::Str) {
                        Ok(typed) => community_link(typed),
                        Err(mismatch) => {
                            pending.drifted(mismatch);
                            None
                        }
                    };
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        pending.field = Some(("generalInfo", Cow::Borrowed("community")));
        Ok(())
    }
}

impl<'de> Visitor<'de> for Chains<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of chains or null")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    drift_on_scalars!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        self.unexpected("an object".into());
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut chains = Vec::new();
        while let Some(chain) = seq.next_element::<&'de RawValue>()? {
            chains.push(compact_json(chain.get()));
        }
        self.0.rows.info.chains = Some(chains);
        Ok(())
    }
}

/// The fast path's `generalInfo` (see `scanner`): the rows `GeneralInfo`'s visitor would write,
/// or `None` (the body goes to serde_json) at anything that visitor turns into a drift row.
pub(super) fn scan_general_info<'de>(scanner: &mut Scanner<'de>, pending: &mut PendingListing<'de>) -> Option<()> {
    object_or_null(scanner, |scanner, key| {
        let info = &mut pending.rows.info;
        if let Some(field) = plain_field(key) {
            *plain_slot(info, field) = convert(scanner.value()?, PLAIN_FIELDS[field].1).ok()?;
            return Some(());
        }
        match key {
            "community" => scan_community(scanner, &mut info.community),
            "chains" => scan_chains(scanner, &mut info.chains),
            _ => scanner.skip(),
        }
    })
}

/// An object, `each` called per key, or a null (nothing to read); `None` for anything else.
fn object_or_null<'de>(
    scanner: &mut Scanner<'de>,
    each: impl FnMut(&mut Scanner<'de>, &'de str) -> Option<()>,
) -> Option<()> {
    if scanner.at_null() {
        return scanner.skip();
    }
    if !scanner.at_object() {
        return None;
    }
    scanner.object(each)
}

fn scan_community<'de>(scanner: &mut Scanner<'de>, community: &mut [Option<Cow<'de, str>>]) -> Option<()> {
    object_or_null(scanner, |scanner, key| match COMMUNITY_KEYS.iter().position(|k| *k == key) {
        Some(slot) => {
            community[slot] = community_link(convert(scanner.value()?, ScalarType::Str).ok()?);
            Some(())
        }
        None => scanner.skip(),
    })
}

fn scan_chains(scanner: &mut Scanner<'_>, chains: &mut Option<Vec<String>>) -> Option<()> {
    if scanner.at_null() {
        return scanner.skip();
    }
    let mut texts = Vec::new();
    scanner.array(|scanner| {
        let start = scanner.position();
        scanner.skip()?;
        // Skipped strings are not checked as UTF-8 by the scanner; kept text must be.
        let text = simdutf8::basic::from_utf8(scanner.slice_from(start)).ok()?;
        let compact = !text.bytes().any(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'));
        texts.push(if compact { text.to_owned() } else { compact_json(text) });
        Some(())
    })?;
    *chains = Some(texts);
    Some(())
}
