//! Parse throughput of the Rust core alone, for profiling (`perf record`, callgrind):
//!
//!     cargo run --release --example parse_throughput --features sandbox -- [bodies] [runs]
//!     cargo run --release --example parse_throughput --features sandbox -- SHAPE.bin [runs]
//!
//! The bodies are the Sandbox's listings at the benchmarks' fixed time, as `bench_parse.py`
//! makes them, or one shape's bodies as `bench_parse.py --dump DIR` writes them (a file whose
//! name says markets holds markets bodies); the figure is the best run's MB/s. Under
//! `valgrind --tool=callgrind --toggle-collect='*parse_listings*' --toggle-collect='*parse_markets*'`
//! the instructions are the parser's alone.

use std::time::Instant;

use _core::{parse_listings, parse_markets, sandbox_body, Endpoint, ListingBody, MarketsBody};

/// 2026-11-23T00:00:00Z, the benchmarks' `SANDBOX_NOW`.
const NOW_MS: i64 = 1_795_392_000_000;

/// The bodies, cached in the temporary folder between runs (making them costs more than
/// parsing them, and would drown the parser in a profile).
fn bodies(count: usize) -> Vec<String> {
    let cache = std::env::temp_dir().join(format!("defilens-parse-throughput-{count}-{NOW_MS}.jsonl"));
    if let Ok(text) = std::fs::read_to_string(&cache) {
        return text.lines().map(str::to_owned).collect();
    }
    let bodies: Vec<String> =
        (0..count).map(|i| sandbox_body(1, Endpoint::Listing, &format!("token-{i}"), NOW_MS)).collect();
    // One body per line: the Sandbox writes compact JSON.
    assert!(bodies.iter().all(|b| !b.contains('\n')));
    let _ = std::fs::write(&cache, bodies.join("\n"));
    bodies
}

/// The bodies of a `bench_parse.py --dump` file: each a little-endian u32 length, then its bytes.
fn dumped(path: &str) -> Vec<String> {
    let bytes = std::fs::read(path).expect("a file of bodies");
    let mut bodies = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let length = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes")) as usize;
        bodies.push(String::from_utf8(bytes[at + 4..at + 4 + length].to_vec()).expect("UTF-8 bodies"));
        at += 4 + length;
    }
    bodies
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let file = args.next_if(|arg| arg.parse::<usize>().is_err());
    let mut args = args.map(|a| a.parse::<usize>().expect("a whole number"));
    let bodies = match &file {
        Some(path) => dumped(path),
        None => bodies(args.next().unwrap_or(20_000)),
    };
    let count = bodies.len();
    let runs = args.next().unwrap_or(10);
    let markets = file.as_deref().is_some_and(|path| path.contains("markets"));
    let megabytes = bodies.iter().map(String::len).sum::<usize>() as f64 / 1e6;
    let inputs: Vec<ListingBody<'_>> =
        bodies.iter().map(|b| ListingBody { body: b.as_bytes(), token: None, fetched_at: Some(NOW_MS) }).collect();
    let markets_inputs: Vec<MarketsBody<'_>> =
        bodies.iter().map(|b| MarketsBody { body: b.as_bytes(), token: "t", fetched_at: Some(NOW_MS) }).collect();
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let started = Instant::now();
        if markets {
            let (frames, results) = parse_markets(&markets_inputs);
            assert!(results.iter().all(Result::is_ok));
            std::hint::black_box(frames);
        } else {
            let (frames, results) = parse_listings(&inputs);
            assert!(results.iter().all(Result::is_ok));
            std::hint::black_box(frames);
        }
        best = best.min(started.elapsed().as_secs_f64());
    }
    println!("{count} bodies, {megabytes:.1} MB: best {:.1} ms, {:.0} MB/s", best * 1e3, megabytes / best);
}
