//! One logical request with its retries, on a connection pool shared by the whole process.
//! Everything here is async and runs on `runtime::runtime()`.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderValue, ACCEPT, RETRY_AFTER, USER_AGENT};
use tokio::sync::Semaphore;

use super::backoff_gauge::BackoffGauge;
use super::cache::ResponseCache;
use super::clock::{parse_sandbox_clock_header, RunningClock, SANDBOX_CLOCK_HEADER};
use super::config::ClientConfig;
use super::disk_cache::DiskCache;
use super::limiter::{RateHeaders, RateLimiter};
use super::retry::parse_retry_after;
use super::url::{encode_path_segment, is_loopback_url, redact_url_credentials};
use crate::error::{carries_retry_after, Error};
use crate::model::Endpoint;

const ERROR_BODY_EXCERPT: usize = 300;
/// Bytes of a non-2xx body read for the error's excerpt.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a body buffer reserves before its bytes arrive.
const INITIAL_BODY_CAPACITY: usize = 16 << 20;

fn install_crypto_provider() {
    // reqwest is built without a bundled provider; ring is ours. Installing twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        // The key travels in a header; a redirect must not carry it to another host.
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(60))
}

/// The pool for remote hosts, honouring HTTPS_PROXY / HTTP_PROXY / NO_PROXY.
static SHARED_CLIENT: LazyLock<Result<reqwest::Client, String>> =
    LazyLock::new(|| client_builder().build().map_err(|e| e.to_string()));

/// The pool for loopback hosts (the Sandbox, local test servers): a proxy never applies.
static LOOPBACK_CLIENT: LazyLock<Result<reqwest::Client, String>> =
    LazyLock::new(|| client_builder().no_proxy().build().map_err(|e| e.to_string()));

/// The outcome of one logical request (all its attempts).
#[derive(Debug)]
pub struct Exchange {
    pub token: String,
    pub endpoint: Endpoint,
    pub result: Result<Bytes, Error>,
    pub status: Option<u16>,
    pub attempts: u32,
    pub elapsed_ms: f64,
    /// When the final answer arrived, in ms since the epoch, on the client's clock.
    pub fetched_at: i64,
    pub cached: bool,
}

pub struct HttpClient {
    config: ClientConfig,
    http: reqwest::Client,
    in_flight: Arc<Semaphore>,
    limiter: RateLimiter,
    cache: ResponseCache,
    disk: Option<DiskCache>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient").field("config", &self.config).finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client for checked settings (`ClientConfig::new`).
    pub fn new(config: ClientConfig) -> Result<Self, Error> {
        let invalid = |message: String| Error::InvalidArgument(message);
        // `ClientConfig::new` checked the URL; here it only says which pool to use.
        let loopback = reqwest::Url::parse(&config.base_url).is_ok_and(|url| is_loopback_url(&url));
        let http = match &config.proxy {
            Some(proxy) => {
                let proxy = reqwest::Proxy::all(proxy.as_str()).map_err(|_| {
                    invalid(format!("proxy {:?} is not a valid proxy URL", redact_url_credentials(proxy)))
                })?;
                client_builder()
                    .proxy(proxy)
                    .build()
                    .map_err(|e| Error::Internal(format!("could not build the HTTP client: {e}")))?
            }
            None => {
                let shared = if loopback { &*LOOPBACK_CLIENT } else { &*SHARED_CLIENT };
                shared.clone().map_err(|e| Error::Internal(format!("could not build the HTTP client: {e}")))?
            }
        };
        let disk = match (&config.cache_dir, config.cache_ttl) {
            (Some(dir), Some(ttl)) => {
                Some(DiskCache::open(dir, &config.base_url, ttl, config.cache_max_bytes as u64).map_err(invalid)?)
            }
            _ => None,
        };
        Ok(Self {
            disk,
            in_flight: Arc::new(Semaphore::new(config.concurrency)),
            limiter: RateLimiter::new(config.rate_limit),
            cache: ResponseCache::new(config.cache_ttl, config.cache_max_bytes),
            http,
            config,
        })
    }

