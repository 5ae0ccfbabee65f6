//! A local fake of the DeFi Lens service: a small HTTP/1.1 server on the global runtime.
//!
//! Data and faults are deterministic in (seed, token id): each (endpoint, token) has an attempt
//! counter, and attempt `n` draws its fault from a hash of (seed, endpoint, token, n), so a run
//! is repeatable and a retry can succeed. Order of checks per request: route (404 for unknown
//! paths), then the key (401), then latency, then the fault draw, then 404 for `unknown…` ids,
//! then the data. Faults come before the 404 because a flaky network does not know what
//! exists.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::runtime::runtime;
pub use crate::sandbox_data::{listing_body, markets_body};
use crate::sandbox_data::stable_hash;

const MAX_HEAD_BYTES: usize = 16 * 1024;

#[derive(Clone, Debug)]
pub struct SandboxConfig {
    pub latency: Duration,
    pub api_key: Option<String>,
    pub seed: u64,
    pub error_rate: f64,
    pub rate_limit_rate: f64,
    pub retry_after: u64,
    pub drop_rate: f64,
    pub truncate_rate: f64,
    pub invalid_json_rate: f64,
    pub host: String,
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
    fn validate(&self) -> io::Result<()> {
        let rates = [
            ("error_rate", self.error_rate),
            ("rate_limit_rate", self.rate_limit_rate),
            ("drop_rate", self.drop_rate),
            ("truncate_rate", self.truncate_rate),
            ("invalid_json_rate", self.invalid_json_rate),
        ];
        for (name, rate) in rates {
            if !(0.0..=1.0).contains(&rate) {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name} must be between 0 and 1, got {rate}")));
            }
        }
        let sum: f64 = rates.iter().map(|(_, r)| r).sum();
        if sum > 1.0 + 1e-9 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("the fault rates add up to {sum}, more than 1")));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    Drop,
    ServerError,
    RateLimited,
    Truncate,
    InvalidJson,
}

struct Shared {
    config: SandboxConfig,
    requests: AtomicU64,
    attempts: Mutex<HashMap<(bool, String), u32>>,
}

impl Shared {
    fn next_attempt(&self, markets: bool, token: &str) -> u32 {
        let mut attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let counter = attempts.entry((markets, token.to_string())).or_insert(0);
        *counter += 1;
        *counter
    }

    fn draw_fault(&self, markets: bool, token: &str, attempt: u32) -> Fault {
        let c = &self.config;
        let endpoint: &[u8] = if markets { b"markets" } else { b"listing" };
        let hash = stable_hash(c.seed, &[b"fault", endpoint, token.as_bytes(), &attempt.to_le_bytes()]);
        let draw = (hash >> 11) as f64 / (1u64 << 53) as f64;
        let mut edge = 0.0;
        for (rate, fault) in [
            (c.drop_rate, Fault::Drop),
            (c.error_rate, Fault::ServerError),
            (c.rate_limit_rate, Fault::RateLimited),
            (c.truncate_rate, Fault::Truncate),
            (c.invalid_json_rate, Fault::InvalidJson),
        ] {
            edge += rate;
            if draw < edge {
                return fault;
            }
        }
        Fault::None
    }
}

/// A running Sandbox; stops when dropped.
pub struct Sandbox {
    shared: Arc<Shared>,
    port: u16,
    host: String,
    shutdown: Option<watch::Sender<bool>>,
}

impl Sandbox {
    pub fn start(config: SandboxConfig) -> io::Result<Sandbox> {
        config.validate()?;
        let listener = std::net::TcpListener::bind((config.host.as_str(), config.port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let host = config.host.clone();
        let listener = {
            let _guard = runtime().enter();
            TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared { config, requests: AtomicU64::new(0), attempts: Mutex::new(HashMap::new()) });
        let (shutdown, stopped) = watch::channel(false);
        let accept_shared = shared.clone();
        runtime().spawn(async move {
            let mut stopped_accept = stopped.clone();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        if let Ok((stream, _)) = accepted {
                            let _ = stream.set_nodelay(true);
                            let shared = accept_shared.clone();
                            let mut stopped = stopped.clone();
                            runtime().spawn(async move {
                                tokio::select! {
                                    _ = serve_connection(stream, shared) => {}
                                    _ = stopped.wait_for(|s| *s) => {}
                                }
                            });
                        }
                    }
                    _ = stopped_accept.wait_for(|s| *s) => break,
                }
            }
        });
        Ok(Sandbox { shared, port, host, shutdown: Some(shutdown) })
    }

    pub fn url(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}", self.host, self.port)
        } else {
            format!("http://{}:{}", self.host, self.port)
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    pub fn stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(true);
            // Give the accept loop a moment to drop the listener, so the port refuses at once.
            for _ in 0..50 {
                if std::net::TcpStream::connect_timeout(
                    &std::net::SocketAddr::from(([127, 0, 0, 1], self.port)),
                    Duration::from_millis(20),
                )
                .is_err()
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Request {
    method: String,
    path: String,
    api_key: Option<String>,
    close: bool,
    body_length: usize,
}

/// Reads one request head. `Ok(None)` when the client closed the connection cleanly.
async fn read_head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> io::Result<Option<Result<Request, &'static str>>> {
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = buffer[..end].to_vec();
            buffer.drain(..end + 4);
            return Ok(Some(parse_head(&head)));
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Ok(Some(Err("request head too large")));
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

fn parse_head(head: &[u8]) -> Result<Request, &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "request head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().ok_or("empty request")?.split(' ');
    let method = request_line.next().filter(|m| !m.is_empty()).ok_or("no method")?.to_string();
    let path = request_line.next().filter(|p| p.starts_with('/')).ok_or("no path")?.to_string();
    let version = request_line.next().ok_or("no HTTP version")?;
    let mut request = Request { method, path, api_key: None, close: version == "HTTP/1.0", body_length: 0 };
    for line in lines {
        let (name, value) = line.split_once(':').ok_or("malformed header")?;
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "x-partner-key" => request.api_key = Some(value.to_string()),
            "connection" => request.close = value.eq_ignore_ascii_case("close"),
            "content-length" => request.body_length = value.parse().map_err(|_| "bad content-length")?,
            "transfer-encoding" => return Err("request bodies are not supported"),
            _ => {}
        }
    }
    Ok(request)
}

fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// (is markets, token) for the two routes; the token must be exactly one segment.
fn route(path: &str) -> Option<(bool, String)> {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let (markets, segment) = match path.strip_prefix("/listings/market/") {
        Some(rest) => (true, rest),
        None => (false, path.strip_prefix("/listings/")?),
    };
    if segment.is_empty() || segment.contains('/') {
        return None;
    }
    Some((markets, percent_decode(segment)?))
}

struct Response {
    status: u16,
    reason: &'static str,
    body: String,
    extra_headers: Vec<(&'static str, String)>,
}

fn json_error(status: u16, reason: &'static str, message: &str) -> Response {
    Response { status, reason, body: format!("{{\"error\":{}}}", serde_json::to_string(message).unwrap_or_default()), extra_headers: Vec::new() }
}

async fn write_response(stream: &mut TcpStream, response: &Response, close: bool, truncate: bool) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        response.status,
        response.reason,
        response.body.len()
    );
    for (name, value) in &response.extra_headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str(if close { "connection: close\r\n\r\n" } else { "connection: keep-alive\r\n\r\n" });
    let body = response.body.as_bytes();
    let body = if truncate { &body[..body.len() / 2] } else { body };
    let mut message = Vec::with_capacity(head.len() + body.len());
    message.extend_from_slice(head.as_bytes());
    message.extend_from_slice(body);
    stream.write_all(&message).await?;
    stream.flush().await
}

