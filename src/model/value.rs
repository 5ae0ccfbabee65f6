//! JSON values as the parser sees them, and their conversion to column types.
//!
//! `Value` is deliberately shallow: scalars, arrays of strings, and "something else". Strings
//! borrow from the response body when they contain no escapes, so most of a body is never
//! copied before it lands in a column builder.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::fields::ScalarType;
use super::timestamp::parse_timestamp_ms;

#[derive(Clone, Debug, PartialEq)]
pub enum Value<'de> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(Cow<'de, str>),
    /// An array whose elements are all strings or nulls.
    StrList(Vec<Option<Cow<'de, str>>>),
    /// An object, or an array with a non-string element; named for error messages.
    Other(&'static str),
}

impl Value<'_> {
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(v) => Some(v as f64),
            Value::UInt(v) => Some(v as f64),
            Value::Float(v) => Some(v),
            _ => None,
        }
    }
}

/// A value converted to its column's type.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Typed<'de> {
    #[default]
    Null,
    Str(Cow<'de, str>),
    F64(f64),
    I64(i64),
    Bool(bool),
    /// Milliseconds since the epoch, UTC.
    Millis(i64),
    List(Vec<Option<Cow<'de, str>>>),
}

impl Typed<'_> {
    /// Whether dropping the value frees memory (owned text or a list).
    #[inline]
    pub fn owns_memory(&self) -> bool {
        matches!(self, Typed::Str(Cow::Owned(_)) | Typed::List(_))
    }

    /// Stores `value` in `slot`, dropping the old value only if it owns memory.
    #[inline]
    pub fn store<'a>(slot: &mut Typed<'a>, value: Typed<'a>) {
        if slot.owns_memory() {
            *slot = value;
        } else {
            std::mem::forget(std::mem::replace(slot, value));
        }
    }
}

/// One element of an array: a string, a null, or anything else (consumed and flagged).
enum Element<'de> {
    Str(Cow<'de, str>),
    Null,
    NotString,
}

impl<'de> Deserialize<'de> for Element<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ElementVisitor;
        impl<'de> Visitor<'de> for ElementVisitor {
            type Value = Element<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Element::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Element::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Element::Str(Cow::Owned(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Element::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Element::Null)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Element::NotString)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Element::NotString)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Element::NotString)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Element::NotString)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Element::NotString)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Element::NotString)
            }
        }
        deserializer.deserialize_any(ElementVisitor)
    }
}

impl<'de> Deserialize<'de> for Value<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ValueVisitor;
        impl<'de> Visitor<'de> for ValueVisitor {
            type Value = Value<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Value::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Value::Null)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Value::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Value::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Value::UInt(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Value::Float(v))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Value::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Value::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Value::Str(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(4));
                while let Some(element) = seq.next_element::<Element<'de>>()? {
                    match element {
                        Element::Str(s) => items.push(Some(s)),
                        Element::Null => items.push(None),
                        Element::NotString => {
                            while seq.next_element::<IgnoredAny>()?.is_some() {}
                            return Ok(Value::Other("an array with a non-string element"));
                        }
                    }
                }
                Ok(Value::StrList(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Value::Other("an object"))
            }
        }
        deserializer.deserialize_any(ValueVisitor)
    }
}

/// A value that does not fit its column: what the column holds, and a short excerpt of what
/// came instead. Becomes a `drift` row; the cell stays null.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub expected: &'static str,
    pub found: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}, found {}", self.expected, self.found)
    }
}

impl Value<'_> {
    /// A short excerpt of the value, for `Mismatch::found`.
    pub fn excerpt(&self) -> String {
        match self {
            Value::Null => "null".into(),
            Value::Bool(v) => v.to_string(),
            Value::Int(v) => v.to_string(),
            Value::UInt(v) => v.to_string(),
            Value::Float(v) => v.to_string(),
            Value::Str(s) => excerpt(s),
            Value::StrList(items) => {
                let first = items.first().map_or("".into(), |item| item.as_deref().map_or("null".into(), excerpt));
                let more = if items.len() > 1 { ", …" } else { "" };
                format!("[{first}{more}]")
            }
            Value::Other(name) => (*name).into(),
        }
    }
}

