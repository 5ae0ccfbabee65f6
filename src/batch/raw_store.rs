//! The successful response bodies of a batch, kept for `Frames.raw`, compressed.
//!
//! Few callers ever read `Frames.raw`, but it must lose nothing, so every body is kept: lz4
//! against a dictionary, a sample body of the same endpoint (`model::samples`; the service
//! repeats the same keys in every body, which the dictionary turns into short back-references:
//! the Sandbox's listings shrink to about 38% of their size, against 54% without one), packed
//! end to end into large
//! segments rather than one heap allocation per body, whose headers and holes would add a
//! third again.
//!
//! Compressing (`CompressedBody::new`) and storing (`RawStore::push`) are separate so that the
//! compression can run on the thread that received the body, in parallel with the others.

use crate::model::{samples, Endpoint};

/// Segments are filled, never grown, so no body is ever copied twice.
const SEGMENT_BYTES: usize = 4 << 20;

fn dictionary(endpoint: Endpoint) -> &'static [u8] {
    match endpoint {
        Endpoint::Listing => samples::LISTING,
        Endpoint::Markets => samples::MARKETS,
    }
}

/// One body, compressed, on its way to a `RawStore`.
pub struct CompressedBody {
    len: usize,
    data: Vec<u8>,
}

impl CompressedBody {
    pub fn new(endpoint: Endpoint, body: &[u8]) -> Self {
        CompressedBody { len: body.len(), data: lz4_flex::block::compress_with_dict(body, dictionary(endpoint)) }
    }
}

#[derive(Default)]
pub struct RawStore {
    entries: Vec<Entry>,
    segments: Vec<Vec<u8>>,
}

struct Entry {
    token: String,
    endpoint: Endpoint,
    segment: usize,
    offset: usize,
    compressed_len: usize,
    len: usize,
}

impl RawStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// `body` must have been compressed for `endpoint`.
    pub fn push(&mut self, token: String, endpoint: Endpoint, body: &CompressedBody) {
        let compressed_len = body.data.len();
        let fits = self.segments.last().is_some_and(|s| s.capacity() - s.len() >= compressed_len);
        if !fits {
            self.segments.push(Vec::with_capacity(SEGMENT_BYTES.max(compressed_len)));
        }
        let segment_index = self.segments.len() - 1;
        let segment = &mut self.segments[segment_index];
        let offset = segment.len();
        segment.extend_from_slice(&body.data);
        self.entries.push(Entry { token, endpoint, segment: segment_index, offset, compressed_len, len: body.len });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held for the bodies (compressed).
    pub fn stored_bytes(&self) -> usize {
        self.segments.iter().map(Vec::len).sum()
    }

    /// `(token, endpoint, body)` in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Endpoint, Vec<u8>)> + '_ {
        self.entries.iter().map(|entry| {
            let compressed = &self.segments[entry.segment][entry.offset..entry.offset + entry.compressed_len];
            let body = lz4_flex::block::decompress_with_dict(compressed, entry.len, dictionary(entry.endpoint))
                .expect("a body compressed by CompressedBody::new decompresses");
            (entry.token.as_str(), entry.endpoint, body)
        })
    }

    /// Gives back the unused end of the last segment.
    pub fn shrink_to_fit(&mut self) {
        if let Some(last) = self.segments.last_mut() {
            last.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(endpoint: Endpoint, token: &str) -> Vec<u8> {
        let text = std::str::from_utf8(dictionary(endpoint)).unwrap();
        text.replace("dictionary", token).into_bytes()
    }

    #[test]
    fn bodies_come_back_as_pushed_in_order() {
        let mut store = RawStore::new();
        let mut expected = Vec::new();
        for i in 0..300 {
            let (endpoint, body) = if i % 3 == 0 {
                (Endpoint::Markets, sample(Endpoint::Markets, &format!("t{i}")))
            } else {
                (Endpoint::Listing, sample(Endpoint::Listing, &format!("t{i}")))
            };
            store.push(format!("t{i}"), endpoint, &CompressedBody::new(endpoint, &body));
            expected.push((format!("t{i}"), endpoint, body));
        }
        // Bodies that are empty, not JSON, or larger than a segment are kept as they are too.
        let large = vec![b'x'; SEGMENT_BYTES + 10];
        for body in [Vec::new(), b"\xff\x00 not json".to_vec(), large] {
            store.push("odd".into(), Endpoint::Listing, &CompressedBody::new(Endpoint::Listing, &body));
            expected.push(("odd".into(), Endpoint::Listing, body));
        }
        store.shrink_to_fit();
        assert_eq!(store.len(), expected.len());
        let total: usize = expected.iter().map(|(_, _, b)| b.len()).sum();
        assert!(store.stored_bytes() < total / 2, "{} of {total}", store.stored_bytes());
        for ((token, endpoint, body), (want_token, want_endpoint, want_body)) in store.iter().zip(&expected) {
            assert_eq!((token, endpoint), (want_token.as_str(), *want_endpoint));
            assert!(body == *want_body, "the body of {token} changed");
        }
    }
}
