//! A local fake of the DeFi Lens service: a small HTTP/1.1 server on the crate's runtime.
//!
//! Hand-written rather than built on a server framework because it only has to speak the tiny
//! slice of HTTP/1.1 that clients use against the service (GET, keep-alive, pipelining), and
//! because its faults need byte-level control (a connection dropped before any byte, a body cut
//! short after a full `content-length`).
//!
//! Data and faults are deterministic in (seed, token id). Each (endpoint, token) pair has an
//! attempt counter; attempt `n` draws its fault from a hash of (seed, endpoint, token, n), so a
//! run is repeatable and a retry can succeed.
//!
//! Order of decisions for each request:
//! 1. a head that cannot be parsed gets 400 and the connection is closed;
//! 2. every answer, errors included, is sent `latency` after its request arrived (timed to a
//!    few tens of microseconds by `precise_timer`, not by tokio's millisecond wheel);
//! 3. methods other than GET and HEAD get 405, paths other than the two routes get 404 (a token
//!    segment with a malformed percent-escape or non-UTF-8 bytes gets 400);
//! 4. the key: with `api_key` set, a missing or different `x-partner-key` gets 401. This comes
//!    before faults, and a 401 does not use up an attempt, because the service checks keys before
//!    doing any work;
//! 5. the fault draw (drop, 503, 429, truncate, invalid JSON, in that order of ranges);
//! 6. ids beginning with `unknown` get 404. This comes after the faults, because a flaky network
//!    or an overloaded server does not know which tokens exist;
//! 7. the data.

use std::collections::HashMap;
use std::io::{self, Write as _};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

use crate::precise_timer;
use crate::runtime::runtime;
use crate::sandbox_data::{stable_hash, unit_interval};
pub use crate::sandbox_data::{listing_body, markets_body};

/// Longest request head accepted; real clients send a few hundred bytes.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Attempt counters are split into this many locks per endpoint, so concurrent requests for
/// different tokens rarely wait on each other.
const ATTEMPT_SHARDS: usize = 32;
/// Room for bursts of new connections from benchmarks.
const LISTEN_BACKLOG: u32 = 1024;
/// How long `stop` waits for the listener and open connections to close.
const STOP_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Added to every answer.
    pub latency: Duration,
    /// When set, requests whose `x-partner-key` differs get 401.
    pub api_key: Option<String>,
    pub seed: u64,
    /// Share of requests answered 503.
    pub error_rate: f64,
    /// Share answered 429 with `Retry-After: retry_after`.
    pub rate_limit_rate: f64,
    /// Seconds, sent in `Retry-After`.
    pub retry_after: u64,
    /// Share whose connection is closed before any response byte.
    pub drop_rate: f64,
    /// Share that send the full `content-length`, half of the body, then close.
    pub truncate_rate: f64,
    /// Share answered 200 with a complete body that is not valid JSON.
    pub invalid_json_rate: f64,
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            api_key: None,
            seed: 0,
            error_rate: 0.0,
            rate_limit_rate: 0.0,
            retry_after: 1,
            drop_rate: 0.0,
            truncate_rate: 0.0,
            invalid_json_rate: 0.0,
            host: "127.0.0.1".into(),
            port: 0,
        }
    }
}

