//! Whose time a client stamps its responses with. The wall clock, unless the client was bound to
//! another clock (a Sandbox's simulated one): then `fetched_at`, the disk cache's ages and an
//! HTTP-date `Retry-After` are all read on that clock, so a history collected from a simulated
//! service has one clock. A client never takes its time from a server's `Date` header; asked to,
//! it follows the clock a Sandbox in another process reports (`RunningClock`).

use std::fmt;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync {
    /// Milliseconds since the epoch, UTC.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
pub struct WallClock;

impl Clock for WallClock {
    fn now_ms(&self) -> i64 {
        wall_clock_ms()
    }
}

pub fn wall_clock_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The header in which a Sandbox reports its clock on every answer: `now_ms=<ms since the epoch>,
/// speed=<simulated ms per real ms>` (speed 0: it stands still; 1 and the wall's time: the wall
/// clock). The Sandbox writes it (`sandbox::server`; a test there reads it back with this reader).
pub const SANDBOX_CLOCK_HEADER: &str = "x-sandbox-clock";

/// `(now_ms, speed)` of a `SANDBOX_CLOCK_HEADER` value; `None` for anything else.
pub fn parse_sandbox_clock_header(value: &str) -> Option<(i64, f64)> {
    let mut now_ms = None;
    let mut speed = None;
    for part in value.split(',') {
        match part.trim().split_once('=')? {
            ("now_ms", ms) => now_ms = ms.parse::<i64>().ok(),
            ("speed", x) => speed = x.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0),
            _ => return None,
        }
    }
    Some((now_ms?, speed?))
}

/// Another process's clock, followed from here: the time it reported (`anchor_ms`), moving on at
/// its `speed` from the moment it was read. Both processes measure real time with their monotonic
/// clocks, so the two stay together; only the report's way over the network (half its round trip
/// on loopback, well under a millisecond) is missed.
pub struct RunningClock {
    anchor_ms: i64,
    anchored: Instant,
    speed: f64,
}

impl RunningClock {
    pub fn new(anchor_ms: i64, speed: f64) -> Self {
        RunningClock { anchor_ms, anchored: Instant::now(), speed }
    }

    pub fn speed(&self) -> f64 {
        self.speed
    }
}

impl Clock for RunningClock {
    fn now_ms(&self) -> i64 {
        self.anchor_ms + (self.anchored.elapsed().as_secs_f64() * 1000.0 * self.speed) as i64
    }
}

/// The clock a client reads; cloning shares it.
#[derive(Clone)]
pub struct SharedClock {
    clock: Arc<dyn Clock>,
    bound: bool,
}

impl SharedClock {
    pub fn wall() -> Self {
        SharedClock { clock: Arc::new(WallClock), bound: false }
    }

    /// A clock other than the wall clock (a Sandbox's).
    pub fn bound(clock: Arc<dyn Clock>) -> Self {
        SharedClock { clock, bound: true }
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The time on this clock as a `SystemTime`, for rules written against one.
    pub fn now_system_time(&self) -> SystemTime {
        let ms = self.now_ms();
        if ms >= 0 {
            UNIX_EPOCH + std::time::Duration::from_millis(ms as u64)
        } else {
            UNIX_EPOCH
        }
    }

    pub fn is_wall(&self) -> bool {
        !self.bound
    }
}

impl Default for SharedClock {
    fn default() -> Self {
        Self::wall()
    }
}

impl fmt::Debug for SharedClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.bound { "SharedClock(bound)" } else { "SharedClock(wall)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    struct Fixed(AtomicI64);
    impl Clock for Fixed {
        fn now_ms(&self) -> i64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn a_bound_clock_is_read_each_time_and_the_wall_clock_is_the_default() {
        let fixed = Arc::new(Fixed(AtomicI64::new(1_767_225_600_000)));
        let clock = SharedClock::bound(fixed.clone());
        assert_eq!(clock.now_ms(), 1_767_225_600_000);
        fixed.0.store(1_767_225_660_000, Ordering::Relaxed);
        assert_eq!(clock.clone().now_ms(), 1_767_225_660_000);
        assert!(!clock.is_wall() && SharedClock::default().is_wall());
        assert!((SharedClock::default().now_ms() - wall_clock_ms()).abs() < 1000);
        assert_eq!(clock.now_system_time(), UNIX_EPOCH + std::time::Duration::from_millis(1_767_225_660_000));
    }

    #[test]
    fn a_sandbox_s_clock_header_reads_back_and_a_followed_clock_runs_at_its_speed() {
        assert_eq!(parse_sandbox_clock_header("now_ms=1767225600000, speed=60"), Some((1_767_225_600_000, 60.0)));
        assert_eq!(parse_sandbox_clock_header("now_ms=5, speed=0.5"), Some((5, 0.5)));
        for bad in ["", "now_ms=5", "speed=1", "now_ms=x, speed=1", "now_ms=5, speed=-1", "now_ms=5, speed=NaN", "a=1"]
        {
            assert_eq!(parse_sandbox_clock_header(bad), None, "{bad}");
        }
        let still = RunningClock::new(1_767_225_600_000, 0.0);
        let fast = RunningClock::new(1_767_225_600_000, 60_000.0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(still.now_ms(), 1_767_225_600_000);
        let ran = fast.now_ms() - 1_767_225_600_000;
        assert!((1_200_000..60_000_000).contains(&ran), "{ran} ms in 20 real ms at 60,000x");
    }
}
