//! Batch fetching: every (token, endpoint) exchange of a batch in flight at once (bounded by
//! the client), each body parsed into the frames as soon as it and every exchange before it
//! have arrived, with a log row per exchange.
//!
//! Parsing while the network is busy takes the parse off the end of the batch, and turns each
//! body into columns (and a compressed copy for `Frames.raw`) right away, so a large batch never
//! holds all of its bodies at once: requests start in order, a few more than run at once, and a
//! bounded backlog makes the network wait for the parser rather than pile bodies up.
//!
//! A batch runs as a `Job` on the global runtime, so the caller can wait for it in slices
//! (to check for Ctrl-C and draw progress) or be called back when it ends (asyncio).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use polars::prelude::DataFrame;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinSet};

use crate::error::{Endpoint, Error};
use crate::flatten::{ListingBody, ListingBuilder, MarketsBody, MarketsBuilder};
use crate::frames::{log_frame, ListingFrames, LogRecord};
use crate::http::{BackoffGauge, Exchange, HttpClient};
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
    // dropped, also when the batch is cancelled. It runs at a lower priority: parsing is
    // throughput work, while every moment a response waits for a core delays the next request.
    let (to_parser, parser_inbox) = mpsc::channel::<Vec<Received>>();
    let (listing_ids, markets_ids) = (if listing { ids.len() } else { 0 }, if markets { ids.len() } else { 0 });
    let (parsed, outcome) = tokio::sync::oneshot::channel();
    let queue = Arc::new(ParserQueue::default());
    let parser_queue = queue.clone();
    std::thread::Builder::new()
        .name("defilens-parse".into())
        .spawn(move || {
            lower_thread_priority();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut assembler = Assembler::new(listing_ids, markets_ids);
                for exchanges in parser_inbox {
                    let count = exchanges.len();
                    for Received { exchange, compressed } in exchanges {
                        assembler.add(exchange, compressed);
                    }
                    parser_queue.parsed(count);
                }
                assembler.finish()
            }));
            let _ = parsed.send(outcome);
        })
        .expect("could not start the parsing thread");

    // Requests are started in order and only a few more than the client runs at once (not
    // counting those waiting out a retry delay), so they finish roughly in order and the parser
    // is rarely left waiting on an early one while later bodies pile up (tokio does not run
    // thousands of spawned tasks in spawn order). And no request starts while the parser has
    // more than `MAX_QUEUED` exchanges to go: a network faster than the parser waits for it
    // instead of piling bodies up in memory. Bodies that wait behind a request being retried
    // are not held back: that would stall the batch for the whole retry delay.
    let window = client.concurrency().saturating_mul(2).max(1);
    let backoff = Arc::new(BackoffGauge::default());
    let mut tasks = JoinSet::new();
    let mut slot_of_task: HashMap<tokio::task::Id, usize> = HashMap::with_capacity(window);
    let mut next_to_start = 0;
    let mut slots: Vec<Option<Received>> = (0..total).map(|_| None).collect();
    let mut next_to_parse = 0;
    let mut ready = Vec::with_capacity(PARSE_BATCH);
    loop {
        let more_to_start = next_to_start < total;
        let parser_has_room = queue.queued.load(Ordering::Relaxed) < MAX_QUEUED;
        let active = tasks.len().saturating_sub(backoff.waiting());
        let can_start = more_to_start && parser_has_room && active < window;
        tokio::select! {
            biased;
            Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let (task, received) = match joined {
                    Ok((task, received)) => (task, received),
                    // A panicked request must not lose the others: it becomes an error of its own.
                    Err(failure) => {
                        let slot = slot_of_task[&failure.id()];
                        let (token, endpoint) = (ids[slot / per_id].clone(), endpoints[slot % per_id]);
                        let exchange = panicked_exchange(token, endpoint);
                        (failure.id(), Received { exchange, compressed: None })
                    }
                };
                let slot = slot_of_task.remove(&task).expect("every task has a slot");
                slots[slot] = Some(received);
                progress.done.fetch_add(1, Ordering::Relaxed);
                while let Some(received) = slots.get_mut(next_to_parse).and_then(Option::take) {
                    ready.push(received);
                    next_to_parse += 1;
                }
                // In batches: waking the parser for every body would cost more than parsing it.
                if ready.len() >= PARSE_BATCH {
                    queue.hand_over(&to_parser, std::mem::take(&mut ready));
                }
            }
            _ = std::future::ready(()), if can_start => {
                let slot = next_to_start;
                next_to_start += 1;
                let (client, id, endpoint) = (client.clone(), ids[slot / per_id].clone(), endpoints[slot % per_id]);
                let backoff = backoff.clone();
                let task = tasks.spawn(async move {
                    let exchange = client.get(&id, endpoint, Some(&backoff)).await;
                    // Let the request that was waiting for this one's slot go out first.
                    tokio::task::yield_now().await;
                    // Here rather than in the parser: requests finish on every core, the parser has one.
                    let compressed = exchange.result.as_ref().ok().map(|body| CompressedBody::new(endpoint, body));
                    Received { exchange, compressed }
                });
                slot_of_task.insert(task.id(), slot);
            }
            // Woken to look again at what may start: a request began a retry delay...
            _ = backoff.started_waiting(), if more_to_start && parser_has_room => {}
            // ...or the parser caught up.
            _ = queue.drained.notified(), if more_to_start && !parser_has_room => {}
            else => break,
        }
    }
    if !ready.is_empty() {
        queue.hand_over(&to_parser, ready);
    }
    drop(to_parser);
    match outcome.await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("the parsing thread ended without a result"),
    }
}

