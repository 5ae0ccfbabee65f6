//! Candlestick and chart patterns, detected on a candle series (oldest first) by the rules
//! written here. Terms: `body` = |close - open|, `range` = high - low, shadows are the parts of
//! the range above and below the body; "average range" and "average body" are over the 10
//! candles before the one examined; a candle is in a downtrend (uptrend) when the close before it
//! is below (above) the mean of the 10 closes before that.
//!
//! Single candles (the last candle):
//! - doji: body <= 0.1 x average range (TA-Lib's CDLDOJI). `dragonfly_doji` when the upper
//!   shadow is <= 0.1 x range and the lower >= 0.6 x range, `gravestone_doji` the mirror image,
//!   otherwise `basic_doji`;
//! - hammer shape (not a doji): lower shadow >= 2 x body, upper shadow <= body: `bullish_hammer`
//!   in a downtrend, `bearish_hanging_man` in an uptrend;
//! - inverted shape (not a doji): upper shadow >= 2 x body, lower shadow <= body:
//!   `bullish_inverted_hammer` in a downtrend, `bearish_shooting_star` in an uptrend;
//! - marubozu: body >= 0.9 x range and >= average body; bullish or bearish by its colour.
//!
//! Two candles (the last two; "white" means close >= open):
//! - engulfing: TA-Lib's CDLENGULFING: a white candle after a black one with
//!   close >= previous open and open < previous close, or close > previous open and
//!   open <= previous close (and the mirror image for `bearish_engulfing`);
//! - harami: a long candle (body >= average body) then an opposite one of at most half its body,
//!   inside its body;
//! - tweezers: in an uptrend a white then a black candle with highs within 0.1 x average range
//!   (`tweezer_top`); the mirror image on lows in a downtrend (`tweezer_bottom`);
//! - `piercing_line`: a long black candle then a white one opening at or below its close and
//!   closing above its body's midpoint but below its open; `dark_cloud_cover` the mirror image.
//!
//! Three candles (the last three):
//! - `morning_star`: a long black candle, a small one (body <= 0.3 x the first's), a white one
//!   closing above the first's midpoint; `evening_star` the mirror image;
//! - `three_white_soldiers`: three white candles with rising closes, each body >= half the
//!   average body and upper shadow <= 0.3 x its body; `three_black_crows` the mirror image;
//! - `three_inside_up`: a bullish harami then a white candle closing above the first's open;
//!   `three_inside_down` the mirror image.
//!
//! `candlestick_pattern` lists the patterns of `SUMMARY_CANDLES` found ending at any of the last
//! 30 candles.
//!
//! Chart patterns (the last 60 candles; `v` = the average of range / close over them, a slope is
//! "rising" above v/20 per candle, "falling" below -v/20, "flat" in between; slopes are least
//! squares lines through the pivot highs and through the pivot lows, relative to the mean close,
//! and need two pivots of each; a pivot high is a high above the 3 highs before it and not below
//! the 3 after it, a pivot low the mirror image;
//! "a range" below is the average range in price):
//! - channels: the two slopes within v/40 of each other, both rising (`ascending_channel`,
//!   "Channel Up"), both falling (`descending_channel`, "Channel Down") or both flat
//!   (`horizontal_channel`);
//! - triangles: flat highs with rising lows (`ascending_triangle`), falling highs with flat lows
//!   (`descending_triangle`), falling highs with rising lows (`symmetrical_triangle`);
//! - wedges: both rising with the lows rising faster by v/40 (`rising_wedge`, "Wedge Up"), both
//!   falling with the highs falling faster by v/40 (`falling_wedge`, "Wedge Down");
//! - `double_top`: the last two pivot highs at least 5 candles apart, within one range of each
//!   other, with a low between them at least 3 ranges below the lower; `double_bottom` the
//!   mirror image; `triple_top`/`triple_bottom` the last three pivots within a quarter range of
//!   their mean and at least 10 candles from first to last; `multiple_top`/`multiple_bottom` four
//!   or more pivots within a quarter range of the highest (lowest);
//! - `head_and_shoulders`: of the last three pivot highs, the middle one at least 3 ranges above
//!   both others, which are within 1.5 ranges of each other; `inverse_head_and_shoulders` the
//!   mirror image on pivot lows.

