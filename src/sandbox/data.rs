//! The Sandbox's data: realistic bodies for any (seed, token id), byte-identical for the same
//! inputs.
//!
//! Every body is built with `write!` into one `String` (no serde tree) because the Sandbox serves
//! thousands of them per second. The token id is the only untrusted text that reaches a body and
//! always goes through `json_string`, so ids with quotes, backslashes, control characters or
//! non-ASCII text still give valid JSON.

use super::random::stable_hash;

/// Intervals of the per-indicator fields, and of the grouped chart-pattern fields (4h instead
/// of 1w, as the service does): the catalogue's.
pub(super) use crate::model::fields::{
    GROUPED_PATTERN_INTERVALS as GROUPED_INTERVALS, INDICATOR_INTERVALS as TA_INTERVALS,
};

pub(super) const CATEGORIES: &[&str] = &[
    "Layer 1",
    "Smart Contract Platform",
    "Decentralized Finance (DeFi)",
    "Proof of Work",
    "Proof of Stake",
    "Meme",
    "Stablecoins",
    "Gaming",
    "Oracle",
    "Layer 2",
    "Exchange-based Tokens",
    "Real World Assets",
];
pub(super) const EXCHANGES: &[&str] = &[
    "Binance",
    "Coinbase Exchange",
    "Kraken",
    "OKX",
    "Bybit",
    "KuCoin",
    "Gate.io",
    "Bitget",
    "HTX",
    "MEXC",
    "Bitfinex",
    "Crypto.com Exchange",
];
pub(super) const QUOTES: &[&str] = &["USDT", "USD", "USDC", "BTC", "ETH", "EUR"];

pub(super) fn json_string(text: &str) -> String {
    // Serialising a &str cannot fail; the fallback only keeps the output valid JSON regardless.
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

pub(super) fn json_list<S: AsRef<str>>(items: &[S]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json_string(item.as_ref()));
    }
    out.push(']');
    out
}

