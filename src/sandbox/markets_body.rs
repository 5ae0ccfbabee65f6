//! The Sandbox's markets body for any (seed, token id, time).

use std::fmt::Write;

use super::data::*;
use super::market::{last_close_ms, TokenMarket};
use super::random::Rng;

const DAY_MS: i64 = 86_400_000;
/// The most pairs a body lists (the busiest first).
const MAX_LISTED: usize = 30;
/// The most pairs a token trades on beyond those listed (the service's `total` is then larger).
const MAX_UNLISTED: usize = 40;
/// The share of days a pair beyond a token's two main ones is not listed: venues come and go.
const DELISTED_SHARE: f64 = 0.15;

/// How many pairs a day's volume supports: about 2 at $10k a day, 10 at $1M, 30 at $10bn.
fn pairs_for(volume_24h: f64, jitter: i64) -> usize {
    let base = 2.0 + 4.0 * (volume_24h.max(1.0) / 1e4).log10();
    (base.round() as i64 + jitter).clamp(1, MAX_LISTED as i64) as usize
}

/// How far a pair's price may stray from the token's, as a share: 5 basis points where billions
/// trade a day, towards 1% where almost nothing does (arbitrage between venues is thin there).
fn price_spread(volume_24h: f64) -> f64 {
    0.0005 + 0.0095 * (1e5 / (volume_24h.max(0.0) + 1e5)).sqrt()
}