use super::Candle;

/// The candlestick patterns that `candlestick_pattern` reports.
const SUMMARY_CANDLES: &[&str] = &[
    "bullish_hammer",
    "bullish_inverted_hammer",
    "basic_doji",
    "bearish_engulfing",
    "bullish_engulfing",
    "morning_star",
    "evening_star",
    "three_white_soldiers",
];

const AVERAGE_OVER: usize = 10;
const SUMMARY_WINDOW: usize = 30;
const CHART_WINDOW: usize = 60;
const PIVOT_REACH: usize = 3;

/// Every pattern found on one series, in the order of each field's list in the body.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct Detected {
    pub single: Vec<&'static str>,
    pub double: Vec<&'static str>,
    pub triple: Vec<&'static str>,
    pub summary: Vec<&'static str>,
    pub chart: Vec<&'static str>,
    pub triangle: Vec<&'static str>,
    pub head_shoulder: Vec<&'static str>,
    pub multiple_top_bottom: Vec<&'static str>,
    pub double_top_bottom: Vec<&'static str>,
    pub wedge: Vec<&'static str>,
    pub channel: Vec<&'static str>,
}

impl Detected {
    /// The names found for a pattern family, by its name in the `patterns` frame
    /// (`model::fields::pattern_families`); `None` for a family the detector does not know.
    pub fn of(&self, family: &str) -> Option<&Vec<&'static str>> {
        Some(match family {
            "single" => &self.single,
            "double" => &self.double,
            "triple" => &self.triple,
            "chart" => &self.chart,
            "candlestick" => &self.summary,
            "triangle" => &self.triangle,
            "head_shoulder" => &self.head_shoulder,
            "multiple_top_bottom" => &self.multiple_top_bottom,
            "double_top_bottom" => &self.double_top_bottom,
            "wedge" => &self.wedge,
            "channel" => &self.channel,
            _ => return None,
        })
    }
}

pub fn detect(candles: &[Candle]) -> Detected {
    let mut detected = Detected::default();
    let Some(last) = candles.len().checked_sub(1) else { return detected };
    detected.single = single(candles, last);
    detected.double = double(candles, last);
    detected.triple = triple(candles, last);
    for end in last.saturating_sub(SUMMARY_WINDOW - 1)..=last {
        for name in single(candles, end).into_iter().chain(double(candles, end)).chain(triple(candles, end)) {
            if SUMMARY_CANDLES.contains(&name) && !detected.summary.contains(&name) {
                detected.summary.push(name);
            }
        }
    }
    chart(candles, &mut detected);
    detected
}

fn body(c: &Candle) -> f64 {
    (c.close - c.open).abs()
}

fn range(c: &Candle) -> f64 {
    c.high - c.low
}

fn upper_shadow(c: &Candle) -> f64 {
    c.high - c.open.max(c.close)
}

fn lower_shadow(c: &Candle) -> f64 {
    c.open.min(c.close) - c.low
}

fn white(c: &Candle) -> bool {
    c.close >= c.open
}

/// Means over the `AVERAGE_OVER` candles before `i`; `None` without that many.
fn averages(candles: &[Candle], i: usize) -> Option<(f64, f64)> {
    let before = candles.get(i.checked_sub(AVERAGE_OVER)?..i)?;
    let count = AVERAGE_OVER as f64;
    Some((before.iter().map(range).sum::<f64>() / count, before.iter().map(body).sum::<f64>() / count))
}

#[derive(PartialEq)]
enum Trend {
    Up,
    Down,
    Neither,
}

fn trend_before(candles: &[Candle], i: usize) -> Trend {
    let Some(start) = i.checked_sub(AVERAGE_OVER + 1) else { return Trend::Neither };
    let mean = candles[start..i - 1].iter().map(|c| c.close).sum::<f64>() / AVERAGE_OVER as f64;
    let previous = candles[i - 1].close;
    if previous > mean {
        Trend::Up
    } else if previous < mean {
        Trend::Down
    } else {
        Trend::Neither
    }
}

fn is_doji(candles: &[Candle], i: usize) -> bool {
    averages(candles, i).is_some_and(|(average_range, _)| body(&candles[i]) <= 0.1 * average_range)
}

