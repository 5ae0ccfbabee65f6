//! Response bodies straight into column builders: the listing and markets parsers, and batch
//! parsing on every core.

pub mod batch;
mod document;
pub mod listing;
pub mod markets;
#[cfg(test)]
mod proptests;
mod scanner;

pub use batch::{parse_listings, parse_markets};
pub use listing::{ListingBody, ListingBuilder};
pub use markets::{MarketsBody, MarketsBuilder, MarketsSummary};
