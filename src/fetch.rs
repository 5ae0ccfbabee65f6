//! Batch fetching: every (token, endpoint) exchange of a batch in flight at once (bounded by
//! the client), each body parsed into the frames as soon as it and every exchange before it
//! have arrived, with a log row per exchange.
//!
//! Parsing while the network is busy takes the parse off the end of the batch, and turns each
//! body into columns (and a compressed copy for `Frames.raw`) right away, so a large batch never
//! holds all of its bodies at once.
//!
//! A batch runs as a `Job` on the global runtime, so the caller can wait for it in slices
//! (to check for Ctrl-C and draw progress) or be called back when it ends (asyncio).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use polars::prelude::DataFrame;
use tokio::task::{AbortHandle, JoinSet};

use crate::error::{Endpoint, Error};
use crate::flatten::{ListingBody, ListingBuilder, MarketsBody, MarketsBuilder};
use crate::frames::{log_frame, ListingFrames, LogRecord};
use crate::http::{Exchange, HttpClient};
use crate::raw_store::{CompressedBody, RawStore};
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

pub struct FetchOutcome {
    pub listing: ListingFrames,
    pub markets: DataFrame,
    pub log: DataFrame,
    /// The failed exchanges, in log order.
    pub errors: Vec<Error>,
    /// Every successful body, for `Frames.raw`.
    pub raw: RawStore,
}

/// Sends every exchange of the batch and turns them into frames, in (id, endpoint) order.
pub async fn run(client: Arc<HttpClient>, ids: &[String], listing: bool, markets: bool, progress: &Progress) -> FetchOutcome {
    let endpoints: Vec<Endpoint> = [(listing, Endpoint::Listing), (markets, Endpoint::Markets)]
        .into_iter()
        .filter_map(|(wanted, endpoint)| wanted.then_some(endpoint))
        .collect();
    let total = ids.len() * endpoints.len();
    progress.total.store(total, Ordering::Relaxed);
    let per_id = endpoints.len();

    // One thread parses, in order, what the network hands it; it stops when `to_parser` is
    // dropped, also when the batch is cancelled.
    let (to_parser, parser_inbox) = mpsc::channel::<Vec<Received>>();
    let (listing_ids, markets_ids) = (if listing { ids.len() } else { 0 }, if markets { ids.len() } else { 0 });
    let parser = tokio::task::spawn_blocking(move || {
        let mut assembler = Assembler::new(listing_ids, markets_ids);
        for exchanges in parser_inbox {
            for (exchange, compressed) in exchanges {
                assembler.add(exchange, compressed);
            }
        }
        assembler.finish()
    });

    // Requests are started in order and only a few more than the client runs at once, so
    // they finish roughly in order and the parser is never left waiting on an early one while
    // later bodies pile up (tokio does not run thousands of spawned tasks in spawn order).
    let window = client.concurrency().saturating_mul(2).max(1);
    let mut tasks = JoinSet::new();
    let mut slot_of_task = HashMap::with_capacity(window);
    let mut next_to_start = 0;
    let mut start_next = |tasks: &mut JoinSet<Received>, slot_of_task: &mut HashMap<_, _>| {
        if next_to_start < total {
            let slot = next_to_start;
            next_to_start += 1;
            let (client, id, endpoint) = (client.clone(), ids[slot / per_id].clone(), endpoints[slot % per_id]);
            let task = tasks.spawn(async move {
                let exchange = client.get(&id, endpoint).await;
                // Let the request that was waiting for this one's slot go out first.
                tokio::task::yield_now().await;
                // Here rather than in the parser: requests finish on every core, the parser has one.
                let compressed = exchange.result.as_ref().ok().map(|body| CompressedBody::new(endpoint, body));
                (exchange, compressed)
            });
            slot_of_task.insert(task.id(), slot);
        }
    };
    for _ in 0..window {
        start_next(&mut tasks, &mut slot_of_task);
    }
    let mut slots: Vec<Option<Received>> = (0..total).map(|_| None).collect();
    let mut next_to_parse = 0;
    let mut ready = Vec::with_capacity(PARSE_BATCH);
    while let Some(joined) = tasks.join_next_with_id().await {
        let (task, received) = match joined {
            Ok((task, received)) => (task, received),
            // A panicked request must not lose the others: it becomes an error of its own.
            Err(failure) => {
                let slot = slot_of_task[&failure.id()];
                let (token, endpoint) = (ids[slot / per_id].clone(), endpoints[slot % per_id]);
                (failure.id(), (panicked_exchange(token, endpoint), None))
            }
        };
        let slot = slot_of_task.remove(&task).expect("every task has a slot");
        start_next(&mut tasks, &mut slot_of_task);
        slots[slot] = Some(received);
        progress.done.fetch_add(1, Ordering::Relaxed);
        while let Some(received) = slots.get_mut(next_to_parse).and_then(Option::take) {
            ready.push(received);
            next_to_parse += 1;
        }
        // In batches: waking the parser for every body would cost more than parsing it.
        if ready.len() >= PARSE_BATCH {
            // Fails only if the parser panicked; its join below reports that.
            let _ = to_parser.send(std::mem::take(&mut ready));
        }
    }
    if !ready.is_empty() {
        let _ = to_parser.send(ready);
    }
    drop(to_parser);
    match parser.await {
        Ok(outcome) => outcome,
        Err(failure) => std::panic::resume_unwind(failure.into_panic()),
    }
}

