//! Frames and log from exchanges given in order.

use super::raw_store::{CompressedBody, RawStore};
use super::FetchOutcome;
use crate::client::Exchange;
use crate::error::{Endpoint, Error};
use crate::frames::{log_frame, LogRecord};
use crate::parse::{ListingBody, ListingBuilder, MarketsBody, MarketsBuilder};

/// An exchange on its way to the parser.
pub(super) struct Received {
    pub(super) exchange: Exchange,
    /// The body compressed for `Frames.raw`, if it has one.
    pub(super) compressed: Option<CompressedBody>,
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
            cached: exchange.cached,
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
            Endpoint::Listing => {
                self.listing.append(&ListingBody { body: &body, token: Some(&exchange.token), fetched_at }).map(|_| ())
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
        let compressed = compressed.unwrap_or_else(|| CompressedBody::new(exchange.endpoint, &body));
        drop(body);
        self.raw.push(exchange.token, exchange.endpoint, &compressed);
        self.records.push(record);
    }

    pub fn finish(mut self) -> FetchOutcome {
        self.raw.shrink_to_fit();
        let mut listing = self.listing.finish();
        let markets = self.markets.finish();
        listing.drift.vstack_mut_owned(markets.drift).expect("frames of one schema");
        // The bodies were freed as they were parsed; give their memory back.
        crate::memory::release_free_memory();
        FetchOutcome {
            listing,
            markets: markets.markets,
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
