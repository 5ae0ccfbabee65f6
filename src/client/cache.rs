//! Successful response bodies kept for `cache_ttl`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// Successful bodies by URL, for `cache_ttl`.
pub(crate) struct ResponseCache {
    ttl: Option<Duration>,
    entries: Mutex<HashMap<String, (Instant, Bytes)>>,
}

impl ResponseCache {
    pub(crate) fn new(ttl: Option<Duration>) -> Self {
        Self { ttl, entries: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn get(&self, url: &str) -> Option<Bytes> {
        let ttl = self.ttl?;
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(url).filter(|(at, _)| at.elapsed() < ttl).map(|(_, body)| body.clone())
    }

    pub(crate) fn put(&self, url: &str, body: &Bytes) {
        let Some(ttl) = self.ttl else { return };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= 4096 {
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        entries.insert(url.to_string(), (Instant::now(), body.clone()));
    }

    pub(crate) fn clear(&self) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
