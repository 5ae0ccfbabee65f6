//! The Sandbox's data: realistic, deterministic bodies for any (seed, token id).

use std::fmt::Write;

use crate::timestamp::{format_iso_timestamp, format_ta_timestamp};

/// FNV-1a over the parts, then splitmix64: a stable hash that needs no dependency.
pub fn stable_hash(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    splitmix(hash)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A small deterministic generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, token: &str, stream: &str) -> Self {
        Rng(stable_hash(seed, &[token.as_bytes(), stream.as_bytes()]))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn range(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// Up to `max` distinct items, empty with probability `empty`.
    pub fn some_of<'a>(&mut self, items: &[&'a str], max: usize, empty: f64) -> Vec<&'a str> {
        if self.chance(empty) {
            return Vec::new();
        }
        let count = 1 + self.below(max.min(items.len()));
        let start = self.below(items.len());
        (0..count).map(|i| items[(start + i) % items.len()]).collect()
    }
}

const TA_INTERVALS: [&str; 5] = ["5m", "15m", "1h", "24h", "1w"];
const GROUPED_INTERVALS: [&str; 5] = ["5m", "15m", "1h", "24h", "4h"];
const CANDLES: &[&str] = &[
    "bullish_hammer", "bullish_inverted_hammer", "basic_doji", "bearish_engulfing", "bullish_engulfing",
    "shooting_star", "morning_star", "evening_star", "three_white_soldiers", "dragonfly_doji",
];
const CHARTS: &[&str] = &["Ascending Triangle", "Descending Triangle", "Wedge Up", "Wedge Down", "Channel Up", "Channel Down"];
const CATEGORIES: &[&str] = &["Layer 1", "DeFi", "Smart Contract Platform", "Meme", "Stablecoin", "Gaming", "Oracle"];
const EXCHANGES: &[&str] = &["Binance", "Coinbase Exchange", "Kraken", "OKX", "Bybit", "KuCoin", "Gate.io", "Bitget", "HTX", "MEXC"];
const QUOTES: &[&str] = &["USDT", "USD", "USDC", "BTC", "ETH", "EUR"];
/// 2026-11-22T00:00:00Z: the Sandbox's "now", so bodies never depend on the clock.
const BASE_MS: i64 = 1_795_305_600_000;

fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

fn json_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| json_string(s)).collect();
    format!("[{}]", quoted.join(","))
}

fn slug(text: &str) -> String {
    text.to_lowercase().replace(' ', "-")
}

fn symbol_of(token: &str) -> String {
    let letters: String = token.chars().filter(|c| c.is_ascii_alphanumeric()).take(4).collect();
    if letters.is_empty() { "TKN".into() } else { letters.to_uppercase() }
}

fn display_name(token: &str) -> String {
    let mut chars = token.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    }
}

/// The price a token has in the Sandbox (the markets body trades around it).
fn price_of(seed: u64, token: &str) -> f64 {
    let mut rng = Rng::new(seed, token, "price");
    let magnitude = rng.range(-2.0, 5.0);
    (10f64.powf(magnitude) * 100.0).round() / 100.0 + 0.01
}

