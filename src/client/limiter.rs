//! The client's request rate: off, fixed, or learned while it works (`rate_limit="auto"`).
//!
//! One limiter per client, shared by every request, so concurrency does not multiply the rate.
//! Learning is additive increase, multiplicative decrease: the rate doubles every second until
//! the first 429 (a slow start, so an unknown limit is found in a few seconds), then grows by
//! a twentieth a second and falls by a fifth on a 429. When the service sends rate headers
//! (`X-RateLimit-Limit`, `X-RateLimit-Reset`), the rate never exceeds what they allow: `Limit`
//! requests per window, the window being the longest `Reset` seen (at least a second).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The rate setting of a client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RateLimit {
    /// At most this many requests a second.
    Fixed(f64),
    /// Learned from 429s and rate headers.
    Auto,
}

/// Where a learned rate starts: low enough for most services, found to be higher within seconds.
const START_RATE: f64 = 10.0;
/// The learned rate stays within these (requests a second).
const MIN_RATE: f64 = 0.05;
const MAX_RATE: f64 = 1e6;
/// On a 429 the rate falls to this share of itself.
const DECREASE: f64 = 0.8;
/// After the first 429 the rate grows by this share of itself a second (at least `MIN_STEP`).
const INCREASE: f64 = 0.05;
const MIN_STEP: f64 = 0.2;
/// Below what the rate headers allow, to leave room for clocks that disagree.
const HEADROOM: f64 = 0.95;
/// One decrease per burst of 429s: those within this time answer requests already sent at the
/// old rate.
const DECREASE_HOLD: Duration = Duration::from_millis(50);
/// Rate headers larger than these are ignored as nonsense (a hostile or broken server).
const MAX_HEADER_LIMIT: f64 = 1e9;
const MAX_HEADER_WINDOW: f64 = 86_400.0;

/// The rate headers of one response, checked.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateHeaders {
    pub limit: Option<f64>,
    pub reset: Option<f64>,
}

impl RateHeaders {
    /// From header values as text (`X-RateLimit-Limit` and `X-RateLimit-Reset`, or the IETF
    /// draft's `RateLimit-Limit` and `RateLimit-Reset`); anything not a sane number is ignored.
    pub fn parse(limit: Option<&str>, reset: Option<&str>) -> Self {
        let number = |text: Option<&str>, max: f64| {
            text.and_then(|t| t.trim().parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0 && *v <= max)
        };
        Self { limit: number(limit, MAX_HEADER_LIMIT).filter(|l| *l > 0.0), reset: number(reset, MAX_HEADER_WINDOW) }
    }
}

struct Learned {
    rate: f64,
    /// What the rate headers allow (requests a second), once seen.
    ceiling: Option<f64>,
    /// The longest `Reset` seen: the headers' window, in seconds.
    window: f64,
    slow_start: bool,
    last_growth: Instant,
    last_decrease: Option<Instant>,
}

struct State {
    /// When the last request was let go.
    last_start: Option<Instant>,
    learned: Learned,
}

pub(crate) struct RateLimiter {
    mode: Option<RateLimit>,
    state: Mutex<State>,
}

