//! The scanner's values and failures against serde_json's (numbers in `numbers.rs`, string stops
//! in `string_stop/`, whole bodies in `proptests.rs`).

use super::*;

pub(super) fn scan(text: &str) -> Option<Value<'_>> {
    let mut scanner = Scanner::new(text.as_bytes());
    let value = scanner.value()?;
    scanner.finish()?;
    Some(value)
}

pub(super) fn serde(text: &str) -> Option<Value<'_>> {
    serde_json::from_str(text).ok()
}

#[test]
fn what_serde_json_rejects_is_never_accepted() {
    for text in [
        "01",
        "1.",
        ".5",
        "+1",
        "1e",
        "1e+",
        "-",
        "--1",
        "1.5.2",
        "\"a\\\"b\"",
        "\"tab\there\"",
        "[1]",
        "[\"a\",]",
        "[,]",
        "nul",
        "tru",
        "falsy",
        "{}",
        "1e400",
        "-1e400",
        "\"unterminated",
        "[\"a\" \"b\"]",
    ] {
        let scanned = scan(text);
        assert!(scanned.is_none() || serde(text) == scanned, "{text}: {scanned:?}");
    }
}

#[test]
fn escapes_decode_as_serde_json_decodes_them() {
    for text in [
        r#""a\"b""#,
        r#""\\ \/ \b \f \n \r \t""#,
        r#""Z\u00fcrich \u2013 \u2713""#,
        r#""\ud83d\ude00 a pair""#,
        r#""caf\u00E9 é""#,
        r#""\u0000 nul""#,
        r#"["x\"y", null, "plain"]"#,
    ] {
        let scanned = scan(text);
        assert!(scanned.is_some(), "{text}: the scanner failed");
        assert_eq!(scanned, serde(text), "{text}");
    }
    // serde_json rejects these, and so does the scanner.
    for text in [r#""\ud800""#, r#""\udc00 low""#, r#""\ud800\u0041""#, r#""\x41""#, r#""\u12g4""#, r#""\u12""#] {
        assert!(scan(text).is_none() && serde(text).is_none(), "{text}");
    }
}

#[test]
fn objects_and_skipping() {
    let body = br#" { "a" : [1, {"b": [null, true, "x"]}], "c": "d" , "e": {} } "#;
    let mut scanner = Scanner::new(body);
    let mut seen = Vec::new();
    scanner
        .object(|s, key| {
            s.colon()?;
            let is_c = key == "c";
            seen.push(key);
            if is_c {
                assert_eq!(s.value(), Some(Value::Str("d".into())));
                Some(())
            } else {
                s.skip()
            }
        })
        .unwrap();
    scanner.finish().unwrap();
    assert_eq!(seen, ["a", "c", "e"]);
    for bad in [&br#"{"a": [1,]}"#[..], br#"{"a" 1}"#, br#"{"a": 1,}"#, br#"{"a": 1} x"#, br#"{"a": {"b": 1e}}"#] {
        let mut scanner = Scanner::new(bad);
        let read = scanner.object(|s, _| s.colon().and_then(|()| s.skip())).and_then(|()| scanner.finish());
        assert!(read.is_none(), "{}", String::from_utf8_lossy(bad));
    }
}
