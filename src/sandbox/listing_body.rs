//! The Sandbox's listing body for any (seed, token id, time): every figure is read off the
//! token's market (`super::market`) at the last 5-minute close.

use std::fmt::Write;

use super::data::*;
use super::market::patterns::{detect, Detected};
use super::market::ranking::market_cap_rank;
use super::market::universe::TOTAL_MARKET_CAP;
use super::market::{last_close_ms, last_close_of, level_of, Candle, TokenMarket, HISTORY};
use super::random::Rng;
use super::repaint::provisional_close_factor;
use crate::model::fields::pattern_families;
use crate::model::indicators::RECIPES;
use crate::model::timestamp::{format_iso_timestamp, format_ta_timestamp};
use crate::ta;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// How often a token's general info is revised: every 30 days, each token at a moment of its own
/// (its description then says the day of its last revision), so a history sees `info` change.
pub const INFO_REVISED_EVERY_MS: i64 = 30 * DAY_MS;

/// The moment `token`'s general info was last revised at `at_ms`.
pub fn info_revised_ms(seed: u64, token: &str, at_ms: i64) -> i64 {
    let phase = Rng::new(seed, token, "info").next_u64() % INFO_REVISED_EVERY_MS as u64;
    let since = (at_ms - phase as i64).rem_euclid(INFO_REVISED_EVERY_MS);
    at_ms - since
}

/// Writes `"key":value,` with the shortest text that reads back as the same double (`null` for
/// a value that is not finite, which the market never makes).
fn number(out: &mut String, key: &str, value: f64) {
    if value.is_finite() {
        let _ = write!(out, "\"{key}\":{value},");
    } else {
        let _ = write!(out, "\"{key}\":null,");
    }
}

/// Writes `"<wire>_<interval>":[names],` for each pattern family of the catalogue that has
/// `intervals` (the per-indicator ones, or the grouped chart patterns with 4h).
fn pattern_fields(out: &mut String, interval: &str, found: &Detected, intervals: &[&str; 5]) {
    for (wire, family, _) in pattern_families().filter(|(_, _, of)| *of == intervals) {
        let names = found.of(family).map_or(&[][..], Vec::as_slice);
        let _ = write!(out, "\"{wire}_{interval}\":{},", json_list(names));
    }
}

fn percent_change(now: f64, before: f64) -> f64 {
    (now / before - 1.0) * 100.0
}

/// The listing body (`{"data": {...}, "generalInfo": {...}}`) with every field family of the
/// service reference, including its quirks: `current_price` and `macd_<i>` as text,
/// `number_of_holders` null, `ohlc_updated_time` empty, 4h only on the grouped pattern fields.
pub fn listing_body(seed: u64, token: &str, now_ms: i64) -> String {
    build(seed, token, now_ms, false)
}

/// The listing body as a repainting service serves it in the first minute after a close: the
/// indicators of every candle that has just closed are computed from a close that is slightly
/// off (`repaint`); everything else is as in `listing_body`.
pub fn provisional_listing_body(seed: u64, token: &str, now_ms: i64) -> String {
    build(seed, token, now_ms, true)
}

