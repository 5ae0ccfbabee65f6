//! The successful response bodies of a batch, kept for `Frames.raw`, compressed.
//!
//! Few callers ever read `Frames.raw`, but it must lose nothing, so every body is kept. Bodies
//! are compressed as one zstd stream per segment of a few megabytes, in the order they arrive:
//! the service repeats the same keys, pattern names and links in every body, and a stream whose
//! window holds the bodies before it turns all of that into back-references, leaving little
//! more than the numbers. Measured on 2,000 Sandbox listings: 18% of their size (lz4 against a
//! sample body, one body at a time, kept 38%; zstd the same way 22%). That is what keeps a large
//! fetch's memory close to the size of its frames. Level 1, because higher levels gain nothing
//! here and cost time; the stream runs on the parsing thread, at about 600 MB/s.
//!
//! Reading decompresses one segment at a time.

use std::io::Write;

use crate::model::Endpoint;

/// Bodies (uncompressed bytes) per segment: a segment is the unit `iter` decompresses at once.
const SEGMENT_INPUT_BYTES: usize = 8 << 20;
const LEVEL: i32 = 1;

pub struct RawStore {
    entries: Vec<Entry>,
    /// Every entry's token, end to end (one allocation rather than one per body).
    tokens: String,
    /// Finished segments: one whole zstd frame each.
    segments: Vec<Segment>,
    /// The segment being written.
    open: Option<OpenSegment>,
}

struct Segment {
    compressed: Vec<u8>,
    len: usize,
}

struct OpenSegment {
    encoder: zstd::stream::write::Encoder<'static, Vec<u8>>,
    len: usize,
}

struct Entry {
    /// Where the token ends in `tokens` (it starts where the entry before ends it).
    token_end: usize,
    endpoint: Endpoint,
    segment: usize,
    /// Where the body starts in its segment's decompressed bytes.
    offset: usize,
    len: usize,
}

impl Default for RawStore {
    fn default() -> Self {
        Self::new()
    }
}

impl RawStore {
    pub fn new() -> Self {
        Self { entries: Vec::new(), tokens: String::new(), segments: Vec::new(), open: None }
    }

    pub fn push(&mut self, token: &str, endpoint: Endpoint, body: &[u8]) {
        if self.open.as_ref().is_some_and(|open| open.len > 0 && open.len + body.len() > SEGMENT_INPUT_BYTES) {
            self.close_segment();
        }
        let open = self.open.get_or_insert_with(|| OpenSegment {
            encoder: zstd::stream::write::Encoder::new(Vec::new(), LEVEL)
                .expect("zstd accepts level 1 with default parameters"),
            len: 0,
        });
        let offset = open.len;
        open.encoder.write_all(body).expect("compressing into memory cannot fail");
        open.len += body.len();
        let segment = self.segments.len();
        self.tokens.push_str(token);
        self.entries.push(Entry { token_end: self.tokens.len(), endpoint, segment, offset, len: body.len() });
    }

    fn close_segment(&mut self) {
        if let Some(open) = self.open.take() {
            let mut compressed = open.encoder.finish().expect("compressing into memory cannot fail");
            compressed.shrink_to_fit();
            self.segments.push(Segment { compressed, len: open.len });
        }
    }

    /// Ends the segment being written (and frees its compressor); call when no more bodies come.
    pub fn finish(&mut self) {
        self.close_segment();
        self.entries.shrink_to_fit();
        self.tokens.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held for the bodies (compressed), once `finish` was called.
    pub fn stored_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.compressed.len()).sum()
    }

    /// `(token, endpoint, body)` in the order they were pushed. Call `finish` first: bodies of
    /// a segment still being written are not yet readable, and `iter` panics on them.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Endpoint, Vec<u8>)> + '_ {
        let mut decompressed: Option<(usize, Vec<u8>)> = None;
        let token_starts = std::iter::once(0).chain(self.entries.iter().map(|entry| entry.token_end));
        self.entries.iter().zip(token_starts).map(move |(entry, token_start)| {
            if decompressed.as_ref().is_none_or(|(segment, _)| *segment != entry.segment) {
                let segment = self.segments.get(entry.segment).expect("RawStore::finish was called before reading");
                let bytes = zstd::bulk::decompress(&segment.compressed, segment.len)
                    .expect("a segment compressed by RawStore decompresses");
                decompressed = Some((entry.segment, bytes));
            }
            let bytes = &decompressed.as_ref().expect("decompressed above").1;
            let token = &self.tokens[token_start..entry.token_end];
            (token, entry.endpoint, bytes[entry.offset..entry.offset + entry.len].to_vec())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::samples;

    fn sample(endpoint: Endpoint, token: &str) -> Vec<u8> {
        let sample = match endpoint {
            Endpoint::Listing => samples::LISTING,
            Endpoint::Markets => samples::MARKETS,
        };
        std::str::from_utf8(sample).unwrap().replace("dictionary", token).into_bytes()
    }

    #[test]
    fn bodies_come_back_as_pushed_in_order() {
        let mut store = RawStore::new();
        let mut expected = Vec::new();
        // Enough bodies for several segments.
        for i in 0..3000 {
            let (endpoint, body) = if i % 3 == 0 {
                (Endpoint::Markets, sample(Endpoint::Markets, &format!("t{i}")))
            } else {
                (Endpoint::Listing, sample(Endpoint::Listing, &format!("t{i}")))
            };
            store.push(&format!("t{i}"), endpoint, &body);
            expected.push((format!("t{i}"), endpoint, body));
        }
        // Bodies that are empty, not JSON, or larger than a segment are kept as they are too.
        let large = vec![b'x'; SEGMENT_INPUT_BYTES + 10];
        for body in [Vec::new(), b"\xff\x00 not json".to_vec(), large, b"after the large one".to_vec()] {
            store.push("odd", Endpoint::Listing, &body);
            expected.push(("odd".into(), Endpoint::Listing, body));
        }
        store.finish();
        assert!(store.segments.len() >= 3, "{} segments", store.segments.len());
        assert_eq!(store.len(), expected.len());
        let total: usize = expected.iter().map(|(_, _, b)| b.len()).sum();
        assert!(store.stored_bytes() < total / 10, "{} of {total}", store.stored_bytes());
        let mut read = 0;
        for ((token, endpoint, body), (want_token, want_endpoint, want_body)) in store.iter().zip(&expected) {
            assert_eq!((token, endpoint), (want_token.as_str(), *want_endpoint));
            assert!(body == *want_body, "the body of {token} changed");
            read += 1;
        }
        assert_eq!(read, expected.len());
    }

    #[test]
    fn an_empty_store_reads_as_empty() {
        let mut store = RawStore::new();
        store.finish();
        assert!(store.is_empty());
        assert_eq!(store.stored_bytes(), 0);
        assert_eq!(store.iter().count(), 0);
    }
}
