//! defilens: the DeFi Lens partner API as polars DataFrames.
//!
//! Bytes flow one way: `client` fetches them, `parse` reads them with the field catalogue of
//! `model` into the column builders of `frames`, and `batch` runs many exchanges at once and
//! assembles their frames. `python` (feature `python`) is the only code that knows about
//! Python; `sandbox` (feature `sandbox`) is a fake of the service for tests and demos, which no
//! other module uses. See ARCHITECTURE.md.
//!
//! The modules are private; the re-exports below are the Rust API (for benchmarks and fuzz
//! targets), so rustc reports whatever nothing reaches.

mod batch;
mod client;
mod error;
mod frames;
mod memory;
mod model;
mod parse;
mod runtime;
#[cfg(feature = "sandbox")]
mod sandbox;
mod short_bytes;
pub mod ta;
#[cfg(test)]
mod test_random;

// Not in the unit tests' build: it needs libpython, which an extension module never links, and
// leaving it out lets `.ci/rust-tests-on-wheel-build` reuse the wheel's dependencies.
#[cfg(all(feature = "python", not(test)))]
mod python;

pub use batch::{FetchOutcome, Job, RawStore};
pub use client::clock::RunningClock;
pub use client::disk_cache::read_folder as read_cache_folder;
pub use client::retry::{parse_retry_after, RetryPolicy};
pub use client::{sandbox_clock_at, validate_token_id, ClientConfig, HttpClient, Settings};
pub use error::{Error, Result};
pub use frames::buffer_bytes::buffer_bytes;
pub use frames::{empty_frames, ListingFrames, FRAME_NAMES};
pub use model::duration::parse_seconds as parse_duration_seconds;
pub use model::fields::family_intervals;
pub use model::{Endpoint, INTERVALS};
pub use parse::{parse_listings, parse_markets, ListingBody, MarketsBody, MarketsSummary};
#[cfg(feature = "sandbox")]
pub use sandbox::candles_frame::candles_frame;
#[cfg(feature = "sandbox")]
pub use sandbox::known_ids as sandbox_known_ids;
#[cfg(feature = "sandbox")]
pub use sandbox::{body as sandbox_body, candles as sandbox_candles, Candle, ClockConfig, Sandbox, SandboxConfig};
