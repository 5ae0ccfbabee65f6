//! Parse-only rates of serde_json, sonic-rs and simd-json beside the core's `parse_listings`
//! (bodies to frames), one thread, on the shapes `bench_parse.py --shapes --dump DIR` writes.
//!
//!     taskset -c 0 cargo run --release -- DIR [runs] [shape]
//!
//! Each file of DIR is one shape: bodies as a little-endian u32 length and the bytes; a file
//! whose name says `markets` holds markets bodies. With a third argument only the files whose
//! name holds it are read, and by the core alone (for a profiler).

use std::path::Path;
use std::time::Instant;

#[cfg(feature = "frames")]
use _core::{parse_listings, parse_markets, ListingBody, MarketsBody};
use serde::de::IgnoredAny;

fn bodies(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).expect("a shape file");
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let length = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push(bytes[at + 4..at + 4 + length].to_vec());
        at += 4 + length;
    }
    out
}

/// The core's frames of every body (one thread when the process is pinned to one core): the
/// rows of its main frame.
#[cfg(feature = "frames")]
fn core_frames(bodies: &[Vec<u8>], markets: bool) -> usize {
    if markets {
        let inputs: Vec<MarketsBody<'_>> =
            bodies.iter().map(|b| MarketsBody { body: b, token: "t", fetched_at: Some(0) }).collect();
        let (frames, results) = parse_markets(&inputs);
        assert!(results.iter().all(Result::is_ok));
        frames.markets.height()
    } else {
        let inputs: Vec<ListingBody<'_>> =
            bodies.iter().map(|b| ListingBody { body: b, token: None, fetched_at: Some(0) }).collect();
        let (frames, results) = parse_listings(&inputs);
        assert!(results.iter().all(Result::is_ok));
        frames.indicators.height()
    }
}

/// The best of `runs` runs of `work`, in seconds.
fn best<T>(runs: usize, mut work: impl FnMut() -> T) -> f64 {
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(work());
            started.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let folder = args.next().expect("the folder bench_parse.py --dump wrote");
    let runs = args.next().map_or(5, |r| r.parse().expect("a number of runs"));
    let only = args.next();
    let mut files: Vec<_> = std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|file| only.as_ref().is_none_or(|only| file.to_string_lossy().contains(only.as_str())));
    files.sort();
    if only.is_none() {
        println!("| shape | MB | defilens frames | serde_json, IgnoredAny | sonic-rs, IgnoredAny | sonic-rs, Value | simd-json, tape (with the copy it needs) |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
    }
    for file in files {
        let bodies = bodies(&file);
        let megabytes = bodies.iter().map(Vec::len).sum::<usize>() as f64 / 1e6;
        let rate = |seconds: f64| format!("{:.0}", megabytes / seconds);
        #[cfg(feature = "frames")]
        let frames = {
            let markets = file.to_string_lossy().contains("markets");
            rate(best(runs, || core_frames(&bodies, markets)))
        };
        #[cfg(not(feature = "frames"))]
        let frames = "-".to_string();
        if only.is_some() {
            println!("{}: {frames} MB/s", file.display());
            continue;
        }
        let serde = best(runs, || {
            for body in &bodies {
                std::hint::black_box(serde_json::from_slice::<IgnoredAny>(body).unwrap());
            }
        });
        let sonic = best(runs, || {
            for body in &bodies {
                std::hint::black_box(sonic_rs::from_slice::<IgnoredAny>(body).unwrap());
            }
        });
        let sonic_value = best(runs, || {
            for body in &bodies {
                std::hint::black_box(sonic_rs::from_slice::<sonic_rs::Value>(body).unwrap());
            }
        });
        let mut buffer = Vec::new();
        let simd = best(runs, || {
            for body in &bodies {
                buffer.clear();
                buffer.extend_from_slice(body);
                std::hint::black_box(simd_json::to_tape(&mut buffer).unwrap().0.len());
            }
        });
        let name = file.file_stem().unwrap().to_string_lossy();
        println!(
            "| {name} | {megabytes:.1} | {frames} | {} | {} | {} | {} |",
            rate(serde),
            rate(sonic),
            rate(sonic_value),
            rate(simd)
        );
    }
}
