//! The client's settings: their defaults and the rules they must follow, each written once.
//! The Python layer reads the defaults from here (`_core.DEFAULTS`) and passes what the user
//! gave; `ClientConfig::new` checks every value before any request is made, so no setting can
//! become a `Duration` or a size it does not fit.

use std::fmt;
use std::time::Duration;

use reqwest::header::HeaderValue;

use super::clock::SharedClock;
use super::limiter::RateLimit;
use super::retry::RetryPolicy;
pub use super::retry::{DEFAULT_BACKOFF_SECS, DEFAULT_MAX_RETRIES};
use super::url::redact_url_credentials;
use crate::error::Error;

pub const DEFAULT_BASE_URL: &str = "https://api.defilens.ai";
pub const DEFAULT_TIMEOUT_SECS: f64 = 30.0;
pub const DEFAULT_CONCURRENCY: usize = 16;
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
pub const DEFAULT_CACHE_MAX_BYTES: usize = 256 * 1024 * 1024;

/// The largest value each duration accepts, in seconds: beyond these a setting is a mistake
/// (and soon would not fit a `Duration`).
pub const MAX_TIMEOUT_SECS: f64 = 86_400.0;
pub const MAX_BACKOFF_SECS: f64 = 3_600.0;
pub const MAX_CACHE_TTL_SECS: f64 = 30.0 * 86_400.0;
/// Requests per second: one a day at least, a million at most.
pub const RATE_LIMIT_RANGE: (f64, f64) = (1.0 / 86_400.0, 1e6);
pub const MAX_RETRIES: i64 = 100;
pub const MAX_CONCURRENCY: i64 = 10_000;
pub const MAX_BYTES: i64 = 1 << 40;

/// The settings as the user gave them: numbers not yet checked. `None` means the default.
#[derive(Clone, Default)]
pub struct Settings {
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub timeout: Option<f64>,
    pub max_retries: Option<i64>,
    pub concurrency: Option<i64>,
    pub rate_limit: Option<f64>,
    /// `rate_limit="auto"`: learn the rate (then `rate_limit` is None).
    pub rate_limit_auto: bool,
    pub cache_ttl: Option<f64>,
    pub cache_max_bytes: Option<i64>,
    /// Keep the cache on disk, in this folder (needs `cache_ttl`).
    pub cache_dir: Option<String>,
    pub proxy: Option<String>,
    pub max_response_bytes: Option<i64>,
    pub backoff: Option<(f64, f64)>,
    /// The clock responses are stamped with; the wall clock by default.
    pub clock: SharedClock,
}

/// Checked settings of one client.
#[derive(Clone)]
pub struct ClientConfig {
    pub base_url: String,
    pub api_key: Option<String>,
    /// Per attempt, from connecting until the whole body has arrived.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub concurrency: usize,
    /// Requests per second across the client: fixed, learned, or none.
    pub rate_limit: Option<RateLimit>,
    pub cache_ttl: Option<Duration>,
    pub cache_max_bytes: usize,
    /// The cache's folder when it is on disk (then the bound is the folder's size).
    pub cache_dir: Option<std::path::PathBuf>,
    pub proxy: Option<String>,
    pub max_response_bytes: usize,
    /// Whose time `fetched_at` is: the wall clock, or a clock the client was bound to.
    pub clock: SharedClock,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self::new(Settings::default()).expect("the defaults are valid")
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidArgument(message)
}

/// A number of seconds above 0 and at most `max`.
pub fn seconds(name: &str, value: f64, max: f64) -> Result<Duration, Error> {
    if value.is_finite() && value > 0.0 && value <= max {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(invalid(format!("{name} must be a number of seconds above 0 and at most {max}, got {value}")))
    }
}

/// An integer from `min` to `max`.
pub fn int_in(name: &str, value: i64, min: i64, max: i64) -> Result<i64, Error> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(invalid(format!("{name} must be an int from {min} to {max}, got {value}")))
    }
}

/// An http(s) URL with a host, without query or fragment, without its trailing slash. A path
/// (`https://gateway.example/defilens`) is kept: requests go to `<base_url>/listings/...`.
/// (The Python layer checks the base URL alone first, before it looks for an API key.)
pub fn check_base_url(text: &str) -> Result<String, Error> {
    let base_url = text.trim().trim_end_matches('/').to_string();
    let refused = || {
        invalid(format!(
            "base_url must be an http:// or https:// URL with a host, such as {DEFAULT_BASE_URL}, got {base_url:?}"
        ))
    };
    let parsed = reqwest::Url::parse(&base_url).map_err(|_| refused())?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(refused());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid(format!("base_url must not have a query or fragment, got {base_url:?}")));
    }
    Ok(base_url)
}

/// A proxy URL: http or https, with a host.
fn proxy_url(text: &str) -> Result<String, Error> {
    let refused = || {
        invalid(format!("proxy must be an http:// or https:// URL with a host, got {:?}", redact_url_credentials(text)))
    };
    let parsed = reqwest::Url::parse(text.trim()).map_err(|_| refused())?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(refused());
    }
    Ok(text.trim().to_string())
}

