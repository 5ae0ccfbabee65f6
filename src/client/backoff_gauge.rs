//! How many requests of a batch are waiting out a retry delay, so the batch scheduler can start
//! others meanwhile.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// How many requests are waiting out a retry delay, with a signal each time one starts to.
#[derive(Default)]
pub struct BackoffGauge {
    waiting: AtomicUsize,
    started_waiting: Notify,
}

impl BackoffGauge {
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Completes when a request has started waiting since the last call (at once if one has).
    pub async fn started_waiting(&self) {
        self.started_waiting.notified().await;
    }

    /// Counts the caller until the guard is dropped (also when its request is cancelled).
    pub(crate) fn enter(&self) -> BackoffGuard<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.started_waiting.notify_one();
        BackoffGuard(self)
    }
}

pub(crate) struct BackoffGuard<'a>(&'a BackoffGauge);

impl Drop for BackoffGuard<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn backoff_gauge_counts_requests_while_they_wait_and_signals_each_start() {
        let gauge = BackoffGauge::default();
        let first = gauge.enter();
        let second = gauge.enter();
        assert_eq!(gauge.waiting(), 2);
        drop(first);
        assert_eq!(gauge.waiting(), 1);
        drop(second);
        assert_eq!(gauge.waiting(), 0);
        // The starts above left a signal for the next waiter.
        crate::runtime::runtime().block_on(async {
            tokio::time::timeout(Duration::from_secs(5), gauge.started_waiting()).await.expect("signalled");
        });
    }
}
