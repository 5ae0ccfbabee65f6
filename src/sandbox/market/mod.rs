//! The Sandbox's market: each token's price path (`path`), who the token is (`universe`), its
//! candles at every interval, and the patterns found in them (`patterns`; the indicators are
//! `crate::ta`'s, by `model::indicators`' recipes). Everything is a deterministic function of
//! (seed, token, time), so two Sandboxes with the same seed at the same time serve the same
//! bytes.

pub mod path;
pub mod patterns;
pub mod ranking;
pub mod universe;

pub use universe::{known_ids, known_token};

use path::{boundary_ms, last_boundary, Path, Point, FINEST};
use universe::{Kind, Profile, ANCHOR_MS};

/// Closed candles kept behind "now" at every interval: enough for SMA(100) and for Wilder's RSI
/// and the MACD's EMAs to have forgotten where they started.
pub const HISTORY: usize = 300;
/// The earliest and latest "now" a Sandbox accepts: the path needs `HISTORY` weeks behind it and
/// ends in 2284. (2000-01-01 and 2200-01-01.)
pub const EARLIEST_NOW_MS: i64 = 946_684_800_000;
pub const LATEST_NOW_MS: i64 = 7_258_118_400_000;
/// How far a stablecoin strays from its peg, at most (as a share of it).
const STABLE_BAND: f64 = 0.002;

/// One candle: `open_ms` is its open time; prices are whole ticks; volume is in tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candle {
    pub open_ms: i64,
    pub open: f64,
    pub high: f64,
    pub low: f64,
    pub close: f64,
    pub volume: f64,
}

/// The tree level of a candle interval (`"1w"` is the top, `"5m"` the finest).
pub fn level_of(interval: &str) -> Option<usize> {
    match interval {
        "1w" => Some(0),
        "24h" => Some(1),
        "4h" => Some(2),
        "1h" => Some(3),
        "15m" => Some(4),
        "5m" => Some(5),
        _ => None,
    }
}

/// One token's market.
pub struct TokenMarket {
    pub profile: Profile,
    path: Path,
    anchor: Point,
    /// Tokens traded per year of trading time.
    volume_rate: f64,
}

impl TokenMarket {
    pub fn new(seed: u64, token: &str) -> TokenMarket {
        let profile = Profile::of(seed, token);
        let path = Path::new(seed, token);
        let anchor = path.at(1, last_boundary(1, ANCHOR_MS));
        let volume_rate = profile.anchor_supply * profile.daily_turnover * 365.25;
        TokenMarket { profile, path, anchor, volume_rate }
    }

    /// The price at a point of the path, before rounding to the tick.
    fn exact_price(&self, point: Point) -> f64 {
        let moved = point.level - self.anchor.level;
        let profile = &self.profile;
        match profile.kind {
            Kind::Floating => {
                profile.anchor_price
                    * (profile.volatility * moved + profile.drift * (point.time - self.anchor.time)).exp()
            }
            // A sine of the walk wanders inside the band for ever; a saturating curve would pin
            // the price to the band's edge (a stablecoin whose closes never move has an RSI of 0
            // and tops every oversold screen).
            Kind::Stable => profile.anchor_price * (1.0 + STABLE_BAND * (3.0 * moved).sin()),
        }
    }

    fn price(&self, point: Point) -> f64 {
        self.profile.round_price(self.exact_price(point))
    }

