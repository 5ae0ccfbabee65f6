//! Property tests: the scanner reads every value as serde_json reads it (or fails where serde_json
//! fails), whole bodies read to the frames of a reference reading (serde_json's values routed by
//! the same catalogue: `listing/reference.rs`, `markets::reference`), and whatever bytes arrive,
//! the parser returns frames or a decode error, never a panic, and a body that fails leaves the
//! builder as it was.
use proptest::prelude::*;
use serde::de::IgnoredAny;

use super::listing::{reference, ListingBody, ListingBuilder};
use super::markets::{MarketsBody, MarketsBuilder};
use super::scanner::Scanner;
use crate::error::Error;
use crate::frames::ListingFrames;
use crate::model::value::Value;

/// Two values the same, floats bit for bit (`-0.0` is not `0.0`).
fn same_value(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// The scanner reads `text` as serde_json reads it into a `Value`, and steps over it where
/// serde_json would ignore it, or both fail.
fn assert_value_as_serde(text: &[u8]) -> Result<(), TestCaseError> {
    let mut scanner = Scanner::new(text);
    let scanned = scanner.value().and_then(|value| scanner.finish().map(|()| value));
    let serde = serde_json::from_slice::<Value<'_>>(text).ok();
    match (&scanned, &serde) {
        (Some(a), Some(b)) => {
            prop_assert!(same_value(a, b), "{:?} vs {:?} for {}", a, b, String::from_utf8_lossy(text));
        }
        (None, None) => {}
        _ => prop_assert!(false, "scanner {:?}, serde_json {:?} for {}", scanned, serde, String::from_utf8_lossy(text)),
    }
    let mut scanner = Scanner::new(text);
    let skipped = scanner.skip().and_then(|()| scanner.finish()).is_some();
    let ignored = serde_json::from_slice::<IgnoredAny>(text).is_ok();
    prop_assert_eq!(skipped, ignored, "skipping {}", String::from_utf8_lossy(text));
    Ok(())
}

fn sample_listing() -> String {
    String::from_utf8(crate::model::samples::LISTING.to_vec()).expect("the sample is UTF-8")
}

fn parse_one(body: &[u8]) -> Result<ListingFrames, Error> {
    let mut builder = ListingBuilder::new(1);
    builder.append(&ListingBody { body, token: Some("fuzz"), fetched_at: None })?;
    Ok(builder.finish())
}

fn assert_frames_equal(
    name: &str,
    a: &polars::prelude::DataFrame,
    b: &polars::prelude::DataFrame,
) -> Result<(), TestCaseError> {
    prop_assert!(a.equals_missing(b), "{} differs:\n{}\n{}", name, a, b);
    for (column_a, column_b) in a.columns().iter().zip(b.columns()) {
        if let (Ok(x), Ok(y)) = (column_a.f64(), column_b.f64()) {
            let bits = |c: &polars::prelude::Float64Chunked| c.iter().map(|v| v.map(f64::to_bits)).collect::<Vec<_>>();
            prop_assert_eq!(bits(x), bits(y), "{}.{}", name, column_a.name());
        }
    }
    Ok(())
}

/// The same body through the reader and through the reference: the same frames, or both fail.
fn assert_same_as_reference(body: &[u8]) -> Result<(), TestCaseError> {
    assert_sequence_same_as_reference(&[body])
}

/// `assert_same_as_reference` for bodies read one after another by one builder, as a batch reads
/// them: the reader remembers the keys of the bodies before (their order, where each was).
fn assert_sequence_same_as_reference<B: AsRef<[u8]>>(bodies: &[B]) -> Result<(), TestCaseError> {
    // The reference reads UTF-8 bodies (serde_json's byte reader checks UTF-8 only where it
    // keeps text; the fuzz corpus compares those bodies with the serde_json reader of before).
    if !bodies.iter().all(|body| std::str::from_utf8(body.as_ref()).is_ok()) {
        for body in bodies {
            let _ = parse_one(body.as_ref());
        }
        return Ok(());
    }
    let mut read = ListingBuilder::new(bodies.len());
    let mut reference = ListingBuilder::new(bodies.len());
    for body in bodies {
        let text = std::str::from_utf8(body.as_ref()).expect("checked above");
        let input = ListingBody { body: text.as_bytes(), token: Some("fuzz"), fetched_at: Some(7) };
        let result = read.append(&input);
        let expected = reference::read(text).map(|(saw_data, rows)| reference.append_rows(&input, saw_data, rows));
        assert_same_outcome(&result, expected.as_ref(), text)?;
    }
    let (read, reference) = (read.finish(), reference.finish());
    for ((name, a), (_, b)) in read.into_named().into_iter().zip(reference.into_named()) {
        assert_frames_equal(name, &a, &b)?;
    }
    Ok(())
}

/// The reader's outcome against the reference's (None: serde_json refused the body, so the
/// reader must fail too): the same value, or the same error text.
fn assert_same_outcome<T: PartialEq + std::fmt::Debug, E: std::fmt::Display + std::fmt::Debug>(
    result: &Result<T, E>,
    expected: Option<&Result<T, E>>,
    text: &str,
) -> Result<(), TestCaseError> {
    match (result, expected) {
        (Ok(a), Some(Ok(b))) => prop_assert_eq!(a, b),
        (Err(a), Some(Err(b))) => prop_assert_eq!(a.to_string(), b.to_string()),
        (_, None) => prop_assert!(result.is_err(), "serde_json fails what the reader read: {}", text),
        _ => prop_assert!(false, "reader {:?} but reference {:?} for {}", result, expected, text),
    }
    Ok(())
}

/// A markets body through the reader and through the reference: the same frames, or both fail.
fn assert_markets_same_as_reference(body: &[u8]) -> Result<(), TestCaseError> {
    let mut read = MarketsBuilder::new(1);
    let input = MarketsBody { body, token: "fuzz", fetched_at: Some(7) };
    let result = read.append(&input);
    let Ok(text) = std::str::from_utf8(body) else {
        return Ok(());
    };
    let mut reference = MarketsBuilder::new(1);
    let expected = super::markets::reference(text).map(|pending| reference.append_read(&input, pending));
    assert_same_outcome(&result, expected.as_ref(), text)?;
    let (read, reference) = (read.finish(), reference.finish());
    assert_frames_equal("markets", &read.markets, &reference.markets)?;
    assert_frames_equal("drift", &read.drift, &reference.drift)
}

#[cfg(feature = "sandbox")]
#[test]
fn sandbox_bodies_read_as_the_reference() {
    for (seed, now) in [(1, 1_795_392_000_000), (7, 1_772_368_500_000)] {
        for token in ["bitcoin", "tether", "token-1", "token-2", "token-3", "a-long-token-name-past-twelve"] {
            let body = crate::sandbox::body(seed, crate::model::Endpoint::Listing, token, now);
            assert_same_as_reference(body.as_bytes()).unwrap();
            let body = crate::sandbox::body(seed, crate::model::Endpoint::Markets, token, now);
            assert_markets_same_as_reference(body.as_bytes()).unwrap();
        }
    }
}

/// Keys the catalogue does not know (new families, an unknown interval, anything else) are
/// remembered by the reader like the others, their routes worked out from the key in every
/// body; keys with escapes are read too.
#[test]
fn unknown_and_escaped_keys_in_bodies_in_a_row() {
    let bodies: Vec<String> = (0..3)
        .map(|i| {
            format!(
                r#"{{"data": {{"id": "x", "flag_pattern_15m": ["Bull Flag {i}"], "mystery_1h": {i}, "trend_4h": "up {i}",
                "rsi14_1m": {i}, "wedge_pattern_2h": ["Wedge"], "something_else": {{"a": [{i}]}}, "rsi14_1h": 5{i},
                "rsi7\u005f1h": {i}, "\u0063urrent_price": "1{i}"}}}}"#
            )
        })
        .collect();
    assert_sequence_same_as_reference(&bodies).unwrap();
    let frames = parse_one(bodies[2].as_bytes()).unwrap();
    let indicators: Vec<_> =
        frames.indicators.column("indicator").unwrap().str().unwrap().iter().flatten().map(str::to_owned).collect();
    assert_eq!(indicators, ["mystery", "rsi14", "rsi7"]);
}

