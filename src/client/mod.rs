//! The HTTP side: settings, where requests go, when to retry, the rate limit, the cache, and
//! `HttpClient::get`, one logical request with its retries.

mod backoff_gauge;
mod cache;
pub mod clock;
pub mod config;
pub mod disk_cache;
mod http_client;
pub mod limiter;
pub mod retry;
pub mod url;

pub use backoff_gauge::BackoffGauge;
pub use config::{ClientConfig, Settings};
pub use http_client::{sandbox_clock_at, Exchange, HttpClient};
pub use url::validate_token_id;