/// The listing body (`{"data": ..., "generalInfo": ...}`) with every field family.
pub fn listing_body(seed: u64, token: &str) -> String {
    let mut rng = Rng::new(seed, token, "listing");
    let price = price_of(seed, token);
    let id = json_string(token);
    let categories = rng.some_of(CATEGORIES, 3, 0.1);
    let tags: Vec<String> = categories.iter().map(|c| slug(c)).collect();
    let tag_refs: Vec<&str> = tags.iter().map(String::as_str).collect();
    let exchanges = rng.some_of(EXCHANGES, 6, 0.0);
    let supply = rng.range(1e6, 1e10).round();
    let max_supply = (supply * rng.range(1.0, 2.0)).round();
    let market_cap = price * supply;
    let updated = BASE_MS - rng.below(3_600_000) as i64;
    let mut out = String::with_capacity(7000);
    let o = &mut out;
    let _ = write!(o, "{{\"data\":{{\"id\":{id},\"symbol_id\":{id},\"name\":{},\"symbol\":{},", json_string(&display_name(token)), json_string(&symbol_of(token)));
    let _ = write!(o, "\"image\":\"https://images.example/tokens/{}.png\",", rng.next_u64() % 100_000);
    let _ = write!(o, "\"categories\":{},\"tags\":{},\"exchanges\":{},", json_list(&categories), json_list(&tag_refs), json_list(&exchanges));
    let _ = write!(o, "\"is_active\":{},\"infinite_supply\":{},", !rng.chance(0.05), rng.chance(0.2));
    let _ = write!(o, "\"last_updated\":\"{}\",\"updated_at\":\"{}\",\"ohlc_updated_time\":\"\",", format_iso_timestamp(updated), format_iso_timestamp(updated + 1_234));
    let _ = write!(o, "\"current_price\":\"{price:.2}\",\"circulating_supply\":{supply},\"total_supply\":{supply},\"max_supply\":{max_supply},");
    let _ = write!(o, "\"fully_diluted_valuation\":{:.2},\"market_cap\":{market_cap:.2},\"market_cap_rank\":{},", price * max_supply, 1 + rng.below(5000));
    let _ = write!(o, "\"market_cap_dominance\":{:.4},\"total_volume\":{:.2},", rng.range(0.0, 55.0), market_cap * rng.range(0.01, 0.3));
    let _ = write!(o, "\"ath\":{:.2},\"atl\":{:.4},\"apy\":{:.2},\"tvl\":{:.2},\"day_volatility\":{:.3},", price * rng.range(1.0, 3.0), price * rng.range(0.001, 0.5), rng.range(0.0, 12.0), market_cap * rng.range(0.0, 0.1), rng.range(0.1, 12.0));
    let _ = write!(o, "\"github_commit\":{},\"number_of_holders\":null,", rng.below(60_000));
    if rng.chance(0.5) {
        o.push_str("\"holders_change_percentage_24h\":null,");
    } else {
        let _ = write!(o, "\"holders_change_percentage_24h\":{:.3},", rng.range(-2.0, 2.0));
    }
    for field in [
        "market_cap_change_percentage_24h", "market_cap_change_percentage_1w", "market_cap_percentage_change_7d",
        "price_change_percentage_24h", "price_percent_change_1h", "price_percent_change_24h", "price_percent_change_7d",
        "price_percent_change_30d", "price_percent_change_60d", "price_percent_change_90d", "price_percent_change_1w",
        "volume_change_24h", "volume_change_1w", "volume_percentage_change_7d", "supply_percentage_change_24h",
    ] {
        let _ = write!(o, "\"{field}\":{:.4},", rng.range(-25.0, 25.0));
    }
    let open_interest = market_cap * rng.range(0.001, 0.05);
    let _ = write!(o, "\"open_interest\":{open_interest:.2},\"funding_rate\":{:.6},", rng.range(-0.001, 0.001));
    for window in ["1h", "4h", "24h"] {
        let _ = write!(o, "\"open_interest_change_{window}\":{:.4},\"long_short_ratio_{window}\":{:.4},", rng.range(-10.0, 10.0), rng.range(0.5, 2.0));
        let _ = write!(o, "\"long_liquidation_{window}\":{:.2},\"short_liquidation_{window}\":{:.2},", open_interest * rng.range(0.0, 0.01), open_interest * rng.range(0.0, 0.01));
    }
    for (i, interval) in TA_INTERVALS.iter().enumerate() {
        for period in [7, 14, 25] {
            let _ = write!(o, "\"rsi{period}_{interval}\":{:.4},", rng.range(5.0, 95.0));
        }
        for period in [5, 20, 100] {
            let _ = write!(o, "\"sma{period}_{interval}\":{:.6},", price * rng.range(0.9, 1.1));
        }
        let middle = price * rng.range(0.95, 1.05);
        let width = middle * rng.range(0.01, 0.1);
        let _ = write!(o, "\"upper_bband_{interval}\":{:.6},\"middle_bband_{interval}\":{middle:.6},\"lower_bband_{interval}\":{:.6},", middle + width, middle - width);
        let macd = if rng.chance(0.5) { "Cross Above" } else { "Cross Below" };
        let _ = write!(o, "\"macd_{interval}\":\"{macd}\",");
        let _ = write!(o, "\"ta_{interval}_updated_at\":\"{}\",", format_ta_timestamp(BASE_MS - (i as i64 + 1) * 300_000));
        for family in ["single_pattern", "double_pattern", "tripple_pattern", "candlestick_pattern"] {
            let _ = write!(o, "\"{family}_{interval}\":{},", json_list(&rng.some_of(CANDLES, 3, 0.4)));
        }
        let _ = write!(o, "\"chartpattern_{interval}\":{},", json_list(&rng.some_of(CHARTS, 2, 0.4)));
    }
    for interval in GROUPED_INTERVALS {
        let triangles = rng.some_of(&["ascending_triangle", "descending_triangle", "symmetrical_triangle"], 1, 0.6);
        let heads = rng.some_of(&["head_and_shoulders", "inverse_head_and_shoulders"], 1, 0.7);
        let multiples = rng.some_of(&["triple_top", "triple_bottom"], 1, 0.7);
        let doubles = rng.some_of(&["double_bottom", "double_top"], 1, 0.5);
        let wedges = rng.some_of(&["rising_wedge", "falling_wedge"], 1, 0.6);
        let channels = rng.some_of(&["channel_up", "channel_down", "horizontal_channel"], 1, 0.6);
        let _ = write!(o, "\"triangle_pattern_{interval}\":{},\"head_shoulder_pattern_{interval}\":{},", json_list(&triangles), json_list(&heads));
        let _ = write!(o, "\"multiple_top_bottom_pattern_{interval}\":{},\"double_top_bottom_pattern_{interval}\":{},", json_list(&multiples), json_list(&doubles));
        let _ = write!(o, "\"wedge_pattern_{interval}\":{},\"channel_pattern_{interval}\":{},", json_list(&wedges), json_list(&channels));
    }
    o.pop(); // the last comma
    let name = display_name(token);
    let _ = write!(
        o,
        "}},\"generalInfo\":{{\"description\":{},",
        json_string(&format!("{name} is a digital asset tracked by DeFi Lens. This description is generated by the defilens Sandbox."))
    );
    let _ = write!(o, "\"websites\":[\"https://{0}.example.org\"],\"explorers\":[\"https://explorer.example/{0}\",\"https://scan.example/{0}\"],", rng.next_u64() % 100_000);
    let link = |rng: &mut Rng, site: &str| {
        if rng.chance(0.3) { "null".to_string() } else { format!("\"https://{site}/{}\"", rng.next_u64() % 100_000) }
    };
    let (twitter, reddit, facebook, github, telegram) = (
        link(&mut rng, "twitter.com"),
        link(&mut rng, "reddit.com/r"),
        link(&mut rng, "facebook.com"),
        link(&mut rng, "github.com"),
        link(&mut rng, "t.me"),
    );
    let _ = write!(o, "\"community\":{{\"twitter\":{twitter},\"reddit\":{reddit},\"facebook\":{facebook},\"github\":{github},\"telegram\":{telegram}}},");
    if rng.chance(0.2) {
        let _ = write!(o, "\"chains\":[{{\"name\":\"ethereum\",\"address\":\"0x{:016x}\"}}],", rng.next_u64());
    } else {
        o.push_str("\"chains\":[],");
    }
    let _ = write!(o, "\"categories\":{}}}}}", json_list(&categories));
    out
}

