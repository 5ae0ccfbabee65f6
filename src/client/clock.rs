//! Whose time a client stamps its responses with. The wall clock, unless the client was bound to
//! another clock (a Sandbox's simulated one): then `fetched_at`, the disk cache's ages and an
//! HTTP-date `Retry-After` are all read on that clock, so a history collected from a simulated
//! service has one clock. A client never takes its time from a server's `Date` header.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

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
}