    /// The time on the client's clock (the wall clock unless it was bound to another), in ms.
    pub fn now_ms(&self) -> i64 {
        self.config.clock.now_ms()
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    pub fn clear_cache(&self) {
        self.cache.clear();
    }

    /// What the disk cache had to ignore since the last call (damaged or foreign entries, a
    /// failed write): for the caller to warn about.
    pub fn take_cache_warnings(&self) -> Vec<String> {
        self.disk.as_ref().map(DiskCache::take_warnings).unwrap_or_default()
    }

    /// The rate requests go at now (requests a second): the fixed one, what `rate_limit="auto"`
    /// has learned so far, or None without a limit.
    pub fn rate_limit_now(&self) -> Option<f64> {
        self.limiter.rate()
    }

    pub fn url_for(&self, token: &str, endpoint: Endpoint) -> String {
        format!("{}{}{}", self.config.base_url, endpoint.path_prefix(), encode_path_segment(token))
    }

    /// How many requests this client runs at once.
    pub fn concurrency(&self) -> usize {
        self.config.concurrency
    }

    /// One logical request with its retries. Never fails: the outcome is in the `Exchange`.
    /// `backoff`, when given, counts this request while it waits out a retry delay.
    pub async fn get(&self, token: &str, endpoint: Endpoint, backoff: Option<&BackoffGauge>) -> Exchange {
        let started = Instant::now();
        let url = self.url_for(token, endpoint);
        let finish = |result: Result<Bytes, Error>, status, attempts, fetched_at, cached| Exchange {
            token: token.to_string(),
            endpoint,
            result,
            status,
            attempts,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
            fetched_at,
            cached,
        };
        let hit = match &self.disk {
            Some(disk) => disk.get(endpoint, token, self.now_ms()),
            None => self.cache.get(&url),
        };
        if let Some(hit) = hit {
            // The time of the response reused, not of now: cached data is not fresh data.
            return finish(Ok(hit.body), Some(200), 0, hit.fetched_at, true);
        }
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let outcome = {
                // Waiting for a slot and for the rate limit both count against neither the
                // timeout nor the backoff: only the request itself is timed.
                let _permit = self.in_flight.acquire().await.expect("the semaphore is never closed");
                self.limiter.wait_turn().await;
                self.attempt(&url, token, endpoint).await
            };
            match outcome {
                Ok((status, body)) => {
                    let fetched_at = self.now_ms();
                    match &self.disk {
                        Some(disk) => disk.put(endpoint, token, &body, fetched_at),
                        None => self.cache.put(&url, &body, fetched_at),
                    }
                    return finish(Ok(body), Some(status), attempt, fetched_at, false);
                }
                Err(error) => {
                    if self.config.retry.should_retry(&error, attempt) {
                        let _waiting = backoff.map(BackoffGauge::enter);
                        tokio::time::sleep(self.config.retry.delay(&error, attempt)).await;
                        continue;
                    }
                    let status = error.status();
                    return finish(Err(error), status, attempt, self.now_ms(), false);
                }
            }
        }
    }

    async fn attempt(&self, url: &str, token: &str, endpoint: Endpoint) -> Result<(u16, Bytes), Error> {
        let transport_error = |e: reqwest::Error| classify_transport_error(e, token, endpoint);
        let mut request = self
            .http
            .get(url)
            .header(ACCEPT, "*/*")
            .header(USER_AGENT, concat!("defilens/", env!("CARGO_PKG_VERSION")))
            .timeout(self.config.timeout);
        if let Some(key) = &self.config.api_key {
            let mut value = HeaderValue::from_str(key).map_err(|_| Error::InvalidArgument("invalid api_key".into()))?;
            value.set_sensitive(true);
            request = request.header(crate::model::KEY_HEADER, value);
        }
        let mut response = request.send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let success = response.status().is_success();
        let header = |names: [&str; 2]| names.iter().find_map(|name| response.headers().get(*name)?.to_str().ok());
        self.limiter.observe(
            status,
            RateHeaders::parse(
                header(["x-ratelimit-limit", "ratelimit-limit"]),
                header(["x-ratelimit-reset", "ratelimit-reset"]),
            ),
        );
        let limit = if success { self.config.max_response_bytes } else { ERROR_BODY_LIMIT };
        let retry_after = response
            .headers()
            .get("retry-after-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| ms / 1000.0)
            .or_else(|| {
                response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, self.config.clock.now_system_time()))
            });
        let too_large = |size: u64| Error::Decode {
            token: Some(token.to_string()),
            endpoint,
            field: None,
            offset: None,
            message: format!(
                "the response body ({size} bytes or more) exceeds max_response_bytes={}",
                self.config.max_response_bytes
            ),
        };
        if success {
            if let Some(length) = response.content_length() {
                if length > limit as u64 {
                    return Err(too_large(length));
                }
            }
        }
        // Read chunk by chunk so the size limit holds while reading, not after.
        // The declared length is the server's word: it sizes the first allocation only up to a
        // bound, and the limit is enforced on what actually arrives.
        let declared = response.content_length().map_or(8192, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let mut body = Vec::with_capacity(declared.min(limit).min(INITIAL_BODY_CAPACITY));
        while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
            if body.len() + chunk.len() > limit {
                if success {
                    return Err(too_large((body.len() + chunk.len()) as u64));
                }
                body.extend_from_slice(&chunk[..limit - body.len()]);
                break;
            }
            body.extend_from_slice(&chunk);
        }
        if success {
            return Ok((status, Bytes::from(body)));
        }
        Err(Error::Api {
            status,
            token: token.to_string(),
            endpoint,
            body: body_excerpt(&body),
            retry_after: retry_after.filter(|_| carries_retry_after(status)),
            key_sent: self.config.api_key.is_some(),
        })
    }
}

