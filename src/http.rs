//! The HTTP side: one shared connection pool, request building, the retry loop, the rate
//! limit and the response cache. Everything here is async and runs on `runtime::runtime()`.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use reqwest::header::{HeaderValue, ACCEPT, RETRY_AFTER, USER_AGENT};
use tokio::sync::{Notify, Semaphore};

use crate::error::{Endpoint, Error};
use crate::retry::{parse_retry_after, RetryPolicy};

pub const DEFAULT_BASE_URL: &str = "https://api.defilens.ai";
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
const ERROR_BODY_EXCERPT: usize = 300;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct ClientConfig {
    pub base_url: String,
    pub api_key: Option<String>,
    /// Per attempt, from connecting until the whole body has arrived.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub concurrency: usize,
    /// Requests per second across the client.
    pub rate_limit: Option<f64>,
    pub cache_ttl: Option<Duration>,
    pub proxy: Option<String>,
    pub max_response_bytes: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            concurrency: 16,
            rate_limit: None,
            cache_ttl: None,
            proxy: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("concurrency", &self.concurrency)
            .field("rate_limit", &self.rate_limit)
            .field("cache_ttl", &self.cache_ttl)
            .field("proxy", &self.proxy.as_ref().map(|p| redact_url_credentials(p)))
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

/// `http://user:pass@host` -> `http://***@host`, for anything that prints a proxy URL.
pub fn redact_url_credentials(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => format!("{}***{}", &url[..scheme_end + 3], &url[at..]),
        _ => url.to_string(),
    }
}

/// Checks a token id before any request: it must be a non-blank string that can be sent as
/// exactly one path segment.
pub fn validate_token_id(id: &str) -> Result<(), Error> {
    if id.trim().is_empty() {
        return Err(Error::InvalidArgument(format!(
            "token ids must be non-empty strings, got {id:?}"
        )));
    }
    if id == "." || id == ".." {
        // URL parsers resolve these (and their percent-encoded forms) as dot-segments, so no
        // encoding can carry them to the service as an id.
        return Err(Error::InvalidArgument(format!(
            "token id {id:?} cannot be sent: URLs treat it as a relative path"
        )));
    }
    Ok(())
}

/// Percent-encodes a token id as one path segment: only RFC 3986 unreserved bytes stay as
/// they are, so `/`, `?`, `#`, `%`, spaces and non-ASCII can never change the path or add a
/// query.
pub fn encode_path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 8);
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

pub fn is_loopback_url(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

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

/// Spaces requests evenly so that at most `rate` start per second across the client.
struct RateLimiter {
    interval: Option<Duration>,
    next_slot: Mutex<Instant>,
}

impl RateLimiter {
    fn new(rate: Option<f64>) -> Self {
        let interval = rate.filter(|r| *r > 0.0 && r.is_finite()).map(|r| Duration::from_secs_f64(1.0 / r));
        Self { interval, next_slot: Mutex::new(Instant::now()) }
    }

    async fn wait_turn(&self) {
        let Some(interval) = self.interval else { return };
        let slot = {
            let mut next = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
            let slot = (*next).max(Instant::now());
            *next = slot + interval;
            slot
        };
        tokio::time::sleep_until(slot.into()).await;
    }
}

/// Successful bodies by URL, for `cache_ttl`.
struct ResponseCache {
    ttl: Option<Duration>,
    entries: Mutex<HashMap<String, (Instant, Bytes)>>,
}

impl ResponseCache {
    fn get(&self, url: &str) -> Option<Bytes> {
        let ttl = self.ttl?;
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(url).filter(|(at, _)| at.elapsed() < ttl).map(|(_, body)| body.clone())
    }

    fn put(&self, url: &str, body: &Bytes) {
        let Some(ttl) = self.ttl else { return };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= 4096 {
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        entries.insert(url.to_string(), (Instant::now(), body.clone()));
    }

    fn clear(&self) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// The outcome of one logical request (all its attempts).
#[derive(Debug)]
pub struct Exchange {
    pub token: String,
    pub endpoint: Endpoint,
    pub result: Result<Bytes, Error>,
    pub status: Option<u16>,
    pub attempts: u32,
    pub elapsed_ms: f64,
    /// When the final answer arrived, in ms since the epoch.
    pub fetched_at: i64,
    pub cached: bool,
}

/// How many requests are waiting out a retry delay, with a signal each time one starts to.
#[derive(Default)]
pub struct BackoffGauge {
    waiting: AtomicUsize,
    started_waiting: Notify,
}

impl BackoffGauge {
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Completes when a request has started waiting since the last call (at once if one has).
    pub async fn started_waiting(&self) {
        self.started_waiting.notified().await
    }

    /// Counts the caller until the guard is dropped (also when its request is cancelled).
    fn enter(&self) -> BackoffGuard<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.started_waiting.notify_one();
        BackoffGuard(self)
    }
}

struct BackoffGuard<'a>(&'a BackoffGauge);

impl Drop for BackoffGuard<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

pub struct HttpClient {
    config: ClientConfig,
    base_url: String,
    http: reqwest::Client,
    in_flight: Arc<Semaphore>,
    limiter: RateLimiter,
    cache: ResponseCache,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient").field("config", &self.config).finish_non_exhaustive()
    }
}