/// How many exchanges the parser is handed at a time.
const PARSE_BATCH: usize = 32;

/// An exchange and its body compressed for `Frames.raw`, if it has one.
type Received = (Exchange, Option<CompressedBody>);

fn panicked_exchange(token: String, endpoint: Endpoint) -> Exchange {
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
}

/// Builds the frames and the log from exchanges given in order: one log row per exchange, a
/// body that cannot be decoded turning its row into an error.
pub struct Assembler {
    listing: ListingBuilder,
    markets: MarketsBuilder,
    records: Vec<LogRecord>,
    errors: Vec<Error>,
    raw: RawStore,
}

impl Assembler {
    /// The arguments are capacity hints: how many listing and markets bodies to expect.
    pub fn new(listing_bodies: usize, markets_bodies: usize) -> Self {
        let exchanges = listing_bodies + markets_bodies;
        Assembler {
            listing: ListingBuilder::new(listing_bodies),
            markets: MarketsBuilder::new(markets_bodies * 16),
            records: Vec::with_capacity(exchanges),
            errors: Vec::new(),
            raw: RawStore::new(),
        }
    }

    /// `compressed` is the body for `Frames.raw` when the caller already compressed it.
    pub fn add(&mut self, exchange: Exchange, compressed: Option<CompressedBody>) {
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
        let body = match exchange.result {
            Ok(body) => body,
            Err(error) => {
                mark_failed(&mut record, &mut self.errors, error);
                self.records.push(record);
                return;
            }
        };
        let fetched_at = Some(exchange.fetched_at);
        let parsed = match exchange.endpoint {
            Endpoint::Listing => self
                .listing
                .append(&ListingBody { body: &body, token: Some(&exchange.token), fetched_at })
                .map(|_| ()),
            Endpoint::Markets => self
                .markets
                .append(&MarketsBody { body: &body, token: &exchange.token, fetched_at })
                .map(|summary| {
                    record.total = summary.total;
                    if let Some(total) = summary.total.filter(|t| *t > summary.entries as i64) {
                        record.message = Some(format!(
                            "warning: the service reports total={total} markets but sent {}; the list is incomplete",
                            summary.entries
                        ));
                    }
                }),
        };
        if let Err(error) = parsed {
            mark_failed(&mut record, &mut self.errors, error);
        }
        let compressed = compressed.unwrap_or_else(|| CompressedBody::new(exchange.endpoint, &body));
        drop(body);
        self.raw.push(exchange.token, exchange.endpoint, &compressed);
        self.records.push(record);
    }

    pub fn finish(mut self) -> FetchOutcome {
        self.raw.shrink_to_fit();
        FetchOutcome {
            listing: self.listing.finish(),
            markets: self.markets.finish(),
            log: log_frame(&self.records),
            errors: self.errors,
            raw: self.raw,
        }
    }
}

fn mark_failed(record: &mut LogRecord, errors: &mut Vec<Error>, error: Error) {
    record.ok = false;
    record.kind = Some(error.kind());
    record.message = Some(error.to_string());
    errors.push(error);
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
            Ok(run(client, &ids, listing, markets, &worker_state.progress).await)
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
