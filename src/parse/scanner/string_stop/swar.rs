//! Eight bytes at a time in a `u64` (SIMD within a register): on any target.

use super::Found;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of every zero byte of `word` (and, through borrows, only of bytes above one).
#[inline]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGHS
}

/// The first stop in whole eight-byte chunks from `pos`, or where fewer than eight are left. A
/// byte is flagged if it is '"', '\\' or below 0x20; the lowest flag is exact (borrows flag only
/// bytes above a real match).
#[inline]
pub(super) fn find(bytes: &[u8], mut pos: usize) -> Found {
    while let Some(chunk) = bytes.get(pos..pos + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let flags = zero_bytes(word ^ (ONES * u64::from(b'"')))
            | zero_bytes(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS);
        if flags != 0 {
            return Found::Stop(pos + (flags.trailing_zeros() / 8) as usize);
        }
        pos += 8;
    }
    Found::Until(pos)
}
