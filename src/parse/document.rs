//! What every parser shares: running a visitor over a whole body, locating a failure (the
//! field being read and the byte offset), and the `DeserializeSeed` glue of the visitors.

use std::borrow::Cow;

use serde::de::DeserializeSeed;

use crate::error::Error;
use crate::model::Endpoint;

/// Implements `DeserializeSeed` for a visitor that carries its own state, by asking the
/// deserializer for the JSON shape it expects (`deserialize_map`, `_seq` or `_any`).
macro_rules! seed_from_visitor {
    ($visitor:ident, $shape:ident) => {
        impl<'de> serde::de::DeserializeSeed<'de> for $visitor<'_, 'de> {
            type Value = ();
            fn deserialize<D: serde::de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
                deserializer.$shape(self)
            }
        }
    };
}
pub(crate) use seed_from_visitor;

/// Visitor methods for booleans, numbers and strings, for a visitor that expects a container:
/// each calls `self.unexpected(found)`, so a value of the wrong type becomes a drift row
/// instead of failing the body.
macro_rules! drift_on_scalars {
    () => {
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
            self.unexpected(v.to_string());
            Ok(())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
            self.unexpected(v.to_string());
            Ok(())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
            self.unexpected(v.to_string());
            Ok(())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
            self.unexpected(v.to_string());
            Ok(())
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
            self.unexpected($crate::model::value::excerpt(v));
            Ok(())
        }
    };
}
pub(crate) use drift_on_scalars;

/// `drift_on_scalars!` and arrays: for a visitor that expects an object (or null).
macro_rules! drift_on_non_objects {
    () => {
        $crate::parse::document::drift_on_scalars!();
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            self.unexpected("an array".into());
            Ok(())
        }
    };
}
pub(crate) use drift_on_non_objects;

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

/// Runs `document` over the whole of `body`.
pub fn parse_document<'de, S: DeserializeSeed<'de, Value = ()>>(
    body: &'de [u8],
    document: S,
) -> Result<(), serde_json::Error> {
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

    /// A JSON error located: the field being read and the byte offset.
    pub fn json_error(&self, err: &serde_json::Error, field: &FieldPath<'_>) -> Error {
        let (message, offset) = describe_json_error(err, self.body);
        self.error(field_label(field), offset, message)
    }
}

/// serde_json's message without its position suffix, and the byte offset of that position.
fn describe_json_error(err: &serde_json::Error, body: &[u8]) -> (String, Option<usize>) {
    let text = err.to_string();
    let message = match text.rfind(" at line ") {
        Some(cut) if err.line() > 0 => text[..cut].to_string(),
        _ => text,
    };
    let offset = (err.line() > 0).then(|| {
        let line_start = body.split_inclusive(|&b| b == b'\n').take(err.line() - 1).map(<[u8]>::len).sum::<usize>();
        (line_start + err.column().saturating_sub(1)).min(body.len())
    });
    (message, offset)
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
