//! Where a request goes: token ids checked and encoded as one path segment, and the helpers
//! that tell a loopback URL and hide a proxy's credentials.

use std::net::IpAddr;

use crate::error::Error;

/// `http://user:pass@host` -> `http://***@host`, for anything that prints a proxy URL.
pub fn redact_url_credentials(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => format!("{}***{}", &url[..scheme_end + 3], &url[at..]),
        _ => url.to_string(),
    }
}

/// The longest token id sent; the service's ids are slugs of a few dozen characters.
pub const MAX_TOKEN_ID_CHARS: usize = 256;

/// Checks a token id before any request: it must be a non-blank string that can be sent as
/// exactly one path segment.
pub fn validate_token_id(id: &str) -> Result<(), Error> {
    if id.chars().count() > MAX_TOKEN_ID_CHARS {
        return Err(Error::InvalidArgument(format!(
            "token ids must be at most {MAX_TOKEN_ID_CHARS} characters, got one of {}",
            id.chars().count()
        )));
    }
    if id.trim().is_empty() {
        return Err(Error::InvalidArgument(format!("token ids must be non-empty strings, got {id:?}")));
    }
    if id == "." || id == ".." {
        // URL parsers resolve these (and their percent-encoded forms) as dot-segments, so no
        // encoding can carry them to the service as an id.
        return Err(Error::InvalidArgument(format!(
            "token id {id:?} cannot be sent: URLs treat it as a relative path"
        )));
    }
    Ok(())
}

/// Percent-encodes a token id as one path segment: only RFC 3986 unreserved bytes stay as
/// they are, so `/`, `?`, `#`, `%`, spaces and non-ASCII can never change the path or add a
/// query.
pub fn encode_path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 8);
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

pub fn is_loopback_url(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_one_segment() {
        assert_eq!(encode_path_segment("bitcoin"), "bitcoin");
        assert_eq!(encode_path_segment("a/b"), "a%2Fb");
        assert_eq!(encode_path_segment("../x"), "..%2Fx");
        assert_eq!(encode_path_segment("a?b#c d%"), "a%3Fb%23c%20d%25");
        assert_eq!(encode_path_segment("é"), "%C3%A9");
    }

    #[test]
    fn ids_are_validated() {
        assert!(validate_token_id("bitcoin").is_ok());
        assert!(validate_token_id("").is_err());
        assert!(validate_token_id("  \t").is_err());
        assert!(validate_token_id("..").is_err());
        assert!(validate_token_id("...").is_ok());
        assert!(validate_token_id(&"é".repeat(256)).is_ok());
        assert!(validate_token_id(&"x".repeat(100_000)).is_err());
    }

    #[test]
    fn proxy_credentials_are_hidden() {
        assert_eq!(redact_url_credentials("http://u:p@proxy:8080"), "http://***@proxy:8080");
    }
}
