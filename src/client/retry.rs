//! When to try a request again, and how long to wait first.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;

/// Retries of one request after its first attempt, unless the client's settings say otherwise.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// (first, maximum) retry delay in seconds.
pub const DEFAULT_BACKOFF_SECS: (f64, f64) = (0.5, 8.0);

/// The longest `Retry-After` honoured as it is.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    pub initial_delay: Duration,
    pub max_delay: Duration,
    /// A `Retry-After` longer than this is not honoured as is; the backoff is used instead, so a
    /// confused server cannot park a batch for an hour.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: DEFAULT_MAX_RETRIES,
            initial_delay: Duration::from_secs_f64(DEFAULT_BACKOFF_SECS.0),
            max_delay: Duration::from_secs_f64(DEFAULT_BACKOFF_SECS.1),
            max_retry_after: MAX_RETRY_AFTER,
        }
    }
}

impl RetryPolicy {
    /// Whether a request that failed with `error` on attempt number `attempt` (1-based) gets
    /// another attempt.
    pub fn should_retry(&self, error: &Error, attempt: u32) -> bool {
        error.is_retryable() && attempt <= self.max_retries
    }

    /// How long to wait after failed attempt number `attempt` (1-based).
    pub fn delay(&self, error: &Error, attempt: u32) -> Duration {
        if let Error::Api { retry_after: Some(seconds), .. } = error {
            // Compared as a number first: a server's value may be too large (or not finite)
            // to become a Duration at all.
            if seconds.is_finite() && *seconds >= 0.0 && *seconds <= self.max_retry_after.as_secs_f64() {
                return Duration::from_secs_f64(*seconds);
            }
        }
        self.backoff(attempt, jitter())
    }

    /// `backoff` with this policy's delays.
    pub fn backoff(&self, attempt: u32, jitter_unit: f64) -> Duration {
        backoff(self.initial_delay, self.max_delay, attempt, jitter_unit)
    }
}

/// The package's one backoff rule, for requests and for the history's Delta commits alike: capped
/// exponential, `initial * 2^(attempt-1)` up to `max`, scaled by a jitter factor in (0.75, 1]
/// (`jitter_unit` in [0, 1)) so that a burst of failures does not retry in lockstep.
pub fn backoff(initial: Duration, max: Duration, attempt: u32, jitter_unit: f64) -> Duration {
    let exponent = attempt.saturating_sub(1).min(30);
    let base = initial.as_secs_f64() * f64::from(1u32 << exponent);
    let capped = base.min(max.as_secs_f64());
    Duration::from_secs_f64(capped * (1.0 - 0.25 * jitter_unit.clamp(0.0, 1.0)))
}

/// Reads `Retry-After` (seconds, possibly fractional, or an HTTP-date) into seconds from now.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<f64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then_some(seconds);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).map_or(0.0, |d| d.as_secs_f64()))
}

/// A uniform number in [0, 1) from a process-wide xorshift generator. Jitter needs no quality
/// beyond "different for each call".
pub fn jitter() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        x = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0x9E37_79B9, |d| d.as_nanos() as u64) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Endpoint;

    fn api(status: u16, retry_after: Option<f64>) -> Error {
        Error::Api {
            status,
            token: "t".into(),
            endpoint: Endpoint::Listing,
            body: String::new(),
            retry_after,
            key_sent: false,
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.backoff(1, 0.0), Duration::from_millis(500));
        assert_eq!(policy.backoff(2, 0.0), Duration::from_secs(1));
        assert_eq!(policy.backoff(3, 0.0), Duration::from_secs(2));
        assert_eq!(policy.backoff(10, 0.0), Duration::from_secs(8));
        assert_eq!(policy.backoff(1, 1.0), Duration::from_millis(375));
    }

    #[test]
    fn retry_after_is_honoured_within_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(&api(429, Some(2.0)), 1), Duration::from_secs(2));
        assert!(policy.delay(&api(429, Some(3600.0)), 1) <= Duration::from_millis(500));
        for hostile in [1e20, f64::INFINITY, f64::NAN, -5.0, f64::MAX] {
            assert!(policy.delay(&api(429, Some(hostile)), 1) <= Duration::from_millis(500), "{hostile}");
        }
    }

    #[test]
    fn what_is_retried() {
        let policy = RetryPolicy { max_retries: 2, ..Default::default() };
        assert!(policy.should_retry(&api(503, None), 1));
        assert!(policy.should_retry(&api(429, None), 2));
        assert!(!policy.should_retry(&api(429, None), 3));
        assert!(!policy.should_retry(&api(404, None), 1));
    }

    #[test]
    fn retry_after_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(parse_retry_after("3", now), Some(3.0));
        assert_eq!(parse_retry_after("0.5", now), Some(0.5));
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now), Some(10.0));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now), Some(0.0));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("99999999999999999999", now), Some(1e20));
        assert_eq!(parse_retry_after("inf", now), None);
        assert_eq!(parse_retry_after("NaN", now), None);
        assert_eq!(parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now).map(|s| s > 1e11), Some(true));
        let j = jitter();
        assert!((0.0..1.0).contains(&j));
    }
}
