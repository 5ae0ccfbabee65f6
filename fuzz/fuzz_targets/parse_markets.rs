//! Any bytes as a markets body: a frame or a decode error, never a panic; the entries counted
//! are the rows built.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = _core::MarketsBody { body: data, token: "fuzz", fetched_at: None };
    let (frames, results) = _core::parse_markets(std::slice::from_ref(&body));
    assert_eq!(results.len(), 1);
    match &results[0] {
        Ok(summary) => {
            assert_eq!(frames.markets.height(), summary.entries);
            assert_eq!(frames.drift.height(), summary.drifted);
        }
        Err(error) => {
            assert!(matches!(error, _core::Error::Decode { .. }), "{error:?}");
            assert_eq!(frames.markets.height() + frames.drift.height(), 0);
        }
    }
});
