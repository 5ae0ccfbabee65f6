//! What every reader shares: locating a failure (the field being read and the byte offset),
//! and wording it. The scanner says which part of a body failed (`Unit`) and where that part
//! starts; serde_json reads those bytes alone the way it reads such a part, and its error (the
//! same error at the same place as for the whole body) is the message. serde_json reads nothing
//! else.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::scanner::{Failure, Unit};
use crate::error::Error;
use crate::model::value::Value;
use crate::model::Endpoint;

/// JSON text without the whitespace between tokens; strings, and the order of keys, as they
/// are.
pub fn compact_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\n' | '\r' | '\t') {
            out.push(c);
        }
    }
    out
}

/// The field being read, for error messages: (section, key); section `""` for the top level.
pub type FieldPath<'de> = Option<(&'static str, Cow<'de, str>)>;

pub fn field_label(field: &FieldPath<'_>) -> Option<String> {
    field.as_ref().map(|(section, key)| if section.is_empty() { key.to_string() } else { format!("{section}.{key}") })
}

/// What a `DecodeError` says about the body it comes from.
pub struct DecodeContext<'a> {
    pub endpoint: Endpoint,
    pub token: Option<&'a str>,
    pub body: &'a [u8],
}

impl DecodeContext<'_> {
    pub fn error(&self, field: Option<String>, offset: Option<usize>, message: impl Into<String>) -> Error {
        Error::Decode {
            token: self.token.map(str::to_owned),
            endpoint: self.endpoint,
            field,
            offset,
            message: message.into(),
        }
    }

    /// A body that is not JSON (or not JSON serde_json reads: a lone surrogate, a number out
    /// of range): serde_json's message and offset for the part that failed, and the field.
    pub fn invalid(&self, failure: Option<Failure>, field: &FieldPath<'_>) -> Error {
        let (message, offset) = word_failure(self.body, failure);
        self.error(field_label(field), offset, message)
    }
}

/// serde_json's message (without its position suffix) and byte offset for the part of `body`
/// that failed.
fn word_failure(body: &[u8], failure: Option<Failure>) -> (String, Option<usize>) {
    let Failure { start, unit } = failure.unwrap_or(Failure { start: 0, unit: Unit::Document("a JSON object") });
    let part = &body[start.min(body.len())..];
    // As for the whole body: a text reader when the body is UTF-8, else the byte reader (which
    // checks the UTF-8 of the strings it reads).
    let read = match (std::str::from_utf8(body).is_ok(), std::str::from_utf8(part)) {
        (true, Ok(text)) => read_part(&mut serde_json::Deserializer::from_str(text), unit),
        _ => read_part(&mut serde_json::Deserializer::from_slice(part), unit),
    };
    let Err(err) = read else {
        debug_assert!(false, "serde_json read the part the scanner failed in: {unit:?} at {start}");
        return ("the body could not be read".into(), Some(start));
    };
    let text = err.to_string();
    let message = match text.rfind(" at line ") {
        Some(cut) if err.line() > 0 => text[..cut].to_string(),
        _ => text,
    };
    let offset = (err.line() > 0).then(|| {
        // The index serde_json points at, then the offset its line and column would give for
        // the whole body (the column counts from 1; an error at a line's start stays there).
        let line_start = part.split_inclusive(|&b| b == b'\n').take(err.line() - 1).map(<[u8]>::len).sum::<usize>();
        let index = (start + line_start + err.column()).min(body.len());
        let body_line_start = body[..index].iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1);
        (body_line_start + (index - body_line_start).saturating_sub(1)).min(body.len())
    });
    (message, offset)
}

/// Reads one part as the reader reads it: its error is the body's.
fn read_part<'de, R: serde_json::de::Read<'de>>(
    deserializer: &mut serde_json::Deserializer<R>,
    unit: Unit,
) -> Result<(), serde_json::Error> {
    match unit {
        Unit::Document(expecting) => {
            deserializer.deserialize_map(Walk(expecting))?;
            deserializer.end()
        }
        Unit::Object(expecting) => deserializer.deserialize_map(Walk(expecting)),
        Unit::Array(expecting) => deserializer.deserialize_seq(Walk(expecting)),
        Unit::Any => deserializer.deserialize_any(Walk("any JSON value")),
        Unit::Value => Value::deserialize(deserializer).map(drop),
        Unit::Ignored => IgnoredAny::deserialize(deserializer).map(drop),
        Unit::Raw => <&RawValue>::deserialize(deserializer).map(drop),
    }
}

/// Walks a part as the reader walks it: any value; an object's keys read (and so checked),
/// the values and an array's elements stepped over (the parts inside that the reader reads are
/// units of their own).
struct Walk(&'static str);

impl<'de> Visitor<'de> for Walk {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_json_keeps_strings_and_key_order() {
        let text = r#"{ "z": 1, "a": [ "x y", "q\\\" z" ], "b" : {} }"#;
        assert_eq!(compact_json(text), r#"{"z":1,"a":["x y","q\\\" z"],"b":{}}"#);
    }
}
