//! The technical indicators by the service's definitions, as series over closes (oldest first):
//! Wilder's RSI, simple moving averages, Bollinger bands at population standard deviations, and
//! MACD(fast, slow, signal). The one implementation: the Sandbox reports the last value of each
//! series in its listings, and `defilens.ta` gives users the whole series. Where definitions
//! differ in how they start, these follow TA-Lib's (the Python tests check them against it):
//! a value exists once its window is full, `None` before. What each listing family computes is
//! `model::indicators::RECIPES`; `series` and `last` compute a recipe.

use crate::model::indicators::{Indicator, Recipe};

/// Every series of `indicator` over `closes`: one a name of `indicator.columns()`, or the one
/// series of a kind that has no columns.
pub fn series(indicator: &Indicator, closes: &[f64]) -> Vec<Vec<Option<f64>>> {
    fn unzip3(rows: Vec<Option<(f64, f64, f64)>>) -> Vec<Vec<Option<f64>>> {
        vec![
            rows.iter().map(|row| row.map(|r| r.0)).collect(),
            rows.iter().map(|row| row.map(|r| r.1)).collect(),
            rows.iter().map(|row| row.map(|r| r.2)).collect(),
        ]
    }
    match *indicator {
        Indicator::Rsi { n } => vec![rsi(closes, n)],
        Indicator::Sma { n } => vec![sma(closes, n)],
        Indicator::Bbands { n, k } => unzip3(bollinger(closes, n, k)),
        Indicator::Macd { fast, slow, signal } => unzip3(macd(closes, fast, slow, signal)),
    }
}

/// `series` over closes that may have gaps: a missing close (`None`) or one that is not a price
/// (NaN, infinite). A gap cannot be computed through, so every window that holds one is `None`
/// and each run of closes between gaps starts the indicator again, as a series that began there
/// would (an RSI or an EMA carries state no gap may bridge; a NaN folded into it would turn every
/// later value into NaN, or, through `max`, into a wrong number).
pub fn series_over_gaps(indicator: &Indicator, closes: &[Option<f64>]) -> Vec<Vec<Option<f64>>> {
    let width = indicator.columns().len().max(1);
    let mut out: Vec<Vec<Option<f64>>> = vec![Vec::with_capacity(closes.len()); width];
    for run in closes.split(|close| !close.is_some_and(f64::is_finite)) {
        let values: Vec<f64> = run.iter().flatten().copied().collect();
        for (column, computed) in out.iter_mut().zip(series(indicator, &values)) {
            column.extend(computed);
        }
        if out[0].len() < closes.len() {
            out.iter_mut().for_each(|column| column.push(None));
        }
    }
    out
}

/// A family's value at the last close (`None` while its window is not full). The kinds whose
/// value depends on their window alone are computed over the last window only: the same double.
pub fn last(recipe: &Recipe, closes: &[f64]) -> Option<f64> {
    let closes = match recipe.indicator {
        Indicator::Sma { n } | Indicator::Bbands { n, .. } => &closes[closes.len().saturating_sub(n)..],
        Indicator::Rsi { .. } | Indicator::Macd { .. } => closes,
    };
    let column = recipe.column.and_then(|name| recipe.indicator.columns().iter().position(|c| *c == name));
    series(&recipe.indicator, closes).swap_remove(column.unwrap_or(0)).last().copied().flatten()
}

/// The simple mean of the last `period` closes at each close (each window summed afresh: the
/// same double whatever came before).
pub fn sma(closes: &[f64], period: usize) -> Vec<Option<f64>> {
    let period = period.max(1);
    (0..closes.len())
        .map(|i| (i + 1 >= period).then(|| closes[i + 1 - period..=i].iter().sum::<f64>() / period as f64))
        .collect()
}

