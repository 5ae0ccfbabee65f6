//! defilens: the DeFi Lens partner API as polars DataFrames.
//!
//! The crate is plain Rust (parsing, HTTP, the Sandbox) with one bindings module behind the
//! `python` feature, so `cargo test` needs no Python.

pub mod error;
pub mod fetch;
pub mod flatten;
pub mod frames;
pub mod http;
pub mod model;
pub mod precise_timer;
pub mod raw_store;
pub mod retry;
pub mod runtime;
pub mod sandbox;
pub mod sandbox_data;
pub mod timestamp;
pub mod value;

#[cfg(feature = "python")]
mod bindings;
