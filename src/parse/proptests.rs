//! Property tests: whatever bytes arrive, the parser returns frames or a decode error, never a
/// panic, and a body that fails leaves the builder exactly as it was.
use proptest::prelude::*;

use super::listing::{ListingBody, ListingBuilder};
use super::markets::{MarketsBody, MarketsBuilder};
use crate::error::Error;
use crate::frames::ListingFrames;

fn sample_listing() -> String {
    String::from_utf8(crate::model::samples::LISTING.to_vec()).expect("the sample is UTF-8")
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