/// Wilder's RSI at each close: the first average gain and loss are the means of the first
/// `period` changes, then each new change is folded in with weight 1/period. 0 when nothing
/// moved (as TA-Lib).
pub fn rsi(closes: &[f64], period: usize) -> Vec<Option<f64>> {
    let period = period.max(1);
    let mut out = vec![None; closes.len()];
    if closes.len() <= period {
        return out;
    }
    let weight = period as f64;
    let (mut gain, mut loss) = (0.0, 0.0);
    for i in 1..=period {
        let delta = closes[i] - closes[i - 1];
        gain += delta.max(0.0);
        loss += (-delta).max(0.0);
    }
    gain /= weight;
    loss /= weight;
    let value = |gain: f64, loss: f64| if gain + loss == 0.0 { 0.0 } else { 100.0 * gain / (gain + loss) };
    out[period] = Some(value(gain, loss));
    for i in period + 1..closes.len() {
        let delta = closes[i] - closes[i - 1];
        gain = (gain * (weight - 1.0) + delta.max(0.0)) / weight;
        loss = (loss * (weight - 1.0) + (-delta).max(0.0)) / weight;
        out[i] = Some(value(gain, loss));
    }
    out
}

/// Bollinger bands at each close: (upper, middle, lower) over the last `period` closes at
/// `deviations` population standard deviations; `middle` is exactly `sma(closes, period)`.
pub fn bollinger(closes: &[f64], period: usize, deviations: f64) -> Vec<Option<(f64, f64, f64)>> {
    let period = period.max(1);
    sma(closes, period)
        .into_iter()
        .enumerate()
        .map(|(i, middle)| {
            let middle = middle?;
            let window = &closes[i + 1 - period..=i];
            let variance = window.iter().map(|close| (close - middle).powi(2)).sum::<f64>() / period as f64;
            let width = deviations * variance.sqrt();
            Some((middle + width, middle, middle - width))
        })
        .collect()
}

