//! The Sandbox's listing body for any (seed, token id).

use std::fmt::Write;

use super::data::*;
use crate::model::timestamp::{format_iso_timestamp, format_ta_timestamp};

/// The listing body (`{"data": {...}, "generalInfo": {...}}`) with every field family of the
/// service reference, including its quirks: `current_price` and `macd_<i>` as text,
/// `number_of_holders` null, `ohlc_updated_time` empty, 4h only on the grouped pattern fields.
pub fn listing_body(seed: u64, token: &str) -> String {
    let mut rng = Rng::new(seed, token, "listing");
    let (price_text, price) = price_of(seed, token);
    let decimals = price_decimals(price);
    let id = json_string(token);
    let name = display_name(token);
    let site = url_slug(seed, token);
    let categories = rng.some_of(CATEGORIES, 3, 0.1);
    let tags: Vec<String> = categories.iter().map(|c| slug(c)).collect();
    let exchanges = rng.some_of(EXCHANGES, 6, 0.05);

    let circulating = rng.range(1e6, 1e11).round();
    let total_supply = (circulating * rng.range(1.0, 1.5)).round();
    let infinite_supply = rng.chance(0.2);
    let max_supply = if infinite_supply { 0.0 } else { (total_supply * rng.range(1.0, 1.5)).round() };
    let market_cap = price * circulating;
    // Within the last few days of the Sandbox's "now" (always in 2026).
    let updated_ms = SANDBOX_NOW_MS - rng.below(3 * 86_400_000) as i64;

    let mut out = String::with_capacity(8192);
    let o = &mut out;
    let _ = write!(
        o,
        "{{\"data\":{{\"id\":{id},\"symbol_id\":{id},\"name\":{},\"symbol\":{},",
        json_string(&name),
        json_string(&symbol_of(token))
    );
    let _ = write!(o, "\"image\":\"https://assets.sandbox.defilens.example/coins/{site}/large.png\",");
    let _ = write!(
        o,
        "\"categories\":{},\"tags\":{},\"exchanges\":{},",
        json_list(&categories),
        json_list(&tags),
        json_list(&exchanges)
    );
    let _ = write!(o, "\"is_active\":{},\"infinite_supply\":{infinite_supply},", !rng.chance(0.05));
    let _ = write!(
        o,
        "\"last_updated\":\"{}\",\"updated_at\":\"{}\",\"ohlc_updated_time\":\"\",",
        format_iso_timestamp(updated_ms),
        format_iso_timestamp(updated_ms + rng.below(60_000) as i64)
    );

    let _ = write!(o, "\"current_price\":\"{price_text}\",\"circulating_supply\":{circulating:.0},\"total_supply\":{total_supply:.0},\"max_supply\":{max_supply:.0},");
    let _ = write!(
        o,
        "\"fully_diluted_valuation\":{:.2},\"market_cap\":{market_cap:.2},\"market_cap_rank\":{},",
        price * total_supply,
        1 + rng.below(5000)
    );
    let _ = write!(
        o,
        "\"market_cap_dominance\":{:.4},\"total_volume\":{:.2},",
        rng.range(0.0, 55.0),
        market_cap * rng.range(0.01, 0.3)
    );
    let _ = write!(
        o,
        "\"ath\":{:.*},\"atl\":{:.*},\"apy\":{:.2},\"tvl\":{:.2},\"day_volatility\":{:.3},",
        decimals,
        price * rng.range(1.0, 3.0),
        decimals + 2,
        price * rng.range(0.001, 0.5),
        rng.range(0.0, 12.0),
        market_cap * rng.range(0.0, 0.1),
        rng.range(0.1, 12.0)
    );
    let _ = write!(o, "\"github_commit\":{},\"number_of_holders\":null,", rng.below(60_000));
    if rng.chance(0.5) {
        o.push_str("\"holders_change_percentage_24h\":null,");
    } else {
        let _ = write!(o, "\"holders_change_percentage_24h\":{:.3},", rng.range(-2.0, 2.0));
    }

    for field in [
        "market_cap_change_percentage_24h",
        "market_cap_change_percentage_1w",
        "market_cap_percentage_change_7d",
        "price_change_percentage_24h",
        "price_percent_change_1h",
        "price_percent_change_24h",
        "price_percent_change_7d",
        "price_percent_change_30d",
        "price_percent_change_60d",
        "price_percent_change_90d",
        "price_percent_change_1w",
        "volume_change_24h",
        "volume_change_1w",
        "volume_percentage_change_7d",
        "supply_percentage_change_24h",
    ] {
        let _ = write!(o, "\"{field}\":{:.4},", rng.range(-25.0, 25.0));
    }

    let open_interest = market_cap * rng.range(0.001, 0.05);
    let _ = write!(o, "\"open_interest\":{open_interest:.2},\"funding_rate\":{:.6},", rng.range(-0.001, 0.001));
    for window in ["1h", "4h", "24h"] {
        let _ = write!(
            o,
            "\"open_interest_change_{window}\":{:.4},\"long_short_ratio_{window}\":{:.4},",
            rng.range(-10.0, 10.0),
            rng.range(0.5, 2.0)
        );
        let _ = write!(
            o,
            "\"long_liquidation_{window}\":{:.2},\"short_liquidation_{window}\":{:.2},",
            open_interest * rng.range(0.0, 0.01),
            open_interest * rng.range(0.0, 0.01)
        );
    }

    for (step, interval) in TA_INTERVALS.iter().enumerate() {
        for period in [7, 14, 25] {
            let _ = write!(o, "\"rsi{period}_{interval}\":{:.4},", rng.range(5.0, 95.0));
        }
        for period in [5, 20, 100] {
            let _ = write!(o, "\"sma{period}_{interval}\":{:.*},", decimals + 2, price * rng.range(0.9, 1.1));
        }
        let middle = price * rng.range(0.95, 1.05);
        let width = middle * rng.range(0.01, 0.1);
        let _ = write!(
            o,
            "\"upper_bband_{interval}\":{:.p$},\"middle_bband_{interval}\":{middle:.p$},\"lower_bband_{interval}\":{:.p$},",
            middle + width,
            middle - width,
            p = decimals + 2
        );
        let macd = if rng.chance(0.5) { "Cross Above" } else { "Cross Below" };
        let _ = write!(o, "\"macd_{interval}\":\"{macd}\",");
        let ta_updated_ms = SANDBOX_NOW_MS - (step as i64 + 1) * 300_000 - rng.below(60) as i64 * 1000;
        let _ = write!(o, "\"ta_{interval}_updated_at\":\"{}\",", format_ta_timestamp(ta_updated_ms));
        for (family, names) in [
            ("single_pattern", SINGLE_CANDLES),
            ("double_pattern", DOUBLE_CANDLES),
            ("tripple_pattern", TRIPLE_CANDLES),
            ("chartpattern", CHART_PATTERNS),
            ("candlestick_pattern", SUMMARY_CANDLES),
        ] {
            let _ = write!(o, "\"{family}_{interval}\":{},", json_list(&rng.some_of(names, 3, PATTERN_EMPTY_SHARE)));
        }
    }

    for interval in GROUPED_INTERVALS {
        for (family, names) in [
            ("triangle_pattern", TRIANGLES),
            ("head_shoulder_pattern", HEAD_SHOULDERS),
            ("multiple_top_bottom_pattern", MULTIPLE_TOPS_BOTTOMS),
            ("double_top_bottom_pattern", DOUBLE_TOPS_BOTTOMS),
            ("wedge_pattern", WEDGES),
            ("channel_pattern", CHANNELS),
        ] {
            let _ = write!(o, "\"{family}_{interval}\":{},", json_list(&rng.some_of(names, 1, 0.6)));
        }
    }
    o.pop(); // the comma after the last field

    let description = format!(
        "{name} is a digital asset tracked by DeFi Lens, listed on {} exchanges. This text was generated by the defilens Sandbox and describes nothing real.",
        exchanges.len()
    );
    let _ = write!(o, "}},\"generalInfo\":{{\"description\":{},", json_string(&description));
    let _ = write!(o, "\"websites\":[\"https://{site}.example.org\"],");
    let _ = write!(
        o,
        "\"explorers\":[\"https://explorer.example.com/token/{site}\",\"https://scan.example.net/address/0x{:016x}\"],",
        rng.next_u64()
    );
    let mut community_link = |host: &str, prefix: &str| {
        if rng.chance(0.3) {
            "null".to_string()
        } else {
            format!("\"https://{host}/{prefix}{site}\"")
        }
    };
    let twitter = community_link("twitter.com", "");
    let reddit = community_link("www.reddit.com", "r/");
    let facebook = community_link("www.facebook.com", "");
    let github = community_link("github.com", "");
    let telegram = community_link("t.me", "");
    let _ = write!(o, "\"community\":{{\"twitter\":{twitter},\"reddit\":{reddit},\"facebook\":{facebook},\"github\":{github},\"telegram\":{telegram}}},");
    if rng.chance(0.25) {
        o.push_str("\"chains\":[");
        let chain_count = 1 + rng.below(3);
        for (i, chain) in ["ethereum", "binance-smart-chain", "arbitrum-one"].iter().take(chain_count).enumerate() {
            if i > 0 {
                o.push(',');
            }
            let _ = write!(
                o,
                "{{\"name\":\"{chain}\",\"address\":\"0x{:016x}{:016x}{:08x}\"}}",
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64() as u32
            );
        }
        o.push_str("],");
    } else {
        o.push_str("\"chains\":[],");
    }
    let _ = write!(o, "\"categories\":{}}}}}", json_list(&categories));
    out
}