async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) -> io::Result<()> {
    let mut buffer = Vec::with_capacity(1024);
    loop {
        let request = match read_head(&mut stream, &mut buffer).await? {
            None => return Ok(()),
            Some(Err(why)) => {
                write_response(&mut stream, &json_error(400, "Bad Request", why), true, false).await?;
                return Ok(());
            }
            Some(Ok(request)) => request,
        };
        // Discard any request body so the next request on the connection starts cleanly.
        while buffer.len() < request.body_length {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
        buffer.drain(..request.body_length);
        shared.requests.fetch_add(1, Ordering::Relaxed);

        let (response, fault) = answer(&shared, &request).await;
        match fault {
            Fault::Drop => return Ok(()),
            Fault::Truncate => {
                write_response(&mut stream, &response, true, true).await?;
                return Ok(());
            }
            _ => write_response(&mut stream, &response, request.close, false).await?,
        }
        if request.close {
            return Ok(());
        }
    }
}

async fn answer(shared: &Shared, request: &Request) -> (Response, Fault) {
    let config = &shared.config;
    if request.method != "GET" && request.method != "HEAD" {
        let mut response = json_error(405, "Method Not Allowed", "only GET is served");
        response.extra_headers.push(("allow", "GET".into()));
        return (response, Fault::None);
    }
    let Some((markets, token)) = route(&request.path) else {
        return (json_error(404, "Not Found", "not found"), Fault::None);
    };
    if let Some(key) = &config.api_key {
        if request.api_key.as_deref() != Some(key.as_str()) {
            return (json_error(401, "Unauthorized", "missing or invalid x-partner-key"), Fault::None);
        }
    }
    if !config.latency.is_zero() {
        tokio::time::sleep(config.latency).await;
    }
    let attempt = shared.next_attempt(markets, &token);
    let fault = shared.draw_fault(markets, &token, attempt);
    let mut response = match fault {
        Fault::Drop => json_error(500, "Internal Server Error", "dropped"),
        Fault::ServerError => json_error(503, "Service Unavailable", "the sandbox is pretending to be down"),
        Fault::RateLimited => {
            let mut response = json_error(429, "Too Many Requests", "too many requests");
            response.extra_headers.push(("retry-after", config.retry_after.to_string()));
            response
        }
        Fault::InvalidJson => Response {
            status: 200,
            reason: "OK",
            body: format!("{{\"data\": {{\"id\": {}, \"current_price\": ", serde_json::to_string(&token).unwrap_or_default()),
            extra_headers: Vec::new(),
        },
        Fault::None | Fault::Truncate => {
            if token.starts_with("unknown") {
                json_error(404, "Not Found", "no such token")
            } else {
                let body = if markets { markets_body(config.seed, &token) } else { listing_body(config.seed, &token) };
                Response { status: 200, reason: "OK", body, extra_headers: Vec::new() }
            }
        }
    };
    response.extra_headers.push(("x-sandbox-attempt", attempt.to_string()));
    (response, fault)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn raw_get(sandbox: &Sandbox, path: &str, key: Option<&str>) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", sandbox.port())).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let key_header = key.map(|k| format!("x-partner-key: {k}\r\n")).unwrap_or_default();
        write!(stream, "GET {path} HTTP/1.1\r\nhost: x\r\n{key_header}connection: close\r\n\r\n").unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    }

    fn status(response: &str) -> u16 {
        response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    #[test]
    fn routes_keys_and_segments() {
        let sandbox = Sandbox::start(SandboxConfig { api_key: Some("k".into()), ..Default::default() }).unwrap();
        assert_eq!(status(&raw_get(&sandbox, "/listings/bitcoin", Some("k"))), 200);
        assert_eq!(status(&raw_get(&sandbox, "/listings/market/bitcoin", Some("k"))), 200);
        assert_eq!(status(&raw_get(&sandbox, "/listings/bitcoin", None)), 401);
        assert_eq!(status(&raw_get(&sandbox, "/listings/bitcoin", Some("nope"))), 401);
        assert_eq!(status(&raw_get(&sandbox, "/listings/unknown-x", Some("k"))), 404);
        assert_eq!(status(&raw_get(&sandbox, "/listings/a/b", Some("k"))), 404);
        let decoded = raw_get(&sandbox, "/listings/a%2Fb", Some("k"));
        assert_eq!(status(&decoded), 200);
        assert!(decoded.contains("\"id\":\"a/b\""));
        assert_eq!(sandbox.requests(), 7);
    }

    #[test]
    fn faults_and_retries() {
        let always = |config: SandboxConfig| Sandbox::start(config).unwrap();
        let sb = always(SandboxConfig { error_rate: 1.0, ..Default::default() });
        assert_eq!(status(&raw_get(&sb, "/listings/x", None)), 503);
        let sb = always(SandboxConfig { rate_limit_rate: 1.0, retry_after: 7, ..Default::default() });
        assert!(raw_get(&sb, "/listings/x", None).contains("retry-after: 7"));
        let sb = always(SandboxConfig { drop_rate: 1.0, ..Default::default() });
        assert_eq!(raw_get(&sb, "/listings/x", None), "");
        let sb = always(SandboxConfig { invalid_json_rate: 1.0, ..Default::default() });
        let response = raw_get(&sb, "/listings/x", None);
        assert_eq!(status(&response), 200);
        let body = response.split("\r\n\r\n").nth(1).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(body).is_err());
        let sb = always(SandboxConfig { truncate_rate: 1.0, ..Default::default() });
        let response = raw_get(&sb, "/listings/x", None);
        let declared: usize = response.lines().find_map(|l| l.strip_prefix("content-length: ")).unwrap().trim().parse().unwrap();
        assert!(response.split("\r\n\r\n").nth(1).unwrap().len() < declared);
        let sb = always(SandboxConfig { error_rate: 0.5, seed: 3, ..Default::default() });
        let statuses: Vec<u16> = (0..20).map(|_| status(&raw_get(&sb, "/listings/y", None))).collect();
        assert!(statuses.contains(&200) && statuses.contains(&503));
    }

    #[test]
    fn invalid_rates_and_stop() {
        assert!(Sandbox::start(SandboxConfig { error_rate: 2.0, ..Default::default() }).is_err());
        assert!(Sandbox::start(SandboxConfig { error_rate: 0.7, drop_rate: 0.7, ..Default::default() }).is_err());
        let mut sb = Sandbox::start(SandboxConfig::default()).unwrap();
        let port = sb.port();
        sb.stop();
        sb.stop();
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    }

    #[test]
    fn garbage_requests_get_400() {
        let sb = Sandbox::start(SandboxConfig::default()).unwrap();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", sb.port())).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.write_all(b"\x00\xff garbage\r\n\r\n").unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        assert_eq!(status(&response), 400);
    }
}
