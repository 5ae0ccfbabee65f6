//! Batch fetching: every (token, endpoint) exchange of a batch in flight at once (bounded by
//! the client), then all bodies parsed in one pass into frames, with a log row per exchange.
//!
//! A batch runs as a `Job` on the global runtime, so the caller can wait for it in slices
//! (to check for Ctrl-C and draw progress) or be called back when it ends (asyncio).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use polars::prelude::DataFrame;
use tokio::task::{AbortHandle, JoinSet};

use crate::error::{Endpoint, Error};
use crate::flatten::{self, ListingBody, MarketsBody};
use crate::frames::{log_frame, ListingFrames, LogRecord};
use crate::http::{Exchange, HttpClient};
use crate::runtime::runtime;

/// Keeps the first occurrence of each id, in order.
pub fn dedupe(ids: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.into_iter().filter(|id| seen.insert(id.clone())).collect()
}

#[derive(Default, Debug)]
pub struct Progress {
    pub done: AtomicUsize,
    pub total: AtomicUsize,
}

/// A successful response body, kept for `Frames.raw`.
pub struct RawBody {
    pub token: String,
    pub endpoint: Endpoint,
    pub body: Bytes,
}

pub struct FetchOutcome {
    pub listing: ListingFrames,
    pub markets: DataFrame,
    pub log: DataFrame,
    /// The failed exchanges, in log order.
    pub errors: Vec<Error>,
    pub raw: Vec<RawBody>,
}

/// Sends every exchange of the batch and waits for all of them.
pub async fn run(client: Arc<HttpClient>, ids: &[String], listing: bool, markets: bool, progress: &Progress) -> Vec<Exchange> {
    let endpoints: Vec<Endpoint> = [(listing, Endpoint::Listing), (markets, Endpoint::Markets)]
        .into_iter()
        .filter_map(|(wanted, endpoint)| wanted.then_some(endpoint))
        .collect();
    let total = ids.len() * endpoints.len();
    progress.total.store(total, Ordering::Relaxed);
    let per_id = endpoints.len();
    let mut tasks = JoinSet::new();
    for (position, id) in ids.iter().enumerate() {
        for (offset, endpoint) in endpoints.iter().copied().enumerate() {
            let client = client.clone();
            let id = id.clone();
            tasks.spawn(async move { (position * per_id + offset, client.get(&id, endpoint).await) });
        }
    }
    let mut slots: Vec<Option<Exchange>> = (0..total).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((slot, exchange)) => slots[slot] = Some(exchange),
            // A panicked request must not lose the others; its empty slot is reported below.
            Err(_) => {}
        }
        progress.done.fetch_add(1, Ordering::Relaxed);
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(slot, exchange)| {
            exchange.unwrap_or_else(|| {
                let endpoint = endpoints[slot % endpoints.len()];
                let token = ids[slot / endpoints.len()].clone();
                Exchange {
                    result: Err(Error::Internal(format!("the request for {token:?} ({}) panicked", endpoint.as_str()))),
                    token,
                    endpoint,
                    status: None,
                    attempts: 0,
                    elapsed_ms: 0.0,
                    fetched_at: crate::http::now_ms(),
                    cached: false,
                }
            })
        })
        .collect()
}

