//! Reads every file under the folders given as fuzz inputs (a listing folder's files split at
//! 0x1E into bodies read one after another, a markets folder's files one body each) and prints
//! one line per file: its name and a digest of the frames and errors. Two builds of the core
//! compare by diffing their output:
//!
//!     cargo run --release --example parse_digest --features sandbox -- fuzz/corpus/parse_listing fuzz/corpus/parse_markets
use std::fmt::Write;
use std::hash::{Hash, Hasher};

use _core::{parse_listings, parse_markets, ListingBody, MarketsBody};
use polars::prelude::DataFrame;

fn frame_text(out: &mut String, name: &str, frame: &DataFrame) {
    let _ = writeln!(out, "{name} {}x{}", frame.height(), frame.width());
    for column in frame.columns() {
        let _ = write!(out, " {}:", column.name());
        for i in 0..column.len() {
            let _ = write!(out, "{:?}|", column.get(i).unwrap());
        }
        out.push('\n');
    }
}

fn main() {
    let verbose = std::env::var_os("DIGEST_VERBOSE").is_some();
    for folder in std::env::args().skip(1) {
        let markets = folder.contains("markets");
        let mut paths: Vec<_> = std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().path()).collect();
        paths.sort();
        for path in paths {
            let data = std::fs::read(&path).unwrap();
            let mut text = String::new();
            if markets {
                let body = MarketsBody { body: &data, token: "fuzz", fetched_at: Some(0) };
                let (frames, results) = parse_markets(std::slice::from_ref(&body));
                for result in &results {
                    let _ = writeln!(text, "{result:?}");
                }
                frame_text(&mut text, "markets", &frames.markets);
                frame_text(&mut text, "drift", &frames.drift);
            } else {
                let bodies: Vec<_> = data
                    .split(|&byte| byte == 0x1E)
                    .take(16)
                    .map(|body| ListingBody { body, token: Some("fuzz"), fetched_at: Some(0) })
                    .collect();
                let (frames, results) = parse_listings(&bodies);
                for result in &results {
                    let _ = writeln!(text, "{result:?}");
                }
                for (name, frame) in frames.into_named() {
                    frame_text(&mut text, name, &frame);
                }
            }
            if verbose {
                println!("== {}\n{text}", path.display());
            } else {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                text.hash(&mut hasher);
                println!("{} {:016x}", path.display(), hasher.finish());
            }
        }
    }
}