fn body_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_EXCERPT * 4)]);
    let mut excerpt: String = text.chars().filter(|c| !c.is_control() || *c == ' ').take(ERROR_BODY_EXCERPT).collect();
    if excerpt.len() < text.len() {
        excerpt.push('…');
    }
    excerpt.trim().to_string()
}

fn classify_transport_error(error: reqwest::Error, token: &str, endpoint: Endpoint) -> Error {
    let is_timeout = error.is_timeout();
    let message = transport_message(error);
    let token = token.to_string();
    if is_timeout {
        Error::Timeout { token, endpoint, message: format!("no complete response within the timeout ({message})") }
    } else {
        Error::Connection { token, endpoint, message }
    }
}

/// What went wrong with a request that got no response, and where it went.
fn transport_message(error: reqwest::Error) -> String {
    // reqwest's message names the URL, which holds no secret (the key is a header); the causes
    // below it say what actually went wrong.
    let url = error.url().map(|url| redact_url_credentials(url.as_str()));
    let mut message = String::new();
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(&error);
    while let Some(cause) = source {
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    if message.is_empty() {
        message = error.without_url().to_string();
    }
    // Which address was tried (without credentials in it): a wrong base URL or proxy shows here.
    if let Some(url) = url {
        message = format!("{message} (GET {url})");
    }
    message
}

/// The clock of the Sandbox serving `base_url` (in another process: `defilens sandbox`), read
/// from the `x-sandbox-clock` header of one request (it answers every path with it), for a client
/// asked to follow it. Half the request's round trip is added at the clock's speed: the header
/// was written about then.
pub async fn sandbox_clock_at(base_url: &str, timeout: Duration) -> Result<RunningClock, Error> {
    let invalid = |message: String| Error::InvalidArgument(message);
    let shown = redact_url_credentials(base_url);
    let url = reqwest::Url::parse(base_url).map_err(|_| invalid(format!("{shown:?} is not a URL")))?;
    let pool = if is_loopback_url(&url) { &*LOOPBACK_CLIENT } else { &*SHARED_CLIENT };
    let http = pool.clone().map_err(|e| Error::Internal(format!("could not build the HTTP client: {e}")))?;
    let sent = Instant::now();
    let response = http.get(url).timeout(timeout).send().await.map_err(|error| {
        invalid(format!(
            "could not read the clock of a Sandbox at {shown} (clock=\"sandbox\", --clock sandbox): {}",
            transport_message(error)
        ))
    })?;
    let half_trip_ms = sent.elapsed().as_secs_f64() * 500.0;
    let (now_ms, speed) = response
        .headers()
        .get(SANDBOX_CLOCK_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(parse_sandbox_clock_header)
        .ok_or_else(|| {
            invalid(format!(
                "{shown} does not report a clock, so clock=\"sandbox\" (--clock sandbox) cannot follow it: only a \
                 defilens Sandbox does (in its {SANDBOX_CLOCK_HEADER} header)"
            ))
        })?;
    Ok(RunningClock::new(now_ms + (half_trip_ms * speed) as i64, speed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::config::Settings;

    fn config(settings: Settings) -> Result<ClientConfig, Error> {
        ClientConfig::new(settings)
    }

    #[test]
    fn urls_keep_the_encoded_segment() {
        let client = HttpClient::new(
            config(Settings { base_url: Some("http://127.0.0.1:9/v1/".into()), ..Default::default() }).unwrap(),
        )
        .unwrap();
        let url = client.url_for("a/b?c#d", Endpoint::Markets);
        assert_eq!(url, "http://127.0.0.1:9/v1/listings/market/a%2Fb%3Fc%23d");
        let parsed = reqwest::Url::parse(&url).unwrap();
        assert_eq!(parsed.path(), "/v1/listings/market/a%2Fb%3Fc%23d");
        assert_eq!(parsed.query(), None);
        let url = client.url_for("..%2e", Endpoint::Listing);
        assert_eq!(reqwest::Url::parse(&url).unwrap().path(), "/v1/listings/..%252e");
    }

    #[test]
    fn config_is_checked_and_the_key_redacted() {
        assert!(config(Settings { base_url: Some("ftp://x".into()), ..Default::default() }).is_err());
        assert!(config(Settings { base_url: Some("not a url".into()), ..Default::default() }).is_err());
        assert!(config(Settings { concurrency: Some(0), ..Default::default() }).is_err());
        let config = config(Settings { api_key: Some("sk-secret".into()), ..Default::default() }).unwrap();
        assert!(!format!("{config:?}").contains("sk-secret"));
        let client = HttpClient::new(config).unwrap();
        assert!(!format!("{client:?}").contains("sk-secret"));
    }
}