impl RateLimiter {
    pub(crate) fn new(mode: Option<RateLimit>) -> Self {
        let now = Instant::now();
        let learned = Learned {
            rate: START_RATE,
            ceiling: None,
            window: 1.0,
            slow_start: true,
            last_growth: now,
            last_decrease: None,
        };
        Self { mode, state: Mutex::new(State { last_start: None, learned }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The rate requests go at now (requests a second): the fixed one, the learned one, or None.
    pub(crate) fn rate(&self) -> Option<f64> {
        match self.mode? {
            RateLimit::Fixed(rate) => Some(rate),
            RateLimit::Auto => Some(self.lock().learned.rate),
        }
    }

    /// Waits for this request's turn: requests start evenly spaced at the rate of the moment
    /// each starts. No turn is booked ahead, so a rate learned meanwhile applies at once to
    /// every request still waiting (booking ahead at a slow start rate would keep them slow).
    pub(crate) async fn wait_turn(&self) {
        if self.mode.is_none() {
            return;
        }
        loop {
            let wait = {
                let mut state = self.lock();
                let rate = match self.mode {
                    Some(RateLimit::Fixed(rate)) => rate,
                    _ => state.learned.rate,
                };
                let now = Instant::now();
                let turn = state.last_start.map_or(now, |last| last + Duration::from_secs_f64(1.0 / rate));
                if turn <= now {
                    state.last_start = Some(now);
                    return;
                }
                turn - now
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// What one response said about the limit: its status and rate headers. Learns only in
    /// `Auto` mode.
    pub(crate) fn observe(&self, status: u16, headers: RateHeaders) {
        if self.mode != Some(RateLimit::Auto) {
            return;
        }
        self.observe_at(status, headers, Instant::now());
    }

    fn observe_at(&self, status: u16, headers: RateHeaders, now: Instant) {
        let mut state = self.lock();
        let learned = &mut state.learned;
        if let Some(reset) = headers.reset {
            learned.window = learned.window.max(reset).max(1.0);
        }
        if let Some(limit) = headers.limit {
            let ceiling = limit / learned.window * HEADROOM;
            // The first time the service says its limit, there is nothing left to search for.
            if learned.ceiling.is_none() || learned.slow_start {
                learned.rate = ceiling;
                learned.slow_start = false;
            }
            learned.ceiling = Some(ceiling);
        }
        if status == 429 {
            let recent = learned.last_decrease.is_some_and(|at| now.saturating_duration_since(at) < DECREASE_HOLD);
            if !recent {
                learned.rate *= DECREASE;
                learned.last_decrease = Some(now);
            }
            learned.slow_start = false;
        } else if (200..300).contains(&status) {
            let seconds = now.saturating_duration_since(learned.last_growth).as_secs_f64();
            learned.rate = if learned.slow_start {
                learned.rate * 2f64.powf(seconds)
            } else {
                learned.rate + (learned.rate * INCREASE).max(MIN_STEP) * seconds
            };
        }
        learned.last_growth = now;
        let ceiling = learned.ceiling.unwrap_or(MAX_RATE);
        learned.rate = learned.rate.clamp(MIN_RATE, ceiling.clamp(MIN_RATE, MAX_RATE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto() -> RateLimiter {
        RateLimiter::new(Some(RateLimit::Auto))
    }

    #[test]
    fn slow_start_doubles_until_the_first_429_then_backs_off() {
        let limiter = auto();
        let start = Instant::now();
        limiter.observe_at(200, RateHeaders::default(), start + Duration::from_secs(2));
        let grown = limiter.rate().unwrap();
        assert!((grown - START_RATE * 4.0).abs() < 1e-3, "{grown}");
        limiter.observe_at(429, RateHeaders::default(), start + Duration::from_secs(2));
        let after = limiter.rate().unwrap();
        assert!((after - grown * DECREASE).abs() < 1e-6);
        // A burst of 429s answering requests sent at the old rate is one decrease.
        limiter.observe_at(429, RateHeaders::default(), start + Duration::from_millis(2030));
        assert_eq!(limiter.rate().unwrap(), after);
        // Then additive growth: a twentieth a second.
        limiter.observe_at(200, RateHeaders::default(), start + Duration::from_secs(3));
        assert!(limiter.rate().unwrap() > after && limiter.rate().unwrap() < after * 1.1);
    }

    #[test]
    fn rate_headers_set_the_ceiling() {
        let limiter = auto();
        let now = Instant::now();
        limiter.observe_at(200, RateHeaders::parse(Some("40"), Some("1")), now);
        assert!((limiter.rate().unwrap() - 40.0 * HEADROOM).abs() < 1e-9);
        limiter.observe_at(200, RateHeaders::default(), now + Duration::from_secs(60));
        assert!((limiter.rate().unwrap() - 40.0 * HEADROOM).abs() < 1e-9, "never above what the headers allow");
        // A per-minute window: 600 a minute is 10 a second.
        let minute = auto();
        minute.observe_at(200, RateHeaders::parse(Some("600"), Some("60")), now);
        assert!((minute.rate().unwrap() - 10.0 * HEADROOM).abs() < 1e-9);
    }

    #[test]
    fn hostile_headers_are_ignored_and_the_rate_stays_in_bounds() {
        for (limit, reset) in [("inf", "1"), ("-5", "1"), ("nan", "nan"), ("1e300", "0"), ("40", "1e300"), ("0", "1")] {
            let headers = RateHeaders::parse(Some(limit), Some(reset));
            let limiter = auto();
            for i in 0..50 {
                limiter.observe_at(429, headers, Instant::now() + Duration::from_secs(i));
            }
            let rate = limiter.rate().unwrap();
            assert!((MIN_RATE..=MAX_RATE).contains(&rate), "{limit} {reset}: {rate}");
        }
    }

    #[test]
    fn fixed_and_off_do_not_learn() {
        let fixed = RateLimiter::new(Some(RateLimit::Fixed(7.0)));
        fixed.observe(429, RateHeaders::parse(Some("1"), Some("1")));
        assert_eq!(fixed.rate(), Some(7.0));
        assert_eq!(RateLimiter::new(None).rate(), None);
    }
}