/// Makes the calling thread yield to the others of the process when cores are scarce.
#[cfg(target_os = "linux")]
fn lower_thread_priority() {
    extern "C" {
        fn setpriority(which: i32, who: u32, priority: i32) -> i32;
    }
    const PRIO_PROCESS: i32 = 0;
    // SAFETY: a plain system call wrapper. On Linux the nice value belongs to the thread and
    // `who = 0` means the calling one, so only this thread is lowered. A failure keeps the
    // normal priority, which is harmless.
    unsafe {
        setpriority(PRIO_PROCESS, 0, 10);
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_thread_priority() {}

/// How many exchanges the parser is handed at a time.
const PARSE_BATCH: usize = 32;
/// How many exchanges may wait for the parser before no more requests start (see `run`).
const MAX_QUEUED: usize = 1024;

/// An exchange on its way to the parser.
struct Received {
    exchange: Exchange,
    /// The body compressed for `Frames.raw`, if it has one.
    compressed: Option<CompressedBody>,
}

/// How many exchanges have been handed to the parser and not yet parsed.
#[derive(Default)]
struct ParserQueue {
    queued: AtomicUsize,
    drained: Notify,
}

impl ParserQueue {
    fn hand_over(&self, to_parser: &mpsc::Sender<Vec<Received>>, exchanges: Vec<Received>) {
        self.queued.fetch_add(exchanges.len(), Ordering::Relaxed);
        // Fails only if the parser panicked; its result, awaited at the end of `run`, reports that.
        let _ = to_parser.send(exchanges);
    }

    /// Called by the parser when it is done with `count` exchanges.
    fn parsed(&self, count: usize) {
        self.queued.fetch_sub(count, Ordering::Relaxed);
        self.drained.notify_one();
    }
}

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
    fn frames_and_raw_bodies_follow_the_order_of_the_ids() {
        let sandbox = crate::sandbox::Sandbox::start(crate::sandbox::SandboxConfig::default()).unwrap();
        let client = HttpClient::new(crate::http::ClientConfig {
            base_url: sandbox.url(),
            concurrency: 3,
            ..Default::default()
        })
        .unwrap();
        // More ids than the backlog holds, and an unknown one in the middle.
        let ids: Vec<String> = (0..1500).map(|i| if i == 700 { "unknown-x".into() } else { format!("order-{i}") }).collect();
        let job = Job::spawn(Arc::new(client), ids.clone(), true, true);
        assert!(job.wait(Duration::from_secs(120)));
        let outcome = job.take().unwrap().unwrap();
        let tokens: Vec<&str> = outcome.listing.snapshot.column("token").unwrap().str().unwrap().iter().map(Option::unwrap).collect();
        let known: Vec<&str> = ids.iter().map(String::as_str).filter(|id| !id.starts_with("unknown")).collect();
        assert_eq!(tokens, known);
        let log_tokens: Vec<&str> = outcome.log.column("token").unwrap().str().unwrap().iter().map(Option::unwrap).collect();
        let expected_log: Vec<&str> = ids.iter().flat_map(|id| [id.as_str(), id.as_str()]).collect();
        assert_eq!(log_tokens, expected_log);
        assert_eq!(outcome.errors.len(), 2);
        assert_eq!(outcome.raw.len(), 2 * known.len());
        for (index, (token, endpoint, body)) in outcome.raw.iter().enumerate() {
            assert_eq!(token, known[index / 2]);
            let expected = match endpoint {
                Endpoint::Listing => crate::sandbox::listing_body(0, token),
                Endpoint::Markets => crate::sandbox::markets_body(0, token),
            };
            assert!(body == expected.as_bytes(), "the raw body of {token} ({endpoint:?}) changed");
        }
    }

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
