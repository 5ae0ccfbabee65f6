//! The Sandbox's markets body for any (seed, token id).

use std::fmt::Write;

use super::data::*;

/// The markets body (`{"data": [...], "total": N}`): 3 to 30 entries with distinct
/// (exchange, quote) pairs around the listing's price. About one token in five reports a `total`
/// larger than the list, as the service sometimes does.
pub fn markets_body(seed: u64, token: &str) -> String {
    let mut rng = Rng::new(seed, token, "markets");
    let (_, price) = price_of(seed, token);
    let decimals = price_decimals(price) + 2;
    let symbol = symbol_of(token);
    let count = 3 + rng.below(28);
    let shares: Vec<f64> = (0..count).map(|_| rng.range(0.05, 1.0).powi(3)).collect();
    let share_total: f64 = shares.iter().sum();
    let total_volume = rng.range(1e5, 1e10);

    // Walk the (exchange, quote) grid from a random start with a stride coprime to its size, so
    // pairs never repeat within a body.
    let pair_count = EXCHANGES.len() * QUOTES.len();
    let start = rng.below(pair_count);
    let stride = [7, 11, 13, 17, 19, 23][rng.below(6)];

    let mut out = String::with_capacity(count * 480 + 32);
    out.push_str("{\"data\":[");
    for (i, share) in shares.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let pair_index = (start + i * stride) % pair_count;
        let exchange = EXCHANGES[pair_index / QUOTES.len()];
        let quote = QUOTES[pair_index % QUOTES.len()];
        let exchange_slug = slug(exchange);
        let volume_percent = share / share_total * 100.0;
        let volume_usd = total_volume * volume_percent / 100.0;
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
            "\"price\":{:.*},\"volumeUsd\":{volume_usd:.2},\"liquidity_score\":{},\"depthUsdPositiveTwo\":{:.2},\"depthUsdNegativeTwo\":{:.2},\"volumePercent\":{volume_percent:.4},\"marketReputation\":{}}}",
            decimals,
            price * rng.range(0.995, 1.005),
            rng.below(1001),
            volume_usd * rng.range(0.001, 0.05),
            volume_usd * rng.range(0.001, 0.05),
            rng.below(6)
        );
    }
    let total = if rng.chance(0.2) { count + 1 + rng.below(40) } else { count };
    let _ = write!(out, "],\"total\":{total}}}");
    out
}
