//! A batch running on the global runtime, waited for in slices or called back when it ends.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::task::AbortHandle;

use super::dedupe;
use super::scheduler::run;
use super::{FetchOutcome, Progress};
use crate::client::{validate_token_id, HttpClient};
use crate::error::Error;
use crate::runtime::runtime;

type DoneCallback = Box<dyn FnOnce() + Send>;

struct JobState {
    outcome: Mutex<Option<Result<FetchOutcome, Error>>>,
    finished: Mutex<bool>,
    finished_signal: Condvar,
    on_done: Mutex<Option<DoneCallback>>,
    progress: Progress,
}

impl JobState {
    fn complete(&self, outcome: Result<FetchOutcome, Error>) {
        {
            let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
            if *finished {
                return;
            }
            *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
            *finished = true;
        }
        self.finished_signal.notify_all();
        let callback = self.on_done.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(callback) = callback {
            callback();
        }
    }

    fn is_finished(&self) -> bool {
        *self.finished.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A batch running on the global runtime.
pub struct Job {
    state: Arc<JobState>,
    work: AbortHandle,
}

impl Job {
    /// Checks every id (`validate_token_id`), drops duplicates (keeping the first of each) and
    /// starts the batch. Fails before any request if an id cannot be sent.
    pub fn start(client: Arc<HttpClient>, ids: Vec<String>, listing: bool, markets: bool) -> Result<Job, Error> {
        for id in &ids {
            validate_token_id(id)?;
        }
        Ok(Job::spawn(client, dedupe(ids), listing, markets))
    }

    pub fn spawn(client: Arc<HttpClient>, ids: Vec<String>, listing: bool, markets: bool) -> Job {
        let state = Arc::new(JobState {
            outcome: Mutex::new(None),
            finished: Mutex::new(false),
            finished_signal: Condvar::new(),
            on_done: Mutex::new(None),
            progress: Progress::default(),
        });
        let worker_state = state.clone();
        let work =
            runtime().spawn(async move { Ok(run(client, &ids, listing, markets, &worker_state.progress).await) });
        let abort = work.abort_handle();
        // A supervisor turns every ending of the work (done, panicked, cancelled) into a
        // completed job, so no waiter can hang.
        let supervisor_state = state.clone();
        runtime().spawn(async move {
            let outcome = match work.await {
                Ok(outcome) => outcome,
                Err(e) if e.is_cancelled() => Err(Error::Internal("the batch was cancelled".into())),
                Err(e) => Err(Error::Internal(format!("the batch failed: {}", panic_message(e)))),
            };
            supervisor_state.complete(outcome);
        });
        Job { state, work: abort }
    }

    /// Blocks up to `timeout`; true once the job has finished.
    pub fn wait(&self, timeout: Duration) -> bool {
        let finished = self.state.finished.lock().unwrap_or_else(|p| p.into_inner());
        let (finished, _) = self
            .state
            .finished_signal
            .wait_timeout_while(finished, timeout, |done| !*done)
            .unwrap_or_else(|p| p.into_inner());
        *finished
    }

    pub fn is_finished(&self) -> bool {
        self.state.is_finished()
    }

    /// The outcome, once; `None` before the job finished or after it was taken.
    pub fn take(&self) -> Option<Result<FetchOutcome, Error>> {
        self.state.outcome.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Stops the batch: requests in flight are dropped, their connections closed.
    pub fn cancel(&self) {
        self.work.abort();
    }

    /// Calls `callback` once when the job finishes (at once if it already has).
    pub fn on_done(&self, callback: DoneCallback) {
        {
            // Holding `finished` while registering closes the race with `complete`.
            let finished = self.state.finished.lock().unwrap_or_else(|p| p.into_inner());
            if !*finished {
                *self.state.on_done.lock().unwrap_or_else(|p| p.into_inner()) = Some(callback);
                return;
            }
        }
        callback();
    }

    /// (finished exchanges, all exchanges)
    pub fn progress(&self) -> (usize, usize) {
        let p = &self.state.progress;
        (p.done.load(Ordering::Relaxed), p.total.load(Ordering::Relaxed))
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // A job nobody waits for any more must not keep the network busy.
        self.work.abort();
    }
}

fn panic_message(error: tokio::task::JoinError) -> String {
    if !error.is_panic() {
        return error.to_string();
    }
    let payload = error.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ClientConfig, Settings};

    fn client(base_url: String, settings: Settings) -> Arc<HttpClient> {
        let config = ClientConfig::new(Settings { base_url: Some(base_url), ..settings }).unwrap();
        Arc::new(HttpClient::new(config).unwrap())
    }

    #[cfg(feature = "sandbox")]
    #[test]
    fn frames_and_raw_bodies_follow_the_order_of_the_ids() {
        let sandbox = crate::sandbox::Sandbox::start(crate::sandbox::SandboxConfig {
            clock: crate::sandbox::ClockConfig { start_ms: Some(1_795_305_600_000), speed: None },
            ..Default::default()
        })
        .unwrap();
        let client = client(sandbox.url(), Settings { concurrency: Some(3), ..Default::default() });
        // More ids than the backlog holds, and an unknown one in the middle.
        let ids: Vec<String> =
            (0..1500).map(|i| if i == 700 { "unknown-x".into() } else { format!("order-{i}") }).collect();
        let job = Job::spawn(client, ids.clone(), true, true);
        assert!(job.wait(Duration::from_secs(120)));
        let outcome = job.take().unwrap().unwrap();
        let tokens: Vec<&str> =
            outcome.listing.snapshot.column("token").unwrap().str().unwrap().iter().map(Option::unwrap).collect();
        let known: Vec<&str> = ids.iter().map(String::as_str).filter(|id| !id.starts_with("unknown")).collect();
        assert_eq!(tokens, known);
        let log_tokens: Vec<&str> =
            outcome.log.column("token").unwrap().str().unwrap().iter().map(Option::unwrap).collect();
        let expected_log: Vec<&str> = ids.iter().flat_map(|id| [id.as_str(), id.as_str()]).collect();
        assert_eq!(log_tokens, expected_log);
        assert_eq!(outcome.errors.len(), 2);
        assert_eq!(outcome.raw.len(), 2 * known.len());
        for (index, (token, endpoint, body)) in outcome.raw.iter().enumerate() {
            assert_eq!(token, known[index / 2]);
            let expected = crate::sandbox::body(0, endpoint, token, sandbox.now_ms());
            assert!(body == expected.as_bytes(), "the raw body of {token} ({endpoint:?}) changed");
        }
    }

    #[test]
    fn unreachable_service_gives_connection_errors_for_every_exchange() {
        // Port 9 on loopback: nothing listens, so every attempt is refused at once.
        let settings = Settings { max_retries: Some(1), backoff: Some((0.001, 8.0)), ..Default::default() };
        let client = client("http://127.0.0.1:9".into(), settings);
        let job = Job::spawn(client, vec!["a".into(), "b".into()], true, true);
        assert!(job.wait(Duration::from_secs(20)));
        let outcome = job.take().unwrap().unwrap();
        assert_eq!(outcome.log.height(), 4);
        assert_eq!(outcome.errors.len(), 4);
        assert!(outcome.errors.iter().all(|e| e.kind() == "connection"));
        assert_eq!(outcome.listing.snapshot.height(), 0);
        assert_eq!(job.progress(), (4, 4));
    }
}