/// MACD(fast, slow, signal) at each close: (macd line, signal line, histogram). Each EMA starts
/// from the mean of its first `period` inputs, the fast one aligned to end where the slow one
/// starts (as TA-Lib does); the first value comes once the signal line has its own start.
pub fn macd(closes: &[f64], fast: usize, slow: usize, signal: usize) -> Vec<Option<(f64, f64, f64)>> {
    let (fast, slow, signal) = (fast.max(1), slow.max(1), signal.max(1));
    let mut out = vec![None; closes.len()];
    let first_macd = slow.max(fast) - 1;
    if closes.len() < first_macd + signal {
        return out;
    }
    let fast_line = ema_from(closes, fast, first_macd);
    let slow_line = ema_from(closes, slow, first_macd);
    let line: Vec<f64> = fast_line.iter().zip(&slow_line).map(|(f, s)| f - s).collect();
    let signal_line = ema_from(&line, signal, signal - 1);
    for (offset, signal_value) in signal_line.iter().enumerate() {
        let at = offset + signal - 1;
        let line_value = line[at];
        out[first_macd + at] = Some((line_value, *signal_value, line_value - signal_value));
    }
    out
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
    fn the_warm_up_is_the_fewest_closes_that_give_every_column() {
        let closes: Vec<f64> = (0..300).map(|i| 100.0 + (f64::from(i) * 0.7).sin() * 5.0).collect();
        for recipe in crate::model::indicators::RECIPES {
            let need = recipe.indicator.warm_up();
            let full = series(&recipe.indicator, &closes[..need]);
            let short = series(&recipe.indicator, &closes[..need - 1]);
            assert!(full.iter().all(|column| column.last().copied().flatten().is_some()), "{}", recipe.family);
            assert!(short.iter().any(|column| column.last().copied().flatten().is_none()), "{}", recipe.family);
        }
    }

    #[test]
    fn a_gap_is_null_and_the_series_starts_again_after_it() {
        let closes: Vec<f64> = (1..=30).map(f64::from).collect();
        let mut holed: Vec<Option<f64>> = closes.iter().copied().map(Some).collect();
        holed[10] = None;
        for indicator in
            [Indicator::Sma { n: 5 }, Indicator::Rsi { n: 3 }, Indicator::Macd { fast: 2, slow: 4, signal: 2 }]
        {
            let whole = series_over_gaps(&indicator, &holed);
            let (before, after) = (series(&indicator, &closes[..10]), series(&indicator, &closes[11..]));
            for ((column, before), after) in whole.iter().zip(before).zip(after) {
                assert_eq!(column.len(), holed.len());
                assert_eq!(column[..10], before[..]);
                assert_eq!(column[10], None);
                assert_eq!(column[11..], after[..]);
            }
        }
        for not_a_price in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut odd = holed.clone();
            odd[10] = Some(not_a_price);
            for indicator in [Indicator::Rsi { n: 3 }, Indicator::Bbands { n: 4, k: 2.0 }] {
                assert_eq!(series_over_gaps(&indicator, &odd), series_over_gaps(&indicator, &holed));
            }
        }
        assert_eq!(series_over_gaps(&Indicator::Sma { n: 2 }, &[None, None]), vec![vec![None, None]]);
        assert_eq!(series_over_gaps(&Indicator::Sma { n: 1 }, &[]), vec![Vec::<Option<f64>>::new()]);
        let no_gap: Vec<Option<f64>> = closes.iter().copied().map(Some).collect();
        assert_eq!(series_over_gaps(&Indicator::Rsi { n: 14 }, &no_gap), series(&Indicator::Rsi { n: 14 }, &closes));
    }

    #[test]
    fn textbook_values() {
        let closes: Vec<f64> = (1..=40).map(f64::from).collect();
        assert_eq!(sma(&closes, 5).last().copied().flatten(), Some(38.0));
        assert_eq!(sma(&closes, 5)[3], None);
        assert_eq!(rsi(&closes, 14).last().copied().flatten(), Some(100.0));
        let falling: Vec<f64> = closes.iter().rev().copied().collect();
        assert_eq!(rsi(&falling, 14).last().copied().flatten(), Some(0.0));
        let flat = vec![3.0; 40];
        assert_eq!(rsi(&flat, 14).last().copied().flatten(), Some(0.0));
        assert_eq!(bollinger(&flat, 20, 2.0).last().copied().flatten(), Some((3.0, 3.0, 3.0)));
        let (line, _, _) = macd(&closes, 12, 26, 9).last().copied().flatten().unwrap_or_default();
        assert!(line > 0.0, "{line}");
        assert!(macd(&closes[..33], 12, 26, 9).iter().all(Option::is_none));
        assert!(macd(&closes[..34], 12, 26, 9)[33].is_some());
    }

    #[test]
    fn a_recipe_reads_its_column() {
        use crate::model::indicators::{recipe, RECIPES};
        let closes: Vec<f64> = (0..300).map(|i| 100.0 + (f64::from(i) * 0.3).sin() * 7.0).collect();
        let bands = bollinger(&closes, 20, 2.0).last().copied().flatten().unwrap();
        let family = |name| last(recipe(name).unwrap(), &closes);
        assert_eq!(family("upper_bband"), Some(bands.0));
        assert_eq!(family("middle_bband"), Some(bands.1));
        assert_eq!(family("middle_bband"), family("sma20"));
        assert_eq!(family("lower_bband"), Some(bands.2));
        assert_eq!(family("rsi14"), rsi(&closes, 14).last().copied().flatten());
        assert_eq!(family("macd"), macd(&closes, 12, 26, 9).last().copied().flatten().map(|m| m.2));
        for recipe in RECIPES {
            assert!(last(recipe, &closes).is_some_and(f64::is_finite), "{recipe:?}");
            assert_eq!(last(recipe, &closes[..3]), None, "{recipe:?}");
        }
    }

    #[test]
    fn each_value_is_the_indicator_of_the_closes_up_to_it() {
        let closes: Vec<f64> =
            (0..120).map(|i| 100.0 + (f64::from(i) * 0.7).sin() * 5.0 + f64::from(i) * 0.1).collect();
        let whole = rsi(&closes, 14);
        for end in [15, 40, 119] {
            assert_eq!(rsi(&closes[..=end], 14).last().copied().flatten(), whole[end]);
        }
        let bands = bollinger(&closes, 20, 2.0);
        let means = sma(&closes, 20);
        for (band, mean) in bands.iter().zip(&means) {
            assert_eq!(band.map(|b| b.1), *mean);
        }
    }
}
