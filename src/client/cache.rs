//! Successful response bodies kept for `cache_ttl`, bounded by `cache_max_bytes` (least
//! recently used out first). A hit carries the time of the response it reuses, so cached data
//! never enters a history stamped as fresh.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lru::LruCache;

/// A response kept for reuse.
#[derive(Clone)]
pub(crate) struct CachedBody {
    pub(crate) body: Bytes,
    /// When the response arrived, in ms since the epoch (its `fetched_at`).
    pub(crate) fetched_at: i64,
}

struct Entry {
    stored: Instant,
    cached: CachedBody,
}

struct Entries {
    lru: LruCache<String, Entry>,
    bytes: usize,
}

pub(crate) struct ResponseCache {
    ttl: Option<Duration>,
    max_bytes: usize,
    entries: Mutex<Entries>,
}

impl ResponseCache {
    pub(crate) fn new(ttl: Option<Duration>, max_bytes: usize) -> Self {
        Self { ttl, max_bytes, entries: Mutex::new(Entries { lru: LruCache::unbounded(), bytes: 0 }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A poisoned lock only means a panic elsewhere mid-update; the map itself is intact.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, url: &str) -> Option<CachedBody> {
        let ttl = self.ttl?;
        let mut entries = self.lock();
        let entry = entries.lru.get(url)?;
        if entry.stored.elapsed() < ttl {
            return Some(entry.cached.clone());
        }
        if let Some(stale) = entries.lru.pop(url) {
            entries.bytes -= stale.cached.body.len();
        }
        None
    }

    pub(crate) fn put(&self, url: &str, body: &Bytes, fetched_at: i64) {
        if self.ttl.is_none() || body.len() > self.max_bytes {
            return;
        }
        let mut entries = self.lock();
        let entry = Entry { stored: Instant::now(), cached: CachedBody { body: body.clone(), fetched_at } };
        if let Some(old) = entries.lru.put(url.to_string(), entry) {
            entries.bytes -= old.cached.body.len();
        }
        entries.bytes += body.len();
        while entries.bytes > self.max_bytes {
            match entries.lru.pop_lru() {
                Some((_, evicted)) => entries.bytes -= evicted.cached.body.len(),
                None => break,
            }
        }
    }

    pub(crate) fn clear(&self) {
        let mut entries = self.lock();
        entries.lru.clear();
        entries.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_keep_their_time_and_the_bound_evicts_the_least_recently_used() {
        let cache = ResponseCache::new(Some(Duration::from_secs(60)), 10);
        cache.put("a", &Bytes::from_static(b"1234"), 1);
        cache.put("b", &Bytes::from_static(b"5678"), 2);
        assert_eq!(cache.get("a").map(|c| c.fetched_at), Some(1));
        cache.put("c", &Bytes::from_static(b"9999"), 3);
        // 12 bytes > 10: "b" was used least recently.
        assert!(cache.get("b").is_none());
        assert_eq!(cache.get("a").map(|c| c.body), Some(Bytes::from_static(b"1234")));
        assert_eq!(cache.get("c").map(|c| c.fetched_at), Some(3));
        cache.put("huge", &Bytes::from(vec![0; 11]), 4);
        assert!(cache.get("huge").is_none());
        cache.clear();
        assert!(cache.get("a").is_none());
    }

    #[test]
    fn entries_expire_and_nothing_is_kept_without_a_ttl() {
        let cache = ResponseCache::new(Some(Duration::from_millis(1)), 100);
        cache.put("a", &Bytes::from_static(b"1"), 1);
        std::thread::sleep(Duration::from_millis(5));
        assert!(cache.get("a").is_none());
        let off = ResponseCache::new(None, 100);
        off.put("a", &Bytes::from_static(b"1"), 1);
        assert!(off.get("a").is_none());
    }
}
