//! Parse throughput of the Rust core alone, for profiling (`perf record`, callgrind):
//!
//!     cargo run --release --example parse_throughput --features sandbox -- [bodies] [runs]
//!
//! The bodies are the Sandbox's listings at the benchmarks' fixed time, as `bench_parse.py`
//! makes them; the figure is the best run's MB/s.

use std::time::Instant;

use _core::{parse_listings, sandbox_body, Endpoint, ListingBody};

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

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a whole number"));
    let count = args.next().unwrap_or(20_000);
    let runs = args.next().unwrap_or(10);
    let bodies = bodies(count);
    let megabytes = bodies.iter().map(String::len).sum::<usize>() as f64 / 1e6;
    let inputs: Vec<ListingBody<'_>> =
        bodies.iter().map(|b| ListingBody { body: b.as_bytes(), token: None, fetched_at: Some(NOW_MS) }).collect();
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let started = Instant::now();
        let (frames, results) = parse_listings(&inputs);
        let seconds = started.elapsed().as_secs_f64();
        assert!(results.iter().all(Result::is_ok));
        std::hint::black_box(frames);
        best = best.min(seconds);
    }
    println!("{count} bodies, {megabytes:.1} MB: best {:.1} ms, {:.0} MB/s", best * 1e3, megabytes / best);
}
