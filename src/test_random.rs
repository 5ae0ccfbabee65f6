//! Repeatable pseudo-random numbers for the unit tests that sweep many generated cases.

/// Marsaglia's xorshift64: the same sequence for the same (non-zero) seed on every run.
pub fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
