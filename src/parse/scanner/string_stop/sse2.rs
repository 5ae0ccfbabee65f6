//! Sixteen bytes at a time with SSE2, which every x86_64 has.

use std::arch::x86_64::{
    _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
};

use super::Found;

/// The first stop in whole sixteen-byte chunks from `pos`, or where fewer than sixteen are left.
#[inline]
pub(super) fn find(bytes: &[u8], mut pos: usize) -> Found {
    while let Some(chunk) = bytes.get(pos..pos + 16) {
        // SAFETY: SSE2 is part of x86_64; the load reads the sixteen bytes of `chunk`.
        let flags = unsafe {
            let bytes = _mm_loadu_si128(chunk.as_ptr().cast());
            let quote = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
            let control = _mm_cmpeq_epi8(_mm_max_epu8(bytes, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F));
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control))
        };
        if flags != 0 {
            return Found::Stop(pos + flags.trailing_zeros() as usize);
        }
        pos += 16;
    }
    Found::Until(pos)
}
