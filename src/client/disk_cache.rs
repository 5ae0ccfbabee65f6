//! Successful responses kept on disk (`Client(cache_dir=..., cache_ttl=...)`): reused by a second
//! process, a restarted kernel or an offline session within their TTL, bounded in bytes (least
//! recently used out first), and served by `Sandbox.replay` (the folder is a recording).
//!
//! Layout: `DIR/DEFILENS-CACHE` (the marker that makes a folder one of ours), then one folder a
//! service (`DIR/<hash of the base URL>/`) with one folder an endpoint, one file a token id:
//! `DIR/<service>/listing/<id>.dlc`. A file holds a small header (a magic number, the endpoint,
//! the token id, the response's `fetched_at`) and the body as one zstd frame with its checksum.
//!
//! Safe with several processes: an entry is written to a temporary file beside it, synced, and
//! renamed over the old one, so a reader sees the old entry or the new one, never half of one;
//! writers never share a temporary file. Anything that does not read as an entry (a foreign
//! file, one damaged by a crash of the machine) is ignored with a warning, never fatal.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::cache::CachedBody;
use super::url::encode_path_segment;
use crate::model::Endpoint;

const MAGIC: &[u8; 4] = b"DLC1";
/// The file that marks a folder as a defilens cache (and says what it is to a person).
pub const MARKER: &str = "DEFILENS-CACHE";
const MARKER_TEXT: &str = "A defilens response cache (Client(cache_dir=...)). Safe to delete.\n";
const SUFFIX: &str = "dlc";
/// Token ids longer than this are stored under a hash of the id (file names have limits).
const LONGEST_NAME: usize = 160;
/// zstd's level: fast, and listing bodies shrink about five times.
const LEVEL: i32 = 3;

static TEMPORARIES: AtomicU64 = AtomicU64::new(0);

/// FNV-1a: a stable name for a service's folder (not a secret: the base URL is no secret).
fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

pub(crate) struct DiskCache {
    service: PathBuf,
    ttl: Duration,
    max_bytes: u64,
    /// What this process believes the folder holds: measured when opened and at each trim,
    /// grown by each write; past `max_bytes` the folder is trimmed. Held while an entry is
    /// renamed into place and counted, and during a trim: a trim then lists every entry this
    /// process wrote (writers at once left some out, and the folder past its bound).
    bytes: Mutex<u64>,
    warnings: Mutex<Vec<String>>,
}

/// One entry read back.
pub struct Entry {
    pub endpoint: Endpoint,
    pub token: String,
    pub fetched_at: i64,
    pub body: Vec<u8>,
}