impl HttpClient {
    pub fn new(config: ClientConfig) -> Result<Self, Error> {
        let invalid = |message: String| Error::InvalidArgument(message);
        let base_url = config.base_url.trim().trim_end_matches('/').to_string();
        let parsed = reqwest::Url::parse(&base_url)
            .map_err(|e| invalid(format!("base_url {base_url:?} is not a valid URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid(format!("base_url must start with http:// or https://, got {base_url:?}")));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(invalid(format!("base_url must not have a query or fragment, got {base_url:?}")));
        }
        if config.timeout.is_zero() {
            return Err(invalid("timeout must be positive".into()));
        }
        if config.concurrency == 0 {
            return Err(invalid("concurrency must be at least 1".into()));
        }
        if let Some(rate) = config.rate_limit {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(invalid(format!("rate_limit must be a positive number of requests per second, got {rate}")));
            }
        }
        if let Some(key) = &config.api_key {
            if HeaderValue::from_str(key).is_err() {
                return Err(invalid("api_key contains characters that cannot be sent in an HTTP header".into()));
            }
        }
        let http = match &config.proxy {
            Some(proxy) => {
                let proxy = reqwest::Proxy::all(proxy.as_str()).map_err(|_| {
                    invalid(format!("proxy {:?} is not a valid proxy URL", redact_url_credentials(proxy)))
                })?;
                client_builder().proxy(proxy).build()
                    .map_err(|e| Error::Internal(format!("could not build the HTTP client: {e}")))?
            }
            None => {
                let shared = if is_loopback_url(&parsed) { &*LOOPBACK_CLIENT } else { &*SHARED_CLIENT };
                shared.clone().map_err(|e| Error::Internal(format!("could not build the HTTP client: {e}")))?
            }
        };
        Ok(Self {
            in_flight: Arc::new(Semaphore::new(config.concurrency)),
            limiter: RateLimiter::new(config.rate_limit),
            cache: ResponseCache { ttl: config.cache_ttl, entries: Mutex::new(HashMap::new()) },
            base_url,
            http,
            config,
        })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    pub fn clear_cache(&self) {
        self.cache.clear();
    }

    pub fn url_for(&self, token: &str, endpoint: Endpoint) -> String {
        let path = match endpoint {
            Endpoint::Listing => "/listings/",
            Endpoint::Markets => "/listings/market/",
        };
        format!("{}{}{}", self.base_url, path, encode_path_segment(token))
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
        let finish = |result: Result<Bytes, Error>, status, attempts, cached| Exchange {
            token: token.to_string(),
            endpoint,
            result,
            status,
            attempts,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
            fetched_at: now_ms(),
            cached,
        };
        if let Some(body) = self.cache.get(&url) {
            return finish(Ok(body), Some(200), 0, true);
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
                    self.cache.put(&url, &body);
                    return finish(Ok(body), Some(status), attempt, false);
                }
                Err(error) => {
                    if self.config.retry.should_retry(&error, attempt) {
                        let _waiting = backoff.map(BackoffGauge::enter);
                        tokio::time::sleep(self.config.retry.delay(&error, attempt)).await;
                        continue;
                    }
                    let status = error.status();
                    return finish(Err(error), status, attempt, false);
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
            request = request.header("x-partner-key", value);
        }
        let mut response = request.send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let success = response.status().is_success();
        let limit = if success { self.config.max_response_bytes } else { 64 * 1024 };
        let retry_after = response
            .headers()
            .get("retry-after-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|ms| ms / 1000.0)
            .or_else(|| {
                response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, SystemTime::now()))
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
        let mut body = Vec::with_capacity(response.content_length().map_or(8192, |n| (n as usize).min(limit)));
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
            retry_after: if status == 429 || status == 503 { retry_after } else { None },
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
    // reqwest's message names the URL, which holds no secret (the key is a header); the causes
    // below it say what actually went wrong.
    let is_timeout = error.is_timeout();
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
    let token = token.to_string();
    if is_timeout {
        Error::Timeout { token, endpoint, message: format!("no complete response within the timeout ({message})") }
    } else {
        Error::Connection { token, endpoint, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_gauge_counts_requests_while_they_wait_and_signals_each_start() {
        let gauge = BackoffGauge::default();
        let first = gauge.enter();
        let second = gauge.enter();
        assert_eq!(gauge.waiting(), 2);
        drop(first);
        assert_eq!(gauge.waiting(), 1);
        drop(second);
        assert_eq!(gauge.waiting(), 0);
        // The starts above left a signal for the next waiter.
        crate::runtime::runtime().block_on(async {
            tokio::time::timeout(Duration::from_secs(5), gauge.started_waiting()).await.expect("signalled")
        });
    }

    #[test]
    fn ids_become_one_segment() {
        assert_eq!(encode_path_segment("bitcoin"), "bitcoin");
        assert_eq!(encode_path_segment("a/b"), "a%2Fb");
        assert_eq!(encode_path_segment("../x"), "..%2Fx");
        assert_eq!(encode_path_segment("a?b#c d%"), "a%3Fb%23c%20d%25");
        assert_eq!(encode_path_segment("é"), "%C3%A9");
    }

    #[test]
    fn ids_are_validated() {
        assert!(validate_token_id("bitcoin").is_ok());
        assert!(validate_token_id("").is_err());
        assert!(validate_token_id("  \t").is_err());
        assert!(validate_token_id("..").is_err());
        assert!(validate_token_id("...").is_ok());
    }

    #[test]
    fn urls_keep_the_encoded_segment() {
        let client = HttpClient::new(ClientConfig { base_url: "http://127.0.0.1:9/v1/".into(), ..Default::default() }).unwrap();
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
        assert!(HttpClient::new(ClientConfig { base_url: "ftp://x".into(), ..Default::default() }).is_err());
        assert!(HttpClient::new(ClientConfig { base_url: "not a url".into(), ..Default::default() }).is_err());
        assert!(HttpClient::new(ClientConfig { concurrency: 0, ..Default::default() }).is_err());
        let config = ClientConfig { api_key: Some("sk-secret".into()), ..Default::default() };
        assert!(!format!("{config:?}").contains("sk-secret"));
        let client = HttpClient::new(config).unwrap();
        assert!(!format!("{client:?}").contains("sk-secret"));
        assert_eq!(redact_url_credentials("http://u:p@proxy:8080"), "http://***@proxy:8080");
    }
}