impl SandboxConfig {
    /// The fault rates in the order their ranges are laid out on [0, 1).
    fn fault_ranges(&self) -> [(&'static str, f64, Fault); 5] {
        [
            ("drop_rate", self.drop_rate, Fault::Drop),
            ("error_rate", self.error_rate, Fault::ServerError),
            ("rate_limit_rate", self.rate_limit_rate, Fault::RateLimited),
            ("truncate_rate", self.truncate_rate, Fault::Truncate),
            ("invalid_json_rate", self.invalid_json_rate, Fault::InvalidJson),
        ]
    }

    fn validate(&self) -> io::Result<()> {
        let invalid = |message: String| Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        let ranges = self.fault_ranges();
        for (name, rate, _) in ranges {
            if !(0.0..=1.0).contains(&rate) {
                return invalid(format!("{name} must be between 0 and 1, got {rate}"));
            }
        }
        let sum: f64 = ranges.iter().map(|(_, rate, _)| rate).sum();
        // A little slack so that rates such as 0.1 + 0.2 + 0.7 are not refused for rounding.
        if sum > 1.0 + 1e-9 {
            return invalid(format!(
                "the fault rates (drop_rate, error_rate, rate_limit_rate, truncate_rate, invalid_json_rate) add up to {sum}, more than 1"
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Listing,
    Markets,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Listing => "listing",
            Endpoint::Markets => "markets",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
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

struct Shared {
    config: SandboxConfig,
    requests: AtomicU64,
    attempts: AttemptCounters,
}

impl Shared {
    fn draw_fault(&self, endpoint: Endpoint, token: &str, attempt: u32) -> Option<Fault> {
        let hash = stable_hash(
            self.config.seed,
            &[b"fault", endpoint.name().as_bytes(), token.as_bytes(), &attempt.to_le_bytes()],
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

/// A running Sandbox. Stops (closing the listener and every connection) when dropped.
pub struct Sandbox {
    shared: Arc<Shared>,
    address: SocketAddr,
    stop_signal: watch::Sender<bool>,
    /// Disconnects once the accept loop and every connection task have ended; `None` after stop.
    all_closed: Option<mpsc::Receiver<()>>,
}

impl Sandbox {
    /// Binds (synchronously) and starts serving on the global runtime. Fails with `InvalidInput`
    /// for bad rates and with the bind error when the address is taken.
    pub fn start(config: SandboxConfig) -> io::Result<Sandbox> {
        config.validate()?;
        // Sockets must be created inside the runtime they will be driven by.
        let _runtime_context = runtime().enter();
        let listener = bind(&config.host, config.port)?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared { config, requests: AtomicU64::new(0), attempts: AttemptCounters::new() });
        let (stop_signal, stop_requested) = watch::channel(false);
        let (closed_sender, all_closed) = mpsc::channel();
        runtime().spawn(accept_loop(listener, shared.clone(), stop_requested, closed_sender));
        Ok(Sandbox { shared, address, stop_signal, all_closed: Some(all_closed) })
    }

    /// The base URL, e.g. `http://127.0.0.1:53124`.
    pub fn url(&self) -> String {
        let ip = self.address.ip();
        // A wildcard bind is reachable through loopback; the wildcard itself is not an address.
        let ip = match ip {
            ip if !ip.is_unspecified() => ip,
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        };
        format!("http://{}", SocketAddr::new(ip, self.address.port()))
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Requests served so far: every request whose head was read, faults included.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Stops accepting, closes every open connection and waits (briefly) until they are closed,
    /// so that the port refuses connections when this returns. Idempotent.
    pub fn stop(&mut self) {
        let Some(all_closed) = self.all_closed.take() else { return };
        self.stop_signal.send_replace(true);
        // Nothing is ever sent: the receive ends when the last task drops its sender.
        let wait = move || {
            let _ = all_closed.recv_timeout(STOP_WAIT);
        };
        // Called from inside the runtime (e.g. dropped in async code), let the runtime move its
        // other tasks off this thread while it blocks, so the tasks being waited for can run.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("url", &self.url()).field("requests", &self.requests()).finish()
    }
}

/// Binds the first address `host` resolves to that accepts the bind.
fn bind(host: &str, port: u16) -> io::Result<TcpListener> {
    let mut last_error = None;
    for address in (host, port).to_socket_addrs()? {
        let attempt = (|| {
            let socket = if address.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
            // On Unix this only lets a restart reuse a port in TIME_WAIT; it never lets two
            // listeners share a port. (On Windows it would, so it is not set there.)
            #[cfg(unix)]
            socket.set_reuseaddr(true)?;
            socket.bind(address)?;
            socket.listen(LISTEN_BACKLOG)
        })();
        match attempt {
            Ok(listener) => return Ok(listener),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} resolves to no address"))))
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop_requested: watch::Receiver<bool>,
    closed_sender: mpsc::Sender<()>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            // Also ends when the Sandbox (the sender) is gone.
            _ = stop_requested.wait_for(|stop| *stop) => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                // Responses are written in one piece; Nagle would only add delay.
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                let mut stop_requested = stop_requested.clone();
                let closed_sender = closed_sender.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = serve_connection(stream, &shared) => {}
                        _ = stop_requested.wait_for(|stop| *stop) => {}
                    }
                    // The stream is closed by now (dropped with the finished future above).
                    drop(closed_sender);
                });
            }
            // Typically out of file descriptors: back off instead of spinning on the error.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    drop(listener);
    drop(closed_sender);
}

#[derive(Debug, PartialEq, Eq)]
enum Method {
    Get,
    Head,
    Other,
}

#[derive(Debug)]
struct Request {
    method: Method,
    target: String,
    partner_key: Option<String>,
    keep_alive: bool,
    body_length: u64,
    expects_continue: bool,
}

enum HeadRead {
    /// The head ends at this offset of the input buffer (terminator included).
    Complete(usize),
    TooLarge,
    /// The peer closed the connection before a complete head.
    Closed,
}

/// Offset just past the blank line that ends a head (`\n\r\n` or a bare `\n\n`), searching
/// from `from`.
fn find_head_end(buffer: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < buffer.len() {
        if buffer[i] == b'\n' {
            match buffer.get(i + 1..) {
                Some([b'\n', ..]) => return Some(i + 2),
                Some([b'\r', b'\n', ..]) => return Some(i + 3),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

async fn read_head(stream: &mut TcpStream, input: &mut Vec<u8>) -> io::Result<HeadRead> {
    let mut scanned = 0;
    loop {
        // Blank lines before a request line are allowed (RFC 9112, section 2.2).
        let blank = input.iter().take_while(|byte| matches!(byte, b'\r' | b'\n')).count();
        if blank > 0 {
            input.drain(..blank);
            scanned = 0;
        }
        if let Some(end) = find_head_end(input, scanned) {
            return Ok(if end > MAX_HEAD_BYTES { HeadRead::TooLarge } else { HeadRead::Complete(end) });
        }
        if input.len() > MAX_HEAD_BYTES {
            return Ok(HeadRead::TooLarge);
        }
        // The terminator may straddle two reads.
        scanned = input.len().saturating_sub(3);
        input.reserve(4096);
        if stream.read_buf(input).await? == 0 {
            return Ok(HeadRead::Closed);
        }
    }
}

fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

fn parse_head(head: &[u8]) -> Result<Request, &'static str> {
    let mut lines = head.split(|&byte| byte == b'\n').map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let request_line = lines.next().ok_or("empty request")?;
    let request_line = std::str::from_utf8(request_line).map_err(|_| "request line is not text")?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err("malformed request line");
    };
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        return Err("malformed method");
    }
    if target.is_empty() || target.bytes().any(|byte| byte.is_ascii_control()) {
        return Err("malformed request target");
    }
    let http_1_1 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return Err("unsupported HTTP version"),
    };
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other,
    };

    let mut partner_key = None;
    let mut close_requested = false;
    let mut keep_alive_requested = false;
    let mut body_length: Option<u64> = None;
    let mut expects_continue = false;
    for line in lines.filter(|line| !line.is_empty()) {
        if line[0] == b' ' || line[0] == b'\t' {
            return Err("folded header lines are not supported");
        }
        let colon = line.iter().position(|&byte| byte == b':').ok_or("header line without a colon")?;
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|&byte| is_token_byte(byte)) {
            return Err("malformed header name");
        }
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"x-partner-key") {
            partner_key = Some(String::from_utf8_lossy(value).into_owned());
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in value.split(|&byte| byte == b',').map(<[u8]>::trim_ascii) {
                close_requested |= option.eq_ignore_ascii_case(b"close");
                keep_alive_requested |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let length = std::str::from_utf8(value)
                .ok()
                .filter(|text| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or("malformed content-length")?;
            if body_length.is_some_and(|previous| previous != length) {
                return Err("conflicting content-length headers");
            }
            body_length = Some(length);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The service takes no request bodies; rather than decode chunked framing, refuse.
            return Err("transfer-encoding request bodies are not supported");
        } else if name.eq_ignore_ascii_case(b"expect") {
            expects_continue = value.eq_ignore_ascii_case(b"100-continue");
        }
    }
    Ok(Request {
        method,
        target: target.to_string(),
        partner_key,
        keep_alive: !close_requested && (http_1_1 || keep_alive_requested),
        body_length: body_length.unwrap_or(0),
        expects_continue,
    })
}

/// Reads and discards a request body so the next request on the connection starts cleanly.
/// `Ok(false)` when the peer closed the connection first.
async fn discard_body(stream: &mut TcpStream, input: &mut Vec<u8>, length: u64) -> io::Result<bool> {
    let buffered = length.min(input.len() as u64) as usize;
    input.drain(..buffered);
    let mut remaining = length - buffered as u64;
    // When more is left to read, everything buffered was body and `input` is empty: it serves as
    // scratch space. Reads stop at the end of the body, so no pipelined request is lost.
    while remaining > 0 {
        input.clear();
        input.reserve(8192);
        let read = (&mut *stream).take(remaining.min(8192)).read_buf(input).await?;
        if read == 0 {
            return Ok(false);
        }
        remaining -= read as u64;
    }
    if length > buffered as u64 {
        input.clear();
    }
    Ok(true)
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
    let (endpoint, segment) = if let Some(segment) = path.strip_prefix("/listings/market/") {
        (Endpoint::Markets, segment)
    } else if let Some(segment) = path.strip_prefix("/listings/") {
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
enum Delivery {
    Complete,
    /// Headers with the full length, half of the body, then close.
    Truncated,
    /// Close before any byte.
    Dropped,
}

struct Reply {
    status: u16,
    body: String,
    attempt: Option<u32>,
    retry_after: Option<u64>,
    delivery: Delivery,
}

impl Reply {
    fn ok(body: String) -> Self {
        Reply { status: 200, body, attempt: None, retry_after: None, delivery: Delivery::Complete }
    }

    fn error(status: u16, message: &str) -> Self {
        let body = format!("{{\"error\":{}}}", serde_json::to_string(message).unwrap_or_else(|_| "\"\"".into()));
        Reply { status, ..Reply::ok(body) }
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "",
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

/// The answer to one request, sent `latency` after the request arrived.
async fn respond(shared: &Shared, request: &Request) -> Reply {
    let due = std::time::Instant::now() + shared.config.latency;
    let reply = decide(shared, request);
    precise_timer::sleep_until(due).await;
    reply
}

/// Decides the answer to one request (see the module docs for the order).
fn decide(shared: &Shared, request: &Request) -> Reply {
    let config = &shared.config;
    if request.method == Method::Other {
        return Reply::error(405, "method not allowed: the service is read-only (GET)");
    }
    let (endpoint, token) = match route(&request.target) {
        Ok(Some(route)) => route,
        Ok(None) => return Reply::error(404, "not found"),
        Err(reason) => return Reply::error(400, reason),
    };
    if let Some(expected) = &config.api_key {
        if request.partner_key.as_deref() != Some(expected.as_str()) {
            return Reply::error(401, "missing or invalid x-partner-key");
        }
    }
    let attempt = shared.attempts.next(endpoint, &token);
    let fault = shared.draw_fault(endpoint, &token, attempt);
    let mut reply = match fault {
        Some(Fault::Drop) => Reply { delivery: Delivery::Dropped, ..Reply::ok(String::new()) },
        Some(Fault::ServerError) => Reply::error(503, "service unavailable (a Sandbox fault)"),
        Some(Fault::RateLimited) => Reply {
            retry_after: Some(config.retry_after),
            ..Reply::error(429, "too many requests (a Sandbox fault)")
        },
        Some(Fault::InvalidJson) => Reply::ok(invalid_json_body(endpoint, &token)),
        None | Some(Fault::Truncate) => {
            let mut reply = if token.starts_with("unknown") {
                Reply::error(404, "not found")
            } else {
                Reply::ok(match endpoint {
                    Endpoint::Listing => listing_body(config.seed, &token),
                    Endpoint::Markets => markets_body(config.seed, &token),
                })
            };
            if fault == Some(Fault::Truncate) {
                reply.delivery = Delivery::Truncated;
            }
            reply
        }
    };
    reply.attempt = Some(attempt);
    reply
}

/// Writes the status line and headers of `reply` into `out`.
fn write_head(out: &mut Vec<u8>, reply: &Reply, keep_alive: bool) {
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        reply.status,
        reason_phrase(reply.status),
        reply.body.len()
    );
    if let Some(attempt) = reply.attempt {
        let _ = write!(out, "x-sandbox-attempt: {attempt}\r\n");
    }
    if let Some(seconds) = reply.retry_after {
        let _ = write!(out, "retry-after: {seconds}\r\n");
    }
    if reply.status == 405 {
        out.extend_from_slice(b"allow: GET, HEAD\r\n");
    }
    out.extend_from_slice(if keep_alive { b"connection: keep-alive\r\n\r\n" } else { b"connection: close\r\n\r\n" });
}

async fn serve_connection(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let mut input = Vec::with_capacity(4096);
    let mut output = Vec::with_capacity(8192);
    loop {
        let head_end = match read_head(&mut stream, &mut input).await? {
            HeadRead::Closed => return Ok(()),
            HeadRead::TooLarge => {
                shared.requests.fetch_add(1, Ordering::Relaxed);
                return close_with_error(&mut stream, &mut output, "request head too large").await;
            }
            HeadRead::Complete(end) => end,
        };
        shared.requests.fetch_add(1, Ordering::Relaxed);
        let parsed = parse_head(&input[..head_end]);
        input.drain(..head_end);
        let request = match parsed {
            Ok(request) => request,
            Err(reason) => return close_with_error(&mut stream, &mut output, reason).await,
        };
        if request.expects_continue && request.body_length > 0 {
            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        if !discard_body(&mut stream, &mut input, request.body_length).await? {
            return Ok(());
        }

        let reply = respond(shared, &request).await;
        let keep_alive = request.keep_alive && reply.delivery == Delivery::Complete;
        let body = match reply.delivery {
            // Dropping the stream on return closes it before any byte was sent.
            Delivery::Dropped => return Ok(()),
            Delivery::Truncated => &reply.body.as_bytes()[..reply.body.len() / 2],
            Delivery::Complete => reply.body.as_bytes(),
        };
        output.clear();
        write_head(&mut output, &reply, keep_alive);
        if request.method != Method::Head {
            output.extend_from_slice(body);
        }
        stream.write_all(&output).await?;
        if !keep_alive {
            return lingering_close(&mut stream).await;
        }
    }
}

async fn close_with_error(stream: &mut TcpStream, output: &mut Vec<u8>, reason: &str) -> io::Result<()> {
    let reply = Reply::error(400, reason);
    output.clear();
    write_head(output, &reply, false);
    output.extend_from_slice(reply.body.as_bytes());
    stream.write_all(output).await?;
    lingering_close(stream).await
}

/// Sends FIN, then reads and discards what the client still sends for a short while before the
/// socket is closed. Closing a socket with unread input makes the kernel send a reset, which
/// can destroy the response in flight to the client (RFC 9112, section 9.6).
async fn lingering_close(stream: &mut TcpStream) -> io::Result<()> {
    const LINGER: Duration = Duration::from_millis(500);
    const MAX_DISCARDED: usize = 1 << 20;
    stream.shutdown().await?;
    let mut scratch = [0u8; 4096];
    let mut discarded = 0;
    let deadline = tokio::time::Instant::now() + LINGER;
    while discarded < MAX_DISCARDED {
        match tokio::time::timeout_at(deadline, stream.read(&mut scratch)).await {
            Ok(Ok(read)) if read > 0 => discarded += read,
            _ => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Instant;

    fn start(config: SandboxConfig) -> Sandbox {
        Sandbox::start(config).expect("the sandbox starts")
    }

    struct RawResponse {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    impl RawResponse {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
        }

        fn json(&self) -> serde_json::Value {
            serde_json::from_slice(&self.body).expect("the body is JSON")
        }
    }

    /// Sends raw bytes on a new connection and returns everything received until the server
    /// closes it.
    fn exchange(sandbox: &Sandbox, request: &[u8]) -> Vec<u8> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", sandbox.port())).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        stream.write_all(request).expect("write");
        // Half-close, so a server waiting for more of a request sees the end instead.
        stream.shutdown(std::net::Shutdown::Write).expect("half-close");
        let mut received = Vec::new();
        let _ = stream.read_to_end(&mut received);
        received
    }

    /// Splits one response off the front of `bytes` (it may hold several).
    fn parse_response(bytes: &[u8]) -> Option<(RawResponse, &[u8])> {
        let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = std::str::from_utf8(&bytes[..head_end]).ok()?;
        let mut lines = head.split("\r\n");
        let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.to_string(), value.trim().to_string()))
            .collect();
        let length: usize = headers.iter().find(|(n, _)| n == "content-length")?.1.parse().ok()?;
        let available = (bytes.len() - head_end).min(length);
        let body = bytes[head_end..head_end + available].to_vec();
        Some((RawResponse { status, headers, body }, &bytes[head_end + available..]))
    }

    fn get(sandbox: &Sandbox, path: &str, key: Option<&str>) -> RawResponse {
        let key_header = key.map(|k| format!("x-partner-key: {k}\r\n")).unwrap_or_default();
        let request = format!("GET {path} HTTP/1.1\r\nhost: sandbox\r\n{key_header}connection: close\r\n\r\n");
        let received = exchange(sandbox, request.as_bytes());
        parse_response(&received).map(|(response, _)| response).expect("a response")
    }

    fn http_client() -> reqwest::Client {
        // reqwest is built without a bundled TLS provider; install ours like the client does.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder().no_proxy().build().expect("a client")
    }

    #[test]
    fn serves_both_routes_and_404s_the_rest() {
        let sandbox = start(SandboxConfig::default());
        let listing = get(&sandbox, "/listings/bitcoin", None);
        assert_eq!(listing.status, 200);
        assert_eq!(listing.header("content-type"), Some("application/json"));
        assert_eq!(listing.header("content-length"), Some(listing.body.len().to_string().as_str()));
        assert_eq!(listing.header("x-sandbox-attempt"), Some("1"));
        assert_eq!(listing.body, listing_body(0, "bitcoin").into_bytes());
        let markets = get(&sandbox, "/listings/market/bitcoin", None);
        assert_eq!(markets.status, 200);
        assert_eq!(markets.body, markets_body(0, "bitcoin").into_bytes());
        assert_eq!(get(&sandbox, "/listings/bitcoin", None).header("x-sandbox-attempt"), Some("2"));

        let unknown = get(&sandbox, "/listings/unknown-x", None);
        assert_eq!(unknown.status, 404);
        assert!(unknown.json()["error"].is_string());
        assert_eq!(get(&sandbox, "/listings/market/unknown-x", None).status, 404);
        for path in ["/listings/a/b", "/listings/", "/listings/market/", "/listings/bitcoin/", "/nope", "/"] {
            let response = get(&sandbox, path, None);
            assert_eq!(response.status, 404, "{path}");
            assert_eq!(response.json(), serde_json::json!({"error": "not found"}));
        }

        let slash = get(&sandbox, "/listings/a%2Fb", None);
        assert_eq!(slash.status, 200);
        assert_eq!(slash.json()["data"]["id"], "a/b");
        assert_eq!(get(&sandbox, "/listings/market/a%2fb", None).status, 200);
        assert_eq!(get(&sandbox, "/listings/a+b%20c", None).json()["data"]["id"], "a+b c");
        assert_eq!(get(&sandbox, "/listings/%C3%BCber", None).json()["data"]["id"], "über");
        assert_eq!(get(&sandbox, "/listings/bitcoin?x=1", None).status, 200);
        assert_eq!(get(&sandbox, "/listings/bad%zz", None).status, 400);
        assert_eq!(get(&sandbox, "/listings/bad%FF", None).status, 400);
        assert_eq!(sandbox.requests(), 18);
        assert!(sandbox.url().starts_with("http://127.0.0.1:"));
        assert!(sandbox.url().ends_with(&sandbox.port().to_string()));
    }

    #[test]
    fn api_key_is_checked_before_anything_else() {
        let sandbox = start(SandboxConfig { api_key: Some("secret".into()), ..Default::default() });
        assert_eq!(get(&sandbox, "/listings/bitcoin", None).status, 401);
        assert_eq!(get(&sandbox, "/listings/bitcoin", Some("wrong")).status, 401);
        assert_eq!(get(&sandbox, "/listings/unknown-x", None).status, 401);
        let ok = get(&sandbox, "/listings/bitcoin", Some("secret"));
        assert_eq!(ok.status, 200);
        // Refused requests do not use up attempts.
        assert_eq!(ok.header("x-sandbox-attempt"), Some("1"));
        let upper_case = exchange(&sandbox, b"GET /listings/market/eth HTTP/1.1\r\nX-Partner-Key: secret\r\nConnection: close\r\n\r\n");
        assert_eq!(parse_response(&upper_case).map(|(r, _)| r.status), Some(200));
    }

    #[test]
    fn keep_alive_pipelining_head_and_other_methods() {
        let sandbox = start(SandboxConfig::default());
        let received = exchange(
            &sandbox,
            b"GET /listings/x HTTP/1.1\r\nhost: a\r\n\r\n\
              POST /listings/x HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello\
              HEAD /listings/x HTTP/1.1\r\n\r\n\
              GET /listings/market/x HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        let (first, rest) = parse_response(&received).expect("first");
        assert_eq!(first.status, 200);
        assert_eq!(first.header("connection"), Some("keep-alive"));
        let (post, rest) = parse_response(rest).expect("second");
        assert_eq!(post.status, 405);
        assert!(post.header("allow").is_some());
        // HEAD: the GET headers, no body (so the next response starts right after them).
        let head_end = rest.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
        assert!(std::str::from_utf8(&rest[..head_end]).unwrap_or_default().starts_with("HTTP/1.1 200"));
        let (last, rest) = parse_response(&rest[head_end..]).expect("fourth");
        assert_eq!(last.status, 200);
        assert_eq!(last.header("connection"), Some("close"));
        assert!(rest.is_empty());
        assert_eq!(sandbox.requests(), 4);

        // A body longer than one read, then a pipelined request: the body is skipped exactly.
        let mut request = format!("POST /listings/x HTTP/1.1\r\ncontent-length: 100000\r\n\r\n{}", "b".repeat(100_000)).into_bytes();
        request.extend_from_slice(b"GET /listings/y HTTP/1.1\r\nconnection: close\r\n\r\n");
        let received = exchange(&sandbox, &request);
        let (post, rest) = parse_response(&received).expect("the POST is answered");
        assert_eq!(post.status, 405);
        let (get, _) = parse_response(rest).expect("the GET is answered");
        assert_eq!(get.json()["data"]["id"], "y");

        // HTTP/1.0 closes unless asked to keep alive.
        let received = exchange(&sandbox, b"GET /listings/x HTTP/1.0\r\n\r\n");
        assert_eq!(parse_response(&received).map(|(r, _)| r.status), Some(200));
    }

    #[test]
    fn malformed_requests_get_400_and_never_hurt_the_server() {
        let sandbox = start(SandboxConfig::default());
        let oversized = format!("GET /listings/x HTTP/1.1\r\nx-filler: {}\r\n\r\n", "a".repeat(20_000));
        let requests: Vec<Vec<u8>> = vec![
            b"\x00\xff garbage\r\n\r\n".to_vec(),
            b"GET /listings/x\r\n\r\n".to_vec(),
            b"GET /listings/x HTTP/9.9\r\n\r\n".to_vec(),
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
            b"GET /listings/x HTTP/1.1\r\nno colon here\r\n\r\n".to_vec(),
            b"GET /listings/x HTTP/1.1\r\ncontent-length: ten\r\n\r\n".to_vec(),
            b"GET /listings/x HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab".to_vec(),
            b"POST /listings/x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            oversized.into_bytes(),
            vec![b'G'; 40_000],
        ];
        for request in &requests {
            let received = exchange(&sandbox, request);
            let status = parse_response(&received).map(|(r, _)| r.status);
            assert_eq!(status, Some(400), "{:?}", String::from_utf8_lossy(&request[..request.len().min(60)]));
        }
        // Half a head, then hang up: no answer, no harm.
        assert!(exchange(&sandbox, b"GET /listings/x HTT").is_empty());
        // Bare LF line endings are tolerated.
        let received = exchange(&sandbox, b"GET /listings/x HTTP/1.1\nconnection: close\n\n");
        assert_eq!(parse_response(&received).map(|(r, _)| r.status), Some(200));
        assert_eq!(get(&sandbox, "/listings/still-alive", None).status, 200);
    }

    #[test]
    fn faults_seen_on_the_wire() {
        let sandbox = start(SandboxConfig { error_rate: 1.0, ..Default::default() });
        let response = get(&sandbox, "/listings/x", None);
        assert_eq!(response.status, 503);
        assert!(response.json()["error"].is_string());
        // Faults come before the 404 for unknown ids.
        assert_eq!(get(&sandbox, "/listings/unknown-x", None).status, 503);

        let sandbox = start(SandboxConfig { rate_limit_rate: 1.0, retry_after: 7, ..Default::default() });
        let response = get(&sandbox, "/listings/market/x", None);
        assert_eq!(response.status, 429);
        assert_eq!(response.header("retry-after"), Some("7"));

        let sandbox = start(SandboxConfig { drop_rate: 1.0, ..Default::default() });
        assert!(exchange(&sandbox, b"GET /listings/x HTTP/1.1\r\n\r\n").is_empty());
        assert_eq!(sandbox.requests(), 1);

        let sandbox = start(SandboxConfig { invalid_json_rate: 1.0, ..Default::default() });
        for path in ["/listings/x", "/listings/market/x"] {
            let response = get(&sandbox, path, None);
            assert_eq!(response.status, 200);
            assert_eq!(response.header("content-length"), Some(response.body.len().to_string().as_str()));
            assert!(serde_json::from_slice::<serde_json::Value>(&response.body).is_err());
        }

        let sandbox = start(SandboxConfig { truncate_rate: 1.0, ..Default::default() });
        // Keep-alive was asked for, yet the connection closes after the short body.
        let received = exchange(&sandbox, b"GET /listings/x HTTP/1.1\r\n\r\n");
        let (response, _) = parse_response(&received).expect("headers arrive");
        let declared: usize = response.header("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
        assert_eq!(declared, listing_body(0, "x").len());
        assert!(!response.body.is_empty() && response.body.len() < declared);
    }

    #[test]
    fn faults_seen_by_reqwest() {
        let client = http_client();
        runtime().block_on(async {
            let drop = start(SandboxConfig { drop_rate: 1.0, ..Default::default() });
            assert!(client.get(format!("{}/listings/x", drop.url())).send().await.is_err());

            let truncate = start(SandboxConfig { truncate_rate: 1.0, ..Default::default() });
            let response = client.get(format!("{}/listings/x", truncate.url())).send().await.expect("headers arrive");
            assert_eq!(response.status(), 200);
            assert!(response.bytes().await.is_err(), "a short body must fail to read");

            let invalid = start(SandboxConfig { invalid_json_rate: 1.0, ..Default::default() });
            let response = client.get(format!("{}/listings/x", invalid.url())).send().await.expect("a response");
            assert_eq!(response.status(), 200);
            let body = response.bytes().await.expect("a complete body");
            assert!(serde_json::from_slice::<serde_json::Value>(&body).is_err());

            let limited = start(SandboxConfig { rate_limit_rate: 1.0, retry_after: 3, ..Default::default() });
            let response = client.get(format!("{}/listings/x", limited.url())).send().await.expect("a response");
            assert_eq!(response.status(), 429);
            assert_eq!(response.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("3"));

            let keyed = start(SandboxConfig { api_key: Some("k".into()), ..Default::default() });
            let url = format!("{}/listings/bitcoin", keyed.url());
            assert_eq!(client.get(&url).send().await.map(|r| r.status().as_u16()).ok(), Some(401));
            let response = client.get(&url).header("x-partner-key", "k").send().await.expect("a response");
            assert_eq!(response.status(), 200);
            let body = response.text().await.expect("a body");
            assert_eq!(body, listing_body(0, "bitcoin"));
        });
    }

    #[test]
    fn retries_eventually_succeed_and_the_draws_are_repeatable() {
        let config = SandboxConfig { error_rate: 0.5, seed: 3, ..Default::default() };
        let statuses = |sandbox: &Sandbox, path: &str| -> Vec<u16> { (0..20).map(|_| get(sandbox, path, None).status).collect() };
        let first = start(config.clone());
        let run = statuses(&first, "/listings/y");
        assert!(run.contains(&200) && run.contains(&503), "{run:?}");
        assert_eq!(run, statuses(&start(config.clone()), "/listings/y"), "same seed, same faults");
        assert_ne!(run, statuses(&start(SandboxConfig { seed: 4, ..config.clone() }), "/listings/y"));
        // Each (endpoint, token) counts its own attempts.
        assert_eq!(get(&first, "/listings/market/y", None).header("x-sandbox-attempt"), Some("1"));
        assert_eq!(get(&first, "/listings/z", None).header("x-sandbox-attempt"), Some("1"));

        // The way a client retries: keep-alive connections, until success.
        let sandbox = start(SandboxConfig { error_rate: 0.3, rate_limit_rate: 0.2, drop_rate: 0.1, ..Default::default() });
        let client = http_client();
        runtime().block_on(async {
            for token in ["alpha", "beta", "gamma", "delta"] {
                let url = format!("{}/listings/{token}", sandbox.url());
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    assert!(attempts < 50, "{token} never succeeded");
                    let Ok(response) = client.get(&url).send().await else { continue };
                    let attempt = response.headers().get("x-sandbox-attempt").and_then(|v| v.to_str().ok()).map(str::to_owned);
                    assert_eq!(attempt, Some(attempts.to_string()));
                    if response.status() == 200 {
                        let body = response.bytes().await.expect("a body");
                        assert_eq!(body, listing_body(0, token).as_bytes());
                        break;
                    }
                }
            }
        });
    }

    #[test]
    fn latency_is_added() {
        let sandbox = start(SandboxConfig { latency: Duration::from_millis(80), ..Default::default() });
        let started = Instant::now();
        assert_eq!(get(&sandbox, "/listings/x", None).status, 200);
        assert!(started.elapsed() >= Duration::from_millis(80));
    }

    #[test]
    fn stop_closes_the_port_and_open_connections() {
        let mut sandbox = start(SandboxConfig::default());
        let port = sandbox.port();
        let mut open = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        open.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        open.write_all(b"GET /listings/x HTTP/1.1\r\n\r\n").expect("write");
        let mut first = [0u8; 12];
        open.read_exact(&mut first).expect("a response starts");
        assert_eq!(&first, b"HTTP/1.1 200");

        let started = Instant::now();
        sandbox.stop();
        sandbox.stop();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        // The kept-alive connection ends (the rest of the response may or may not have arrived).
        let mut rest = Vec::new();
        let ended = open.read_to_end(&mut rest);
        assert!(ended.is_ok() || ended.is_err_and(|e| e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::TimedOut));
        assert_eq!(sandbox.requests(), 1);
    }

    #[test]
    fn stop_and_drop_work_inside_the_runtime() {
        runtime().block_on(async {
            let sandbox = start(SandboxConfig::default());
            let port = sandbox.port();
            drop(sandbox);
            assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        });
    }

    #[test]
    fn refuses_bad_configurations_and_taken_ports() {
        for config in [
            SandboxConfig { error_rate: 1.5, ..Default::default() },
            SandboxConfig { drop_rate: -0.1, ..Default::default() },
            SandboxConfig { truncate_rate: f64::NAN, ..Default::default() },
            SandboxConfig { error_rate: 0.7, rate_limit_rate: 0.4, ..Default::default() },
        ] {
            let error = Sandbox::start(config).expect_err("invalid rates are refused");
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
            assert!(error.to_string().contains("rate"), "{error}");
        }
        assert!(Sandbox::start(SandboxConfig { error_rate: 0.1, rate_limit_rate: 0.2, invalid_json_rate: 0.7, ..Default::default() }).is_ok());

        let taken = start(SandboxConfig::default());
        let error = Sandbox::start(SandboxConfig { port: taken.port(), ..Default::default() }).expect_err("the port is taken");
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn sustains_concurrent_keep_alive_traffic() {
        const TASKS: usize = 20;
        const PER_TASK: usize = 100;
        let sandbox = start(SandboxConfig::default());
        let client = http_client();
        let started = Instant::now();
        let successes = runtime().block_on(async {
            let mut tasks = Vec::new();
            for task in 0..TASKS {
                let client = client.clone();
                let base = sandbox.url();
                tasks.push(tokio::spawn(async move {
                    let mut ok = 0;
                    for i in 0..PER_TASK {
                        let path = if i % 2 == 0 { "listings" } else { "listings/market" };
                        let url = format!("{base}/{path}/token-{}", (task * PER_TASK + i) % 97);
                        if let Ok(response) = client.get(url).send().await {
                            if response.status() == 200 && response.bytes().await.is_ok_and(|b| !b.is_empty()) {
                                ok += 1;
                            }
                        }
                    }
                    ok
                }));
            }
            let mut total = 0;
            for task in tasks {
                total += task.await.unwrap_or(0);
            }
            total
        });
        assert_eq!(successes, TASKS * PER_TASK);
        assert_eq!(sandbox.requests(), (TASKS * PER_TASK) as u64);
        eprintln!("{} requests in {:?}", TASKS * PER_TASK, started.elapsed());

        let started = Instant::now();
        let bytes: usize = (0..1000).map(|i| listing_body(0, &format!("t{i}")).len() + markets_body(0, &format!("t{i}")).len()).sum();
        eprintln!("1000 listing + markets bodies ({bytes} bytes) built in {:?}", started.elapsed());
    }
}