/// The rare valid shapes the reader once left to serde_json: read, each where it belongs.
#[test]
fn rare_valid_shapes_are_read() {
    let body = r#"{"data": {"id": "x", "rsi14_1h": -0, "sma20_1h": 123456789012345678901234, "ema50_1h": -9223372036854775809,
        "current_price": {"nested": [1]}, "\u006d\u0061cd_1h": "up", "name": "\ud83d\ude00", "single_pattern_1h": ["a", 1]},
        "\u0067eneralInfo": {"description": ["x"], "community": [1], "chains": "none"}}"#;
    let frames = parse_one(body.as_bytes()).unwrap();
    let values: Vec<_> =
        frames.indicators.column("value").unwrap().f64().unwrap().iter().map(|v| v.map(f64::to_bits)).collect();
    let expected = [-0.0f64, 1.2345678901234568e23, -9223372036854775809.0];
    assert_eq!(values, expected.map(|v| Some(v.to_bits())));
    let column = |name: &str| -> Vec<String> {
        frames.drift.column(name).unwrap().str().unwrap().iter().flatten().map(str::to_owned).collect()
    };
    assert_eq!(
        column("field"),
        [
            "data.current_price",
            "data.single_pattern_1h",
            "generalInfo.description",
            "generalInfo.community",
            "generalInfo.chains",
            "data.id",
        ]
    );
    assert_eq!(
        column("found"),
        ["an object", "an array with a non-string element", "[\"x\"]", "an array", "\"none\"", "\"x\""]
    );
    assert_eq!(frames.signals.column("value").unwrap().str().unwrap().get(0), Some("up"));
    assert_same_as_reference(body.as_bytes()).unwrap();
}