/// The markets body (`{"data": [...], "total": N}`).
pub fn markets_body(seed: u64, token: &str) -> String {
    let mut rng = Rng::new(seed, token, "markets");
    let price = price_of(seed, token);
    let count = 3 + rng.below(28);
    let shares: Vec<f64> = (0..count).map(|_| rng.range(0.1, 1.0)).collect();
    let share_total: f64 = shares.iter().sum();
    let volume = price * rng.range(1e5, 1e9);
    let symbol = symbol_of(token);
    let mut out = String::with_capacity(count * 420 + 32);
    out.push_str("{\"data\":[");
    for (i, share) in shares.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let exchange = rng.pick(EXCHANGES);
        let quote = rng.pick(QUOTES);
        let percent = share / share_total * 100.0;
        let _ = write!(
            out,
            "{{\"id\":\"{:x}\",\"exchangeName\":{},\"exchangeImage\":\"https://images.example/exchanges/{}.png\",\"marketPair\":{},\"marketUrl\":\"https://{}.example/trade/{}\",",
            rng.next_u64(),
            json_string(exchange),
            slug(exchange),
            json_string(&format!("{symbol}/{quote}")),
            slug(exchange),
            i
        );
        let _ = write!(
            out,
            "\"price\":{:.6},\"volumeUsd\":{:.2},\"liquidity_score\":{},\"depthUsdPositiveTwo\":{:.2},\"depthUsdNegativeTwo\":{:.2},\"volumePercent\":{percent:.4},\"marketReputation\":{}}}",
            price * rng.range(0.995, 1.005),
            volume * percent / 100.0,
            rng.below(1001),
            volume * rng.range(0.001, 0.02),
            volume * rng.range(0.001, 0.02),
            rng.below(2)
        );
    }
    let total = if rng.chance(0.2) { count + 1 + rng.below(20) } else { count };
    let _ = write!(out, "],\"total\":{total}}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_valid_deterministic_and_complete() {
        let body = listing_body(0, "bitcoin");
        assert_eq!(body, listing_body(0, "bitcoin"));
        assert_ne!(body, listing_body(1, "bitcoin"));
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        let data = &value["data"];
        assert!(data["current_price"].is_string());
        assert!(data["number_of_holders"].is_null());
        assert_eq!(data["ohlc_updated_time"], "");
        for key in ["rsi7_5m", "sma100_1w", "lower_bband_24h", "macd_1h", "ta_15m_updated_at", "tripple_pattern_1h",
                    "chartpattern_1w", "wedge_pattern_4h", "channel_pattern_5m", "short_liquidation_24h"] {
            assert!(data.get(key).is_some(), "{key}");
        }
        assert!(data.get("rsi7_4h").is_none() && data.get("wedge_pattern_1w").is_none());
        assert!(value["generalInfo"]["community"].is_object());
        assert!(body.len() > 4000, "{}", body.len());
        let markets: serde_json::Value = serde_json::from_str(&markets_body(0, "bitcoin")).unwrap();
        let entries = markets["data"].as_array().unwrap();
        assert!(entries.len() >= 3 && markets["total"].as_u64().unwrap() >= entries.len() as u64);
    }

    #[test]
    fn odd_token_ids_stay_valid_json() {
        for token in ["a\"b", "back\\slash", "new\nline", "ünï", "", "a/b"] {
            let value: serde_json::Value = serde_json::from_str(&listing_body(3, token)).unwrap();
            assert_eq!(value["data"]["id"], token);
            serde_json::from_str::<serde_json::Value>(&markets_body(3, token)).unwrap();
        }
    }

    #[test]
    fn some_totals_exceed_the_list() {
        let larger = (0..100)
            .filter(|i| {
                let v: serde_json::Value = serde_json::from_str(&markets_body(0, &format!("t{i}"))).unwrap();
                v["total"].as_u64().unwrap() > v["data"].as_array().unwrap().len() as u64
            })
            .count();
        assert!((5..50).contains(&larger), "{larger}");
    }
}
