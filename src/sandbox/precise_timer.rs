//! Async sleeps that end within a few tens of microseconds of their deadline, for the
//! Sandbox's `latency`.
//!
//! tokio's timer wheel has millisecond resolution and rounds every deadline up, so
//! `tokio::time::sleep(20 ms)` takes 21-22 ms. A Sandbox that answered that late would make
//! every throughput measurement against it measure the timer instead of the client. Here one
//! thread keeps the deadlines in a heap and waits on a condition variable, whose timeouts the
//! kernel keeps with high-resolution timers.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Condvar, LazyLock, Mutex};
use std::time::Instant;

use tokio::sync::oneshot;

/// Completes at `deadline` (at once if it has passed).
pub async fn sleep_until(deadline: Instant) {
    if deadline <= Instant::now() {
        return;
    }
    let (wake, woken) = oneshot::channel();
    TIMER.schedule(deadline, wake);
    // An error means the timer thread is gone (it never exits, short of a panic): do not hang.
    let _ = woken.await;
}

static TIMER: LazyLock<&'static Timer> = LazyLock::new(|| {
    let timer: &'static Timer =
        Box::leak(Box::new(Timer { deadlines: Mutex::new(BinaryHeap::new()), earliest_changed: Condvar::new() }));
    std::thread::Builder::new()
        .name("defilens-precise-timer".into())
        .spawn(move || {
            reduce_timer_slack();
            timer.run();
        })
        .expect("the timer thread starts");
    timer
});

/// Linux lets a thread's timed waits end up to 50 µs late by default, to batch wake-ups;
/// this thread exists to be punctual.
#[cfg(target_os = "linux")]
fn reduce_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long (nanoseconds) and changes only the
    // calling thread; a failure leaves the default slack, which is harmless.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

#[cfg(not(target_os = "linux"))]
fn reduce_timer_slack() {}

struct Timer {
    deadlines: Mutex<BinaryHeap<Entry>>,
    earliest_changed: Condvar,
}

struct Entry {
    deadline: Instant,
    wake: oneshot::Sender<()>,
}

// Ordered so that the heap's top is the earliest deadline.
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other.deadline.cmp(&self.deadline)
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline
    }
}

impl Eq for Entry {}

impl Timer {
    fn schedule(&self, deadline: Instant, wake: oneshot::Sender<()>) {
        let mut deadlines = self.deadlines.lock().unwrap_or_else(|p| p.into_inner());
        let becomes_earliest = deadlines.peek().is_none_or(|top| deadline < top.deadline);
        deadlines.push(Entry { deadline, wake });
        drop(deadlines);
        if becomes_earliest {
            self.earliest_changed.notify_one();
        }
    }

    fn run(&self) {
        let mut deadlines = self.deadlines.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = Instant::now();
            for entry in due(&mut deadlines, now) {
                // The sleeper may be gone (its connection closed); nothing to do then.
                let _ = entry.wake.send(());
            }
            deadlines = match deadlines.peek() {
                None => self.earliest_changed.wait(deadlines).unwrap_or_else(|p| p.into_inner()),
                Some(top) => {
                    let timeout = top.deadline.saturating_duration_since(now);
                    let waited = self.earliest_changed.wait_timeout(deadlines, timeout);
                    waited.unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
    }
}

/// The entries whose deadline is at or before `now`, earliest first, taken out of the heap.
fn due(deadlines: &mut BinaryHeap<Entry>, now: Instant) -> Vec<Entry> {
    let mut woken = Vec::new();
    while deadlines.peek().is_some_and(|top| top.deadline <= now) {
        woken.extend(deadlines.pop());
    }
    woken
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The order in which the timer wakes sleepers, without the scheduler in the way: whatever
    /// order the deadlines came in, the due ones leave earliest first and the others stay.
    #[test]
    fn the_due_deadlines_leave_earliest_first() {
        let start = Instant::now();
        let mut deadlines = BinaryHeap::new();
        for millis in [30u64, 10, 40, 20, 0] {
            let (wake, _woken) = oneshot::channel();
            deadlines.push(Entry { deadline: start + Duration::from_millis(millis), wake });
        }
        let woken = due(&mut deadlines, start + Duration::from_millis(20));
        let at = |entries: &[Entry]| -> Vec<u128> {
            entries.iter().map(|entry| (entry.deadline - start).as_millis()).collect()
        };
        assert_eq!(at(&woken), vec![0, 10, 20]);
        assert_eq!(deadlines.peek().map(|top| (top.deadline - start).as_millis()), Some(30));
        assert!(due(&mut deadlines, start + Duration::from_millis(29)).is_empty());
        assert_eq!(at(&due(&mut deadlines, start + Duration::from_secs(1))), vec![30, 40]);
        assert!(deadlines.is_empty());
    }

    /// Real sleeps through the timer thread: none ends before its deadline, each ends close to it.
    /// The order in which the tasks then run is the scheduler's (a loaded machine once ran the
    /// task of the 0 ms deadline after the 10 ms one's, as it spawned it late), so it is checked
    /// above, on the timer alone; here each task checks its own deadline.
    #[test]
    fn sleeps_end_at_their_deadline_never_before() {
        let started = Instant::now();
        crate::runtime::runtime().block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for millis in [30u64, 10, 20, 0] {
                let deadline = started + Duration::from_millis(millis);
                tasks.spawn(async move {
                    sleep_until(deadline).await;
                    let ended = Instant::now();
                    assert!(ended >= deadline, "a sleep of {millis} ms ended before its deadline");
                    ended - deadline
                });
            }
            while let Some(late) = tasks.join_next().await {
                // Generous: a busy test machine can delay any thread, but never by a whole tick
                // of tokio's wheel on an idle one.
                assert!(late.unwrap() < Duration::from_millis(250));
            }
        });
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