fn build(seed: u64, token: &str, now_ms: i64, provisional: bool) -> String {
    let market = TokenMarket::new(seed, token);
    let profile = &market.profile;
    // Figures that belong to the token rather than the moment (its categories, links, ...).
    let mut rng = Rng::new(seed, token, "listing");
    let at = last_close_ms(now_ms);
    let decimals = profile.decimals as usize;
    let price = market.price_at(at);
    let id = json_string(token);
    let name = display_name(token);
    let site = url_slug(seed, token);
    let drawn = rng.some_of(CATEGORIES, 3, 0.1);
    // A well-known token is in its own categories (bitcoin is not a meme coin); any other id's
    // price floats, so it is never a stablecoin (a category screen finds the real ones only).
    let categories = match super::market::known_token(token) {
        Some(known) => known.categories.to_vec(),
        None => drawn.into_iter().filter(|category| *category != "Stablecoins").collect(),
    };
    let tags: Vec<String> = categories.iter().map(|c| slug(c)).collect();
    let exchanges = rng.some_of(EXCHANGES, 6, 0.05);

    let circulating = profile.circulating_supply(at);
    let total_supply = (circulating * profile.total_over_circulating).round();
    let max_supply = profile.max_over_total.map(|ratio| (total_supply * ratio).round());
    let market_cap = price * circulating;
    let change = |window_ms: i64| percent_change(price, market.price_at(at - window_ms));
    // Windows used by several fields, each read off the path once.
    let (change_hour, change_day, change_week) = (change(HOUR_MS), change(DAY_MS), change(7 * DAY_MS));
    let cap_change = |window_ms: i64| percent_change(market_cap, market.market_cap_at(at - window_ms));
    let volume_change = |window_ms: i64| {
        percent_change(
            market.volume_between(at - window_ms, at),
            market.volume_between(at - 2 * window_ms, at - window_ms),
        )
    };

    let mut series: Vec<(&str, Vec<Candle>, Detected)> = Vec::with_capacity(6);
    for interval in crate::model::INTERVALS {
        let level = level_of(interval).unwrap_or_default();
        let candles = market.candles(level, now_ms, HISTORY);
        let found = detect(&candles);
        series.push((interval, candles, found));
    }
    let find = |interval: &str| series.iter().find(|(name, ..)| *name == interval);
    let candles_of = |interval: &str| find(interval).map_or(&[][..], |(_, candles, _)| candles.as_slice());
    let no_patterns = Detected::default();
    let patterns_of = |interval: &str| find(interval).map_or(&no_patterns, |(.., found)| found);
    let ath = series.iter().flat_map(|(_, c, _)| c.iter().map(|c| c.high)).fold(price, f64::max);
    let atl = series.iter().flat_map(|(_, c, _)| c.iter().map(|c| c.low)).fold(price, f64::min);
    let day_volatility = {
        let closes: Vec<f64> = candles_of("5m").iter().rev().take(289).map(|c| c.close).collect();
        let returns: Vec<f64> = closes.windows(2).map(|pair| (pair[0] / pair[1]).ln()).collect();
        let mean = returns.iter().sum::<f64>() / returns.len().max(1) as f64;
        let variance = returns.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / returns.len().max(1) as f64;
        (variance * returns.len() as f64).sqrt() * 100.0
    };

    let mut out = String::with_capacity(12_288);
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
    let _ = write!(o, "\"is_active\":{},\"infinite_supply\":{},", !rng.chance(0.05), max_supply.is_none());
    let updated = format_iso_timestamp(at);
    let _ = write!(o, "\"last_updated\":\"{updated}\",\"updated_at\":\"{updated}\",\"ohlc_updated_time\":\"\",");

    let _ = write!(o, "\"current_price\":\"{price:.decimals$}\",");
    let _ = write!(
        o,
        "\"circulating_supply\":{circulating:.0},\"total_supply\":{total_supply:.0},\"max_supply\":{:.0},",
        max_supply.unwrap_or(0.0)
    );
    let _ = write!(
        o,
        "\"fully_diluted_valuation\":{:.2},\"market_cap\":{market_cap:.2},\"market_cap_rank\":{},",
        price * max_supply.unwrap_or(total_supply),
        market_cap_rank(seed, token, at, market_cap)
    );
    let _ = write!(
        o,
        "\"market_cap_dominance\":{:.4},\"total_volume\":{:.2},",
        market_cap / TOTAL_MARKET_CAP * 100.0,
        market.volume_between(at - DAY_MS, at) * price
    );
    let _ = write!(
        o,
        "\"ath\":{ath:.decimals$},\"atl\":{atl:.decimals$},\"apy\":{:.2},\"tvl\":{:.2},\"day_volatility\":{day_volatility:.3},",
        rng.range(0.0, 12.0),
        market_cap * rng.range(0.0, 0.1)
    );
    let _ = write!(o, "\"github_commit\":{},\"number_of_holders\":null,", rng.below(60_000));
    if rng.chance(0.5) {
        o.push_str("\"holders_change_percentage_24h\":null,");
    } else {
        let _ = write!(o, "\"holders_change_percentage_24h\":{:.3},", rng.range(-2.0, 2.0));
    }

    let (cap_change_week, volume_change_week) = (cap_change(7 * DAY_MS), volume_change(7 * DAY_MS));
    for (field, value) in [
        ("market_cap_change_percentage_24h", cap_change(DAY_MS)),
        ("market_cap_change_percentage_1w", cap_change_week),
        ("market_cap_percentage_change_7d", cap_change_week),
        ("price_change_percentage_24h", change_day),
        ("price_percent_change_1h", change_hour),
        ("price_percent_change_24h", change_day),
        ("price_percent_change_7d", change_week),
        ("price_percent_change_30d", change(30 * DAY_MS)),
        ("price_percent_change_60d", change(60 * DAY_MS)),
        ("price_percent_change_90d", change(90 * DAY_MS)),
        ("price_percent_change_1w", change_week),
        ("volume_change_24h", volume_change(DAY_MS)),
        ("volume_change_1w", volume_change_week),
        ("volume_percentage_change_7d", volume_change_week),
        ("supply_percentage_change_24h", percent_change(circulating, profile.circulating_supply(at - DAY_MS))),
    ] {
        let _ = write!(o, "\"{field}\":{value:.4},");
    }

    // Derivatives follow the price: open interest swells with a rally, funding and the
    // long/short ratio lean with the last moves, and liquidations hit the side the market moved
    // against.
    let open_interest = market_cap * rng.range(0.001, 0.05) * (1.0 + 0.5 * (change_day / 10.0).tanh());
    let funding_rate = 0.0001 + 0.0005 * (change(8 * HOUR_MS) / 2.0).tanh();
    let _ = write!(o, "\"open_interest\":{open_interest:.2},\"funding_rate\":{funding_rate:.6},");
    for (window, moved) in [("1h", change_hour), ("4h", change(4 * HOUR_MS)), ("24h", change_day)] {
        let _ = write!(
            o,
            "\"open_interest_change_{window}\":{:.4},\"long_short_ratio_{window}\":{:.4},",
            0.6 * moved,
            (0.5 * (moved / 5.0).tanh()).exp()
        );
        let _ = write!(
            o,
            "\"long_liquidation_{window}\":{:.2},\"short_liquidation_{window}\":{:.2},",
            open_interest * 0.002 * (-moved).max(0.0),
            open_interest * 0.002 * moved.max(0.0)
        );
    }

    for interval in TA_INTERVALS {
        let candles = candles_of(interval);
        let mut closes: Vec<f64> = candles.iter().map(|c| c.close).collect();
        let level = level_of(interval).unwrap_or_default();
        if provisional && last_close_of(level, now_ms) == at {
            if let Some(last) = closes.last_mut() {
                *last *= provisional_close_factor(seed, token, at);
            }
        }
        for recipe in RECIPES {
            let value = ta::last(recipe, &closes);
            let key = format!("{}_{interval}", recipe.family);
            match recipe.reported.text(value.unwrap_or(0.0)) {
                None => number(o, &key, value.unwrap_or(f64::NAN)),
                Some(text) => {
                    let _ = write!(o, "\"{key}\":\"{text}\",");
                }
            }
        }
        let _ = write!(o, "\"ta_{interval}_updated_at\":\"{}\",", format_ta_timestamp(last_close_of(level, now_ms)));
        pattern_fields(o, interval, patterns_of(interval), &TA_INTERVALS);
    }

    for interval in GROUPED_INTERVALS {
        pattern_fields(o, interval, patterns_of(interval), &GROUPED_INTERVALS);
    }
    o.pop(); // the comma after the last field

    let description = format!(
        "{name} is a digital asset tracked by DeFi Lens, listed on {} exchanges. This text was generated by the defilens Sandbox and describes nothing real. Last revised {}.",
        exchanges.len(),
        &format_iso_timestamp(info_revised_ms(seed, token, at))[..10]
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

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_305_600_000; // 2026-11-22T00:00:00Z

    fn description(body: &str) -> String {
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        value["generalInfo"]["description"].as_str().unwrap().to_string()
    }

    #[test]
    fn info_changes_once_every_revision_period() {
        let mut changes = 0;
        let mut last = description(&listing_body(3, "bitcoin", NOW));
        for day in 1..=60 {
            let now = description(&listing_body(3, "bitcoin", NOW + day * DAY_MS));
            changes += usize::from(now != last);
            last = now;
        }
        assert_eq!(changes, 2);
        let revised = info_revised_ms(3, "bitcoin", NOW);
        assert!(revised <= NOW && NOW - revised < INFO_REVISED_EVERY_MS);
        assert_ne!(info_revised_ms(3, "bitcoin", NOW), info_revised_ms(3, "ethereum", NOW));
    }

    #[test]
    fn a_body_has_every_family_of_the_catalogue_on_its_intervals_and_nothing_else() {
        use crate::model::fields::{classify_data_key, family_intervals, DataKey, SuffixedKey};
        use crate::model::INTERVALS;
        let body: serde_json::Value = serde_json::from_str(&listing_body(3, "coin-5", NOW)).unwrap();
        let mut served = Vec::new();
        for key in body["data"].as_object().unwrap().keys() {
            match classify_data_key(key) {
                DataKey::Snapshot(_) => {}
                DataKey::Suffixed(SuffixedKey::Known { name, interval, .. }) => {
                    served.push((name, INTERVALS[usize::from(interval.index())]));
                }
                DataKey::Suffixed(SuffixedKey::TaUpdated { interval }) => {
                    served.push(("updated_at", INTERVALS[usize::from(interval.index())]));
                }
                other => panic!("the Sandbox serves {key:?}, which the catalogue calls {other:?}"),
            }
        }
        let mut expected: Vec<(&str, &str)> = family_intervals()
            .into_iter()
            .flat_map(|(_, name, intervals)| intervals.iter().map(move |interval| (name, *interval)))
            .collect();
        served.sort_unstable();
        expected.sort_unstable();
        assert_eq!(served, expected);
        for (_, family, _) in pattern_families() {
            assert!(detect(&[]).of(family).is_some(), "the Sandbox finds no {family} patterns");
        }
    }

    #[test]
    fn a_body_ranks_the_token_among_the_universe() {
        let body: serde_json::Value = serde_json::from_str(&listing_body(3, "coin-5", NOW)).unwrap();
        let rank = body["data"]["market_cap_rank"].as_u64().unwrap();
        assert!((1..=1015).contains(&rank));
    }
}
