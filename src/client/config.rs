//! The client's settings: their defaults and the rules they must follow, each written once.
//! The Python layer reads the defaults from here (`_core.DEFAULTS`) and passes what the user
//! gave; `ClientConfig::new` checks every value before any request is made.

use std::fmt;
use std::time::Duration;

use reqwest::header::HeaderValue;

use super::retry::RetryPolicy;
use super::url::redact_url_credentials;
use crate::error::Error;

pub const DEFAULT_BASE_URL: &str = "https://api.defilens.ai";
pub const DEFAULT_TIMEOUT_SECS: f64 = 30.0;
pub const DEFAULT_MAX_RETRIES: u32 = 3;
pub const DEFAULT_CONCURRENCY: usize = 16;
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// (first, maximum) retry delay in seconds.
pub const DEFAULT_BACKOFF_SECS: (f64, f64) = (0.5, 8.0);

/// The settings as the user gave them: numbers not yet checked. `None` means the default.
#[derive(Clone, Default)]
pub struct Settings {
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub timeout: Option<f64>,
    pub max_retries: Option<i64>,
    pub concurrency: Option<i64>,
    pub rate_limit: Option<f64>,
    pub cache_ttl: Option<f64>,
    pub proxy: Option<String>,
    pub max_response_bytes: Option<i64>,
    pub backoff: Option<(f64, f64)>,
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
    /// Requests per second across the client.
    pub rate_limit: Option<f64>,
    pub cache_ttl: Option<Duration>,
    pub proxy: Option<String>,
    pub max_response_bytes: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self::new(Settings::default()).expect("the defaults are valid")
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidArgument(message)
}

/// A positive, finite number of seconds.
fn seconds(name: &str, value: f64) -> Result<Duration, Error> {
    if value.is_finite() && value > 0.0 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(invalid(format!("{name} must be a positive number of seconds, got {value}")))
    }
}

/// An integer of at least `min`.
fn at_least(name: &str, value: i64, min: i64) -> Result<i64, Error> {
    if value >= min {
        Ok(value)
    } else if min == 0 {
        Err(invalid(format!("{name} must be a non-negative int, got {value}")))
    } else {
        Err(invalid(format!("{name} must be an int of at least {min}, got {value}")))
    }
}

/// An http(s) URL without query or fragment, without its trailing slash.
fn base_url(text: &str) -> Result<String, Error> {
    let base_url = text.trim().trim_end_matches('/').to_string();
    let parsed = reqwest::Url::parse(&base_url)
        .map_err(|e| invalid(format!("base_url {base_url:?} is not a valid URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(format!("base_url must start with http:// or https://, got {base_url:?}")));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid(format!("base_url must not have a query or fragment, got {base_url:?}")));
    }
    Ok(base_url)
}

impl ClientConfig {
    /// Fills in the defaults and checks every setting; a bad one is `Error::InvalidArgument`
    /// naming it.
    pub fn new(settings: Settings) -> Result<Self, Error> {
        let base_url = base_url(settings.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL))?;
        let timeout = seconds("timeout", settings.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS))?;
        let max_retries = at_least("max_retries", settings.max_retries.unwrap_or(DEFAULT_MAX_RETRIES.into()), 0)?;
        let max_retries = u32::try_from(max_retries).unwrap_or(u32::MAX);
        let concurrency = at_least("concurrency", settings.concurrency.unwrap_or(DEFAULT_CONCURRENCY as i64), 1)?;
        let concurrency = usize::try_from(concurrency).unwrap_or(usize::MAX);
        if let Some(rate) = settings.rate_limit {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(invalid(format!(
                    "rate_limit must be a positive number of requests per second, got {rate}"
                )));
            }
        }
        let cache_ttl = settings.cache_ttl.map(|ttl| seconds("cache_ttl", ttl)).transpose()?;
        let max_response_bytes = at_least(
            "max_response_bytes",
            settings.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES as i64),
            1,
        )?;
        let (initial, maximum) = settings.backoff.unwrap_or(DEFAULT_BACKOFF_SECS);
        if let Some(key) = &settings.api_key {
            if HeaderValue::from_str(key).is_err() {
                return Err(invalid("api_key contains characters that cannot be sent in an HTTP header".into()));
            }
        }
        Ok(Self {
            base_url,
            api_key: settings.api_key,
            timeout,
            retry: RetryPolicy {
                max_retries,
                initial_delay: seconds("backoff", initial)?,
                max_delay: seconds("backoff", maximum)?,
                ..RetryPolicy::default()
            },
            concurrency,
            rate_limit: settings.rate_limit,
            cache_ttl,
            proxy: settings.proxy,
            max_response_bytes: usize::try_from(max_response_bytes).unwrap_or(usize::MAX),
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
            .field("proxy", &self.proxy.as_ref().map(|p| redact_url_credentials(p)))
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_checks() {
        let config = ClientConfig::default();
        assert_eq!(config.base_url, DEFAULT_BASE_URL);
        assert_eq!(config.timeout, Duration::from_secs(30));
        assert_eq!((config.retry.max_retries, config.concurrency), (DEFAULT_MAX_RETRIES, DEFAULT_CONCURRENCY));
        for settings in [
            Settings { timeout: Some(0.0), ..Default::default() },
            Settings { timeout: Some(f64::NAN), ..Default::default() },
            Settings { max_retries: Some(-1), ..Default::default() },
            Settings { concurrency: Some(0), ..Default::default() },
            Settings { rate_limit: Some(0.0), ..Default::default() },
            Settings { cache_ttl: Some(-1.0), ..Default::default() },
            Settings { max_response_bytes: Some(0), ..Default::default() },
            Settings { backoff: Some((0.5, f64::INFINITY)), ..Default::default() },
            Settings { api_key: Some("a\nb".into()), ..Default::default() },
        ] {
            assert!(matches!(ClientConfig::new(settings), Err(Error::InvalidArgument(_))));
        }
    }
}
