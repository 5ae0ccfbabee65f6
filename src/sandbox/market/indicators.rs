//! The technical indicators of the listing, by their standard definitions, computed over a
//! candle series' closes (oldest first) and reported at the last close. Where definitions differ
//! in how they start, these follow TA-Lib's, so that TA-Lib on the same candles gives the same
//! numbers (the Python tests check it).

/// The simple mean of the last `period` closes.
pub fn sma(closes: &[f64], period: usize) -> f64 {
    let window = &closes[closes.len().saturating_sub(period)..];
    window.iter().sum::<f64>() / window.len().max(1) as f64
}

/// Wilder's RSI: the first average gain and loss are the means of the first `period` changes,
/// then each new change is folded in with weight 1/period. 0 when nothing moved (as TA-Lib).
pub fn rsi(closes: &[f64], period: usize) -> f64 {
    if closes.len() <= period {
        return 50.0;
    }
    let change = |i: usize| closes[i] - closes[i - 1];
    let (mut gain, mut loss) = (0.0, 0.0);
    for i in 1..=period {
        let delta = change(i);
        if delta > 0.0 {
            gain += delta;
        } else {
            loss -= delta;
        }
    }
    let weight = period as f64;
    gain /= weight;
    loss /= weight;
    for i in period + 1..closes.len() {
        let delta = change(i);
        gain = (gain * (weight - 1.0) + delta.max(0.0)) / weight;
        loss = (loss * (weight - 1.0) + (-delta).max(0.0)) / weight;
    }
    if gain + loss == 0.0 {
        0.0
    } else {
        100.0 * gain / (gain + loss)
    }
}

pub struct Bands {
    pub upper: f64,
    /// Exactly `sma(closes, 20)`.
    pub middle: f64,
    pub lower: f64,
}

/// Bollinger bands over the last `period` closes at `deviations` population standard deviations.
pub fn bollinger(closes: &[f64], period: usize, deviations: f64) -> Bands {
    let middle = sma(closes, period);
    let window = &closes[closes.len().saturating_sub(period)..];
    let variance = window.iter().map(|close| (close - middle).powi(2)).sum::<f64>() / window.len().max(1) as f64;
    let width = deviations * variance.sqrt();
    Bands { upper: middle + width, middle, lower: middle - width }
}

/// MACD(fast, slow, signal) line and signal line at the last close. Each EMA starts from the
/// mean of its first `period` inputs, the fast one aligned to end where the slow one starts (as
/// TA-Lib does).
pub fn macd(closes: &[f64], fast: usize, slow: usize, signal: usize) -> Option<(f64, f64)> {
    let first_macd = slow - 1;
    if closes.len() < first_macd + signal {
        return None;
    }
    let fast_line = ema_from(closes, fast, first_macd);
    let slow_line = ema_from(closes, slow, first_macd);
    let macd_line: Vec<f64> = fast_line.iter().zip(&slow_line).map(|(f, s)| f - s).collect();
    let signal_line = ema_from(&macd_line, signal, signal - 1);
    Some((*macd_line.last()?, *signal_line.last()?))
}

/// The EMA of `values` from index `start` on: its value at `start` is the mean of the `period`
/// values ending there, then `ema += (value - ema) * 2 / (period + 1)`.
fn ema_from(values: &[f64], period: usize, start: usize) -> Vec<f64> {
    let k = 2.0 / (period as f64 + 1.0);
    let mut ema = values[start + 1 - period..=start].iter().sum::<f64>() / period as f64;
    let mut out = Vec::with_capacity(values.len() - start);
    out.push(ema);
    for value in &values[start + 1..] {
        ema += (value - ema) * k;
        out.push(ema);
    }
    out
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
