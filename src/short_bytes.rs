//! Short byte strings (keys, names, pattern names) compared and hashed inline: the parser
//! recognises keys with these, and the column builders find the views they stored before.
//! A call to `memcmp` or a general-purpose hasher costs more than the work on a few bytes.

/// Byte equality of two short texts, eight (or four) bytes at a time.
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        if n < 4 {
            return a.iter().zip(b).all(|(x, y)| x == y);
        }
        let word = |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"));
        return word(a, 0) == word(b, 0) && word(a, n - 4) == word(b, n - 4);
    }
    let word = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
    let mut at = 0;
    while at + 8 < n {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    word(a, n - 8) == word(b, n - 8)
}

/// A slot among `1 << log2` for `bits` (an address, or `text_bits`): Fibonacci hashing.
#[inline]
pub fn slot_of(bits: u64, log2: u32) -> usize {
    (bits.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - log2)) as usize
}

/// The bits a short text is known by in a direct-mapped table: its length and its first and
/// last eight bytes, where the service's keys and names differ (a family's name at the front,
/// an interval at the end). Tables keyed by these check the whole text on a hit, so texts that
/// share them only cost a miss.
#[inline]
pub fn text_bits(text: &[u8]) -> u64 {
    let n = text.len();
    let word = |at: usize| u64::from_le_bytes(text[at..at + 8].try_into().expect("eight bytes"));
    if n >= 8 {
        word(0) ^ word(n - 8).rotate_left(29) ^ n as u64
    } else {
        text.iter().fold(n as u64, |acc, &byte| (acc << 8) | u64::from(byte))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_agrees_with_slice_equality() {
        let texts: Vec<Vec<u8>> = (0..24)
            .flat_map(|n| {
                let base: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
                let mut variants = vec![base.clone()];
                for at in 0..n {
                    let mut changed = base.clone();
                    changed[at] ^= 1;
                    variants.push(changed);
                }
                variants
            })
            .collect();
        for a in &texts {
            for b in &texts {
                assert_eq!(same_bytes(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn slots_stay_in_range() {
        for text in [&b""[..], b"a", b"rsi14_5m", b"price_percent_change_24h"] {
            assert!(slot_of(text_bits(text), 9) < 512);
        }
        assert_ne!(text_bits(b"rsi14_5m"), text_bits(b"rsi14_1h"));
    }
}
