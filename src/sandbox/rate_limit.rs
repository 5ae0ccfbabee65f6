//! `Sandbox(max_rps=R)`: a real limit the client does not know, for testing limiters. A token
//! bucket holding R tokens (a burst of one second) refilled at R a second; a request that finds
//! it empty gets 429 with `Retry-After`. The `X-RateLimit-*` headers say where the bucket stands.

use std::sync::Mutex;
use std::time::Instant;

/// What one request learns from the bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Verdict {
    pub(super) allowed: bool,
    /// The bucket's size: requests a second, and the burst it allows.
    pub(super) limit: u64,
    /// Whole tokens left after this request.
    pub(super) remaining: u64,
    /// Seconds until the bucket is full again (rounded up).
    pub(super) reset: u64,
    /// On a refusal: seconds until the next token (rounded up, at least 1: `Retry-After` is whole seconds).
    pub(super) retry_after: u64,
}

pub(super) struct TokenBucket {
    rate: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub(super) fn new(rate: f64) -> Self {
        Self { rate, state: Mutex::new((rate, Instant::now())) }
    }

    pub(super) fn take(&self) -> Verdict {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> Verdict {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = *state;
        let tokens = (tokens + now.saturating_duration_since(last).as_secs_f64() * self.rate).min(self.rate);
        let allowed = tokens >= 1.0;
        let left = if allowed { tokens - 1.0 } else { tokens };
        *state = (left, now.max(last));
        let seconds = |missing: f64| (missing / self.rate).ceil().max(0.0) as u64;
        Verdict {
            allowed,
            limit: self.rate.ceil() as u64,
            remaining: left.floor() as u64,
            reset: seconds(self.rate - left),
            retry_after: if allowed { 0 } else { seconds(1.0 - left).max(1) },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_of_one_second_then_the_rate() {
        let bucket = TokenBucket::new(40.0);
        let start = Instant::now();
        let first: Vec<Verdict> = (0..45).map(|_| bucket.take_at(start)).collect();
        assert_eq!(first.iter().filter(|v| v.allowed).count(), 40);
        let refused = first[44];
        assert!(!refused.allowed && refused.retry_after == 1 && refused.remaining == 0 && refused.limit == 40);
        // A quarter of a second later, ten more tokens.
        let later = start + Duration::from_millis(250);
        assert_eq!((0..12).filter(|_| bucket.take_at(later).allowed).count(), 10);
        let full = TokenBucket::new(40.0);
        let verdict = full.take_at(start);
        assert!(verdict.allowed && verdict.remaining == 39 && verdict.reset == 1);
    }
}
