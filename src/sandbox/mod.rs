//! A local fake of the DeFi Lens service, for offline demos, the package's own tests and its
//! users' tests. It is not part of the client: no other module imports it, and it is compiled
//! only with the `sandbox` feature (which the wheel turns on).
//!
//! Data are a deterministic function of (seed, token id, time): `market` gives each token a price
//! path and derives candles, indicators and patterns from it; `clock` says what time it is (the
//! wall clock, or a simulated one). Faults are deterministic in (seed, token id, attempt). Each (endpoint, token) pair has an
//! attempt counter; attempt `n` draws its fault from a hash of (seed, endpoint, token, n), so a
//! run is repeatable and a retry can succeed.
//!
//! Order of decisions for each request (`responses::decide`):
//! 1. a request hyper cannot parse gets its 4xx and the connection is closed;
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
//! 7. the data: the market's (with `repaint_rate`, a drawn share of just-closed candles carry
//!    provisional values for a minute: `repaint`), or with a recording the last body recorded for the (endpoint,
//!    token) at or before the clock's time (404 for ids and times the recording does not cover).

pub mod candles_frame;
mod clock;
mod data;
mod listing_body;
mod market;
mod markets_body;
mod precise_timer;
mod random;
mod rate_limit;
mod recording;
mod repaint;
mod responses;
mod server;

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;

#[cfg(all(feature = "python", not(test)))]
pub use clock::wall_clock_ms;
pub use clock::ClockConfig;
pub use market::{known_ids, level_of, Candle, HISTORY};
pub use recording::Recording;
pub use responses::body;