fn single(candles: &[Candle], i: usize) -> Vec<&'static str> {
    let mut found = Vec::new();
    let Some((_, average_body)) = averages(candles, i) else { return found };
    let c = &candles[i];
    let (b, r, upper, lower) = (body(c), range(c), upper_shadow(c), lower_shadow(c));
    let trend = trend_before(candles, i);
    if is_doji(candles, i) {
        if r > 0.0 && upper <= 0.1 * r && lower >= 0.6 * r {
            found.push("dragonfly_doji");
        } else if r > 0.0 && lower <= 0.1 * r && upper >= 0.6 * r {
            found.push("gravestone_doji");
        } else {
            found.push("basic_doji");
        }
    } else {
        if lower >= 2.0 * b && upper <= b {
            match trend {
                Trend::Down => found.push("bullish_hammer"),
                Trend::Up => found.push("bearish_hanging_man"),
                Trend::Neither => {}
            }
        }
        if upper >= 2.0 * b && lower <= b {
            match trend {
                Trend::Down => found.push("bullish_inverted_hammer"),
                Trend::Up => found.push("bearish_shooting_star"),
                Trend::Neither => {}
            }
        }
    }
    if r > 0.0 && b >= 0.9 * r && b >= average_body {
        found.push(if white(c) { "bullish_marubozu" } else { "bearish_marubozu" });
    }
    found
}

/// TA-Lib's CDLENGULFING: +1 bullish, -1 bearish, 0 neither.
pub fn engulfing(previous: &Candle, c: &Candle) -> i8 {
    if white(c)
        && !white(previous)
        && ((c.close >= previous.open && c.open < previous.close)
            || (c.close > previous.open && c.open <= previous.close))
    {
        1
    } else if !white(c)
        && white(previous)
        && ((c.open >= previous.close && c.close < previous.open)
            || (c.open > previous.close && c.close <= previous.open))
    {
        -1
    } else {
        0
    }
}

/// +1 for a bullish harami at (i - 1, i), -1 for a bearish one.
fn harami(candles: &[Candle], i: usize) -> i8 {
    let Some((_, average_body)) = averages(candles, i - 1) else { return 0 };
    let (first, second) = (&candles[i - 1], &candles[i]);
    let (top, bottom) = (first.open.max(first.close), first.open.min(first.close));
    let inside = second.open.max(second.close) <= top && second.open.min(second.close) >= bottom;
    if body(first) < average_body || body(second) > 0.5 * body(first) || !inside || body(second) == 0.0 {
        return 0;
    }
    match (white(first), white(second)) {
        (false, true) => 1,
        (true, false) => -1,
        _ => 0,
    }
}

fn double(candles: &[Candle], i: usize) -> Vec<&'static str> {
    let mut found = Vec::new();
    if i < 1 {
        return found;
    }
    let (previous, c) = (&candles[i - 1], &candles[i]);
    match engulfing(previous, c) {
        1 => found.push("bullish_engulfing"),
        -1 => found.push("bearish_engulfing"),
        _ => {}
    }
    let Some((average_range, average_body)) = averages(candles, i - 1) else { return found };
    match harami(candles, i) {
        1 => found.push("bullish_harami"),
        -1 => found.push("bearish_harami"),
        _ => {}
    }
    let trend = trend_before(candles, i - 1);
    let close_enough = 0.1 * average_range;
    if trend == Trend::Up && white(previous) && !white(c) && (c.high - previous.high).abs() <= close_enough {
        found.push("tweezer_top");
    }
    if trend == Trend::Down && !white(previous) && white(c) && (c.low - previous.low).abs() <= close_enough {
        found.push("tweezer_bottom");
    }
    let middle = (previous.open + previous.close) / 2.0;
    if body(previous) >= average_body {
        if !white(previous) && white(c) && c.open <= previous.close && c.close > middle && c.close < previous.open {
            found.push("piercing_line");
        }
        if white(previous) && !white(c) && c.open >= previous.close && c.close < middle && c.close > previous.open {
            found.push("dark_cloud_cover");
        }
    }
    found
}

