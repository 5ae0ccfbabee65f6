//! Many bodies at once: contiguous chunks parsed on scoped threads, merged in order.

use super::listing::{ListingBody, ListingBuilder};
use super::markets::{MarketsBody, MarketsBuilder, MarketsSummary};
use crate::error::Error;
use crate::frames::{ListingFrames, MarketsFrames};

/// How many threads a batch of `n` bodies is worth: one per core, but never fewer than a few
/// hundred bodies per thread, where spawning would cost more than it saves.
fn batch_threads(n: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    cores.min(n / 256).max(1)
}

fn split_in_chunks<T>(items: &[T], parts: usize) -> impl Iterator<Item = &[T]> {
    let size = items.len().div_ceil(parts.max(1)).max(1);
    items.chunks(size)
}

/// Runs `parse_chunk` over contiguous chunks of `bodies` on scoped threads and merges the
/// results in order, so row order always follows body order.
fn parse_in_parallel<B: Sync, R: Send>(
    bodies: &[B],
    parse_chunk: impl Fn(&[B]) -> R + Sync,
    merge: impl Fn(&mut R, R),
) -> R {
    let threads = batch_threads(bodies.len());
    if threads == 1 {
        return parse_chunk(bodies);
    }
    let parse_chunk = &parse_chunk;
    let parts: Vec<R> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            split_in_chunks(bodies, threads).map(|chunk| scope.spawn(move || parse_chunk(chunk))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    let mut parts = parts.into_iter();
    let mut merged = parts.next().unwrap_or_else(|| parse_chunk(&[]));
    for part in parts {
        merge(&mut merged, part);
    }
    merged
}

/// Parses many listing bodies into one set of frames, in order, using every core.
/// Each body's result is the token its rows carry, or why it could not be read.
pub fn parse_listings(bodies: &[ListingBody<'_>]) -> (ListingFrames, Vec<Result<String, Error>>) {
    let parsed = parse_in_parallel(
        bodies,
        |chunk| {
            let mut builder = ListingBuilder::new(chunk.len());
            let results: Vec<_> = chunk.iter().map(|body| builder.append(body)).collect();
            (builder.finish(), results)
        },
        |(frames, results), (more_frames, more_results)| {
            frames.vstack(more_frames);
            results.extend(more_results);
        },
    );
    if bodies.len() >= RELEASE_AFTER {
        crate::memory::release_free_memory();
    }
    parsed
}

/// Batches of at least this many bodies give the memory they freed back to the system.
const RELEASE_AFTER: usize = 1000;

/// Parses many markets bodies into one markets frame, in order.
pub fn parse_markets(bodies: &[MarketsBody<'_>]) -> (MarketsFrames, Vec<Result<MarketsSummary, Error>>) {
    parse_in_parallel(
        bodies,
        |chunk| {
            let mut builder = MarketsBuilder::new(chunk.len() * 16);
            let results: Vec<_> = chunk.iter().map(|body| builder.append(body)).collect();
            (builder.finish(), results)
        },
        |(frame, results), (more_frame, more_results)| {
            frame.vstack(more_frame);
            results.extend(more_results);
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_batches_keep_order() {
        let bodies: Vec<String> =
            (0..1000).map(|i| format!(r#"{{"data": {{"id": "t{i}", "rsi14_1h": {i}}}}}"#)).collect();
        let inputs: Vec<_> =
            bodies.iter().map(|b| ListingBody { body: b.as_bytes(), token: None, fetched_at: None }).collect();
        let (frames, results) = parse_listings(&inputs);
        assert!(results.iter().all(Result::is_ok));
        let values: Vec<Option<f64>> = frames.indicators.column("value").unwrap().f64().unwrap().iter().collect();
        assert_eq!(values, (0..1000).map(|i| Some(f64::from(i))).collect::<Vec<_>>());
    }
}
