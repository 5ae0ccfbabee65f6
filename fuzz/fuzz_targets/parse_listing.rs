//! Any bytes as listing bodies: frames or a decode error per body, never a panic; a body that
//! fails leaves no rows, each one that parses exactly one snapshot row. The input is split at
//! each 0x1E byte (never part of valid JSON) into bodies read one after another by one builder,
//! as a batch reads them, so the fast path's memory of earlier bodies' keys is fuzzed too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bodies: Vec<_> = data
        .split(|&byte| byte == 0x1E)
        .take(16)
        .map(|body| _core::ListingBody { body, token: Some("fuzz"), fetched_at: Some(0) })
        .collect();
    let (frames, results) = _core::parse_listings(&bodies);
    assert_eq!(results.len(), bodies.len());
    for result in &results {
        match result {
            Ok(token) => assert_eq!(token, "fuzz"),
            Err(error) => assert!(matches!(error, _core::Error::Decode { .. }), "{error:?}"),
        }
    }
    let parsed = results.iter().filter(|result| result.is_ok()).count();
    assert_eq!((frames.snapshot.height(), frames.info.height()), (parsed, parsed));
    if parsed == 0 {
        assert_eq!(frames.indicators.height() + frames.patterns.height() + frames.drift.height(), 0);
    }
});