/// The markets body (`{"data": [...], "total": N}`) at the last 5-minute close. How many pairs
/// a token trades on follows its 24-hour volume (a micro cap on one or two venues, bitcoin on
/// thirty; `pairs_for`), and beyond its two main pairs each is delisted on some days and back on
/// others; the body lists them busiest first, and about one token in five has more pairs than
/// the body lists, as the service sometimes does. Volume shares add up to 100% over all pairs;
/// their volumes add up to the token's 24-hour volume; each pair's price strays from the token's
/// by less than `price_spread` (wider for thinly traded tokens); depth within 2% on each side is
/// 1-4% of the pair's daily volume (so it scales with the token's volume and market cap), and the
/// liquidity score rises with it. A pair (its exchange, quote, id and share) is the same each
/// time it is listed.
pub fn markets_body(seed: u64, token: &str, now_ms: i64) -> String {
    let market = TokenMarket::new(seed, token);
    let mut rng = Rng::new(seed, token, "markets");
    let at = last_close_ms(now_ms);
    let price = market.price_at(at);
    let decimals = market.profile.decimals as usize + 2;
    let symbol = symbol_of(token);
    let volume_24h = market.volume_between(at - DAY_MS, at) * price;
    // Which pairs a token trades on, and each pair's share, are the token's own; the moment
    // moves prices and volumes around them, and the day decides which are listed.
    let jitter = rng.below(5) as i64 - 2;
    let unlisted = if rng.chance(0.2) { 1 + rng.below(MAX_UNLISTED) } else { 0 };
    let mut shares: Vec<f64> = (0..MAX_LISTED + MAX_UNLISTED).map(|_| rng.range(0.05, 1.0).powi(3)).collect();
    shares.sort_by(|a, b| b.total_cmp(a));
    let day = at.div_euclid(DAY_MS) as u64;
    let listed: Vec<usize> = (0..pairs_for(volume_24h, jitter))
        .filter(|&i| i < 2 || !Rng::new(seed ^ day, token, &format!("pair-{i}-listed")).chance(DELISTED_SHARE))
        .collect();
    let total = listed.len() + unlisted;
    let share_total: f64 =
        listed.iter().map(|&i| shares[i]).sum::<f64>() + shares[MAX_LISTED..MAX_LISTED + unlisted].iter().sum::<f64>();
    let spread = price_spread(volume_24h);
    let mut moment = Rng::new(seed ^ at as u64, token, "markets-moment");

    // Walk the (exchange, quote) grid from a random start with a stride coprime to its size, so
    // pairs never repeat within a body.
    // A token is not quoted in itself (no BTC/BTC).
    let quotes: Vec<&str> = QUOTES.iter().copied().filter(|quote| *quote != symbol).collect();
    let pair_count = EXCHANGES.len() * quotes.len();
    let start = rng.below(pair_count);
    let stride = [7, 11, 13, 17, 19, 23][rng.below(6)];

    let mut out = String::with_capacity(listed.len() * 480 + 32);
    out.push_str("{\"data\":[");
    for (position, &i) in listed.iter().enumerate() {
        if position > 0 {
            out.push(',');
        }
        let mut pair = Rng::new(seed, token, &format!("pair-{i}"));
        let pair_index = (start + (i * stride) % pair_count) % pair_count;
        let exchange = EXCHANGES[pair_index / quotes.len()];
        let quote = quotes[pair_index % quotes.len()];
        let exchange_slug = slug(exchange);
        let volume_percent = shares[i] / share_total * 100.0;
        let volume_usd = volume_24h * shares[i] / share_total;
        // Depth is a slice of the pair's daily volume; the score is its logarithm on 0..1000.
        let depth_ratio = pair.range(0.01, 0.04);
        let depth_up = volume_usd * depth_ratio * moment.range(0.9, 1.1);
        let depth_down = volume_usd * depth_ratio * moment.range(0.9, 1.1);
        let liquidity_score = ((((depth_up + depth_down) / 2.0).max(1.0).log10() * 110.0) as u64).min(1000);
        let _ = write!(
            out,
            "{{\"id\":\"{:016x}\",\"exchangeName\":{},\"exchangeImage\":\"https://assets.sandbox.defilens.example/exchanges/{exchange_slug}.png\",",
            pair.next_u64(),
            json_string(exchange)
        );
        let _ = write!(
            out,
            "\"marketPair\":{},\"marketUrl\":\"https://{exchange_slug}.example.com/trade/{symbol}_{quote}\",",
            json_string(&format!("{symbol}/{quote}"))
        );
        let _ = write!(
            out,
            "\"price\":{:.*},\"volumeUsd\":{volume_usd:.2},\"liquidity_score\":{liquidity_score},\"depthUsdPositiveTwo\":{depth_up:.2},\"depthUsdNegativeTwo\":{depth_down:.2},\"volumePercent\":{volume_percent:.4},\"marketReputation\":{}}}",
            decimals,
            price * (1.0 + moment.range(-spread, spread)),
            pair.below(6)
        );
    }
    let _ = write!(out, "],\"total\":{total}}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_305_600_000; // 2026-11-22T00:00:00Z

    struct Pair {
        name: String,
        price: f64,
        depth: f64,
    }

    fn pairs(seed: u64, token: &str, now_ms: i64) -> (Vec<Pair>, u64) {
        let body: serde_json::Value = serde_json::from_str(&markets_body(seed, token, now_ms)).unwrap();
        let listed = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| Pair {
                name: format!("{} {}", pair["exchangeName"].as_str().unwrap(), pair["marketPair"].as_str().unwrap()),
                price: pair["price"].as_f64().unwrap(),
                depth: pair["depthUsdPositiveTwo"].as_f64().unwrap() + pair["depthUsdNegativeTwo"].as_f64().unwrap(),
            })
            .collect();
        (listed, body["total"].as_u64().unwrap())
    }

    fn volume_24h(token: &str) -> f64 {
        let market = TokenMarket::new(0, token);
        let at = last_close_ms(NOW);
        market.volume_between(at - DAY_MS, at) * market.price_at(at)
    }

    #[test]
    fn venues_depth_and_price_dispersion_follow_the_tokens_volume() {
        let (bitcoin, _) = pairs(0, "bitcoin", NOW);
        let mut generic: Vec<(f64, usize, f64, f64)> = (0..300)
            .map(|i| {
                let token = format!("coin-{i}");
                let (listed, _) = pairs(0, &token, NOW);
                let depth: f64 = listed.iter().map(|p| p.depth).sum();
                let mean = listed.iter().map(|p| p.price).sum::<f64>() / listed.len() as f64;
                let dispersion = listed.iter().map(|p| (p.price / mean - 1.0).abs()).sum::<f64>() / listed.len() as f64;
                (volume_24h(&token), listed.len(), depth, dispersion)
            })
            .collect();
        generic.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (thin, busy) = (&generic[..50], &generic[250..]);
        let mean = |rows: &[(f64, usize, f64, f64)], pick: fn(&(f64, usize, f64, f64)) -> f64| {
            rows.iter().map(pick).sum::<f64>() / rows.len() as f64
        };
        // The busiest tokens trade on several times more venues, with far deeper books and
        // venues' prices closer together, than the thinnest.
        assert!(mean(busy, |r| r.1 as f64) > 3.0 * mean(thin, |r| r.1 as f64));
        assert!(mean(busy, |r| r.2) > 1000.0 * mean(thin, |r| r.2));
        assert!(mean(busy, |r| r.3) < 0.5 * mean(thin, |r| r.3));
        assert!(thin.iter().all(|r| r.1 <= 6), "a micro cap on many venues");
        assert!(bitcoin.len() >= 20, "bitcoin on {} venues", bitcoin.len());
        for (volume, _, depth, _) in &generic {
            // Depth within 2% on both sides is 2-8% of the day's volume over the listed pairs.
            assert!(*depth <= 0.09 * volume, "{depth} of {volume}");
        }
    }

    #[test]
    fn venues_come_and_go_from_day_to_day_and_stay_who_they_are() {
        let mut seen_leave_and_return = 0;
        for i in 0..40 {
            let token = format!("coin-{i}");
            let days: Vec<Vec<String>> = (0..20)
                .map(|day| pairs(0, &token, NOW + day * DAY_MS).0.into_iter().map(|p| p.name).collect())
                .collect();
            let mut everyone: Vec<&String> = days.iter().flatten().collect();
            everyone.sort();
            everyone.dedup();
            for name in everyone {
                let listed: Vec<bool> = days.iter().map(|day| day.contains(name)).collect();
                let first = listed.iter().position(|&x| x).unwrap();
                let last = listed.iter().rposition(|&x| x).unwrap();
                if listed[first..=last].iter().any(|&x| !x) {
                    seen_leave_and_return += 1;
                }
            }
            // A token's main pairs are listed every day, the same exchange and quote each time.
            let main = days[0].iter().take(2).collect::<Vec<_>>();
            for day in &days {
                let shared = main.len().min(day.len());
                assert_eq!(day.iter().take(shared).collect::<Vec<_>>(), main[..shared], "{token}");
            }
        }
        assert!(seen_leave_and_return > 20, "{seen_leave_and_return} pairs left and came back");
    }

    #[test]
    fn some_tokens_trade_on_more_pairs_than_the_body_lists() {
        let more = (0..200)
            .filter(|i| {
                let (listed, total) = pairs(0, &format!("coin-{i}"), NOW);
                total > listed.len() as u64
            })
            .count();
        assert!((20..=60).contains(&more), "{more} of 200");
    }
}
