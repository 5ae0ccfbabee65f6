//! `market_cap_rank`: a token's place by market cap among a fixed universe of ids, at each moment.
//!
//! The ranked universe is the well-known ids (`universe::known_ids`) and the generated ids
//! `coin-0` to `coin-999` (`RANKED_COINS`). At a moment (a 5-minute close) every member's market
//! cap is read off its path, the members are ordered by cap (largest first, ties by id), and a
//! member's rank is its place in that order: ranks are distinct, 1 to 1,015, with no gaps, and
//! they cross as prices move. An id outside the universe gets the rank it would have among the
//! members (one plus the members with a larger cap), which it may share with the member just
//! below it. The order is computed once per (seed, moment) and kept for the next bodies of the
//! same round.

use std::sync::{Arc, Mutex};

use super::universe::known_ids;
use super::TokenMarket;

/// How many generated ids (`coin-0`, `coin-1`, ...) are ranked beside the well-known ones.
pub const RANKED_COINS: usize = 1000;
/// Orders kept for the moments asked last (a round's bodies share one moment).
const KEPT: usize = 4;

/// The ids `market_cap_rank` ranks among: the well-known ones, then `coin-0` to `coin-999`.
pub fn ranked_ids() -> Vec<String> {
    let mut ids: Vec<String> = known_ids().into_iter().map(str::to_string).collect();
    ids.extend((0..RANKED_COINS).map(|i| format!("coin-{i}")));
    ids
}

/// Every member's market cap at one moment, largest first (ties by id).
struct Order {
    seed: u64,
    at_ms: i64,
    caps: Vec<(f64, String)>,
}

static ORDERS: Mutex<Vec<Arc<Order>>> = Mutex::new(Vec::new());

fn order_at(seed: u64, at_ms: i64) -> Arc<Order> {
    // Held while an order is built, so that the bodies of one round build it once.
    let mut orders = ORDERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(found) = orders.iter().find(|order| order.seed == seed && order.at_ms == at_ms) {
        return Arc::clone(found);
    }
    let mut caps: Vec<(f64, String)> =
        ranked_ids().into_iter().map(|id| (TokenMarket::new(seed, &id).market_cap_at(at_ms), id)).collect();
    caps.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let order = Arc::new(Order { seed, at_ms, caps });
    if orders.len() >= KEPT {
        orders.remove(0);
    }
    orders.push(Arc::clone(&order));
    order
}

/// The rank of `token`, whose market cap at the 5-minute close `at_ms` is `market_cap`: one plus
/// the members of the ranked universe ahead of it (a larger cap, or the same cap and a smaller id).
pub fn market_cap_rank(seed: u64, token: &str, at_ms: i64, market_cap: f64) -> u64 {
    let order = order_at(seed, at_ms);
    if !(market_cap.is_finite() && market_cap > 0.0) {
        return order.caps.len() as u64 + 1;
    }
    let ahead =
        order.caps.partition_point(|(cap, id)| *cap > market_cap || (*cap == market_cap && id.as_str() < token));
    ahead as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::super::last_close_ms;
    use super::*;

    const NOW: i64 = 1_795_305_600_000; // 2026-11-22T00:00:00Z
    const DAY_MS: i64 = 86_400_000;

    fn ranks_at(seed: u64, at: i64) -> Vec<(String, u64, f64)> {
        ranked_ids()
            .into_iter()
            .map(|id| {
                let cap = TokenMarket::new(seed, &id).market_cap_at(at);
                (id.clone(), market_cap_rank(seed, &id, at, cap), cap)
            })
            .collect()
    }

    #[test]
    fn ranks_are_distinct_without_gaps_and_follow_the_caps() {
        let at = last_close_ms(NOW);
        let mut ranks = ranks_at(7, at);
        let mut numbers: Vec<u64> = ranks.iter().map(|(_, rank, _)| *rank).collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (1..=ranks.len() as u64).collect::<Vec<_>>());
        ranks.sort_by_key(|(_, rank, _)| *rank);
        for pair in ranks.windows(2) {
            assert!(pair[0].2 >= pair[1].2, "{pair:?}");
        }
        assert!(ranks[0].0 == "bitcoin" || ranks[0].0 == "ethereum", "{:?}", ranks[0]);
    }

    #[test]
    fn ranks_cross_as_prices_move() {
        let first = ranks_at(7, last_close_ms(NOW));
        let later = ranks_at(7, last_close_ms(NOW + 30 * DAY_MS));
        let moved = first.iter().zip(&later).filter(|(a, b)| a.1 != b.1).count();
        assert!(moved > 100, "{moved}");
    }

    #[test]
    fn an_id_outside_the_universe_ranks_among_it() {
        let at = last_close_ms(NOW);
        let members = ranks_at(7, at);
        let cap = TokenMarket::new(7, "not-a-member").market_cap_at(at);
        let rank = market_cap_rank(7, "not-a-member", at, cap);
        assert_eq!(rank, 1 + members.iter().filter(|(_, _, c)| *c > cap).count() as u64);
        assert_eq!(market_cap_rank(7, "x", at, f64::NAN), members.len() as u64 + 1);
        assert_eq!(market_cap_rank(7, "x", at, f64::MAX), 1);
    }
}
