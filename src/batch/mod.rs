//! Batches: every (token, endpoint) exchange of a batch in flight at once (bounded by the
//! client), each body parsed into the frames as soon as it and every exchange before it have
//! arrived, with a log row per exchange.
//!
//! A batch runs as a `Job` on the global runtime, so the caller can wait for it in slices
//! (to check for Ctrl-C and draw progress) or be called back when it ends (asyncio).

mod assembler;
mod job;
pub mod raw_store;
mod scheduler;

use std::sync::atomic::AtomicUsize;

use polars::prelude::DataFrame;

pub use job::Job;
pub use raw_store::RawStore;

use crate::error::Error;
use crate::frames::ListingFrames;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupe_keeps_first_occurrences_in_order() {
        let ids = ["b", "a", "b", "c", "a"].map(String::from).to_vec();
        assert_eq!(dedupe(ids), ["b", "a", "c"].map(String::from).to_vec());
    }
}