pub(super) fn slug(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// A host-name-safe form of the token for the made-up URLs.
pub(super) fn url_slug(seed: u64, token: &str) -> String {
    let slug = slug(token);
    if slug.is_empty() {
        format!("token-{:x}", stable_hash(seed, &[token.as_bytes()]) & 0xffff_ffff)
    } else {
        slug
    }
}

/// The ticker: a known one, else the id's ASCII letters and digits upper-cased (`coin-043` ->
/// `COIN043`), so that different ids never share a ticker; a long id keeps 6 of them and 4 hex
/// digits of its hash.
pub(super) fn symbol_of(token: &str) -> String {
    if let Some(known) = super::market::known_token(token) {
        return known.symbol.to_string();
    }
    let letters: String = token.chars().filter(char::is_ascii_alphanumeric).collect::<String>().to_ascii_uppercase();
    if letters.is_empty() {
        return format!("T{:04X}", stable_hash(0, &[token.as_bytes(), b"symbol"]) & 0xffff);
    }
    if letters.len() <= 10 {
        return letters;
    }
    format!("{}{:04X}", &letters[..6], stable_hash(0, &[token.as_bytes(), b"symbol"]) & 0xffff)
}

/// The display name: words of the id (split at `-` and `_`), each capitalised.
pub(super) fn display_name(token: &str) -> String {
    let words: Vec<String> = token
        .split(['-', '_'])
        .filter(|word| !word.is_empty())
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect(),
                None => String::new(),
            }
        })
        .collect();
    if words.is_empty() {
        token.to_string()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const NOW: i64 = 1_795_305_600_000; // 2026-11-22T00:00:00Z

    fn listing_body(seed: u64, token: &str) -> String {
        crate::sandbox::listing_body::listing_body(seed, token, NOW)
    }

    fn markets_body(seed: u64, token: &str) -> String {
        crate::sandbox::markets_body::markets_body(seed, token, NOW)
    }

    fn parse(body: &str) -> Value {
        serde_json::from_str(body).unwrap_or_else(|e| panic!("invalid JSON ({e}): {body}"))
    }

    #[test]
    fn listing_is_valid_deterministic_and_varies_with_its_inputs() {
        let body = listing_body(0, "bitcoin");
        assert_eq!(body, listing_body(0, "bitcoin"));
        assert_ne!(body, listing_body(1, "bitcoin"));
        assert_ne!(body, listing_body(0, "ethereum"));
        let value = parse(&body);
        assert!(value["data"].is_object() && value["generalInfo"].is_object());
        assert!((4_000..12_000).contains(&body.len()), "listing body is {} bytes", body.len());
    }

    #[test]
    fn listing_has_every_field_family_and_the_quirks() {
        let value = parse(&listing_body(7, "bitcoin"));
        let data = &value["data"];
        let families: &[&[&str]] = &[
            &[
                "id",
                "symbol_id",
                "name",
                "symbol",
                "image",
                "categories",
                "tags",
                "exchanges",
                "is_active",
                "infinite_supply",
                "last_updated",
                "updated_at",
                "ohlc_updated_time",
            ],
            &[
                "current_price",
                "circulating_supply",
                "total_supply",
                "max_supply",
                "fully_diluted_valuation",
                "market_cap",
                "market_cap_rank",
                "market_cap_dominance",
                "total_volume",
                "ath",
                "atl",
                "apy",
                "tvl",
                "day_volatility",
                "github_commit",
                "number_of_holders",
                "holders_change_percentage_24h",
            ],
            &[
                "market_cap_change_percentage_24h",
                "market_cap_percentage_change_7d",
                "price_percent_change_90d",
                "volume_percentage_change_7d",
                "supply_percentage_change_24h",
            ],
            &[
                "open_interest",
                "open_interest_change_4h",
                "funding_rate",
                "long_short_ratio_24h",
                "long_liquidation_1h",
                "short_liquidation_24h",
            ],
            &[
                "rsi7_5m",
                "rsi14_1w",
                "rsi25_24h",
                "sma5_15m",
                "sma100_1w",
                "upper_bband_1h",
                "middle_bband_24h",
                "lower_bband_5m",
                "macd_1h",
                "ta_15m_updated_at",
            ],
            &[
                "single_pattern_5m",
                "double_pattern_1w",
                "tripple_pattern_1h",
                "chartpattern_24h",
                "candlestick_pattern_5m",
            ],
            &[
                "triangle_pattern_4h",
                "head_shoulder_pattern_5m",
                "multiple_top_bottom_pattern_1h",
                "double_top_bottom_pattern_24h",
                "wedge_pattern_4h",
                "channel_pattern_15m",
            ],
        ];
        for key in families.iter().flat_map(|family| family.iter()) {
            assert!(data.get(*key).is_some(), "missing {key}");
        }
        for absent in ["rsi7_4h", "macd_4h", "single_pattern_4h", "wedge_pattern_1w", "triple_pattern_1h"] {
            assert!(data.get(absent).is_none(), "unexpected {absent}");
        }
        assert_eq!(data["id"], "bitcoin");
        assert_eq!(data["symbol"], "BTC");
        assert_eq!(data["name"], "Bitcoin");
        let price = data["current_price"].as_str().expect("current_price is a string");
        assert!(price.parse::<f64>().is_ok_and(|p| p > 0.0), "{price}");
        assert!(data["number_of_holders"].is_null());
        assert_eq!(data["ohlc_updated_time"], "");
        assert!(data["market_cap_rank"].is_u64() && data["github_commit"].is_u64());
        assert!(data["macd_24h"] == "Cross Above" || data["macd_24h"] == "Cross Below");
        let updated = data["last_updated"].as_str().unwrap_or_default();
        assert!(updated.starts_with("2026-") && updated.ends_with('Z') && updated.len() == 24, "{updated}");
        let ta_updated = data["ta_1h_updated_at"].as_str().unwrap_or_default();
        assert!(
            ta_updated.starts_with("2026-") && ta_updated.ends_with("+00") && ta_updated.len() == 22,
            "{ta_updated}"
        );
        for interval in TA_INTERVALS {
            let band = |name: &str| data[format!("{name}_bband_{interval}")].as_f64().unwrap_or(f64::NAN);
            assert!(band("upper") > band("middle") && band("middle") > band("lower"));
            let rsi = data[format!("rsi14_{interval}")].as_f64().unwrap_or(-1.0);
            assert!((0.0..=100.0).contains(&rsi));
        }
        let info = &value["generalInfo"];
        for key in ["description", "websites", "explorers", "community", "chains", "categories"] {
            assert!(info.get(key).is_some(), "missing generalInfo.{key}");
        }
        for key in ["twitter", "reddit", "facebook", "github", "telegram"] {
            let link = &info["community"][key];
            assert!(link.is_null() || link.is_string());
        }
    }

    #[test]
    fn pattern_arrays_are_sometimes_empty_and_chains_sometimes_filled() {
        let (mut empty, mut filled, mut with_chains, mut holders_null) = (0, 0, 0, 0);
        for i in 0..50 {
            let value = parse(&listing_body(0, &format!("token-{i}")));
            for (key, field) in value["data"].as_object().into_iter().flatten() {
                if key.contains("pattern") {
                    let names = field.as_array().expect("pattern fields are arrays");
                    assert!(names.iter().all(Value::is_string));
                    if names.is_empty() {
                        empty += 1;
                    } else {
                        filled += 1;
                    }
                }
            }
            if value["generalInfo"]["chains"].as_array().is_some_and(|c| !c.is_empty()) {
                with_chains += 1;
            }
            if value["data"]["holders_change_percentage_24h"].is_null() {
                holders_null += 1;
            }
        }
        assert!(empty > 0 && filled > 0, "{empty} empty, {filled} filled");
        assert!((1..50).contains(&with_chains), "{with_chains}");
        assert!((1..50).contains(&holders_null), "{holders_null}");
    }

    #[test]
    fn odd_token_ids_stay_valid_json() {
        for token in ["a\"b", "back\\slash", "new\nline\u{1}", "ünïcödé-币", "", "a/b", "</script>", "   "] {
            let listing = parse(&listing_body(3, token));
            assert_eq!(listing["data"]["id"], token);
            assert_eq!(listing["data"]["symbol_id"], token);
            parse(&markets_body(3, token));
        }
    }

    #[test]
    fn markets_are_valid_deterministic_and_plausible() {
        let body = markets_body(0, "bitcoin");
        assert_eq!(body, markets_body(0, "bitcoin"));
        assert_ne!(body, markets_body(1, "bitcoin"));
        assert_ne!(body, markets_body(0, "ethereum"));
        let value = parse(&body);
        let entries = value["data"].as_array().expect("data is an array");
        assert!((3..=30).contains(&entries.len()));
        let price: f64 = parse(&listing_body(0, "bitcoin"))["data"]["current_price"]
            .as_str()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0.0);
        let mut pairs = std::collections::HashSet::new();
        let mut percent_sum = 0.0;
        for entry in entries {
            for key in [
                "id",
                "exchangeName",
                "exchangeImage",
                "marketPair",
                "marketUrl",
                "price",
                "volumeUsd",
                "liquidity_score",
                "depthUsdPositiveTwo",
                "depthUsdNegativeTwo",
                "volumePercent",
                "marketReputation",
            ] {
                assert!(entry.get(key).is_some(), "missing {key}");
            }
            let pair = entry["marketPair"].as_str().unwrap_or_default();
            assert!(pair.starts_with("BTC/"), "{pair}");
            assert!(pairs.insert((entry["exchangeName"].to_string(), pair.to_string())), "repeated pair {pair}");
            assert!(entry["liquidity_score"].as_u64().is_some_and(|s| s <= 1000));
            assert!(entry["marketReputation"].is_u64());
            let market_price = entry["price"].as_f64().unwrap_or(0.0);
            assert!((market_price / price - 1.0).abs() < 0.01, "{market_price} vs {price}");
            percent_sum += entry["volumePercent"].as_f64().unwrap_or(0.0);
        }
        assert!((percent_sum - 100.0).abs() < 0.1, "{percent_sum}");
    }

    #[test]
    fn some_totals_exceed_the_list() {
        let larger = (0..200)
            .filter(|i| {
                let value = parse(&markets_body(0, &format!("t{i}")));
                let listed = value["data"].as_array().map_or(0, Vec::len) as u64;
                let total = value["total"].as_u64().unwrap_or(0);
                assert!(total >= listed);
                total > listed
            })
            .count();
        assert!((15..80).contains(&larger), "{larger} of 200");
    }
}
