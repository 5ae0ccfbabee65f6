//! The order of work within a batch: requests started in order within a window, bodies
//! handed in order to one parsing thread, and a bounded backlog between the two.
//!
//! Parsing while the network is busy takes the parse off the end of the batch, and turns each
//! body into columns (and a compressed copy for `Frames.raw`) right away, so a large batch never
//! holds all of its bodies at once: requests start in order, a few more than run at once, and a
//! bounded backlog makes the network wait for the parser rather than pile bodies up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::assembler::Assembler;
use super::{FetchOutcome, Progress};
use crate::client::{BackoffGauge, Exchange, HttpClient};
use crate::error::Error;
use crate::model::Endpoint;

/// Sends every exchange of the batch and turns them into frames, in (id, endpoint) order.
pub(super) async fn run(
    client: Arc<HttpClient>,
    ids: &[String],
    listing: bool,
    markets: bool,
    progress: &Progress,
) -> FetchOutcome {
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
    let (to_parser, parser_inbox) = mpsc::channel::<Vec<Exchange>>();
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
                    for exchange in exchanges {
                        assembler.add(exchange);
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
    // Exchanges that arrived before one started earlier: only the window's worth, never the batch.
    let mut arrived: HashMap<usize, Exchange> = HashMap::with_capacity(window);
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
                        (failure.id(), panicked_exchange(token, endpoint, client.now_ms()))
                    }
                };
                let slot = slot_of_task.remove(&task).expect("every task has a slot");
                arrived.insert(slot, received);
                progress.done.fetch_add(1, Ordering::Relaxed);
                while let Some(received) = arrived.remove(&next_to_parse) {
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
                    exchange
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
    // SAFETY: a plain system call. On Linux the nice value belongs to the thread and `who = 0`
    // means the calling one, so only this thread is lowered. A failure keeps the normal
    // priority, which is harmless.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_thread_priority() {}

/// How many exchanges the parser is handed at a time.
const PARSE_BATCH: usize = 32;
/// How many exchanges may wait for the parser before no more requests start (see `run`).
const MAX_QUEUED: usize = 128;

/// How many exchanges have been handed to the parser and not yet parsed.
#[derive(Default)]
struct ParserQueue {
    queued: AtomicUsize,
    drained: Notify,
}

impl ParserQueue {
    fn hand_over(&self, to_parser: &mpsc::Sender<Vec<Exchange>>, exchanges: Vec<Exchange>) {
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

fn panicked_exchange(token: String, endpoint: Endpoint, now_ms: i64) -> Exchange {
    Exchange {
        result: Err(Error::Internal(format!("the request for {token:?} ({}) panicked", endpoint.as_str()))),
        token,
        endpoint,
        status: None,
        attempts: 0,
        elapsed_ms: 0.0,
        fetched_at: now_ms,
        cached: false,
    }
}
