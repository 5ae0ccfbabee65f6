//! Repaints: a service that computes a candle's indicators before the candle's last trades have
//! settled serves provisional values for a while after the close, then the final ones. With
//! `repaint_rate` set, a drawn share of (token, 5-minute close) pairs behave so, which gives
//! `defilens.panel` and `audit` something real to find.

use super::random::{stable_hash, unit_interval};

/// How long after a close a repainting candle's values stay provisional.
pub const REPAINT_WINDOW_MS: i64 = 60_000;

/// Whether the body for `token` at `now_ms` (whose last 5-minute close is `close_ms`) carries
/// provisional values.
pub fn is_provisional(seed: u64, rate: f64, token: &str, close_ms: i64, now_ms: i64) -> bool {
    rate > 0.0
        && now_ms - close_ms < REPAINT_WINDOW_MS
        && unit_interval(stable_hash(seed, &[b"repaint", token.as_bytes(), &close_ms.to_le_bytes()])) < rate
}

/// The factor a provisional candle's close is off by: 0.2% to 1%, up or down.
pub fn provisional_close_factor(seed: u64, token: &str, close_ms: i64) -> f64 {
    let draw = unit_interval(stable_hash(seed, &[b"repaint-size", token.as_bytes(), &close_ms.to_le_bytes()]));
    let size = 0.002 + 0.008 * (2.0 * draw - 1.0).abs();
    if draw < 0.5 {
        1.0 - size
    } else {
        1.0 + size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_drawn_share_inside_the_window_repaints() {
        let close = 1_795_392_000_000;
        let drawn = (0..10_000).filter(|i| is_provisional(0, 0.3, &format!("t{i}"), close, close + 1_000)).count();
        assert!((2_700..3_300).contains(&drawn), "{drawn}");
        assert!(!(0..1_000).any(|i| is_provisional(0, 1.0, &format!("t{i}"), close, close + REPAINT_WINDOW_MS)));
        assert!(!(0..1_000).any(|i| is_provisional(0, 0.0, &format!("t{i}"), close, close)));
    }

    #[test]
    fn the_provisional_close_is_off_but_near() {
        for i in 0..1_000 {
            let factor = provisional_close_factor(7, &format!("t{i}"), 1_795_392_000_000);
            let off = (factor - 1.0).abs();
            assert!((0.002..=0.01).contains(&off), "{factor}");
        }
    }
}