/// Invalid bodies are worded as serde_json words them, with the field and the offset (the
/// figures main's serde visitors gave).
#[test]
fn invalid_bodies_are_worded_by_serde_json() {
    for (body, field, message, offset) in [
        (r#"{"data": {"id": "x", "rsi14_1h": 1e400}}"#, Some("data.rsi14_1h"), "number out of range", 37),
        (r#"{"data": {"id": "x", "name": "\ud800"}}"#, Some("data.name"), "unexpected end of hex escape", 36),
        (r#"{"data": {"id": "x", "other": "\ud800"}, "x": [1,]}"#, None, "expected value", 49),
        (r#"{"data": {"id": "x" "rsi14_1h": 1}}"#, Some("data"), "expected `,` or `}`", 20),
        (
            r#"{"data": {"id": "x"}, "generalInfo": {"community": {"twitter": "t", "x": tru}}}"#,
            Some("generalInfo.community.twitter"),
            "expected ident",
            76,
        ),
        (r#"{"data": null}"#, Some("data"), "invalid type: null, expected the token listing object", 12),
        ("[]", None, "invalid type: sequence, expected a JSON object with `data` and `generalInfo`", 0),
        (r#"{"data": {}} x"#, None, "trailing characters", 13),
    ] {
        let Err(Error::Decode { field: f, message: m, offset: o, .. }) = parse_one(body.as_bytes()) else {
            panic!("{body} parsed");
        };
        assert_eq!((f.as_deref(), m.as_str(), o), (field, message, Some(offset)), "{body}");
    }
}

const MARKET_KEYS: &[&str] = &["id", "marketPair", "price", "liquidity_score", "volumeUsd", "unknown", "total"];

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
        Just("-0".to_string()),
        Just("-9223372036854775809".to_string()),
        Just("18446744073709551616".to_string()),
        Just("-12345678901234567890".to_string()),
        // \u escapes, surrogates (paired, lone and misordered) among them, beside non-ASCII text.
        "(\\\\u(d[89abcdef]|[0-9a-f]{2})[0-9a-fA-F]{2}|[a-z\u{e9}\u{2713}]){0,5}".prop_map(|s| format!("\"{s}\"")),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|items| format!("[{}]", items.join(","))),
            // Keys with escapes too, a lone surrogate among them.
            prop::collection::vec(("[a-z_0-9]{1,8}|\\\\u00[67][0-9a-f]|\\\\ud800", inner), 0..6).prop_map(|entries| {
                let body: Vec<String> = entries.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    })
}

const KEYS: &[&str] = &[
    "id",
    "current_price",
    "market_cap_rank",
    "is_active",
    "last_updated",
    "categories",
    "rsi14_1h",
    "macd_5m",
    "tripple_pattern_24h",
    "ta_1h_updated_at",
    "ema50_4h",
    "wedge_pattern_4h",
    "number_of_holders",
];

/// How a body is written out again: the same members, in other shapes (see `reshaped`).
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// 0 compact, 1 a space after `,` and `:`, 2 pretty-printed, 3 whitespace everywhere JSON allows it.
    spacing: u8,
    /// `data`'s keys in the order of the body before (`None`), or shuffled by this seed.
    shuffle: Option<u64>,
    /// Each member of `data` left out with probability `missing`/8.
    missing: u8,
    /// Characters of strings written as `\u` escapes (also as surrogate pairs), `\"` and `\/`.
    escapes: bool,
    /// Numbers in another form of the same decimal: exponents, trailing zeros, `E+`.
    numbers: bool,
    seed: u64,
}

fn shape() -> impl Strategy<Value = Shape> {
    (0u8..4, prop::option::of(any::<u64>()), 0u8..4, any::<bool>(), any::<bool>(), 1u64..u64::MAX).prop_map(
        |(spacing, shuffle, missing, escapes, numbers, seed)| Shape {
            spacing,
            shuffle,
            missing,
            escapes,
            numbers,
            seed,
        },
    )
}

/// The realistic bodies the shapes start from: the documented sample, and the Sandbox's (made
/// once: a Sandbox body takes a while to build in a debug build).
fn realistic_bodies() -> &'static [String] {
    static BODIES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    BODIES.get_or_init(|| {
        #[allow(unused_mut)]
        let mut bodies = vec![sample_listing()];
        #[cfg(feature = "sandbox")]
        for token in ["bitcoin", "token-3"] {
            bodies.push(crate::sandbox::body(1, crate::model::Endpoint::Listing, token, 1_795_392_000_000));
        }
        bodies
    })
}

/// A string's text again, some characters escaped (a surrogate pair for those past U+FFFF).
fn escaped_string(text: &str, next: &mut impl FnMut() -> u64) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match (c, next() % 4) {
            ('"', _) => out.push_str("\\\""),
            ('\\', _) => out.push_str("\\\\"),
            ('/', 0) => out.push_str("\\/"),
            (c, 0) | (c @ '\0'..='\u{1f}', _) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            (c, _) => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number's text in another form that names the same decimal.
fn renumbered(text: &str, next: &mut impl FnMut() -> u64) -> String {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i32>().unwrap_or(0)),
        None => (text, 0),
    };
    let (sign, digits) = mantissa.strip_prefix('-').map_or(("", mantissa), |rest| ("-", rest));
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    match next() % 3 {
        // d.ddd e±k: the same decimal with the point after the first digit.
        0 if whole.len() == 1 => format!("{sign}{whole}.{fraction}0e{exponent}"),
        0 => format!("{sign}{}.{}{fraction}E+{}", &whole[..1], &whole[1..], exponent + whole.len() as i32 - 1),
        1 => {
            // All the digits as a whole number (no leading zero, which JSON forbids).
            let digits = format!("{whole}{fraction}");
            let digits = digits.trim_start_matches('0');
            let digits = if digits.is_empty() { "0" } else { digits };
            format!("{sign}{digits}e{}", exponent - fraction.len() as i32)
        }
        _ => text.to_string(),
    }
}

/// One value's text in the shape: strings and numbers rewritten, containers spaced.
fn reshaped_value(value: &serde_json::Value, shape: &Shape, depth: usize, next: &mut impl FnMut() -> u64) -> String {
    use serde_json::Value as Json;
    match value {
        Json::String(text) if shape.escapes => escaped_string(text, next),
        Json::Number(number) if shape.numbers => renumbered(&number.to_string(), next),
        Json::Array(items) => {
            let items = items.iter().map(|item| reshaped_value(item, shape, depth + 1, next)).collect();
            container('[', items, ']', shape.spacing, depth)
        }
        Json::Object(members) => {
            let members = members
                .iter()
                .map(|(key, value)| member(key, reshaped_value(value, shape, depth + 1, next), shape.spacing))
                .collect();
            container('{', members, '}', shape.spacing, depth)
        }
        other => other.to_string(),
    }
}

/// `items`, already written, between `open` and `close` in the spacing `style` of a container at
/// `depth` (0 compact, 1 a space after `,`, 2 pretty-printed, 3 whitespace everywhere JSON allows).
fn container(open: char, items: Vec<String>, close: char, style: u8, depth: usize) -> String {
    if items.is_empty() {
        return format!("{open}{close}");
    }
    let indent = |depth: usize| match style {
        0 | 1 => String::new(),
        2 => format!("\n{}", "  ".repeat(depth)),
        _ => " \n".into(),
    };
    let comma = match style {
        0 => ",".to_string(),
        1 => ", ".into(),
        2 => format!(",{}", indent(depth + 1)),
        _ => " \t,\r\n ".into(),
    };
    format!("{open}{}{}{}{close}", indent(depth + 1), items.join(&comma), indent(depth))
}

/// A member of an object: its key, the colon in the spacing `style`, its value's text.
fn member(key: &str, value: String, style: u8) -> String {
    let colon = match style {
        0 => ":",
        1 | 2 => ": ",
        _ => " : ",
    };
    format!("{key:?}{colon}{value}")
}

/// `body` written out again in `shape`; `order` is `data`'s key order of the body before, and
/// becomes this body's.
fn reshaped(body: &str, shape: &Shape, order: &mut Vec<String>) -> String {
    let mut next = crate::test_random::xorshift(shape.seed);
    let document: serde_json::Map<String, serde_json::Value> = serde_json::from_str(body).expect("a realistic body");
    let data = document["data"].as_object().expect("a data object");
    let mut keys: Vec<String> = order.iter().filter(|key| data.contains_key(*key)).cloned().collect();
    keys.extend(data.keys().filter(|key| !order.contains(key)).cloned());
    if let Some(seed) = shape.shuffle {
        let mut shuffle = crate::test_random::xorshift(seed | 1);
        for i in (1..keys.len()).rev() {
            keys.swap(i, (shuffle() % (i as u64 + 1)) as usize);
        }
    }
    keys.retain(|_| next() % 8 >= u64::from(shape.missing));
    order.clone_from(&keys);
    let style = shape.spacing;
    let members = keys.iter().map(|key| member(key, reshaped_value(&data[key], shape, 2, &mut next), style)).collect();
    let data = container('{', members, '}', style, 1);
    let info = reshaped_value(&document["generalInfo"], shape, 1, &mut next);
    container('{', vec![member("data", data, style), member("generalInfo", info, style)], '}', style, 0)
}

const GENERAL_INFO_KEYS: &[&str] =
    &["description", "websites", "explorers", "categories", "community", "chains", "unknown"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The scanner's values are serde_json's, and it fails where serde_json fails.
    #[test]
    fn scanner_values_are_serde_jsons(value in json_value(), cut in any::<prop::sample::Index>(),
                                      flip in any::<(prop::sample::Index, u8)>()) {
        assert_value_as_serde(value.as_bytes())?;
        assert_value_as_serde(&value.as_bytes()[..cut.index(value.len() + 1)])?;
        let mut flipped = value.into_bytes();
        if !flipped.is_empty() {
            let at = flip.0.index(flipped.len());
            flipped[at] = flip.1;
        }
        assert_value_as_serde(&flipped)?;
    }

    #[test]
    fn any_value_in_any_known_field(key in prop::sample::select(KEYS), value in json_value()) {
        let body = format!("{{\"data\": {{\"id\": \"x\", \"{key}\": {value}}}, \"generalInfo\": {{\"description\": {value}}}}}");
        assert_same_as_reference(body.as_bytes())?;
    }

    /// Every text column of the snapshot, with any string (whitespace at its ends, escapes,
    /// any character): the reader stores strings there itself.
    #[test]
    fn any_string_in_any_text_field(index in any::<prop::sample::Index>(), text in any::<String>(), padded in any::<bool>()) {
        use crate::model::fields::{ScalarType, SNAPSHOT_FIELDS};
        let keys: Vec<&str> = SNAPSHOT_FIELDS.iter().filter(|(_, ty)| *ty == ScalarType::Str).map(|(key, _)| *key).collect();
        let key = keys[index.index(keys.len())];
        let value = if padded { serde_json::to_string(&format!(" {text} ")).unwrap() } else { serde_json::to_string(&text).unwrap() };
        let body = format!("{{\"data\": {{\"id\": \"x\", \"{key}\": {value}}}}}");
        assert_same_as_reference(body.as_bytes())?;
    }

    #[test]
    fn any_value_in_any_general_info_field(
        key in prop::sample::select(GENERAL_INFO_KEYS),
        link in prop::sample::select(&["twitter", "github", "discord"][..]),
        value in json_value(),
        spaced in any::<bool>(),
    ) {
        let chain = if spaced { r#"{ "name" : "a b", "address": "0x1" }"# } else { r#"{"name":"a b","address":"0x1"}"# };
        let body = format!(
            "{{\"data\": {{\"id\": \"x\"}}, \"generalInfo\": {{\"chains\": [{chain}], \"{key}\": {value}, \"community\": {{\"{link}\": {value}}}}}}}"
        );
        assert_same_as_reference(body.as_bytes())?;
        let whole = format!("{{\"data\": {{\"id\": \"x\"}}, \"generalInfo\": {value}}}");
        assert_same_as_reference(whole.as_bytes())?;
    }

    #[test]
    fn numbers_read_as_serde_json_reads_them(value in any::<f64>().prop_filter("finite", |f| f.is_finite()),
                                             digits in "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?") {
        for text in [value.to_string(), format!("{value:e}"), format!("{value:.17}"), digits] {
            assert_value_as_serde(text.as_bytes())?;
            let body = format!("{{\"data\": {{\"id\": \"x\", \"rsi14_1h\": {text}, \"current_price\": {text}}}}}");
            assert_same_as_reference(body.as_bytes())?;
        }
    }

    /// Realistic bodies in every shape, one after another through one builder: compact or
    /// spaced, keys in the last body's order or shuffled, fields missing, escapes, other number forms.
    #[test]
    fn reshaped_bodies_in_a_row(shapes in prop::collection::vec((any::<prop::sample::Index>(), shape()), 1..6)) {
        let sources = realistic_bodies();
        let mut order = Vec::new();
        let bodies: Vec<String> =
            shapes.iter().map(|(source, shape)| reshaped(&sources[source.index(sources.len())], shape, &mut order)).collect();
        for body in &bodies {
            prop_assert!(parse_one(body.as_bytes()).is_ok(), "not read: {}", body);
        }
        assert_sequence_same_as_reference(&bodies)?;
    }

    #[test]
    fn mutated_real_bodies(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12),
                           cut in any::<prop::sample::Index>()) {
        let mut body = sample_listing().into_bytes();
        for (index, byte) in &flips {
            let at = index.index(body.len());
            body[at] = *byte;
        }
        assert_same_as_reference(&body)?;
        let end = cut.index(body.len());
        let prefix_parsed = parse_one(&body[..end]).is_ok();
        prop_assert!(!prefix_parsed || end == body.len() || body[..end].ends_with(b"}"), "a cut body parsed");
    }

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let parsed = parse_one(&bytes).is_ok();
        assert_same_as_reference(&bytes)?;
        prop_assert!(!parsed || bytes.contains(&b'{'), "bytes without an object parsed");
        assert_markets_same_as_reference(&bytes)?;
    }

    #[test]
    fn any_value_in_any_market_field(key in prop::sample::select(MARKET_KEYS), value in json_value(),
                                     other in json_value(), spaced in any::<bool>()) {
        let entry = if spaced { format!("{{ \"id\" : \"1\", \"{key}\" : {value} }}") } else { format!("{{\"id\":\"1\",\"{key}\":{value}}}") };
        let body = format!("{{\"data\": [{entry}, {other}, {entry}], \"total\": {value}}}");
        assert_markets_same_as_reference(body.as_bytes())?;
        let whole = format!("{{\"total\": 3, \"data\": {value}}}");
        assert_markets_same_as_reference(whole.as_bytes())?;
    }

    #[test]
    fn mutated_real_markets_bodies(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12)) {
        let mut body = br#"{"data":[{"id":"1","exchangeName":"Binance","marketPair":"BTC/USDT","price":64000.1,"volumeUsd":1e9,"liquidity_score":950},{"id":"2","exchangeName":"Kraken","marketPair":"XBT/EUR","price":"64001"}],"total":2}"#.to_vec();
        for (index, byte) in &flips {
            let at = index.index(body.len());
            body[at] = *byte;
        }
        assert_markets_same_as_reference(&body)?;
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
