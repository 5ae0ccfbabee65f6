//! The Sandbox's clock: the wall clock by default; or a simulated one that starts at a given
//! time and runs at a given speed (0 = stands still), moved forward by `advance`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use super::market::{EARLIEST_NOW_MS, LATEST_NOW_MS};

/// How much faster than real time a clock may run (a year in about five minutes).
pub const MAX_SPEED: f64 = 100_000.0;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockConfig {
    /// Where a simulated clock starts (ms since the epoch); `None` starts at the wall clock.
    pub start_ms: Option<i64>,
    /// Simulated milliseconds per real millisecond. `None` is 1 for the wall clock and 0 (still)
    /// for a clock given a start.
    pub speed: Option<f64>,
}

impl ClockConfig {
    pub const WALL: ClockConfig = ClockConfig { start_ms: None, speed: None };

    pub fn validate(&self) -> Result<(), String> {
        if let Some(start) = self.start_ms {
            if !(EARLIEST_NOW_MS..LATEST_NOW_MS).contains(&start) {
                return Err(
                    "now must be from 2000-01-01 to 2200-01-01 (the Sandbox's market has no data outside)".into()
                );
            }
        }
        if let Some(speed) = self.speed {
            if !(speed.is_finite() && (0.0..=MAX_SPEED).contains(&speed)) {
                return Err(format!("speed must be a number from 0 to {MAX_SPEED}, got {speed}"));
            }
        }
        Ok(())
    }

    /// Simulated unless it is the plain wall clock.
    pub fn is_simulated(&self) -> bool {
        *self != ClockConfig::WALL
    }
}

pub struct Clock {
    config: ClockConfig,
    start_ms: i64,
    started: Instant,
    speed: f64,
    advanced_ms: AtomicI64,
}

pub use crate::client::clock::wall_clock_ms;

impl Clock {
    pub fn new(config: ClockConfig) -> Clock {
        let speed = config.speed.unwrap_or(if config.start_ms.is_some() { 0.0 } else { 1.0 });
        Clock {
            config,
            start_ms: config.start_ms.unwrap_or_else(wall_clock_ms),
            started: Instant::now(),
            speed,
            advanced_ms: AtomicI64::new(0),
        }
    }

    pub fn is_simulated(&self) -> bool {
        self.config.is_simulated()
    }

    /// Milliseconds since the epoch, UTC.
    pub fn now_ms(&self) -> i64 {
        if !self.is_simulated() {
            return wall_clock_ms();
        }
        let run = (self.started.elapsed().as_secs_f64() * 1000.0 * self.speed) as i64;
        (self.start_ms + run + self.advanced_ms.load(Ordering::Relaxed)).min(LATEST_NOW_MS)
    }

    /// Moves a simulated clock forward. Errors (with the reason) for the wall clock, a negative
    /// step, or a step past the end of the market's data.
    pub fn advance(&self, ms: i64) -> Result<i64, String> {
        if !self.is_simulated() {
            return Err("advance() moves a simulated clock; this Sandbox follows the wall clock (start it with now=... to simulate time)".into());
        }
        if ms < 0 {
            return Err(format!("advance() moves the clock forward only; got a step of {ms} ms"));
        }
        if self.now_ms().saturating_add(ms) >= LATEST_NOW_MS {
            return Err("advance() would move the clock past 2200-01-01, where the Sandbox's market ends".into());
        }
        self.advanced_ms.fetch_add(ms, Ordering::Relaxed);
        Ok(self.now_ms())
    }

    /// Simulated milliseconds per real millisecond (0: it stands still until `advance`).
    pub fn speed(&self) -> f64 {
        self.speed
    }
}

/// A client bound to a Sandbox reads the Sandbox's time.
impl crate::client::clock::Clock for Clock {
    fn now_ms(&self) -> i64 {
        Clock::now_ms(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_with_a_start_stands_still_until_advanced() {
        let start = 1_767_225_600_000;
        let clock = Clock::new(ClockConfig { start_ms: Some(start), speed: None });
        assert_eq!(clock.now_ms(), start);
        assert_eq!(clock.advance(300_000), Ok(start + 300_000));
        assert!(clock.advance(-1).is_err());
        assert!(Clock::new(ClockConfig::WALL).advance(1).is_err());
        assert!((Clock::new(ClockConfig::WALL).now_ms() - wall_clock_ms()).abs() < 1000);
    }

    #[test]
    fn fast_clocks_run_and_bad_settings_are_refused() {
        let clock = Clock::new(ClockConfig { start_ms: Some(1_767_225_600_000), speed: Some(60_000.0) });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(clock.now_ms() >= 1_767_225_600_000 + 60_000);
        assert!(ClockConfig { start_ms: Some(0), speed: None }.validate().is_err());
        assert!(ClockConfig { start_ms: None, speed: Some(-1.0) }.validate().is_err());
        assert!(ClockConfig { start_ms: None, speed: Some(f64::NAN) }.validate().is_err());
    }
}
