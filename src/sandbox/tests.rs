//! The Sandbox seen from outside: raw bytes on a socket, and reqwest.

use super::*;
use crate::model::Endpoint;

/// The tests' Sandboxes stand still at this time, so a body can be compared with `body`.
const NOW: i64 = 1_795_305_600_000; // 2026-11-22T00:00:00Z

fn listing_body(seed: u64, token: &str) -> String {
    body(seed, Endpoint::Listing, token, NOW)
}

fn markets_body(seed: u64, token: &str) -> String {
    body(seed, Endpoint::Markets, token, NOW)
}

fn still() -> SandboxConfig {
    SandboxConfig { clock: ClockConfig { start_ms: Some(NOW), speed: None }, ..SandboxConfig::default() }
}
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
/// closes it. (A server that gives up on a request may close before all of it was sent.)
fn exchange(sandbox: &Sandbox, request: &[u8]) -> Vec<u8> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", sandbox.port())).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let _ = stream.write_all(request);
    // Half-close, so a server waiting for more of a request sees the end instead.
    let _ = stream.shutdown(std::net::Shutdown::Write);
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
    let sandbox = start(still());
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
    // A typo of a known id is not a token of its own (the real service answers 404 to etherum).
    for typo in ["etherum", "bitcoim", "bticoin", "ethereumm", "soalna"] {
        let response = get(&sandbox, &format!("/listings/{typo}"), None);
        assert_eq!(response.status, 404, "{typo}");
        assert!(response.json()["error"].as_str().unwrap_or("").contains("did you mean"), "{typo}");
    }
    for path in ["/listings/a/b", "/listings/", "/listings/market/", "/listings/bitcoin/", "/nope", "/"] {
        let response = get(&sandbox, path, None);
        assert_eq!(response.status, 404, "{path}");
        assert_eq!(response.json(), serde_json::json!({"error": "not found"}));
    }

    // Ids are percent-decoded; only lowercase slugs are listed (as the service's ids are).
    let encoded = get(&sandbox, "/listings/bit%63oin", None);
    assert_eq!(encoded.status, 200);
    assert_eq!(encoded.json()["data"]["id"], "bitcoin");
    assert_eq!(get(&sandbox, "/listings/market/usd%2dcoin", None).status, 200);
    for not_a_slug in
        ["/listings/a%2Fb", "/listings/market/a%2fb", "/listings/a+b%20c", "/listings/%C3%BCber", "/listings/BTC"]
    {
        let response = get(&sandbox, not_a_slug, None);
        assert_eq!(response.status, 404, "{not_a_slug}");
        assert!(response.json()["error"].as_str().is_some_and(|e| e.contains("lowercase slugs")), "{not_a_slug}");
    }
    assert_eq!(get(&sandbox, "/listings/bitcoin?x=1", None).status, 200);
    assert_eq!(get(&sandbox, "/listings/bad%zz", None).status, 400);
    assert_eq!(get(&sandbox, "/listings/bad%FF", None).status, 400);
    assert_eq!(sandbox.requests(), 26);
    assert!(sandbox.url().starts_with("http://127.0.0.1:"));
    assert!(sandbox.url().ends_with(&sandbox.port().to_string()));
}

#[test]
fn api_key_is_checked_before_anything_else() {
    let sandbox = start(SandboxConfig { api_key: Some("secret".into()), ..still() });
    assert_eq!(get(&sandbox, "/listings/bitcoin", None).status, 401);
    assert_eq!(get(&sandbox, "/listings/bitcoin", Some("wrong")).status, 401);
    assert_eq!(get(&sandbox, "/listings/unknown-x", None).status, 401);
    let ok = get(&sandbox, "/listings/bitcoin", Some("secret"));
    assert_eq!(ok.status, 200);
    // Refused requests do not use up attempts.
    assert_eq!(ok.header("x-sandbox-attempt"), Some("1"));
    let upper_case =
        exchange(&sandbox, b"GET /listings/market/eth HTTP/1.1\r\nX-Partner-Key: secret\r\nConnection: close\r\n\r\n");
    assert_eq!(parse_response(&upper_case).map(|(r, _)| r.status), Some(200));
}

