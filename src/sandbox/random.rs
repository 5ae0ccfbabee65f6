//! The Sandbox's randomness: a stable hash of (seed, parts) and a small generator seeded by it,
//! so that every value the Sandbox makes is a function of its seed and inputs, the same on every
//! platform and release. The market and the body writers both draw from here.

/// FNV-1a over the parts (each followed by a separator byte so `["ab","c"]` and `["a","bc"]`
/// differ), finished with splitmix64 so nearby inputs give unrelated outputs. Stable across
/// platforms and releases, unlike `std`'s hasher.
pub fn stable_hash(seed: u64, parts: &[&[u8]]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0100_0000_01b3;
    let mut hash = FNV_OFFSET ^ splitmix(seed);
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(FNV_PRIME);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    splitmix(hash)
}

pub(super) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Maps a 64-bit hash to a uniform draw in [0, 1).
pub fn unit_interval(hash: u64) -> f64 {
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// A small deterministic generator (splitmix64 stream). Each body part uses its own stream name,
/// so adding a field to one part does not reshuffle the values of the others.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, token: &str, stream: &str) -> Self {
        Rng(stable_hash(seed, &[token.as_bytes(), stream.as_bytes()]))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        unit_interval(self.next_u64())
    }

    pub fn range(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }

    /// Uniform in 0..n (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    pub fn chance(&mut self, probability: f64) -> bool {
        self.unit() < probability
    }

    pub fn some_of<'a>(&mut self, items: &[&'a str], max: usize, empty: f64) -> Vec<&'a str> {
        if items.is_empty() || self.chance(empty) {
            return Vec::new();
        }
        let count = 1 + self.below(max.clamp(1, items.len()));
        let start = self.below(items.len());
        (0..count).map(|i| items[(start + i) % items.len()]).collect()
    }
}
