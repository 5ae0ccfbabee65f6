//! Recorded responses for `Sandbox.replay`: the bodies of a raw archive, served for the ids and
//! times they cover instead of the market's.

use std::collections::HashMap;

use bytes::Bytes;

use crate::model::Endpoint;

/// Bodies by (endpoint, token), each list sorted by the time it was fetched.
#[derive(Debug)]
pub struct Recording {
    bodies: HashMap<(Endpoint, String), Vec<(i64, Bytes)>>,
    start_ms: i64,
}

impl Recording {
    /// An empty recording whose replay starts at `start_ms` (when its first round was whole).
    pub fn starting_at(start_ms: i64) -> Self {
        Recording { bodies: HashMap::new(), start_ms }
    }

    pub fn add(&mut self, endpoint: Endpoint, token: String, fetched_at_ms: i64, body: Bytes) {
        self.bodies.entry((endpoint, token)).or_default().push((fetched_at_ms, body));
    }

    /// Sorts each token's bodies by time (call once after the last `add`).
    pub fn seal(mut self) -> Self {
        for bodies in self.bodies.values_mut() {
            bodies.sort_by_key(|(at, _)| *at);
        }
        self
    }

    /// Where a replaying Sandbox's clock starts.
    pub fn start_ms(&self) -> i64 {
        self.start_ms
    }

    pub fn len(&self) -> usize {
        self.bodies.values().map(Vec::len).sum()
    }

    /// The last body fetched at or before `now_ms`; `None` outside what was recorded.
    pub fn body(&self, endpoint: Endpoint, token: &str, now_ms: i64) -> Option<Bytes> {
        let bodies = self.bodies.get(&(endpoint, token.to_owned()))?;
        let after = bodies.partition_point(|(at, _)| *at <= now_ms);
        after.checked_sub(1).map(|index| bodies[index].1.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_latest_body_at_or_before_now() {
        let mut recording = Recording::starting_at(100);
        recording.add(Endpoint::Listing, "a".into(), 200, Bytes::from_static(b"second"));
        recording.add(Endpoint::Listing, "a".into(), 100, Bytes::from_static(b"first"));
        let recording = recording.seal();
        assert_eq!(recording.start_ms(), 100);
        assert_eq!(recording.body(Endpoint::Listing, "a", 99), None);
        assert_eq!(recording.body(Endpoint::Listing, "a", 100).as_deref(), Some(&b"first"[..]));
        assert_eq!(recording.body(Endpoint::Listing, "a", 199).as_deref(), Some(&b"first"[..]));
        assert_eq!(recording.body(Endpoint::Listing, "a", 5000).as_deref(), Some(&b"second"[..]));
        assert_eq!(recording.body(Endpoint::Markets, "a", 5000), None);
        assert_eq!(recording.body(Endpoint::Listing, "b", 5000), None);
        assert_eq!(recording.len(), 2);
    }
}
