//! `generalInfo`: description, links, community, chains and categories, each value of the wrong
//! type a drift row rather than a failed body.

use std::borrow::Cow;

use super::pending::PendingListing;
use crate::frames::listing::InfoRow;
use crate::model::fields::{ScalarType, COMMUNITY_KEYS};
use crate::model::value::{convert, Mismatch, Typed};
use crate::parse::document::compact_json;
use crate::parse::scanner::{Scanner, Unit};

/// The `generalInfo` fields that fill one `info` column each, and their column types (their
/// slots: `plain_slot`).
pub(super) const PLAIN_FIELDS: [(&str, ScalarType); 4] = [
    ("description", ScalarType::Str),
    ("websites", ScalarType::ListStr),
    ("explorers", ScalarType::ListStr),
    ("categories", ScalarType::ListStr),
];

pub(super) fn plain_field(key: &str) -> Option<usize> {
    PLAIN_FIELDS.iter().position(|(name, _)| *name == key)
}

pub(super) fn plain_slot<'a, 'de>(info: &'a mut InfoRow<'de>, field: usize) -> &'a mut Typed<'de> {
    [&mut info.description, &mut info.websites, &mut info.explorers, &mut info.categories][field]
}

/// A community link as the `info` frame holds it: an empty text is no link.
pub(super) fn community_link(typed: Typed<'_>) -> Option<Cow<'_, str>> {
    match typed {
        Typed::Str(link) if !link.is_empty() => Some(link),
        _ => None,
    }
}

/// A part that should be an object (or null) and is another value: read as serde_json reads
/// one (an array's elements stepped over, a scalar read) and named for the drift row.
fn not_an_object(scanner: &mut Scanner<'_>) -> Option<String> {
    if scanner.at_array() {
        scanner.array(Scanner::skip)?;
        return Some("an array".into());
    }
    Some(scanner.value()?.excerpt())
}

/// `generalInfo`: an object, null, or (a drift row) anything else.
pub(super) fn read_general_info<'de>(scanner: &mut Scanner<'de>, pending: &mut PendingListing<'de>) -> Option<()> {
    scanner.unit(Unit::Any, |scanner| match scanner.peek()? {
        b'n' => scanner.null(),
        b'{' => scanner.object(|scanner, key| read_info_field(scanner, pending, key)),
        _ => {
            let found = not_an_object(scanner)?;
            pending.drifted("", "generalInfo", Mismatch { expected: "the generalInfo object", found });
            Some(())
        }
    })
}

fn read_info_field<'de>(
    scanner: &mut Scanner<'de>,
    pending: &mut PendingListing<'de>,
    key: Cow<'de, str>,
) -> Option<()> {
    let read = scanner.colon().and_then(|()| {
        if let Some(field) = plain_field(&key) {
            let value = scanner.unit(Unit::Value, Scanner::value)?;
            match convert(value, PLAIN_FIELDS[field].1) {
                Ok(typed) => *plain_slot(&mut pending.rows.info, field) = typed,
                Err(mismatch) => pending.drifted("generalInfo", &key, mismatch),
            }
            return Some(());
        }
        match key.as_ref() {
            "community" => read_community(scanner, pending),
            "chains" => read_chains(scanner, pending),
            _ => scanner.unit(Unit::Ignored, Scanner::skip),
        }
    });
    if read.is_none() {
        return pending.failed_in("generalInfo", key);
    }
    read
}

/// `generalInfo.community`: an object of links, null, or (a drift row) anything else.
fn read_community<'de>(scanner: &mut Scanner<'de>, pending: &mut PendingListing<'de>) -> Option<()> {
    // A failure is named by the link being read, or the last one read (as the serde visitors
    // before the one reader named it), else by `community`.
    let mut last_link: Option<Cow<'de, str>> = None;
    let read = scanner.unit(Unit::Any, |scanner| match scanner.peek()? {
        b'n' => scanner.null(),
        b'{' => scanner.object(|scanner, key| match COMMUNITY_KEYS.iter().position(|k| *k == key) {
            Some(slot) => {
                last_link = Some(key);
                scanner.colon()?;
                let value = scanner.unit(Unit::Value, Scanner::value)?;
                pending.rows.info.community[slot] = match convert(value, ScalarType::Str) {
                    Ok(typed) => community_link(typed),
                    Err(mismatch) => {
                        pending.drifted("generalInfo.community", COMMUNITY_KEYS[slot], mismatch);
                        None
                    }
                };
                Some(())
            }
            None => scanner.skip_member(),
        }),
        _ => {
            let found = not_an_object(scanner)?;
            pending.drifted("generalInfo", "community", Mismatch { expected: "an object of community links", found });
            Some(())
        }
    });
    if read.is_none() {
        return match last_link {
            Some(link) => pending.failed_in("generalInfo.community", link),
            None => pending.failed_in("generalInfo", "community"),
        };
    }
    read
}

/// `generalInfo.chains`: each element kept as the service's JSON text, keys in its order; null;
/// or (a drift row) anything else.
fn read_chains(scanner: &mut Scanner<'_>, pending: &mut PendingListing<'_>) -> Option<()> {
    scanner.unit(Unit::Any, |scanner| match scanner.peek()? {
        b'n' => scanner.null(),
        b'[' => {
            let mut texts = Vec::new();
            scanner.array(|scanner| {
                scanner.unit(Unit::Raw, |scanner| {
                    let start = scanner.position();
                    scanner.skip()?;
                    // Skipped strings are not checked as UTF-8; kept text must be.
                    let text = simdutf8::basic::from_utf8(scanner.slice_from(start)).ok()?;
                    let compact = !text.bytes().any(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'));
                    texts.push(if compact { text.to_owned() } else { compact_json(text) });
                    Some(())
                })
            })?;
            pending.rows.info.chains = Some(texts);
            Some(())
        }
        b'{' => {
            scanner.object(|scanner, _| scanner.skip_member())?;
            let found = "an object".into();
            pending.drifted("generalInfo", "chains", Mismatch { expected: "an array of chain objects", found });
            Some(())
        }
        _ => {
            let found = scanner.value()?.excerpt();
            pending.drifted("generalInfo", "chains", Mismatch { expected: "an array of chain objects", found });
            Some(())
        }
    })
}