/// Reads a number from text, as the service sends `current_price`. `Ok(None)` for blank text.
/// Text that Rust's float parser reads as NaN or an infinity (`NaN`, `inf`, `1e400`) is not a
/// number a column can hold: a mismatch, so the cell is null and a drift row says why.
pub fn parse_number_text(text: &str) -> Result<Option<f64>, Mismatch> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    match trimmed.parse::<f64>() {
        Ok(number) if number.is_finite() => Ok(Some(number)),
        _ => Err(Mismatch { expected: "a number", found: excerpt(text) }),
    }
}

/// Converts a value to a column type, tolerant where the service is loose (numbers in strings,
/// blank strings for missing values, `933.0` for an integer) and strict elsewhere: a value that
/// cannot be read as the column's type is a `Mismatch`, never a silently wrong number.
pub fn convert(value: Value<'_>, target: ScalarType) -> Result<Typed<'_>, Mismatch> {
    if let Value::Null = value {
        return Ok(Typed::Null);
    }
    let expected = target_name(target);
    let mismatch = |value: &Value| Mismatch { expected, found: value.excerpt() };
    match target {
        ScalarType::Str => match value {
            Value::Str(s) => Ok(Typed::Str(s)),
            Value::Int(v) => Ok(Typed::Str(Cow::Owned(v.to_string()))),
            Value::UInt(v) => Ok(Typed::Str(Cow::Owned(v.to_string()))),
            Value::Float(v) => Ok(Typed::Str(Cow::Owned(v.to_string()))),
            Value::Bool(v) => Ok(Typed::Str(Cow::Borrowed(if v { "true" } else { "false" }))),
            other => Err(mismatch(&other)),
        },
        ScalarType::F64 => match value {
            Value::Str(s) => Ok(parse_number_text(&s)?.map_or(Typed::Null, Typed::F64)),
            other => other.as_f64().map(Typed::F64).ok_or_else(|| mismatch(&other)),
        },
        ScalarType::I64 => match value {
            Value::Int(v) => Ok(Typed::I64(v)),
            Value::UInt(v) => i64::try_from(v).map(Typed::I64).map_err(|_| Mismatch { expected, found: v.to_string() }),
            Value::Float(v) => {
                float_to_i64(v).map(Typed::I64).ok_or_else(|| Mismatch { expected, found: v.to_string() })
            }
            Value::Str(s) => {
                let trimmed = s.trim();
                if trimmed.is_empty() {
                    return Ok(Typed::Null);
                }
                if let Ok(v) = trimmed.parse::<i64>() {
                    return Ok(Typed::I64(v));
                }
                match parse_number_text(trimmed) {
                    Ok(Some(v)) => float_to_i64(v).map(Typed::I64),
                    _ => None,
                }
                .ok_or_else(|| Mismatch { expected, found: excerpt(&s) })
            }
            other => Err(mismatch(&other)),
        },
        ScalarType::Bool => match value {
            Value::Bool(v) => Ok(Typed::Bool(v)),
            Value::Int(0) | Value::UInt(0) => Ok(Typed::Bool(false)),
            Value::Int(1) | Value::UInt(1) => Ok(Typed::Bool(true)),
            Value::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(Typed::Bool(true)),
                "false" => Ok(Typed::Bool(false)),
                "" => Ok(Typed::Null),
                _ => Err(Mismatch { expected, found: excerpt(&s) }),
            },
            other => Err(mismatch(&other)),
        },
        ScalarType::Datetime => match value {
            Value::Str(s) if s.trim().is_empty() => Ok(Typed::Null),
            Value::Str(s) => parse_timestamp_ms(&s)
                .map(Typed::Millis)
                .map_err(|why| Mismatch { expected, found: format!("{} ({why})", excerpt(&s)) }),
            other => Err(mismatch(&other)),
        },
        ScalarType::ListStr => match value {
            Value::StrList(items) => Ok(Typed::List(items)),
            other => Err(mismatch(&other)),
        },
    }
}

/// An integral float within i64 (`933.0` -> 933); `None` for `933.5`, infinities and beyond.
fn float_to_i64(v: f64) -> Option<i64> {
    // i64::MAX as f64 rounds up to 2^63, so the upper bound is exclusive.
    const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;
    (v.is_finite() && v.fract() == 0.0 && (-TWO_TO_63..TWO_TO_63).contains(&v)).then_some(v as i64)
}

