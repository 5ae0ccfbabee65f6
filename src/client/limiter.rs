//! The client's request rate limit.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Spaces requests evenly so that at most `rate` start per second across the client.
pub(crate) struct RateLimiter {
    interval: Option<Duration>,
    next_slot: Mutex<Instant>,
}

impl RateLimiter {
    pub(crate) fn new(rate: Option<f64>) -> Self {
        let interval = rate.filter(|r| *r > 0.0 && r.is_finite()).map(|r| Duration::from_secs_f64(1.0 / r));
        Self { interval, next_slot: Mutex::new(Instant::now()) }
    }

    pub(crate) async fn wait_turn(&self) {
        let Some(interval) = self.interval else { return };
        let slot = {
            let mut next = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
            let slot = (*next).max(Instant::now());
            *next = slot + interval;
            slot
        };
        tokio::time::sleep_until(slot.into()).await;
    }
}