fn triple(candles: &[Candle], i: usize) -> Vec<&'static str> {
    let mut found = Vec::new();
    if i < 2 {
        return found;
    }
    let Some((_, average_body)) = averages(candles, i - 2) else { return found };
    let (first, second, third) = (&candles[i - 2], &candles[i - 1], &candles[i]);
    let middle = (first.open + first.close) / 2.0;
    let long_first = body(first) >= average_body;
    let small_second = body(second) <= 0.3 * body(first);
    if long_first && small_second && !white(first) && white(third) && third.close > middle {
        found.push("morning_star");
    }
    if long_first && small_second && white(first) && !white(third) && third.close < middle {
        found.push("evening_star");
    }
    let soldier = |c: &Candle| white(c) && body(c) >= 0.5 * average_body && upper_shadow(c) <= 0.3 * body(c);
    if soldier(first) && soldier(second) && soldier(third) && second.close > first.close && third.close > second.close {
        found.push("three_white_soldiers");
    }
    let crow = |c: &Candle| !white(c) && body(c) >= 0.5 * average_body && lower_shadow(c) <= 0.3 * body(c);
    if crow(first) && crow(second) && crow(third) && second.close < first.close && third.close < second.close {
        found.push("three_black_crows");
    }
    match harami(candles, i - 1) {
        1 if white(third) && third.close > first.open => found.push("three_inside_up"),
        -1 if !white(third) && third.close < first.open => found.push("three_inside_down"),
        _ => {}
    }
    found
}

/// Least squares slope of `values[j]` against `j`, over the given indices.
fn slope(values: &[f64], at: &[usize]) -> f64 {
    let n = at.len() as f64;
    let mean_x = at.iter().sum::<usize>() as f64 / n;
    let mean_y = at.iter().map(|&j| values[j]).sum::<f64>() / n;
    let (mut covariance, mut variance) = (0.0, 0.0);
    for &j in at {
        let dx = j as f64 - mean_x;
        covariance += dx * (values[j] - mean_y);
        variance += dx * dx;
    }
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance
    }
}

/// Indices of pivots: values beyond every other of the `PIVOT_REACH` on each side (a tie goes
/// to the earlier one).
fn pivots(values: &[f64], beyond: fn(f64, f64) -> bool) -> Vec<usize> {
    (PIVOT_REACH..values.len().saturating_sub(PIVOT_REACH))
        .filter(|&j| {
            (j - PIVOT_REACH..j).all(|k| beyond(values[j], values[k]))
                && (j + 1..=j + PIVOT_REACH).all(|k| !beyond(values[k], values[j]))
        })
        .collect()
}

fn chart(candles: &[Candle], detected: &mut Detected) {
    if candles.len() < CHART_WINDOW {
        return;
    }
    let window = &candles[candles.len() - CHART_WINDOW..];
    let mean_close = window.iter().map(|c| c.close).sum::<f64>() / CHART_WINDOW as f64;
    if mean_close.is_nan() || mean_close <= 0.0 {
        return;
    }
    let highs: Vec<f64> = window.iter().map(|c| c.high).collect();
    let lows: Vec<f64> = window.iter().map(|c| c.low).collect();
    let average_range = window.iter().map(range).sum::<f64>() / CHART_WINDOW as f64;
    let peaks = pivots(&highs, |a, b| a > b);
    let troughs = pivots(&lows, |a, b| a < b);
    tops_and_bottoms(&highs, &lows, &peaks, average_range, 1.0, detected);
    tops_and_bottoms(&lows, &highs, &troughs, average_range, -1.0, detected);
    if peaks.len() < 2 || troughs.len() < 2 {
        return;
    }

    let v = window.iter().map(|c| range(c) / c.close).sum::<f64>() / CHART_WINDOW as f64;
    let (high_slope, low_slope) = (slope(&highs, &peaks) / mean_close, slope(&lows, &troughs) / mean_close);
    let threshold = v / 20.0;
    let rising = |s: f64| s > threshold;
    let falling = |s: f64| s < -threshold;
    let flat = |s: f64| !rising(s) && !falling(s);
    if (high_slope - low_slope).abs() <= threshold / 2.0 {
        if rising(high_slope) && rising(low_slope) {
            detected.channel.push("ascending_channel");
            detected.chart.push("Channel Up");
        } else if falling(high_slope) && falling(low_slope) {
            detected.channel.push("descending_channel");
            detected.chart.push("Channel Down");
        } else if flat(high_slope) && flat(low_slope) {
            detected.channel.push("horizontal_channel");
        }
    }
    if flat(high_slope) && rising(low_slope) {
        detected.triangle.push("ascending_triangle");
        detected.chart.push("Ascending Triangle");
    } else if falling(high_slope) && flat(low_slope) {
        detected.triangle.push("descending_triangle");
        detected.chart.push("Descending Triangle");
    } else if falling(high_slope) && rising(low_slope) {
        detected.triangle.push("symmetrical_triangle");
        detected.chart.push("Symmetrical Triangle");
    }
    if rising(high_slope) && rising(low_slope) && low_slope - high_slope > threshold / 2.0 {
        detected.wedge.push("rising_wedge");
        detected.chart.push("Wedge Up");
    } else if falling(high_slope) && falling(low_slope) && low_slope - high_slope > threshold / 2.0 {
        detected.wedge.push("falling_wedge");
        detected.chart.push("Wedge Down");
    }
}

