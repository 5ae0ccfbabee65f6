//! Frames and log from exchanges given in order.

use super::raw_store::RawStore;
use super::FetchOutcome;
use crate::client::Exchange;
use crate::error::Error;
use crate::frames::{LogColumns, LogRecord};
use crate::model::Endpoint;
use crate::parse::{ListingBody, ListingBuilder, MarketsBody, MarketsBuilder};

/// Builds the frames and the log from exchanges given in order: one log row per exchange, a
/// body that cannot be decoded turning its row into an error.
pub struct Assembler {
    listing: ListingBuilder,
    markets: MarketsBuilder,
    log: LogColumns,
    errors: Vec<Error>,
    raw: RawStore,
    added: usize,
}

/// Every this many exchanges, the memory of the bodies freed since is given back to the system.
/// The bodies are received on the runtime's threads and freed on the parser's, which leaves
/// free but resident pages in the C allocator's per-thread heaps: some megabytes over a batch of
/// 20,000 ids, more than the trim costs (well under a millisecond, a page fault per page reused).
const RELEASE_EVERY: usize = 2048;

impl Assembler {
    /// The arguments are capacity hints: how many listing and markets bodies to expect.
    pub fn new(listing_bodies: usize, markets_bodies: usize) -> Self {
        let exchanges = listing_bodies + markets_bodies;
        Assembler {
            listing: ListingBuilder::new(listing_bodies),
            markets: MarketsBuilder::new(markets_bodies * 16),
            log: LogColumns::new(exchanges),
            errors: Vec::new(),
            raw: RawStore::new(),
            added: 0,
        }
    }

    /// Parses the exchange's body into the frames and keeps it (compressed) for `Frames.raw`.
    pub fn add(&mut self, exchange: Exchange) {
        self.added += 1;
        if self.added.is_multiple_of(RELEASE_EVERY) {
            crate::memory::release_free_memory();
        }
        let mut record = LogRecord {
            token: &exchange.token,
            endpoint: exchange.endpoint.as_str(),
            ok: exchange.result.is_ok(),
            status: exchange.status,
            kind: None,
            message: exchange.cached.then(|| "served from the cache".to_string()),
            attempts: exchange.attempts,
            elapsed_ms: exchange.elapsed_ms,
            total: None,
            fetched_at: Some(exchange.fetched_at),
            cached: exchange.cached,
        };
        let body = match exchange.result {
            Ok(body) => body,
            Err(error) => {
                mark_failed(&mut record, &mut self.errors, error);
                self.log.push(&record);
                return;
            }
        };
        let fetched_at = Some(exchange.fetched_at);
        let parsed = match exchange.endpoint {
            Endpoint::Listing => {
                self.listing.append(&ListingBody { body: &body, token: Some(&exchange.token), fetched_at }).map(|_| {
                    if let Some(id) = self.listing.misrouted() {
                        record.message = Some(format!(
                            "warning: the body is for {id:?}, not {:?} (a proxy or cache answered for another path?): \
                             kept under {:?}, with a drift row",
                            exchange.token, exchange.token
                        ));
                    }
                })
            }
            Endpoint::Markets => {
                self.markets.append(&MarketsBody { body: &body, token: &exchange.token, fetched_at }).map(|summary| {
                    record.total = summary.total;
                    if let Some(total) = summary.total.filter(|t| *t > summary.entries as i64) {
                        record.message = Some(format!(
                            "warning: the service reports total={total} markets but sent {}; the list is incomplete",
                            summary.entries
                        ));
                    }
                })
            }
        };
        if let Err(error) = parsed {
            mark_failed(&mut record, &mut self.errors, error);
        }
        self.raw.push(&exchange.token, exchange.endpoint, &body);
        drop(body);
        self.log.push(&record);
    }

    pub fn finish(mut self) -> FetchOutcome {
        self.raw.finish();
        let mut listing = self.listing.finish();
        let markets = self.markets.finish();
        listing.drift.vstack_mut_owned(markets.drift).expect("frames of one schema");
        let outcome = FetchOutcome {
            listing,
            markets: markets.markets,
            log: self.log.finish(),
            errors: self.errors,
            raw: self.raw,
        };
        // The bodies were freed as they were parsed; give their memory back.
        crate::memory::release_free_memory();
        outcome
    }
}

fn mark_failed(record: &mut LogRecord<'_>, errors: &mut Vec<Error>, error: Error) {
    record.ok = false;
    record.kind = Some(error.kind());
    record.message = Some(error.to_string());
    errors.push(error);
}