fn encode(endpoint: Endpoint, token: &str, fetched_at: i64, body: &[u8]) -> std::io::Result<Vec<u8>> {
    let token_bytes = token.as_bytes();
    let length = u16::try_from(token_bytes.len()).map_err(|_| std::io::Error::other("token id too long"))?;
    let mut out = Vec::with_capacity(body.len() / 4 + token_bytes.len() + 32);
    out.extend_from_slice(MAGIC);
    out.push(match endpoint {
        Endpoint::Listing => 0,
        Endpoint::Markets => 1,
    });
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(token_bytes);
    out.extend_from_slice(&fetched_at.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let mut encoder = zstd::Encoder::new(&mut out, LEVEL)?;
    encoder.include_checksum(true)?;
    encoder.write_all(body)?;
    encoder.finish()?;
    Ok(out)
}

/// Reads an entry; the reason when the bytes are not one.
pub fn decode(bytes: &[u8]) -> Result<Entry, String> {
    let take = |at: usize, n: usize| bytes.get(at..at + n).ok_or_else(|| "cut short".to_string());
    if take(0, 4)? != MAGIC {
        return Err("not a defilens cache entry".into());
    }
    let endpoint = match take(4, 1)?[0] {
        0 => Endpoint::Listing,
        1 => Endpoint::Markets,
        other => return Err(format!("unknown endpoint {other}")),
    };
    let length = u16::from_le_bytes(take(5, 2)?.try_into().map_err(|_| "cut short")?) as usize;
    let token = String::from_utf8(take(7, length)?.to_vec()).map_err(|_| "a token id that is not UTF-8")?;
    let at = 7 + length;
    let fetched_at = i64::from_le_bytes(take(at, 8)?.try_into().map_err(|_| "cut short")?);
    let size = u64::from_le_bytes(take(at + 8, 8)?.try_into().map_err(|_| "cut short")?);
    let frame = &bytes[at + 16..];
    let mut body = Vec::with_capacity(usize::try_from(size.min(1 << 30)).unwrap_or(0));
    let mut decoder = zstd::Decoder::new(frame).map_err(|e| e.to_string())?;
    std::io::copy(&mut decoder, &mut body).map_err(|e| format!("damaged ({e})"))?;
    if body.len() as u64 != size {
        return Err(format!("damaged (holds {} bytes of {size})", body.len()));
    }
    Ok(Entry { endpoint, token, fetched_at, body })
}

fn file_name(token: &str) -> String {
    let encoded = encode_path_segment(token);
    if encoded.len() <= LONGEST_NAME && !encoded.starts_with('.') {
        format!("{encoded}.{SUFFIX}")
    } else {
        format!("h-{:016x}.{SUFFIX}", stable_hash(token.as_bytes()))
    }
}

impl DiskCache {
    /// Opens (making it if need be) the cache at `dir` for the service at `base_url`. An error
    /// says what is wrong with the folder.
    pub(crate) fn open(dir: &Path, base_url: &str, ttl: Duration, max_bytes: u64) -> Result<Self, String> {
        if dir.exists() && !dir.is_dir() {
            return Err(format!("cache_dir {:?} is a file; give a folder", dir.display().to_string()));
        }
        let marker = dir.join(MARKER);
        if dir.is_dir() && !marker.exists() && fs::read_dir(dir).map_err(|e| e.to_string())?.next().is_some() {
            return Err(format!(
                "cache_dir {:?} holds other files and no {MARKER}: give an empty or new folder, so that trimming \
                 the cache never deletes anything else",
                dir.display().to_string()
            ));
        }
        let service = dir.join(format!("{:016x}", stable_hash(base_url.as_bytes())));
        for endpoint in [Endpoint::Listing, Endpoint::Markets] {
            fs::create_dir_all(service.join(endpoint.as_str()))
                .map_err(|e| format!("cannot create cache_dir {:?}: {e}", dir.display().to_string()))?;
        }
        if !marker.exists() {
            fs::write(&marker, MARKER_TEXT)
                .map_err(|e| format!("cannot write in cache_dir {:?}: {e}", dir.display().to_string()))?;
        }
        let cache = Self { service, ttl, max_bytes, bytes: Mutex::new(0), warnings: Mutex::new(Vec::new()) };
        let measured = cache.trim();
        *cache.bytes.lock().unwrap_or_else(|p| p.into_inner()) = measured;
        Ok(cache)
    }

    fn path(&self, endpoint: Endpoint, token: &str) -> PathBuf {
        self.service.join(endpoint.as_str()).join(file_name(token))
    }

    fn warn(&self, message: String) {
        self.warnings.lock().unwrap_or_else(|p| p.into_inner()).push(message);
    }

    /// What the cache had to ignore since the last call (damaged or foreign entries).
    pub(crate) fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A response within its TTL, or None. A damaged entry is a miss, with a warning.
    pub(crate) fn get(&self, endpoint: Endpoint, token: &str, now_ms: i64) -> Option<CachedBody> {
        let path = self.path(endpoint, token);
        let bytes = fs::read(&path).ok()?;
        let entry = match decode(&bytes) {
            Ok(entry) if entry.token == token && entry.endpoint == endpoint => entry,
            Ok(_) => return None, // a hash collision of two long ids: the other id's entry
            Err(reason) => {
                self.warn(format!("ignored the cache entry {} ({reason}); it will be replaced", path.display()));
                return None;
            }
        };
        let age_ms = now_ms.saturating_sub(entry.fetched_at);
        if age_ms < 0 || age_ms as u128 >= self.ttl.as_millis() {
            return None;
        }
        // Least recently used goes first: a hit counts as a use.
        if let Ok(file) = fs::File::options().write(true).open(&path) {
            let _ = file.set_modified(SystemTime::now());
        }
        Some(CachedBody { body: Bytes::from(entry.body), fetched_at: entry.fetched_at })
    }

    /// Keeps a successful response. A failure to write (a full disk) is a warning, never an error.
    pub(crate) fn put(&self, endpoint: Endpoint, token: &str, body: &[u8], fetched_at: i64) {
        let path = self.path(endpoint, token);
        let temporary = path.with_file_name(format!(
            ".{}-{}-{}.tmp",
            file_name(token),
            std::process::id(),
            TEMPORARIES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = encode(endpoint, token, fetched_at, body).and_then(|bytes| {
            let mut file = fs::File::create(&temporary)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            Ok(bytes.len() as u64)
        });
        let mut held = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        match written.and_then(|size| fs::rename(&temporary, &path).map(|()| size)) {
            Ok(size) => {
                *held += size;
                if *held > self.max_bytes {
                    *held = self.trim();
                }
            }
            Err(error) => {
                drop(held);
                let _ = fs::remove_file(&temporary);
                self.warn(format!("could not write the cache entry {} ({error})", path.display()));
            }
        }
    }

    /// Deletes the least recently used entries (of every service in the folder) until the
    /// folder holds at most `max_bytes`, and returns what it holds then. Only our entries are ever
    /// deleted. Called with `bytes` held, or before the cache is shared.
    fn trim(&self) -> u64 {
        let Some(dir) = self.service.parent() else { return 0 };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        let Ok(services) = fs::read_dir(dir) else { return 0 };
        for service in services.flatten() {
            for endpoint in [Endpoint::Listing, Endpoint::Markets] {
                let Ok(files) = fs::read_dir(service.path().join(endpoint.as_str())) else { continue };
                for file in files.flatten() {
                    let path = file.path();
                    if path.extension().is_some_and(|e| e == SUFFIX) {
                        if let Ok(meta) = file.metadata() {
                            entries.push((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len(), path));
                        }
                    }
                }
            }
        }
        let mut total: u64 = entries.iter().map(|(_, size, _)| size).sum();
        if total > self.max_bytes {
            // Down to nine tenths, so that the next writes do not trim again at once.
            let goal = self.max_bytes / 10 * 9;
            entries.sort();
            for (_, size, path) in entries {
                if total <= goal {
                    break;
                }
                if fs::remove_file(&path).is_ok() {
                    total -= size;
                }
            }
        }
        total
    }
}

/// Every entry of a cache folder (all its services), for `Sandbox.replay`. Files that are not
/// entries are skipped; the second value says how many.
pub fn read_folder(dir: &Path) -> Result<(Vec<Entry>, usize), String> {
    if !dir.join(MARKER).exists() {
        return Err(format!("{:?} is not a defilens cache folder (it has no {MARKER})", dir.display().to_string()));
    }
    let mut entries = Vec::new();
    let mut skipped = 0;
    for service in fs::read_dir(dir).map_err(|e| e.to_string())?.flatten() {
        for endpoint in [Endpoint::Listing, Endpoint::Markets] {
            let Ok(files) = fs::read_dir(service.path().join(endpoint.as_str())) else { continue };
            for file in files.flatten() {
                let path = file.path();
                if path.extension().is_none_or(|e| e != SUFFIX) {
                    continue;
                }
                match fs::read(&path).map_err(|e| e.to_string()).and_then(|bytes| decode(&bytes)) {
                    Ok(entry) => entries.push(entry),
                    Err(_) => skipped += 1,
                }
            }
        }
    }
    Ok((entries, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("defilens-cache-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn entries_round_trip_expire_and_survive_damage() {
        let dir = folder("round-trip");
        let cache = DiskCache::open(&dir, "http://x", Duration::from_secs(60), 1 << 30).unwrap();
        cache.put(Endpoint::Listing, "bitcoin", b"{\"data\":{}}", 1_000_000);
        let hit = cache.get(Endpoint::Listing, "bitcoin", 1_000_500).unwrap();
        assert_eq!((&hit.body[..], hit.fetched_at), (&b"{\"data\":{}}"[..], 1_000_000));
        assert!(cache.get(Endpoint::Markets, "bitcoin", 1_000_500).is_none());
        assert!(cache.get(Endpoint::Listing, "bitcoin", 1_000_000 + 60_000).is_none(), "expired");
        // A second client (another process) on the same folder sees it.
        let other = DiskCache::open(&dir, "http://x", Duration::from_secs(60), 1 << 30).unwrap();
        assert!(other.get(Endpoint::Listing, "bitcoin", 1_000_001).is_some());
        // Damage: cut the file short, then scribble on it. Misses with a warning, never a panic.
        let path = cache.path(Endpoint::Listing, "bitcoin");
        let bytes = fs::read(&path).unwrap();
        for damaged in [bytes[..bytes.len() - 3].to_vec(), b"junk".to_vec(), Vec::new()] {
            fs::write(&path, &damaged).unwrap();
            assert!(cache.get(Endpoint::Listing, "bitcoin", 1_000_001).is_none());
        }
        assert_eq!(cache.take_warnings().len(), 3);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_folder_of_other_files_is_refused_and_the_bound_is_kept() {
        let dir = folder("bound");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("mine.txt"), "x").unwrap();
        assert!(DiskCache::open(&dir, "http://x", Duration::from_secs(60), 1 << 30).is_err());
        let _ = fs::remove_dir_all(&dir);
        let cache = DiskCache::open(&dir, "http://x", Duration::from_secs(60), 20_000).unwrap();
        let body: Vec<u8> = (0..4000u32).flat_map(|i| i.to_le_bytes()).collect();
        for i in 0..64 {
            cache.put(Endpoint::Markets, &format!("t{i}"), &body, 1);
        }
        let (entries, skipped) = read_folder(&dir).unwrap();
        assert!(skipped == 0 && !entries.is_empty() && entries.len() < 64, "{}", entries.len());
        let on_disk: u64 = fs::read_dir(dir.join(format!("{:016x}", stable_hash(b"http://x"))).join("markets"))
            .unwrap()
            .flatten()
            .map(|f| f.metadata().unwrap().len())
            .sum();
        assert!(on_disk <= 20_000, "{on_disk}");
        let long = "x".repeat(500);
        cache.put(Endpoint::Listing, &long, b"{}", 1);
        assert!(cache.get(Endpoint::Listing, &long, 2).is_some());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn writers_at_once_keep_the_bound() {
        // A fetch writes its entries from many tasks at once: a trim that listed the folder
        // while another write was being renamed into it undercounted, and the folder stayed
        // past its bound (50,474 bytes for 50,000 in a loaded test run).
        let bound = 20_000;
        for round in 0..20 {
            let dir = folder(&format!("writers-{round}"));
            let cache = DiskCache::open(&dir, "http://x", Duration::from_secs(60), bound).unwrap();
            std::thread::scope(|scope| {
                for writer in 0..8 {
                    let cache = &cache;
                    scope.spawn(move || {
                        let body: Vec<u8> = (0..1500u32)
                            .map(|i| i.wrapping_mul(2_654_435_761 ^ writer))
                            .flat_map(u32::to_le_bytes)
                            .collect();
                        for i in 0..12 {
                            cache.put(Endpoint::Listing, &format!("w{writer}-{i}"), &body, 1);
                        }
                    });
                }
            });
            let on_disk: u64 = fs::read_dir(dir.join(format!("{:016x}", stable_hash(b"http://x"))).join("listing"))
                .unwrap()
                .flatten()
                .map(|f| f.metadata().unwrap().len())
                .sum();
            let _ = fs::remove_dir_all(&dir);
            assert!(on_disk <= bound, "round {round}: {on_disk} bytes for a bound of {bound}");
        }
    }
}