/// Double/triple/multiple tops and head and shoulders on pivot highs (`sign` 1), or the mirror
/// images on pivot lows (`sign` -1, with `values` the lows and `opposite` the highs).
fn tops_and_bottoms(
    values: &[f64],
    opposite: &[f64],
    pivots: &[usize],
    average_range: f64,
    sign: f64,
    detected: &mut Detected,
) {
    let top = sign > 0.0;
    let height = |j: usize| sign * values[j];
    let n = pivots.len();
    if n >= 2 {
        let (a, b) = (pivots[n - 2], pivots[n - 1]);
        let lower = height(a).min(height(b));
        let valley = opposite[a..=b].iter().map(|v| sign * v).fold(f64::INFINITY, f64::min);
        if b - a >= 5 && (values[a] - values[b]).abs() <= average_range && lower - valley >= 3.0 * average_range {
            detected.double_top_bottom.push(if top { "double_top" } else { "double_bottom" });
            detected.chart.push(if top { "Double Top" } else { "Double Bottom" });
        }
    }
    if n >= 3 {
        let last_three = &pivots[n - 3..];
        let mean = last_three.iter().map(|&j| values[j]).sum::<f64>() / 3.0;
        let spread = last_three[2] - last_three[0];
        if spread >= 10 && last_three.iter().all(|&j| (values[j] - mean).abs() <= 0.25 * average_range) {
            detected.multiple_top_bottom.push(if top { "triple_top" } else { "triple_bottom" });
        }
        let (left, head, right) = (height(last_three[0]), height(last_three[1]), height(last_three[2]));
        if head - left.max(right) >= 3.0 * average_range && (left - right).abs() <= 1.5 * average_range {
            detected.head_shoulder.push(if top { "head_and_shoulders" } else { "inverse_head_and_shoulders" });
            if top {
                detected.chart.push("Head and Shoulders");
            }
        }
    }
    if n >= 4 {
        let extreme = pivots.iter().map(|&j| height(j)).fold(f64::NEG_INFINITY, f64::max);
        if pivots.iter().filter(|&&j| extreme - height(j) <= 0.25 * average_range).count() >= 4 {
            detected.multiple_top_bottom.push(if top { "multiple_top" } else { "multiple_bottom" });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candle(open: f64, high: f64, low: f64, close: f64) -> Candle {
        Candle { open_ms: 0, open, high, low, close, volume: 1.0 }
    }

    /// Ten ordinary candles (range 2, body 1) drifting in `direction`, then `tail`.
    fn after_trend(direction: f64, tail: &[Candle]) -> Vec<Candle> {
        let mut candles: Vec<Candle> = (0..11)
            .map(|i| {
                let open = 100.0 + direction * f64::from(i);
                let close = open + direction;
                candle(open, open.max(close) + 0.5, open.min(close) - 0.5, close)
            })
            .collect();
        candles.extend_from_slice(tail);
        candles
    }

    #[test]
    fn single_candle_rules() {
        let names = |direction: f64, c: Candle| detect(&after_trend(direction, &[c])).single;
        assert_eq!(names(1.0, candle(110.0, 111.0, 109.0, 110.05)), ["basic_doji"]);
        assert_eq!(names(1.0, candle(110.0, 110.0, 108.0, 110.0)), ["dragonfly_doji"]);
        assert_eq!(names(1.0, candle(110.0, 112.0, 110.0, 110.0)), ["gravestone_doji"]);
        assert_eq!(names(-1.0, candle(90.0, 90.6, 87.0, 90.5)), ["bullish_hammer"]);
        assert_eq!(names(1.0, candle(110.0, 110.6, 107.0, 110.5)), ["bearish_hanging_man"]);
        assert_eq!(names(-1.0, candle(90.0, 93.0, 89.8, 90.5)), ["bullish_inverted_hammer"]);
        assert_eq!(names(1.0, candle(110.5, 113.0, 109.8, 110.0)), ["bearish_shooting_star"]);
        assert_eq!(names(1.0, candle(110.0, 112.05, 110.0, 112.0)), ["bullish_marubozu"]);
    }

    #[test]
    fn two_and_three_candle_rules() {
        let double = |direction: f64, tail: &[Candle]| detect(&after_trend(direction, tail)).double;
        let black = candle(111.0, 111.2, 109.8, 110.0);
        assert!(double(1.0, &[black, candle(110.0, 111.8, 109.9, 111.5)]).contains(&"bullish_engulfing"));
        assert!(double(1.0, &[black, candle(110.0, 110.7, 109.9, 110.6)]).contains(&"piercing_line"));
        let long_black = candle(112.0, 112.1, 109.9, 110.0);
        assert!(double(1.0, &[long_black, candle(110.2, 110.9, 110.1, 110.8)]).contains(&"bullish_harami"));
        let triple = |tail: &[Candle]| detect(&after_trend(-1.0, tail)).triple;
        let stars = [long_black, candle(110.0, 110.3, 109.8, 110.1), candle(110.1, 111.6, 110.0, 111.5)];
        assert!(triple(&stars).contains(&"morning_star"));
        let soldiers = [candle(90.0, 91.1, 89.9, 91.0), candle(91.0, 92.1, 90.9, 92.0), candle(92.0, 93.1, 91.9, 93.0)];
        assert!(triple(&soldiers).contains(&"three_white_soldiers"));
    }

    /// Sixty candles zigzagging between two lines (period 10, peaks at multiples of 10).
    fn zigzag(upper: fn(f64) -> f64, lower: fn(f64) -> f64) -> Detected {
        let position = |x: f64| {
            let phase = ((x % 10.0) - 5.0).abs() / 5.0;
            lower(x) + (upper(x) - lower(x)) * phase
        };
        let candles: Vec<Candle> = (0..60)
            .map(|i| {
                let (open, close) = (position(f64::from(i) - 1.0), position(f64::from(i)));
                candle(open, open.max(close) + 0.1, open.min(close) - 0.1, close)
            })
            .collect();
        let mut detected = Detected::default();
        chart(&candles, &mut detected);
        detected
    }

    #[test]
    fn trend_line_rules() {
        let up = zigzag(|x| 102.0 + 0.4 * x, |x| 98.0 + 0.4 * x);
        assert_eq!((up.channel.as_slice(), up.chart.as_slice()), (&["ascending_channel"][..], &["Channel Up"][..]));
        let ascending = zigzag(|_| 110.0, |x| 90.0 + 0.25 * x);
        assert_eq!(ascending.triangle, ["ascending_triangle"]);
        let symmetrical = zigzag(|x| 110.0 - 0.15 * x, |x| 90.0 + 0.15 * x);
        assert_eq!(symmetrical.triangle, ["symmetrical_triangle"]);
        let wedge = zigzag(|x| 104.0 + 0.2 * x, |x| 96.0 + 0.3 * x);
        assert_eq!((wedge.wedge.as_slice(), wedge.triangle.len()), (&["rising_wedge"][..], 0));
    }

    #[test]
    fn double_top_rule() {
        let bump = |x: f64| 20.0 * (-((x - 20.0) / 3.0).powi(2)).exp() + 20.0 * (-((x - 40.0) / 3.0).powi(2)).exp();
        let candles: Vec<Candle> = (0..60)
            .map(|i| {
                let y = 100.0 + bump(f64::from(i));
                candle(y - 0.3, y, y - 1.0, y - 0.5)
            })
            .collect();
        let detected = detect(&candles);
        assert_eq!(detected.double_top_bottom, ["double_top"]);
        assert!(detected.chart.contains(&"Double Top"));
    }
}
