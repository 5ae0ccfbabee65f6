//! The technical indicators of the listing, reported at the last close of a candle series: the
//! last values of `crate::ta`'s series (the one implementation, which `defilens.ta` gives users).

use crate::ta;

/// The simple mean of the last `period` closes (of all of them when there are fewer).
pub fn sma(closes: &[f64], period: usize) -> f64 {
    let window = &closes[closes.len().saturating_sub(period)..];
    ta::sma(window, window.len().max(1)).last().copied().flatten().unwrap_or(f64::NAN)
}

/// Wilder's RSI at the last close; 50 until there are more closes than `period`.
pub fn rsi(closes: &[f64], period: usize) -> f64 {
    ta::rsi(closes, period).last().copied().flatten().unwrap_or(50.0)
}

pub struct Bands {
    pub upper: f64,
    /// Exactly `sma(closes, 20)`.
    pub middle: f64,
    pub lower: f64,
}

/// Bollinger bands over the last `period` closes at `deviations` population standard deviations.
pub fn bollinger(closes: &[f64], period: usize, deviations: f64) -> Bands {
    let window = &closes[closes.len().saturating_sub(period)..];
    let (upper, middle, lower) = ta::bollinger(window, window.len().max(1), deviations)
        .last()
        .copied()
        .flatten()
        .unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    Bands { upper, middle, lower }
}

/// MACD(fast, slow, signal) line and signal line at the last close.
pub fn macd(closes: &[f64], fast: usize, slow: usize, signal: usize) -> Option<(f64, f64)> {
    ta::macd(closes, fast, slow, signal).last().copied().flatten().map(|(line, signal, _)| (line, signal))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_values() {
        let closes: Vec<f64> = (1..=40).map(f64::from).collect();
        assert_eq!(sma(&closes, 5), 38.0);
        assert_eq!(rsi(&closes, 14), 100.0);
        let falling: Vec<f64> = closes.iter().rev().copied().collect();
        assert_eq!(rsi(&falling, 14), 0.0);
        let flat = vec![3.0; 40];
        assert_eq!(rsi(&flat, 14), 0.0);
        let bands = bollinger(&flat, 20, 2.0);
        assert_eq!((bands.upper, bands.middle, bands.lower), (3.0, 3.0, 3.0));
        let (line, _) = macd(&closes, 12, 26, 9).unwrap_or_default();
        assert!(line > 0.0, "{line}");
        assert!(macd(&closes[..33], 12, 26, 9).is_none());
    }

    #[test]
    fn rsi_of_alternating_moves_is_in_the_middle() {
        let closes: Vec<f64> = (0..100).map(|i| if i % 2 == 0 { 10.0 } else { 11.0 }).collect();
        let value = rsi(&closes, 14);
        assert!((45.0..55.0).contains(&value), "{value}");
    }
}
