//! Any bytes as a listing body: frames or a decode error, never a panic; a body that fails
//! leaves no rows, one that parses leaves exactly one snapshot row.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = _core::ListingBody { body: data, token: Some("fuzz"), fetched_at: Some(0) };
    let (frames, results) = _core::parse_listings(std::slice::from_ref(&body));
    assert_eq!(results.len(), 1);
    match &results[0] {
        Ok(token) => {
            assert_eq!(token, "fuzz");
            assert_eq!((frames.snapshot.height(), frames.info.height()), (1, 1));
        }
        Err(error) => {
            assert!(matches!(error, _core::Error::Decode { .. }), "{error:?}");
            assert_eq!(frames.snapshot.height() + frames.indicators.height() + frames.drift.height(), 0);
        }
    }
});
