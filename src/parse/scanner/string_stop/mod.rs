//! The fast scan of a string's bytes: the position of the first byte that ends it (the closing
//! quote, an escape, or a control character, which JSON forbids inside strings). The widest tier
//! the target has goes first (`sse2`: sixteen bytes at a time, on every x86_64), then `swar`
//! (eight bytes in a `u64`), then the portable loop over the last few bytes. Each tier is tested
//! against the portable loop over random buffers.

#[cfg(target_arch = "x86_64")]
mod sse2;
mod swar;

/// Bytes that end the fast scan of a string.
static STRING_STOPS: [bool; 256] = {
    let mut stops = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        stops[byte] = true;
        byte += 1;
    }
    stops[b'"' as usize] = true;
    stops[b'\\' as usize] = true;
    stops
};

/// What a tier found: the stop, or where it stopped looking (fewer bytes left than it reads at once).
pub(super) enum Found {
    Stop(usize),
    Until(usize),
}

/// The position of the first quote, backslash or control character at or after `pos`, if any.
#[inline]
pub(in crate::parse) fn string_stop(bytes: &[u8], pos: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    let pos = match sse2::find(bytes, pos) {
        Found::Stop(at) => return Some(at),
        Found::Until(rest) => rest,
    };
    let pos = match swar::find(bytes, pos) {
        Found::Stop(at) => return Some(at),
        Found::Until(rest) => rest,
    };
    portable(bytes, pos)
}

/// A byte at a time: the reference every tier is held to.
#[inline]
fn portable(bytes: &[u8], mut pos: usize) -> Option<usize> {
    while !STRING_STOPS[*bytes.get(pos)? as usize] {
        pos += 1;
    }
    Some(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random buffers of every length up to 80, mostly plain bytes (ASCII and UTF-8 high
    /// bytes), with stops sprinkled in; every start position.
    fn buffers() -> impl Iterator<Item = Vec<u8>> {
        let mut next = crate::test_random::xorshift(0x2545_F491_4F6C_DD1D);
        (0..4000).map(move |case| {
            let length = case % 81;
            (0..length)
                .map(|_| match next() % 40 {
                    0 => b'"',
                    1 => b'\\',
                    2 => (next() % 0x20) as u8,
                    3 => 0x7F,
                    4 => 0x1F,
                    5 => 0x20,
                    6..=12 => 0x80 + (next() % 0x80) as u8,
                    _ => b' ' + (next() % 0x5F) as u8,
                })
                .collect()
        })
    }

    fn held_to_portable(tier: fn(&[u8], usize) -> Found, width: usize) {
        let mut checked = 0;
        for bytes in buffers() {
            for pos in 0..=bytes.len() {
                let expected = portable(&bytes, pos);
                match tier(&bytes, pos) {
                    Found::Stop(at) => assert_eq!(Some(at), expected, "{bytes:?} from {pos}"),
                    Found::Until(rest) => {
                        assert!(rest >= pos && bytes.len() < rest + width, "{bytes:?} from {pos}: gave up at {rest}");
                        assert_eq!(portable(&bytes, rest), expected, "{bytes:?} from {pos}: a stop before {rest}");
                    }
                }
                checked += 1;
            }
        }
        assert!(checked > 100_000);
    }

    #[test]
    fn swar_finds_what_the_portable_loop_finds() {
        held_to_portable(swar::find, 8);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sse2_finds_what_the_portable_loop_finds() {
        held_to_portable(sse2::find, 16);
    }

    #[test]
    fn the_tiers_together_find_what_the_portable_loop_finds() {
        for bytes in buffers() {
            for pos in 0..=bytes.len() + 1 {
                assert_eq!(string_stop(&bytes, pos), portable(&bytes, pos), "{bytes:?} from {pos}");
            }
        }
    }
}