    /// The last `count` closed candles of `level` at `now_ms`, oldest first.
    pub fn candles(&self, level: usize, now_ms: i64, count: usize) -> Vec<Candle> {
        let last = last_boundary(level, now_ms);
        let first = last - count as i64;
        let points = self.path.boundaries(level, first, last);
        // Excursions scale with the candle's own volatility: sigma * sqrt(trading time).
        let volatility = match self.profile.kind {
            Kind::Floating => self.profile.volatility,
            Kind::Stable => STABLE_BAND,
        };
        let tick = self.profile.tick();
        let prices: Vec<f64> = points.iter().map(|point| self.price(*point)).collect();
        (0..count)
            .map(|offset| {
                let index = first + offset as i64;
                let (open, close) = (prices[offset], prices[offset + 1]);
                let duration = points[offset + 1].time - points[offset].time;
                let (up, down) = self.path.excursions(level, index);
                let spread = 0.5 * volatility * duration.sqrt();
                let high = open.max(close) * (spread * up).exp();
                let low = open.min(close) * (-spread * down).exp();
                Candle {
                    open_ms: boundary_ms(level, index),
                    open,
                    high: self.profile.round_price(high).max(open.max(close)),
                    low: self.profile.round_price(low).clamp(tick.min(open.min(close)), open.min(close)),
                    close,
                    volume: self.volume_rate * duration,
                }
            })
            .collect()
    }

    /// The 5-minute boundary at or before `ms`, as (time, point).
    fn point_at(&self, ms: i64) -> (i64, Point) {
        let index = last_boundary(FINEST, ms);
        (boundary_ms(FINEST, index), self.path.at(FINEST, index))
    }

    /// The price at the last 5-minute close at or before `ms`.
    pub fn price_at(&self, ms: i64) -> f64 {
        self.price(self.point_at(ms).1)
    }

    /// Tokens traded from `from_ms` to `to_ms` (both taken at their 5-minute boundary).
    pub fn volume_between(&self, from_ms: i64, to_ms: i64) -> f64 {
        let (from, to) = (self.point_at(from_ms).1, self.point_at(to_ms).1);
        self.volume_rate * (to.time - from.time).max(0.0)
    }

    pub fn market_cap_at(&self, ms: i64) -> f64 {
        self.price_at(ms) * self.profile.circulating_supply(ms)
    }
}

/// The close time of the last 5-minute candle at `now_ms`: the moment a body describes.
pub fn last_close_ms(now_ms: i64) -> i64 {
    last_close_of(FINEST, now_ms)
}

/// The close time of the last closed candle of `level` at `now_ms`.
pub fn last_close_of(level: usize, now_ms: i64) -> i64 {
    boundary_ms(level, last_boundary(level, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use path::LEVEL_MS;

    const NOW: i64 = 1_795_305_600_000; // 2026-11-22T00:00:00Z

    #[test]
    fn candles_chain_and_close_where_finer_ones_do() {
        let market = TokenMarket::new(0, "bitcoin");
        for (level, &length) in LEVEL_MS.iter().enumerate() {
            let candles = market.candles(level, NOW + 123_456, HISTORY);
            assert_eq!(candles.len(), HISTORY);
            let last = candles[HISTORY - 1];
            assert_eq!(last.open_ms + length, last_close_of(level, NOW + 123_456));
            for pair in candles.windows(2) {
                assert_eq!(pair[1].open, pair[0].close);
                assert_eq!(pair[1].open_ms - pair[0].open_ms, length);
            }
            for candle in &candles {
                assert!(candle.low <= candle.open.min(candle.close) && candle.high >= candle.open.max(candle.close));
                assert!(candle.low > 0.0 && candle.volume > 0.0);
            }
            // NOW is midnight on a Sunday: every level but the week closes there.
            if level > 0 {
                assert_eq!(last.close, market.price_at(NOW), "level {level}");
            }
        }
    }

    #[test]
    fn bitcoin_trades_in_the_tens_of_thousands_and_stablecoins_near_one() {
        let bitcoin = TokenMarket::new(0, "bitcoin");
        let tether = TokenMarket::new(0, "tether");
        for day in 0..400 {
            let ms = NOW - day * 86_400_000;
            let price = bitcoin.price_at(ms);
            assert!((10_000.0..1_000_000.0).contains(&price), "{price}");
            assert!((tether.price_at(ms) - 1.0).abs() <= 0.0025);
        }
    }
}
