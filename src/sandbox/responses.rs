//! What the Sandbox answers to a request, decided when it arrives: the route, the key, the
//! fault draw (per (endpoint, token) attempt), the 404 for `unknown*` ids, and the data.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::clock::Clock;
use super::listing_body::{listing_body, provisional_listing_body};
use super::market::last_close_ms;
use super::markets_body::markets_body;
use super::random::{stable_hash, unit_interval};
use super::rate_limit::TokenBucket;
use super::repaint::is_provisional;
use super::SandboxConfig;
use crate::model::Endpoint;

/// Attempt counters are split into this many locks per endpoint, so concurrent requests for
/// different tokens rarely wait on each other.
const ATTEMPT_SHARDS: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    Drop,
    ServerError,
    RateLimited,
    Truncate,
    InvalidJson,
}

/// Per-(endpoint, token) attempt numbers, sharded by a hash of the token.
struct AttemptCounters {
    shards: Vec<Mutex<HashMap<String, u32>>>,
}

impl AttemptCounters {
    fn new() -> Self {
        Self { shards: (0..2 * ATTEMPT_SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    /// The number of this attempt, starting at 1.
    fn next(&self, endpoint: Endpoint, token: &str) -> u32 {
        let endpoint_offset = match endpoint {
            Endpoint::Listing => 0,
            Endpoint::Markets => ATTEMPT_SHARDS,
        };
        let index = endpoint_offset + (stable_hash(0, &[token.as_bytes()]) % ATTEMPT_SHARDS as u64) as usize;
        // A poisoned lock only means another request panicked mid-increment; the count is intact.
        let mut counts = self.shards[index].lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match counts.get_mut(token) {
            Some(count) => {
                *count = count.saturating_add(1);
                *count
            }
            None => {
                counts.insert(token.to_owned(), 1);
                1
            }
        }
    }
}

/// Bodies already built for the current 5-minute candle: a body depends on (endpoint, token,
/// last close, provisional or final) only, and building one derives six candle series, so repeated requests (benchmark
/// rounds, retries, a simulated clock standing still) are served from here.
struct BodyCache {
    shards: Vec<Mutex<BodyShard>>,
}

/// (endpoint, token) -> (the close the body describes and whether it is provisional, the body).
type BodyShard = HashMap<(Endpoint, String), (Moment, Bytes)>;

/// What a body depends on besides its endpoint and token.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Moment {
    close_ms: i64,
    provisional: bool,
}

/// Entries per shard before the shard is emptied (about 64 MB of bodies in all).
const CACHED_PER_SHARD: usize = 256;
const CACHE_SHARDS: usize = 32;

impl BodyCache {
    fn new() -> Self {
        Self { shards: (0..CACHE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    fn get_or_build(&self, endpoint: Endpoint, token: &str, moment: Moment, build: impl FnOnce() -> String) -> Bytes {
        let shard = &self.shards[(stable_hash(1, &[token.as_bytes()]) % CACHE_SHARDS as u64) as usize];
        let key = (endpoint, token.to_owned());
        if let Some((cached_at, body)) = shard.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            if *cached_at == moment {
                return body.clone();
            }
        }
        let body = Bytes::from(build());
        let mut entries = shard.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= CACHED_PER_SHARD {
            entries.clear();
        }
        entries.insert(key, (moment, body.clone()));
        body
    }
}

pub(super) struct Shared {
    pub(super) config: SandboxConfig,
    pub(super) requests: AtomicU64,
    pub(super) clock: Arc<Clock>,
    attempts: AttemptCounters,
    bodies: BodyCache,
    bucket: Option<TokenBucket>,
}

impl Shared {
    pub(super) fn new(config: SandboxConfig) -> Self {
        let clock = Arc::new(Clock::new(config.clock));
        let bucket = config.max_rps.map(TokenBucket::new);
        Shared {
            config,
            requests: AtomicU64::new(0),
            clock,
            attempts: AttemptCounters::new(),
            bucket,
            bodies: BodyCache::new(),
        }
    }

    fn draw_fault(&self, endpoint: Endpoint, token: &str, attempt: u32) -> Option<Fault> {
        let hash = stable_hash(
            self.config.seed,
            &[b"fault", endpoint.as_str().as_bytes(), token.as_bytes(), &attempt.to_le_bytes()],
        );
        let draw = unit_interval(hash);
        let mut upper = 0.0;
        for (_, rate, fault) in self.config.fault_ranges() {
            upper += rate;
            if draw < upper {
                return Some(fault);
            }
        }
        None
    }
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes one path segment to UTF-8 text. `+` stays `+` (it means a space only in
/// query strings). `None` for a malformed escape or text that is not UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let high = hex_value(*bytes.get(i + 1)?)?;
            let low = hex_value(*bytes.get(i + 2)?)?;
            decoded.push(high << 4 | low);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// The endpoint and decoded token of a request target; `Ok(None)` for paths that are not one of
/// the two routes (the token must be exactly one non-empty segment).
fn route(target: &str) -> Result<Option<(Endpoint, String)>, &'static str> {
    // Absolute-form targets (sent to proxies) carry the scheme and authority first.
    let target = match target.split_once("://") {
        Some((_, rest)) if !target.starts_with('/') => rest.find('/').map_or("/", |slash| &rest[slash..]),
        _ => target,
    };
    let path = target.split(['?', '#']).next().unwrap_or_default();
    // The markets prefix extends the listing one, so it is tried first.
    let (endpoint, segment) = if let Some(segment) = path.strip_prefix(Endpoint::Markets.path_prefix()) {
        (Endpoint::Markets, segment)
    } else if let Some(segment) = path.strip_prefix(Endpoint::Listing.path_prefix()) {
        (Endpoint::Listing, segment)
    } else {
        return Ok(None);
    };
    if segment.is_empty() || segment.contains('/') {
        return Ok(None);
    }
    let token = percent_decode(segment).ok_or("malformed percent-encoding in the path")?;
    Ok(Some((endpoint, token)))
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Delivery {
    Complete,
    /// Headers with the full length, half of the body, then close.
    Truncated,
    /// Close before any byte.
    Dropped,
}

pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) body: Bytes,
    pub(super) attempt: Option<u32>,
    pub(super) retry_after: Option<u64>,
    pub(super) delivery: Delivery,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset` (with `max_rps` and its headers on).
    pub(super) rate_headers: Option<(u64, u64, u64)>,
}

impl Reply {
    pub(super) fn ok(body: impl Into<Bytes>) -> Self {
        Reply {
            status: 200,
            body: body.into(),
            attempt: None,
            retry_after: None,
            delivery: Delivery::Complete,
            rate_headers: None,
        }
    }

    pub(super) fn error(status: u16, message: &str) -> Self {
        let body = format!("{{\"error\":{}}}", serde_json::to_string(message).unwrap_or_else(|_| "\"\"".into()));
        Reply { status, ..Reply::ok(body) }
    }
}

/// A complete 200 body that no JSON parser accepts: an object cut off after a member name.
fn invalid_json_body(endpoint: Endpoint, token: &str) -> String {
    let id = serde_json::to_string(token).unwrap_or_else(|_| "\"\"".into());
    match endpoint {
        Endpoint::Listing => format!("{{\"data\": {{\"id\": {id}, \"symbol_id\": {id}, \"current_price\": "),
        Endpoint::Markets => format!("{{\"data\": [{{\"id\": {id}, \"exchangeName\": \"Bin"),
    }
}

/// Decides the answer to one request (see the module docs for the order).
/// `target` is the request's path and query; `partner_key` its `x-partner-key`.
pub(super) fn decide(shared: &Shared, read_only: bool, target: &str, partner_key: Option<&[u8]>) -> Reply {
    let config = &shared.config;
    if !read_only {
        return Reply::error(405, "method not allowed: the service is read-only (GET)");
    }
    let (endpoint, token) = match route(target) {
        Ok(Some(route)) => route,
        Ok(None) => return Reply::error(404, "not found"),
        Err(reason) => return Reply::error(400, reason),
    };
    if let Some(expected) = &config.api_key {
        if partner_key != Some(expected.as_bytes()) {
            return Reply::error(401, "missing or invalid x-partner-key");
        }
    }
    let verdict = shared.bucket.as_ref().map(TokenBucket::take);
    let headers = verdict.filter(|_| config.rate_headers).map(|v| (v.limit, v.remaining, v.reset));
    if let Some(verdict) = verdict.filter(|v| !v.allowed) {
        return Reply {
            retry_after: Some(verdict.retry_after),
            rate_headers: headers,
            ..Reply::error(429, "too many requests (the Sandbox's max_rps)")
        };
    }
    let attempt = shared.attempts.next(endpoint, &token);
    let fault = shared.draw_fault(endpoint, &token, attempt);
    let mut reply = match fault {
        Some(Fault::Drop) => Reply { delivery: Delivery::Dropped, ..Reply::ok(String::new()) },
        Some(Fault::ServerError) => Reply::error(503, "service unavailable (a Sandbox fault)"),
        Some(Fault::RateLimited) => {
            Reply { retry_after: Some(config.retry_after), ..Reply::error(429, "too many requests (a Sandbox fault)") }
        }
        Some(Fault::InvalidJson) => Reply::ok(invalid_json_body(endpoint, &token)),
        None | Some(Fault::Truncate) => {
            let mut reply = if let Some(recording) = &config.recording {
                match recording.body(endpoint, &token, shared.clock.now_ms()) {
                    Some(body) => Reply::ok(body),
                    None => Reply::error(404, "not found (not in the recording at this time)"),
                }
            } else if !super::lists(&token) {
                match super::typo_of(&token) {
                    Some(known) => Reply::error(404, &format!("not found (did you mean {known}?)")),
                    None => Reply::error(
                        404,
                        "not found (the Sandbox lists lowercase slugs such as bitcoin; ids beginning with unknown get \
                         404)",
                    ),
                }
            } else {
                let now_ms = shared.clock.now_ms();
                let close_ms = last_close_ms(now_ms);
                let provisional = endpoint == Endpoint::Listing
                    && is_provisional(config.seed, config.repaint_rate, &token, close_ms, now_ms);
                Reply::ok(shared.bodies.get_or_build(endpoint, &token, Moment { close_ms, provisional }, || {
                    if provisional {
                        provisional_listing_body(config.seed, &token, now_ms)
                    } else {
                        body(config.seed, endpoint, &token, now_ms)
                    }
                }))
            };
            if fault == Some(Fault::Truncate) {
                reply.delivery = Delivery::Truncated;
            }
            reply
        }
    };
    reply.attempt = Some(attempt);
    reply.rate_headers = headers;
    reply
}

/// The body the Sandbox serves for `token` at `endpoint` when its clock reads `now_ms`.
pub fn body(seed: u64, endpoint: Endpoint, token: &str, now_ms: i64) -> String {
    match endpoint {
        Endpoint::Listing => listing_body(seed, token, now_ms),
        Endpoint::Markets => markets_body(seed, token, now_ms),
    }
}