impl ClientConfig {
    /// Fills in the defaults and checks every setting; a bad one is `Error::InvalidArgument`
    /// naming it and its accepted range.
    pub fn new(settings: Settings) -> Result<Self, Error> {
        let base_url = check_base_url(settings.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL))?;
        let timeout = seconds("timeout", settings.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS), MAX_TIMEOUT_SECS)?;
        let max_retries =
            int_in("max_retries", settings.max_retries.unwrap_or(DEFAULT_MAX_RETRIES.into()), 0, MAX_RETRIES)?;
        let concurrency =
            int_in("concurrency", settings.concurrency.unwrap_or(DEFAULT_CONCURRENCY as i64), 1, MAX_CONCURRENCY)?;
        if let Some(rate) = settings.rate_limit {
            let (low, high) = RATE_LIMIT_RANGE;
            if !(rate.is_finite() && (low..=high).contains(&rate)) {
                return Err(invalid(format!(
                    "rate_limit must be a number of requests per second from {low:.2e} (one a day) to {high:.0}, got {rate}"
                )));
            }
        }
        let cache_ttl = settings.cache_ttl.map(|ttl| seconds("cache_ttl", ttl, MAX_CACHE_TTL_SECS)).transpose()?;
        let bytes =
            |name, value: Option<i64>, default: usize| int_in(name, value.unwrap_or(default as i64), 1, MAX_BYTES);
        let max_response_bytes = bytes("max_response_bytes", settings.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES)?;
        let cache_max_bytes = bytes("cache_max_bytes", settings.cache_max_bytes, DEFAULT_CACHE_MAX_BYTES)?;
        let cache_dir = match settings.cache_dir.as_deref() {
            None => None,
            Some(dir) if dir.trim().is_empty() => return Err(invalid("cache_dir is empty: give a folder".into())),
            Some(_) if cache_ttl.is_none() => {
                return Err(invalid(
                    "cache_dir needs cache_ttl: the seconds a response is reused (for example cache_ttl=3600)".into(),
                ))
            }
            Some(dir) => Some(std::path::PathBuf::from(dir)),
        };
        let (initial, maximum) = settings.backoff.unwrap_or(DEFAULT_BACKOFF_SECS);
        let retry = RetryPolicy {
            max_retries: max_retries as u32,
            initial_delay: seconds("backoff", initial, MAX_BACKOFF_SECS)?,
            max_delay: seconds("backoff", maximum, MAX_BACKOFF_SECS)?,
            ..RetryPolicy::default()
        };
        let proxy = settings.proxy.as_deref().map(proxy_url).transpose()?;
        if let Some(key) = &settings.api_key {
            if HeaderValue::from_str(key).is_err() {
                return Err(invalid("api_key contains characters that cannot be sent in an HTTP header".into()));
            }
        }
        Ok(Self {
            base_url,
            api_key: settings.api_key,
            timeout,
            retry,
            concurrency: concurrency as usize,
            rate_limit: if settings.rate_limit_auto {
                Some(RateLimit::Auto)
            } else {
                settings.rate_limit.map(RateLimit::Fixed)
            },
            cache_ttl,
            cache_max_bytes: cache_max_bytes as usize,
            cache_dir,
            proxy,
            max_response_bytes: max_response_bytes as usize,
            clock: settings.clock,
        })
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("concurrency", &self.concurrency)
            .field("rate_limit", &self.rate_limit)
            .field("cache_ttl", &self.cache_ttl)
            .field("cache_max_bytes", &self.cache_max_bytes)
            .field("cache_dir", &self.cache_dir)
            .field("proxy", &self.proxy.as_ref().map(|p| redact_url_credentials(p)))
            .field("max_response_bytes", &self.max_response_bytes)
            .field("clock", &self.clock)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_prefix_is_kept_and_good_proxies_pass() {
        let config =
            ClientConfig::new(Settings { base_url: Some("http://127.0.0.1:9/v1/".into()), ..Default::default() });
        assert_eq!(config.unwrap().base_url, "http://127.0.0.1:9/v1");
        let config =
            ClientConfig::new(Settings { proxy: Some("http://user:pw@proxy:3128".into()), ..Default::default() });
        assert!(config.is_ok());
    }

    #[test]
    fn defaults_and_checks() {
        let config = ClientConfig::default();
        assert_eq!(config.base_url, DEFAULT_BASE_URL);
        assert_eq!(config.timeout, Duration::from_secs(30));
        assert_eq!((config.retry.max_retries, config.concurrency), (DEFAULT_MAX_RETRIES, DEFAULT_CONCURRENCY));
        let cases = [
            Settings { timeout: Some(0.0), ..Default::default() },
            Settings { timeout: Some(f64::NAN), ..Default::default() },
            Settings { timeout: Some(1e300), ..Default::default() },
            Settings { max_retries: Some(-1), ..Default::default() },
            Settings { max_retries: Some(1_000_000), ..Default::default() },
            Settings { concurrency: Some(0), ..Default::default() },
            Settings { concurrency: Some(i64::MAX), ..Default::default() },
            Settings { rate_limit: Some(0.0), ..Default::default() },
            Settings { rate_limit: Some(1e-300), ..Default::default() },
            Settings { cache_ttl: Some(-1.0), ..Default::default() },
            Settings { cache_max_bytes: Some(0), ..Default::default() },
            Settings { max_response_bytes: Some(0), ..Default::default() },
            Settings { max_response_bytes: Some(-1), ..Default::default() },
            Settings { backoff: Some((0.5, f64::INFINITY)), ..Default::default() },
            Settings { backoff: Some((1e300, 1e300)), ..Default::default() },
            Settings { api_key: Some("a\nb".into()), ..Default::default() },
            Settings { base_url: Some("127.0.0.1:9".into()), ..Default::default() },
            Settings { base_url: Some("not a url".into()), ..Default::default() },
            Settings { base_url: Some("http://".into()), ..Default::default() },
            Settings { base_url: Some("file:///etc".into()), ..Default::default() },
            Settings { base_url: Some("https://x/?q=1".into()), ..Default::default() },
            Settings { proxy: Some("garbage".into()), ..Default::default() },
            Settings { proxy: Some("ftp://proxy:21".into()), ..Default::default() },
        ];
        for settings in cases {
            assert!(matches!(ClientConfig::new(settings), Err(Error::InvalidArgument(_))));
        }
    }
}
