//! Who each token is: its price level, supply, volatility and trading activity. Well-known ids
//! get realistic levels (bitcoin in the tens of thousands, stablecoins at $1); any other id gets a plausible small or
//! mid cap drawn from its hash, so that a screen over many ids sees a realistic spread.

use super::super::random::Rng;

/// The moment at which a token's `anchor_price` and `anchor_supply` hold. The path moves away from
/// it in both directions of time.
pub const ANCHOR_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// The whole market's capitalisation, for `market_cap_dominance`.
pub const TOTAL_MARKET_CAP: f64 = 3.2e12;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// Follows its path.
    Floating,
    /// Held near `anchor_price` by its issuer: the path only wiggles it by a few basis points.
    Stable,
}

#[derive(Clone, Debug)]
pub struct Profile {
    pub kind: Kind,
    /// USD at `ANCHOR_MS`.
    pub anchor_price: f64,
    /// Circulating supply at `ANCHOR_MS`; it grows by `supply_growth` per year.
    pub anchor_supply: f64,
    pub supply_growth: f64,
    /// Total supply over circulating supply (at least 1).
    pub total_over_circulating: f64,
    /// Max supply over total supply; `None` for an infinite supply.
    pub max_over_total: Option<f64>,
    /// Annualised volatility of log prices.
    pub volatility: f64,
    /// Annual drift of log prices.
    pub drift: f64,
    /// Share of the circulating supply traded per day, on average.
    pub daily_turnover: f64,
    /// Decimal places of prices: the tick size is 10^-decimals.
    pub decimals: u32,
}

/// A well-known token: its id, ticker and categories, and the levels its path starts from.
pub struct Known {
    pub id: &'static str,
    pub symbol: &'static str,
    pub categories: &'static [&'static str],
    price: f64,
    supply: f64,
    max_supply: Option<f64>,
    volatility: f64,
    turnover: f64,
    kind: Kind,
}

type Tags = &'static [&'static str];

const fn known(
    (id, symbol, categories): (&'static str, &'static str, Tags),
    price: f64,
    supply: f64,
    max_supply: Option<f64>,
    volatility: f64,
) -> Known {
    Known { id, symbol, categories, price, supply, max_supply, volatility, turnover: 0.03, kind: Kind::Floating }
}

const fn stable(id: &'static str, symbol: &'static str, supply: f64) -> Known {
    let categories: Tags = &["Stablecoins"];
    Known {
        id,
        symbol,
        categories,
        price: 1.0,
        supply,
        max_supply: None,
        volatility: 0.0,
        turnover: 0.4,
        kind: Kind::Stable,
    }
}

const L1: Tags = &["Layer 1", "Smart Contract Platform", "Proof of Stake"];

const KNOWN: &[Known] = &[
    known(("bitcoin", "BTC", &["Layer 1", "Proof of Work"]), 60_000.0, 19.97e6, Some(21e6), 0.45),
    known(("ethereum", "ETH", L1), 3_000.0, 120.7e6, None, 0.7),
    stable("tether", "USDT", 187e9),
    known(("ripple", "XRP", &["Layer 1"]), 1.9, 60.5e9, Some(100e9), 0.9),
    known(("binancecoin", "BNB", &["Layer 1", "Exchange-based Tokens"]), 850.0, 139e6, Some(200e6), 0.55),
    known(("solana", "SOL", L1), 125.0, 560e6, None, 0.9),
    stable("usd-coin", "USDC", 75e9),
    known(("tron", "TRX", L1), 0.28, 94.7e9, None, 0.6),
    known(("dogecoin", "DOGE", &["Meme", "Proof of Work"]), 0.13, 151e9, None, 1.0),
    known(("cardano", "ADA", L1), 0.35, 36.5e9, Some(45e9), 0.95),
    known(("chainlink", "LINK", &["Oracle", "Decentralized Finance (DeFi)"]), 12.5, 680e6, Some(1e9), 0.95),
    known(("avalanche-2", "AVAX", L1), 12.0, 425e6, Some(720e6), 1.0),
    known(("shiba-inu", "SHIB", &["Meme"]), 0.0000072, 589e12, None, 1.1),
    known(("polkadot", "DOT", L1), 1.8, 1.6e9, None, 1.0),
    known(("litecoin", "LTC", &["Layer 1", "Proof of Work"]), 77.0, 76.5e6, Some(84e6), 0.8),
];

