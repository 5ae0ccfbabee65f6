//! What a server or a user may send as text: a `Retry-After` value becomes a bounded delay, a
//! base URL is refused or accepted, and a token id that is accepted becomes exactly one path
//! segment under that base URL. Never a panic.
#![no_main]

use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let (retry_after, base_url, token) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));

    let seconds = _core::parse_retry_after(retry_after, SystemTime::now());
    if let Some(seconds) = seconds {
        assert!(seconds.is_finite() && seconds >= 0.0);
    }
    let error = _core::Error::Api {
        status: 429,
        token: "fuzz".into(),
        endpoint: _core::Endpoint::Listing,
        body: String::new(),
        retry_after: seconds,
        key_sent: true,
    };
    let policy = _core::RetryPolicy::default();
    assert!(policy.delay(&error, 1) <= Duration::from_secs(60));

    let settings = _core::Settings { base_url: Some(base_url.to_string()), ..Default::default() };
    let Ok(config) = _core::ClientConfig::new(settings) else { return };
    let Ok(client) = _core::HttpClient::new(config.clone()) else { return };
    if _core::validate_token_id(token).is_err() {
        return;
    }
    let url = client.url_for(token, _core::Endpoint::Markets);
    let segment = url.strip_prefix(&format!("{}/listings/market/", config.base_url)).expect("the prefix is kept");
    assert!(!segment.contains(['/', '?', '#']), "{segment:?}");
});