use crate::runtime::runtime;
use responses::{Fault, Shared};

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
    pub clock: ClockConfig,
    /// When set, the Sandbox replays these bodies instead of its market (404 outside them).
    pub recording: Option<Arc<Recording>>,
    /// A real limit, in requests a second (a token bucket with a burst of one second): requests
    /// beyond it get 429 with `Retry-After`.
    pub max_rps: Option<f64>,
    /// Whether answers carry `X-RateLimit-Limit`, `-Remaining` and `-Reset` (with `max_rps`).
    pub rate_headers: bool,
    /// Share of (token, 5-minute close) pairs whose just-closed candles are served with
    /// provisional indicator values for the first minute after the close, then the final ones.
    pub repaint_rate: f64,
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
            clock: ClockConfig::WALL,
            max_rps: None,
            rate_headers: true,
            repaint_rate: 0.0,
            recording: None,
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
        if !(0.0..=1.0).contains(&self.repaint_rate) {
            return invalid(format!("repaint_rate must be between 0 and 1, got {}", self.repaint_rate));
        }
        self.clock.validate().or_else(invalid)?;
        if let Some(rate) = self.max_rps {
            if !(rate.is_finite() && (0.1..=MAX_RPS).contains(&rate)) {
                return invalid(format!(
                    "max_rps must be a number of requests a second from 0.1 to {MAX_RPS}, got {rate}"
                ));
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

/// The highest `max_rps`: beyond it the Sandbox itself is the limit.
const MAX_RPS: f64 = 1_000_000.0;

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
        let shared = Arc::new(Shared::new(config));
        let (stop_signal, stop_requested) = watch::channel(false);
        let (closed_sender, all_closed) = mpsc::channel();
        runtime().spawn(server::accept_loop(listener, shared.clone(), stop_requested, closed_sender));
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

    /// The Sandbox's time, in milliseconds since the epoch (UTC).
    pub fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    /// The Sandbox's clock, for a client that stamps its responses on the Sandbox's time.
    pub fn clock(&self) -> std::sync::Arc<dyn crate::client::clock::Clock> {
        self.shared.clock.clone()
    }

    /// Whether the clock is simulated, and its speed (0: it stands still until `advance`).
    pub fn clock_speed(&self) -> Option<f64> {
        self.shared.clock.is_simulated().then(|| self.shared.clock.speed())
    }

    /// Moves a simulated clock forward by `ms`; returns the new time.
    pub fn advance(&self, ms: i64) -> Result<i64, String> {
        self.shared.clock.advance(ms)
    }

    /// The closed candles of `interval` (`"5m"` ... `"1w"`) behind the current time, oldest
    /// first: the candles the listing's indicators are computed from.
    pub fn candles(&self, token: &str, interval: &str) -> Option<Vec<Candle>> {
        candles(self.shared.config.seed, token, interval, self.now_ms())
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
                tokio::task::block_in_place(wait);
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

/// Whether the Sandbox lists `token`: an id the real service could have (a lowercase slug of
/// letters, digits, `-`, `_` and `.`), except those beginning with `unknown`, which are its
/// way to ask for a 404, and typos of a known id (`typo_of`). `Bitcoin`, `BTC`, `bit coin` or
/// `etherum` get 404 as the service would.
pub fn lists(token: &str) -> bool {
    !token.is_empty()
        && !token.starts_with("unknown")
        && token.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
        && typo_of(token).is_none()
}

/// Real ids (CoinGecko's) that are one slip from a known id: served as tokens of their own.
/// Checked against a CoinGecko `/coins/list` of 12,868 ids: no other id of it is a slip of one.
const REAL_SLIPS: &[&str] = &["cogecoin", "dogcoin", "gitcoin", "shina-inu", "solama"];

/// The known id (`known_ids`) that `token` is a typo of: one slip of the fingers from it (`is_slip`)
/// and not a real id itself; `None` for a known id and for every other slug (those are generated
/// tokens of their own). Users test with their own ids, so the rule is narrow: `filecoin`,
/// `polkadex`, `iron` and `avalanche` are tokens, not typos of litecoin, polkadot, tron and avalanche-2.
pub fn typo_of(token: &str) -> Option<&'static str> {
    let known = known_ids();
    if known.contains(&token) || REAL_SLIPS.contains(&token) {
        return None;
    }
    known.into_iter().find(|known| is_slip(token.as_bytes(), known.as_bytes()))
}

/// Whether `typed` is `meant` with one slip of the fingers: two neighbouring letters swapped
/// (`bticoin`), a letter doubled (`bitcoinn`) or dropped (`etherum`), or a key struck beside the
/// right one on a QWERTY keyboard (`bitcoim`). A letter changed for a distant one, or added
/// without doubling its neighbour, makes another word (`likecoin`, `bitcoinz`).
fn is_slip(typed: &[u8], meant: &[u8]) -> bool {
    if typed.len() == meant.len() {
        let mut differ = (0..typed.len()).filter(|&i| typed[i] != meant[i]);
        return match (differ.next(), differ.next(), differ.next()) {
            (Some(i), None, None) => keys_touch(typed[i], meant[i]),
            (Some(i), Some(j), None) => j == i + 1 && typed[i] == meant[j] && typed[j] == meant[i],
            _ => false,
        };
    }
    let dropped = |long: &[u8], short: &[u8], i: usize| long[..i] == short[..i] && long[i + 1..] == short[i..];
    if typed.len() == meant.len() + 1 {
        return (1..typed.len()).any(|i| typed[i] == typed[i - 1] && dropped(typed, meant, i));
    }
    meant.len() == typed.len() + 1 && (0..meant.len()).any(|i| dropped(meant, typed, i))
}

/// Whether two keys are neighbours on a QWERTY keyboard (each row sits half a key right of the one above).
fn keys_touch(a: u8, b: u8) -> bool {
    const ROWS: [&[u8]; 4] = [b"1234567890-", b"qwertyuiop", b"asdfghjkl", b"zxcvbnm"];
    let place =
        |key: u8| ROWS.iter().enumerate().find_map(|(row, keys)| Some((row, keys.iter().position(|&k| k == key)?)));
    let (Some((row_a, col_a)), Some((row_b, col_b))) = (place(a), place(b)) else { return false };
    let ((upper, up_col), (lower, low_col)) =
        if row_a <= row_b { ((row_a, col_a), (row_b, col_b)) } else { ((row_b, col_b), (row_a, col_a)) };
    match lower - upper {
        0 => up_col.abs_diff(low_col) == 1,
        1 => low_col == up_col || low_col + 1 == up_col,
        _ => false,
    }
}

/// The closed candles of `interval` at `now_ms` for (seed, token); `None` for an unknown interval.
pub fn candles(seed: u64, token: &str, interval: &str, now_ms: i64) -> Option<Vec<Candle>> {
    let level = level_of(interval)?;
    Some(market::TokenMarket::new(seed, token).candles(level, now_ms, HISTORY))
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
    Err(last_error
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} resolves to no address"))))
}

#[cfg(test)]
mod tests;