#[test]
fn keep_alive_pipelining_head_and_other_methods() {
    let sandbox = start(still());
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
    let mut request =
        format!("POST /listings/x HTTP/1.1\r\ncontent-length: 100000\r\n\r\n{}", "b".repeat(100_000)).into_bytes();
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
fn malformed_requests_are_refused_and_never_hurt_the_server() {
    let sandbox = start(still());
    let oversized = format!("GET /listings/x HTTP/1.1\r\nx-filler: {}\r\n\r\n", "a".repeat(20_000));
    // hyper answers what it can with a 4xx (400, or 431 for a head over the limit) and closes
    // the rest of these connections unanswered; never a 2xx, never a hang.
    let requests: Vec<Vec<u8>> = vec![
        b"\x00\xff garbage\r\n\r\n".to_vec(),
        b"GET /listings/x\r\n\r\n".to_vec(),
        b"GET /listings/x HTTP/9.9\r\n\r\n".to_vec(),
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        b"GET /listings/x HTTP/1.1\r\nno colon here\r\n\r\n".to_vec(),
        b"GET /listings/x HTTP/1.1\r\ncontent-length: ten\r\n\r\n".to_vec(),
        b"GET /listings/x HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab".to_vec(),
        oversized.into_bytes(),
        vec![b'G'; 40_000],
    ];
    for request in &requests {
        let received = exchange(&sandbox, request);
        let status = parse_response(&received).map(|(r, _)| r.status);
        let what = String::from_utf8_lossy(&request[..request.len().min(60)]).into_owned();
        assert!(status.is_none_or(|s| (400..500).contains(&s)), "{what:?} got {status:?}");
        assert!(status.is_some() || received.is_empty(), "{what:?} got a partial answer");
    }
    // A chunked request body is read and skipped; the service takes no bodies.
    let received = exchange(&sandbox, b"POST /listings/x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_eq!(parse_response(&received).map(|(r, _)| r.status), Some(405));
    // Half a head, then hang up: no answer, no harm.
    assert!(exchange(&sandbox, b"GET /listings/x HTT").is_empty());
    // Bare LF line endings are tolerated.
    let received = exchange(&sandbox, b"GET /listings/x HTTP/1.1\nconnection: close\n\n");
    assert_eq!(parse_response(&received).map(|(r, _)| r.status), Some(200));
    assert_eq!(get(&sandbox, "/listings/still-alive", None).status, 200);
}

#[test]
fn faults_seen_on_the_wire() {
    let sandbox = start(SandboxConfig { error_rate: 1.0, ..still() });
    let response = get(&sandbox, "/listings/x", None);
    assert_eq!(response.status, 503);
    assert!(response.json()["error"].is_string());
    // Faults come before the 404 for unknown ids.
    assert_eq!(get(&sandbox, "/listings/unknown-x", None).status, 503);

    let sandbox = start(SandboxConfig { rate_limit_rate: 1.0, retry_after: 7, ..still() });
    let response = get(&sandbox, "/listings/market/x", None);
    assert_eq!(response.status, 429);
    assert_eq!(response.header("retry-after"), Some("7"));

    let sandbox = start(SandboxConfig { drop_rate: 1.0, ..still() });
    assert!(exchange(&sandbox, b"GET /listings/x HTTP/1.1\r\n\r\n").is_empty());
    assert_eq!(sandbox.requests(), 1);

    let sandbox = start(SandboxConfig { invalid_json_rate: 1.0, ..still() });
    for path in ["/listings/x", "/listings/market/x"] {
        let response = get(&sandbox, path, None);
        assert_eq!(response.status, 200);
        assert_eq!(response.header("content-length"), Some(response.body.len().to_string().as_str()));
        assert!(serde_json::from_slice::<serde_json::Value>(&response.body).is_err());
    }

    let sandbox = start(SandboxConfig { truncate_rate: 1.0, ..still() });
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
        let drop = start(SandboxConfig { drop_rate: 1.0, ..still() });
        assert!(client.get(format!("{}/listings/x", drop.url())).send().await.is_err());

        let truncate = start(SandboxConfig { truncate_rate: 1.0, ..still() });
        let response = client.get(format!("{}/listings/x", truncate.url())).send().await.expect("headers arrive");
        assert_eq!(response.status(), 200);
        assert!(response.bytes().await.is_err(), "a short body must fail to read");

        let invalid = start(SandboxConfig { invalid_json_rate: 1.0, ..still() });
        let response = client.get(format!("{}/listings/x", invalid.url())).send().await.expect("a response");
        assert_eq!(response.status(), 200);
        let body = response.bytes().await.expect("a complete body");
        assert!(serde_json::from_slice::<serde_json::Value>(&body).is_err());

        let limited = start(SandboxConfig { rate_limit_rate: 1.0, retry_after: 3, ..still() });
        let response = client.get(format!("{}/listings/x", limited.url())).send().await.expect("a response");
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("3"));

        let keyed = start(SandboxConfig { api_key: Some("k".into()), ..still() });
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
    let config = SandboxConfig { error_rate: 0.5, seed: 3, ..still() };
    let statuses =
        |sandbox: &Sandbox, path: &str| -> Vec<u16> { (0..20).map(|_| get(sandbox, path, None).status).collect() };
    let first = start(config.clone());
    let run = statuses(&first, "/listings/y");
    assert!(run.contains(&200) && run.contains(&503), "{run:?}");
    assert_eq!(run, statuses(&start(config.clone()), "/listings/y"), "same seed, same faults");
    assert_ne!(run, statuses(&start(SandboxConfig { seed: 4, ..config.clone() }), "/listings/y"));
    // Each (endpoint, token) counts its own attempts.
    assert_eq!(get(&first, "/listings/market/y", None).header("x-sandbox-attempt"), Some("1"));
    assert_eq!(get(&first, "/listings/z", None).header("x-sandbox-attempt"), Some("1"));

    // The way a client retries: keep-alive connections, until success.
    let sandbox = start(SandboxConfig { error_rate: 0.3, rate_limit_rate: 0.2, drop_rate: 0.1, ..still() });
    let client = http_client();
    runtime().block_on(async {
        for token in ["alpha", "beta", "gamma", "delta"] {
            let url = format!("{}/listings/{token}", sandbox.url());
            let mut attempts = 0;
            loop {
                attempts += 1;
                assert!(attempts < 50, "{token} never succeeded");
                let Ok(response) = client.get(&url).send().await else { continue };
                let attempt =
                    response.headers().get("x-sandbox-attempt").and_then(|v| v.to_str().ok()).map(str::to_owned);
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
    let sandbox = start(SandboxConfig { latency: Duration::from_millis(80), ..still() });
    let started = Instant::now();
    assert_eq!(get(&sandbox, "/listings/x", None).status, 200);
    assert!(started.elapsed() >= Duration::from_millis(80));
}

#[test]
fn stop_closes_the_port_and_open_connections() {
    let mut sandbox = start(still());
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
    assert!(
        ended.is_ok()
            || ended.is_err_and(|e| e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::TimedOut)
    );
    assert_eq!(sandbox.requests(), 1);
}

#[test]
fn stop_and_drop_work_inside_the_runtime() {
    runtime().block_on(async {
        let sandbox = start(still());
        let port = sandbox.port();
        drop(sandbox);
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    });
}

#[test]
fn refuses_bad_configurations_and_taken_ports() {
    for config in [
        SandboxConfig { error_rate: 1.5, ..still() },
        SandboxConfig { drop_rate: -0.1, ..still() },
        SandboxConfig { truncate_rate: f64::NAN, ..still() },
        SandboxConfig { error_rate: 0.7, rate_limit_rate: 0.4, ..still() },
    ] {
        let error = Sandbox::start(config).expect_err("invalid rates are refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("rate"), "{error}");
    }
    assert!(Sandbox::start(SandboxConfig { error_rate: 0.1, rate_limit_rate: 0.2, invalid_json_rate: 0.7, ..still() })
        .is_ok());

    let taken = start(still());
    let error = Sandbox::start(SandboxConfig { port: taken.port(), ..still() }).expect_err("the port is taken");
    assert_eq!(error.kind(), io::ErrorKind::AddrInUse);
}

#[test]
fn sustains_concurrent_keep_alive_traffic() {
    const TASKS: usize = 20;
    const PER_TASK: usize = 100;
    let sandbox = start(still());
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
    let bytes: usize =
        (0..1000).map(|i| listing_body(0, &format!("t{i}")).len() + markets_body(0, &format!("t{i}")).len()).sum();
    eprintln!("1000 listing + markets bodies ({bytes} bytes) built in {:?}", started.elapsed());
}

#[test]
fn a_repainting_candle_is_provisional_for_a_minute_then_final() {
    let sandbox = start(SandboxConfig {
        repaint_rate: 1.0,
        clock: ClockConfig { start_ms: Some(NOW + 10_000), speed: None },
        ..SandboxConfig::default()
    });
    let rsi = |response: RawResponse| response.json()["data"]["rsi14_5m"].as_f64().expect("a number");
    let provisional = get(&sandbox, "/listings/bitcoin", None);
    assert_ne!(provisional.body, listing_body(0, "bitcoin").into_bytes());
    let provisional_rsi = rsi(provisional);
    // Served again from the body cache, still provisional inside the minute.
    assert_eq!(rsi(get(&sandbox, "/listings/bitcoin", None)), provisional_rsi);
    sandbox.advance(repaint::REPAINT_WINDOW_MS).expect("a simulated clock");
    let last = get(&sandbox, "/listings/bitcoin", None);
    assert_eq!(last.body, listing_body(0, "bitcoin").into_bytes());
    assert_ne!(rsi(last), provisional_rsi);
    assert!(Sandbox::start(SandboxConfig { repaint_rate: 1.5, ..still() }).is_err());
}

#[test]
fn typos_of_known_ids_are_not_listed_and_other_slugs_are() {
    assert_eq!(super::typo_of("etherum"), Some("ethereum"));
    assert_eq!(super::typo_of("etheruem"), Some("ethereum"));
    assert_eq!(super::typo_of("bitcoinn"), Some("bitcoin"));
    for known in super::known_ids() {
        assert_eq!(super::typo_of(known), None, "{known}");
        assert!(super::lists(known), "{known}");
    }
    for slug in ["coin-042", "my-token", "t1", "bitcoin-cash", "wrapped-bitcoin", "tron2x", "sol", "eth"] {
        assert!(super::lists(slug), "{slug}");
    }
    assert!(!super::lists("etherum"));
    assert!(!super::lists("unknown-x"));
}

/// Real ids within one or two edits of a known id: every id of a CoinGecko `/coins/list` (12,868
/// ids) that the earlier rule (any one edit, two for known ids of eight letters or more) answered
/// with 404, and four a user met in notebook 02 and the docs (`filecoin`, `polkadex`, `iron`,
/// `avalanche`). Users test with their own ids; the Sandbox must serve them.
const REAL_IDS_NEAR_KNOWN_ONES: &[&str] = &[
    "asr-coin",
    "atheneum",
    "avalanche",
    "bitcoinv",
    "bitcoinx",
    "bitcoinz",
    "bytecoin",
    "cad-coin",
    "catecoin",
    "chainbing",
    "cogecoin",
    "crogecoin",
    "dagcoin",
    "dimecoin",
    "dogcoin",
    "dogechain",
    "dogecoin-2",
    "dogecola",
    "dogemoon",
    "dogeon",
    "dongcoin",
    "elsd-coin",
    "ethereumx",
    "ethergem",
    "filecoin",
    "gecoin",
    "gitcoin",
    "god-coin",
    "gogocoin",
    "iethereum",
    "iron",
    "jd-coin",
    "kiba-inu",
    "kogecoin",
    "leetcoin",
    "life-coin",
    "likecoin",
    "litecoinz",
    "mog-coin",
    "nether",
    "olecoin",
    "polkadex",
    "popecoin",
    "ratecoin",
    "riecoin",
    "risecoin",
    "shibaw-inu",
    "shila-inu",
    "shina-inu",
    "skolana",
    "solama",
    "tethereum",
    "tlifecoin",
    "tlsd-coin",
    "troy",
    "utu-coin",
    "whitecoin",
    "widecoin",
    "wsb-coin",
    "xlsd-coin",
];

#[test]
fn real_ids_near_a_known_one_are_served_as_tokens_of_their_own() {
    let refused: Vec<_> = REAL_IDS_NEAR_KNOWN_ONES.iter().filter(|id| !super::lists(id)).collect();
    assert!(refused.is_empty(), "real ids answered 404: {refused:?}");
}

#[test]
fn a_typo_is_one_slip_of_the_fingers() {
    // A neighbouring pair swapped, a letter doubled or dropped, a key beside the right one.
    for (typo, meant) in [
        ("bticoin", "bitcoin"),
        ("soalna", "solana"),
        ("etheruem", "ethereum"),
        ("bitcoinn", "bitcoin"),
        ("ethereumm", "ethereum"),
        ("etherum", "ethereum"),
        ("cardno", "cardano"),
        ("bitcoim", "bitcoin"),
        ("trpn", "tron"),
        ("avalanche2", "avalanche-2"),
        ("shiba-imu", "shiba-inu"),
    ] {
        assert_eq!(super::typo_of(typo), Some(meant), "{typo}");
        assert!(!super::lists(typo), "{typo}");
    }
    // Not one slip: two edits, a letter added that doubles nothing, keys far apart.
    for slug in ["bitconn", "bitcoinq", "xbitcoin", "ethereun-x", "tzon", "soalan", "avalanche-3x"] {
        assert_eq!(super::typo_of(slug), None, "{slug}");
        assert!(super::lists(slug), "{slug}");
    }
}

#[test]
fn a_client_reads_and_follows_the_clock_a_sandbox_reports() {
    let timeout = std::time::Duration::from_secs(10);
    let standing = start(still());
    let followed = runtime().block_on(crate::client::sandbox_clock_at(&standing.url(), timeout)).expect("a clock");
    assert_eq!((followed.speed(), crate::client::clock::Clock::now_ms(&followed)), (0.0, NOW));
    let running = start(SandboxConfig { clock: ClockConfig { start_ms: Some(NOW), speed: Some(600.0) }, ..still() });
    let followed = runtime().block_on(crate::client::sandbox_clock_at(&running.url(), timeout)).expect("a clock");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (ours, theirs) = (crate::client::clock::Clock::now_ms(&followed), running.now_ms());
    // 600x: a millisecond of real time is 0.6 s of the clock's; they agree within a few.
    assert!(ours.abs_diff(theirs) < 3_000, "followed {ours}, the Sandbox's {theirs}");
    assert!(runtime().block_on(crate::client::sandbox_clock_at("http://127.0.0.1:9", timeout)).is_err());
}