/// The well-known token with this id, if it is one.
pub fn known_token(token: &str) -> Option<&'static Known> {
    KNOWN.iter().find(|k| k.id == token)
}

/// The ids with realistic levels, tickers and categories (every other slug gets a plausible
/// small or mid cap of its own).
pub fn known_ids() -> Vec<&'static str> {
    KNOWN.iter().map(|k| k.id).collect()
}

impl Profile {
    pub fn of(seed: u64, token: &str) -> Profile {
        let mut rng = Rng::new(seed, token, "profile");
        if let Some(known) = known_token(token) {
            let total_over_circulating = match known.kind {
                Kind::Stable => 1.0,
                Kind::Floating => rng.range(1.0, 1.1),
            };
            return Profile {
                kind: known.kind,
                anchor_price: known.price,
                anchor_supply: known.supply,
                supply_growth: match known.kind {
                    Kind::Stable => rng.range(0.0, 0.3),
                    Kind::Floating => rng.range(0.0, 0.02),
                },
                total_over_circulating,
                max_over_total: known.max_supply.map(|max| (max / (known.supply * total_over_circulating)).max(1.0)),
                volatility: known.volatility,
                drift: rng.range(-0.15, 0.15),
                daily_turnover: known.turnover * rng.range(0.7, 1.4),
                decimals: decimals_for(known.price),
            };
        }
        // Log-uniform caps from $10k to $3bn and supplies from a million to a trillion put most
        // ids among the small caps, some priced at fractions of a cent.
        let market_cap = 10f64.powf(rng.range(4.0, 9.5));
        let supply = 10f64.powf(rng.range(6.0, 12.0)).round();
        let price = market_cap / supply;
        let total_over_circulating = rng.range(1.0, 1.6);
        Profile {
            kind: Kind::Floating,
            anchor_price: price,
            anchor_supply: supply,
            supply_growth: rng.range(0.0, 0.15),
            total_over_circulating,
            max_over_total: if rng.chance(0.3) { None } else { Some(rng.range(1.0, 1.5)) },
            volatility: rng.range(0.6, 1.6),
            drift: rng.range(-0.6, 0.4),
            daily_turnover: rng.range(0.01, 0.25),
            decimals: decimals_for(price),
        }
    }

    /// The tick: prices are whole multiples of it.
    pub fn tick(&self) -> f64 {
        10f64.powi(-(self.decimals as i32))
    }

    /// Rounds to the tick, never below one tick. Dividing the whole number of ticks by a power of
    /// ten gives the same double as parsing the printed decimal.
    pub fn round_price(&self, price: f64) -> f64 {
        let scale = 10f64.powi(self.decimals as i32);
        (price * scale).round().max(1.0) / scale
    }

    pub fn circulating_supply(&self, ms: i64) -> f64 {
        let years = (ms - ANCHOR_MS) as f64 / MS_PER_YEAR;
        (self.anchor_supply * (1.0 + self.supply_growth * years).max(0.05)).round()
    }
}

pub const MS_PER_YEAR: f64 = 365.25 * 86_400_000.0;

/// About six significant digits at the anchor price, at least two decimals, at most twelve.
fn decimals_for(price: f64) -> u32 {
    (5 - price.log10().floor() as i32).clamp(2, 12) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_ids_are_at_their_levels_and_others_spread_widely() {
        assert_eq!(Profile::of(0, "bitcoin").anchor_price, 60_000.0);
        assert_eq!(Profile::of(0, "tether").kind, Kind::Stable);
        let prices: Vec<f64> = (0..500).map(|i| Profile::of(0, &format!("coin-{i}")).anchor_price).collect();
        assert!(prices.iter().any(|&p| p < 0.01) && prices.iter().any(|&p| p > 1.0));
    }

    #[test]
    fn rounding_to_the_tick_matches_the_printed_decimal() {
        let profile = Profile::of(3, "coin-x");
        for i in 0..200 {
            let price = profile.anchor_price * (1.0 + f64::from(i) / 97.0);
            let rounded = profile.round_price(price);
            let text = format!("{:.*}", profile.decimals as usize, rounded);
            assert_eq!(text.parse::<f64>().ok(), Some(rounded), "{text}");
        }
    }
}