/// Parses every successful body and writes the log: one row per exchange, a decode failure
/// turning its row into an error.
pub fn assemble(exchanges: Vec<Exchange>) -> FetchOutcome {
    let mut records: Vec<LogRecord> = Vec::with_capacity(exchanges.len());
    let mut errors: Vec<Option<Error>> = Vec::with_capacity(exchanges.len());
    let mut listing_inputs = Vec::new();
    let mut markets_inputs = Vec::new();
    let mut raw = Vec::new();
    for (index, exchange) in exchanges.into_iter().enumerate() {
        let mut record = LogRecord {
            token: exchange.token.clone(),
            endpoint: exchange.endpoint.as_str(),
            ok: exchange.result.is_ok(),
            status: exchange.status,
            kind: None,
            message: exchange.cached.then(|| "served from the cache".to_string()),
            attempts: exchange.attempts,
            elapsed_ms: exchange.elapsed_ms,
            total: None,
            fetched_at: Some(exchange.fetched_at),
        };
        match exchange.result {
            Ok(body) => {
                let slot = (index, exchange.fetched_at);
                match exchange.endpoint {
                    Endpoint::Listing => listing_inputs.push((slot, raw.len())),
                    Endpoint::Markets => markets_inputs.push((slot, raw.len())),
                }
                raw.push(RawBody { token: exchange.token, endpoint: exchange.endpoint, body });
                errors.push(None);
            }
            Err(error) => {
                record.kind = Some(error.kind());
                record.message = Some(error.to_string());
                errors.push(Some(error));
            }
        }
        records.push(record);
    }

    let listing_bodies: Vec<ListingBody> = listing_inputs
        .iter()
        .map(|&((_, fetched_at), raw_index)| ListingBody {
            body: &raw[raw_index].body,
            token: Some(&raw[raw_index].token),
            fetched_at: Some(fetched_at),
        })
        .collect();
    let (listing, listing_results) = flatten::parse_listings(&listing_bodies);
    for (&((index, _), _), result) in listing_inputs.iter().zip(listing_results) {
        if let Err(error) = result {
            mark_failed(&mut records[index], &mut errors[index], error);
        }
    }

    let markets_bodies: Vec<MarketsBody> = markets_inputs
        .iter()
        .map(|&((_, fetched_at), raw_index)| MarketsBody {
            body: &raw[raw_index].body,
            token: &raw[raw_index].token,
            fetched_at: Some(fetched_at),
        })
        .collect();
    let (markets, markets_results) = flatten::parse_markets(&markets_bodies);
    for (&((index, _), _), result) in markets_inputs.iter().zip(markets_results) {
        match result {
            Ok(summary) => {
                let record = &mut records[index];
                record.total = summary.total;
                if let Some(total) = summary.total.filter(|t| *t > summary.entries as i64) {
                    record.message = Some(format!(
                        "warning: the service reports total={total} markets but sent {}; the list is incomplete",
                        summary.entries
                    ));
                }
            }
            Err(error) => mark_failed(&mut records[index], &mut errors[index], error),
        }
    }
    drop(listing_bodies);
    drop(markets_bodies);

    FetchOutcome {
        listing,
        markets,
        log: log_frame(&records),
        errors: errors.into_iter().flatten().collect(),
        raw,
    }
}

fn mark_failed(record: &mut LogRecord, slot: &mut Option<Error>, error: Error) {
    record.ok = false;
    record.kind = Some(error.kind());
    record.message = Some(error.to_string());
    *slot = Some(error);
}

// ---------------------------------------------------------------------------------------------
// Jobs

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
    pub fn spawn(client: Arc<HttpClient>, ids: Vec<String>, listing: bool, markets: bool) -> Job {
        let state = Arc::new(JobState {
            outcome: Mutex::new(None),
            finished: Mutex::new(false),
            finished_signal: Condvar::new(),
            on_done: Mutex::new(None),
            progress: Progress::default(),
        });
        let worker_state = state.clone();
        let work = runtime().spawn(async move {
            let exchanges = run(client, &ids, listing, markets, &worker_state.progress).await;
            tokio::task::spawn_blocking(move || assemble(exchanges))
                .await
                .map_err(|e| Error::Internal(format!("parsing the batch failed: {}", panic_message(e))))
        });
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

    #[test]
    fn dedupe_keeps_first_occurrences_in_order() {
        let ids = ["b", "a", "b", "c", "a"].map(String::from).to_vec();
        assert_eq!(dedupe(ids), ["b", "a", "c"].map(String::from).to_vec());
    }

    #[test]
    fn unreachable_service_gives_connection_errors_for_every_exchange() {
        // Port 9 on loopback: nothing listens, so every attempt is refused at once.
        let client = HttpClient::new(crate::http::ClientConfig {
            base_url: "http://127.0.0.1:9".into(),
            retry: crate::retry::RetryPolicy { max_retries: 1, initial_delay: Duration::from_millis(1), ..Default::default() },
            ..Default::default()
        })
        .unwrap();
        let job = Job::spawn(Arc::new(client), vec!["a".into(), "b".into()], true, true);
        assert!(job.wait(Duration::from_secs(20)));
        let outcome = job.take().unwrap().unwrap();
        assert_eq!(outcome.log.height(), 4);
        assert_eq!(outcome.errors.len(), 4);
        assert!(outcome.errors.iter().all(|e| e.kind() == "connection"));
        assert_eq!(outcome.listing.snapshot.height(), 0);
        assert_eq!(job.progress(), (4, 4));
    }
}
