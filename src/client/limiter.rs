//! The client's request rate: off, fixed, or learned while it works (`rate_limit="auto"`).
//!
//! One limiter per client, shared by every request, so concurrency does not multiply the rate.
//! Learning starts unthrottled: a service without a limit is never slowed down. The first 429
//! sets the rate to what the service let through in the second before it (nine tenths of it);
//! from then on it is additive increase, multiplicative decrease: the rate grows by a twentieth a
//! second and falls by a fifth on a 429. When the service sends rate headers
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

/// The share of what got through in the last second that the first 429 sets the rate to.
const FIRST_RATE: f64 = 0.9;
/// How far back successes are counted for the first rate.
const GOODPUT_WINDOW: Duration = Duration::from_secs(1);
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
    /// None until the first 429 or rate header: unthrottled.
    rate: Option<f64>,
    /// When the latest successes arrived (within `GOODPUT_WINDOW`), until the rate is known.
    successes: std::collections::VecDeque<Instant>,
    /// What the rate headers allow (requests a second), once seen.
    ceiling: Option<f64>,
    /// The longest `Reset` seen: the headers' window, in seconds.
    window: f64,
    /// Doubling each second: after a first 429 that came with too little traffic to measure.
    doubling: bool,
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
            rate: None,
            successes: std::collections::VecDeque::new(),
            ceiling: None,
            window: 1.0,
            doubling: false,
            last_growth: now,
            last_decrease: None,
        };
        Self { mode, state: Mutex::new(State { last_start: None, learned }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The rate requests go at now (requests a second): the fixed one, the learned one, or None
    /// (no limit, or none learned yet).
    pub(crate) fn rate(&self) -> Option<f64> {
        match self.mode? {
            RateLimit::Fixed(rate) => Some(rate),
            RateLimit::Auto => self.lock().learned.rate,
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
                    _ => match state.learned.rate {
                        Some(rate) => rate,
                        None => return, // nothing learned yet: unthrottled
                    },
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
            if learned.ceiling.is_none() || learned.rate.is_none() {
                learned.rate = Some(ceiling);
            }
            learned.ceiling = Some(ceiling);
        }
        let rate = match learned.rate {
            None if status == 429 => {
                // The first 429: the service let through what arrived in the last second.
                while learned.successes.front().is_some_and(|at| now.saturating_duration_since(*at) > GOODPUT_WINDOW) {
                    learned.successes.pop_front();
                }
                learned.last_decrease = Some(now);
                let through = learned.successes.len() as f64;
                // Too little got through to say much: start at one a second and double each
                // second until the next 429.
                learned.doubling = through < 2.0;
                (through * FIRST_RATE).max(1.0)
            }
            None => {
                if (200..300).contains(&status) {
                    learned.successes.push_back(now);
                    while learned.successes.len() > 100_000
                        || learned
                            .successes
                            .front()
                            .is_some_and(|at| now.saturating_duration_since(*at) > GOODPUT_WINDOW)
                    {
                        learned.successes.pop_front();
                    }
                }
                learned.last_growth = now;
                return;
            }
            Some(rate) if status == 429 => {
                let recent = learned.last_decrease.is_some_and(|at| now.saturating_duration_since(at) < DECREASE_HOLD);
                if recent {
                    rate
                } else {
                    learned.last_decrease = Some(now);
                    learned.doubling = false;
                    rate * DECREASE
                }
            }
            Some(rate) if (200..300).contains(&status) => {
                let seconds = now.saturating_duration_since(learned.last_growth).as_secs_f64();
                if learned.doubling {
                    rate * 2f64.powf(seconds)
                } else {
                    rate + (rate * INCREASE).max(MIN_STEP) * seconds
                }
            }
            Some(rate) => rate,
        };
        learned.successes.clear();
        learned.last_growth = now;
        let ceiling = learned.ceiling.unwrap_or(MAX_RATE);
        learned.rate = Some(rate.clamp(MIN_RATE, ceiling.clamp(MIN_RATE, MAX_RATE)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto() -> RateLimiter {
        RateLimiter::new(Some(RateLimit::Auto))
    }

    #[test]
    fn unthrottled_until_the_first_429_then_what_got_through() {
        let limiter = auto();
        let start = Instant::now();
        assert_eq!(limiter.rate(), None, "a service without a limit is never slowed");
        for i in 0..40u32 {
            limiter.observe_at(200, RateHeaders::default(), start + Duration::from_millis(u64::from(i)));
        }
        limiter.observe_at(429, RateHeaders::default(), start + Duration::from_millis(50));
        let first = limiter.rate().unwrap();
        assert!((first - 40.0 * FIRST_RATE).abs() < 1e-9, "{first}");
        // A burst of 429s answering requests sent at the old rate is one decrease.
        limiter.observe_at(429, RateHeaders::default(), start + Duration::from_millis(60));
        assert_eq!(limiter.rate().unwrap(), first);
        limiter.observe_at(429, RateHeaders::default(), start + Duration::from_millis(200));
        let lower = limiter.rate().unwrap();
        assert!((lower - first * DECREASE).abs() < 1e-9);
        // Then additive growth: a twentieth a second.
        limiter.observe_at(200, RateHeaders::default(), start + Duration::from_millis(1200));
        assert!(limiter.rate().unwrap() > lower && limiter.rate().unwrap() < lower * 1.1);
    }

    #[test]
    fn a_429_first_thing_starts_low_and_doubles() {
        let limiter = auto();
        let start = Instant::now();
        limiter.observe_at(429, RateHeaders::default(), start);
        assert_eq!(limiter.rate(), Some(1.0));
        limiter.observe_at(200, RateHeaders::default(), start + Duration::from_secs(3));
        assert!((limiter.rate().unwrap() - 8.0).abs() < 1e-6);
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
            let rate = limiter.rate().unwrap_or(MIN_RATE);
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