/// What a column holds, for `Mismatch::expected`.
pub fn target_name(target: ScalarType) -> &'static str {
    match target {
        ScalarType::Str => "a string",
        ScalarType::F64 => "a number",
        ScalarType::I64 => "an integer",
        ScalarType::Bool => "a boolean",
        ScalarType::Datetime => "a timestamp string",
        ScalarType::ListStr => "an array of strings",
    }
}

/// Quotes at most 40 characters of untrusted text.
pub fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(40).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    format!("{out:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(json: &str) -> Value<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn shallow_values() {
        assert_eq!(value("null"), Value::Null);
        assert_eq!(value("-3"), Value::Int(-3));
        assert_eq!(value("18446744073709551615"), Value::UInt(u64::MAX));
        assert_eq!(value("1.5"), Value::Float(1.5));
        assert_eq!(value(r#""a""#), Value::Str(Cow::Borrowed("a")));
        assert_eq!(value(r#"["a", null, "b\n"]"#), Value::StrList(vec![Some("a".into()), None, Some("b\n".into())]));
        assert!(matches!(value(r#"["a", 1, {"x": [1]}]"#), Value::Other(_)));
        assert!(matches!(value(r#"{"x": [1, {"y": 2}]}"#), Value::Other(_)));
    }

    #[test]
    fn numbers_in_strings_and_blanks() {
        assert_eq!(convert(value(r#""65000.12""#), ScalarType::F64), Ok(Typed::F64(65000.12)));
        assert_eq!(convert(value(r#"" ""#), ScalarType::F64), Ok(Typed::Null));
        assert_eq!(
            convert(value(r#""n/a""#), ScalarType::F64),
            Err(Mismatch { expected: "a number", found: "\"n/a\"".into() })
        );
        assert_eq!(convert(value("7"), ScalarType::F64), Ok(Typed::F64(7.0)));
        for not_a_number in ["NaN", "nan", "inf", "-Infinity", "1e400", " -1e999 "] {
            let text = format!("\"{not_a_number}\"");
            assert!(convert(value(&text), ScalarType::F64).is_err(), "{not_a_number}");
            assert!(convert(value(&text), ScalarType::I64).is_err(), "{not_a_number}");
        }
        assert_eq!(convert(value(r#""1e300""#), ScalarType::F64), Ok(Typed::F64(1e300)));
        assert!(convert(value("true"), ScalarType::F64).is_err());
        assert!(convert(value("[]"), ScalarType::F64).is_err());
    }

    #[test]
    fn integers_are_exact_or_errors() {
        assert_eq!(convert(value("12"), ScalarType::I64), Ok(Typed::I64(12)));
        assert_eq!(convert(value("12.0"), ScalarType::I64), Ok(Typed::I64(12)));
        assert_eq!(convert(value(r#""12""#), ScalarType::I64), Ok(Typed::I64(12)));
        assert_eq!(convert(value("933.0"), ScalarType::I64), Ok(Typed::I64(933)));
        assert_eq!(convert(value(r#""1.5""#), ScalarType::F64), Ok(Typed::F64(1.5)));
        assert_eq!(
            convert(value("12.5"), ScalarType::I64),
            Err(Mismatch { expected: "an integer", found: "12.5".into() })
        );
        assert!(convert(value("1e300"), ScalarType::I64).is_err());
        assert!(convert(value("18446744073709551615"), ScalarType::I64).is_err());
    }

    #[test]
    fn booleans_timestamps_lists() {
        assert_eq!(convert(value("true"), ScalarType::Bool), Ok(Typed::Bool(true)));
        assert_eq!(convert(value(r#""false""#), ScalarType::Bool), Ok(Typed::Bool(false)));
        assert_eq!(convert(value(r#""""#), ScalarType::Datetime), Ok(Typed::Null));
        assert_eq!(convert(value(r#""1970-01-01T00:00:01.500Z""#), ScalarType::Datetime), Ok(Typed::Millis(1500)));
        assert!(convert(value(r#""soon""#), ScalarType::Datetime).is_err());
        assert_eq!(
            convert(value(r#""Layer 1""#), ScalarType::ListStr),
            Err(Mismatch { expected: "an array of strings", found: "\"Layer 1\"".into() })
        );
        assert_eq!(convert(value(r#"["a", "b"]"#), ScalarType::Str).unwrap_err().found, "[\"a\", …]");
        assert_eq!(convert(value("123"), ScalarType::Str), Ok(Typed::Str("123".into())));
    }
}
