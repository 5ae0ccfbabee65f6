//! The Sandbox's markets body for any (seed, token id, time).

use std::fmt::Write;

use super::data::*;
use super::market::{last_close_ms, TokenMarket};
use super::random::Rng;

const DAY_MS: i64 = 86_400_000;

/// The markets body (`{"data": [...], "total": N}`). The token trades on `total` (exchange,
/// quote) pairs; the body lists the busiest ones first, 3 to 30 of them, and about one token in
/// five has more pairs than the body lists, as the service sometimes does. Volume shares add up
/// to 100% over all pairs; their volumes add up to the token's 24-hour volume; each pair's price
/// sits within half a percent of the token's; depth on each side and the liquidity score rise
/// with the pair's volume.
pub fn markets_body(seed: u64, token: &str, now_ms: i64) -> String {
    let market = TokenMarket::new(seed, token);
    let mut rng = Rng::new(seed, token, "markets");
    let at = last_close_ms(now_ms);
    let price = market.price_at(at);
    let decimals = market.profile.decimals as usize + 2;
    let symbol = symbol_of(token);
    let listed = 3 + rng.below(28);
    let total = if rng.chance(0.2) { listed + 1 + rng.below(40) } else { listed };
    // Which pairs a token trades on, and each pair's share, are the token's own; the moment
    // moves prices and volumes around them.
    let mut shares: Vec<f64> = (0..total).map(|_| rng.range(0.05, 1.0).powi(3)).collect();
    shares.sort_by(|a, b| b.total_cmp(a));
    let share_total: f64 = shares.iter().sum();
    let volume_24h = market.volume_between(at - DAY_MS, at) * price;
    let mut moment = Rng::new(seed ^ at as u64, token, "markets-moment");

    // Walk the (exchange, quote) grid from a random start with a stride coprime to its size, so
    // pairs never repeat within a body.
    // A token is not quoted in itself (no BTC/BTC).
    let quotes: Vec<&str> = QUOTES.iter().copied().filter(|quote| *quote != symbol).collect();
    let pair_count = EXCHANGES.len() * quotes.len();
    let start = rng.below(pair_count);
    let stride = [7, 11, 13, 17, 19, 23][rng.below(6)];

    let mut out = String::with_capacity(listed * 480 + 32);
    out.push_str("{\"data\":[");
    for (i, share) in shares.iter().take(listed).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let pair_index = (start + (i * stride) % pair_count) % pair_count;
        let exchange = EXCHANGES[pair_index / quotes.len()];
        let quote = quotes[pair_index % quotes.len()];
        let exchange_slug = slug(exchange);
        let volume_percent = share / share_total * 100.0;
        let volume_usd = volume_24h * share / share_total;
        // Depth is a slice of the pair's daily volume; the score is its logarithm on 0..1000.
        let depth_ratio = rng.range(0.01, 0.04);
        let depth_up = volume_usd * depth_ratio * moment.range(0.9, 1.1);
        let depth_down = volume_usd * depth_ratio * moment.range(0.9, 1.1);
        let liquidity_score = ((((depth_up + depth_down) / 2.0).max(1.0).log10() * 110.0) as u64).min(1000);
        let _ = write!(
            out,
            "{{\"id\":\"{:016x}\",\"exchangeName\":{},\"exchangeImage\":\"https://assets.sandbox.defilens.example/exchanges/{exchange_slug}.png\",",
            rng.next_u64(),
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
            price * (1.0 + moment.range(-0.005, 0.005)),
            rng.below(6)
        );
    }
    let _ = write!(out, "],\"total\":{total}}}");
    out
}
