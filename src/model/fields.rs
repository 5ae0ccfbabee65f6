//! The field catalogue: what the service's field names mean and what type each becomes.
//!
//! The listing object mixes fixed scalar fields with families of interval-suffixed fields
//! (`rsi14_1h`, `tripple_pattern_24h`, `ta_5m_updated_at`). This module names them; the
//! parser (`parse::listing`) decides per field where its value goes.

use std::sync::LazyLock;

use polars::prelude::PlHashMap;

use super::indicators::{recipe, Recipe, Reported, RECIPES};
use super::{Interval, INTERVALS};

/// The target column type of a snapshot field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarType {
    Str,
    F64,
    I64,
    Bool,
    /// ISO 8601 text -> milliseconds since the epoch, UTC.
    Datetime,
    ListStr,
}

use ScalarType::*;

/// Every scalar field of the token listing, in the order of `service-reference.md`.
/// The snapshot frame has these columns, in this order, after `token` and `fetched_at`.
pub const SNAPSHOT_FIELDS: &[(&str, ScalarType)] = &[
    // identity and descriptive
    ("id", Str),
    ("symbol_id", Str),
    ("name", Str),
    ("symbol", Str),
    ("image", Str),
    ("categories", ListStr),
    ("tags", ListStr),
    ("exchanges", ListStr),
    ("is_active", Bool),
    ("infinite_supply", Bool),
    ("last_updated", Datetime),
    ("updated_at", Datetime),
    ("ohlc_updated_time", Datetime),
    // market, supply and valuation
    ("current_price", F64),
    ("circulating_supply", F64),
    ("total_supply", F64),
    ("max_supply", F64),
    ("fully_diluted_valuation", F64),
    ("market_cap", F64),
    ("market_cap_rank", I64),
    ("market_cap_dominance", F64),
    ("total_volume", F64),
    ("ath", F64),
    ("atl", F64),
    ("apy", F64),
    ("tvl", F64),
    ("day_volatility", F64),
    ("github_commit", I64),
    ("number_of_holders", F64),
    ("holders_change_percentage_24h", F64),
    // changes
    ("market_cap_change_percentage_24h", F64),
    ("market_cap_change_percentage_1w", F64),
    ("market_cap_percentage_change_7d", F64),
    ("price_change_percentage_24h", F64),
    ("price_percent_change_1h", F64),
    ("price_percent_change_24h", F64),
    ("price_percent_change_7d", F64),
    ("price_percent_change_30d", F64),
    ("price_percent_change_60d", F64),
    ("price_percent_change_90d", F64),
    ("price_percent_change_1w", F64),
    ("volume_change_24h", F64),
    ("volume_change_1w", F64),
    ("volume_percentage_change_7d", F64),
    ("supply_percentage_change_24h", F64),
    // derivatives
    ("open_interest", F64),
    ("open_interest_change_1h", F64),
    ("open_interest_change_4h", F64),
    ("open_interest_change_24h", F64),
    ("funding_rate", F64),
    ("long_short_ratio_1h", F64),
    ("long_short_ratio_4h", F64),
    ("long_short_ratio_24h", F64),
    ("long_liquidation_1h", F64),
    ("long_liquidation_4h", F64),
    ("long_liquidation_24h", F64),
    ("short_liquidation_1h", F64),
    ("short_liquidation_4h", F64),
    ("short_liquidation_24h", F64),
];

/// The column of a snapshot field, by its place in `SNAPSHOT_FIELDS`. A scan: bodies' keys are
/// classified through `CATALOGUE_KEYS` (a hash map built once) and the fast path's remembered
/// routes, so this runs only while the catalogue is built and for keys outside it. A `const fn`,
/// so that the places of `ID_FIELD` and `SYMBOL_ID_FIELD` are found when compiling.
pub const fn snapshot_field_index(key: &str) -> Option<usize> {
    let mut index = 0;
    while index < SNAPSHOT_FIELDS.len() {
        let (name, wanted) = (SNAPSHOT_FIELDS[index].0.as_bytes(), key.as_bytes());
        if name.len() == wanted.len() {
            let mut byte = 0;
            while byte < name.len() && name[byte] == wanted[byte] {
                byte += 1;
            }
            if byte == name.len() {
                return Some(index);
            }
        }
        index += 1;
    }
    None
}

/// `data.id` and `data.symbol_id`, the two names a body gives its token by (a name not in
/// `SNAPSHOT_FIELDS` does not compile).
pub const ID_FIELD: usize = snapshot_field_index("id").expect("id is a snapshot field");
pub const SYMBOL_ID_FIELD: usize = snapshot_field_index("symbol_id").expect("symbol_id is a snapshot field");

/// What a known interval-suffixed family carries. Routing is by the JSON type of the value
/// (see `flatten`); the expectation decides how tolerant to be and what counts as malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyKind {
    Numeric,
    Text,
    Patterns,
}

/// A parsed interval-suffixed key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SuffixedKey<'a> {
    /// `ta_<i>_updated_at`
    TaUpdated { interval: Interval },
    /// `<family>_<i>` of a known family; `name` is the indicator name or pattern family as it
    /// appears in frames.
    Known { name: &'static str, kind: FamilyKind, interval: Interval },
    /// `<family>_<i>` of a family added after this was written; routed by JSON type alone.
    Unknown { name: &'a str, interval: Interval },
}

impl FamilyKind {
    /// What an indicator family carries: its number, or a text (`indicators` or `signals`).
    fn of(recipe: &Recipe) -> Self {
        match recipe.reported {
            Reported::Number => FamilyKind::Numeric,
            Reported::Sign { .. } => FamilyKind::Text,
        }
    }
}

/// Wire prefix -> family name in the `patterns` frame.
const PATTERN_FAMILIES: &[(&str, &str)] = &[
    ("single_pattern", "single"),
    ("double_pattern", "double"),
    ("tripple_pattern", "triple"),
    ("triple_pattern", "triple"),
    ("chartpattern", "chart"),
    ("candlestick_pattern", "candlestick"),
    ("triangle_pattern", "triangle"),
    ("head_shoulder_pattern", "head_shoulder"),
    ("multiple_top_bottom_pattern", "multiple_top_bottom"),
    ("double_top_bottom_pattern", "double_top_bottom"),
    ("wedge_pattern", "wedge"),
    ("channel_pattern", "channel"),
];

/// The intervals of the per-indicator families and the candlestick pattern families, as the
/// service's reference lists them (no 4h).
pub const INDICATOR_INTERVALS: [&str; 5] = ["5m", "15m", "1h", "24h", "1w"];
/// The intervals of the grouped chart-pattern families: 4h instead of 1w.
pub const GROUPED_PATTERN_INTERVALS: [&str; 5] = ["5m", "15m", "1h", "24h", "4h"];
/// The grouped chart-pattern families (wire prefixes), the only ones with a 4h interval.
pub const GROUPED_PATTERN_FAMILIES: [&str; 6] = [
    "triangle_pattern",
    "head_shoulder_pattern",
    "multiple_top_bottom_pattern",
    "double_top_bottom_pattern",
    "wedge_pattern",
    "channel_pattern",
];

/// The pattern families as the service writes them: (wire prefix, name in the `patterns` frame,
/// the intervals the service's reference gives it), in catalogue order. `triple_pattern`, a
/// spelling the parser accepts too, is not the service's (`tripple_pattern` is).
pub fn pattern_families() -> impl Iterator<Item = (&'static str, &'static str, &'static [&'static str; 5])> {
    PATTERN_FAMILIES.iter().filter(|(wire, _)| *wire != "triple_pattern").map(|(wire, family)| {
        let intervals =
            if GROUPED_PATTERN_FAMILIES.contains(wire) { &GROUPED_PATTERN_INTERVALS } else { &INDICATOR_INTERVALS };
        (*wire, *family, intervals)
    })
}

/// Every known family as the frames show it: (frame, name in the frame, the intervals the
/// service's reference gives it), in catalogue order. Documentation tables and the Sandbox's
/// bodies are made from this, so neither can disagree with the parser.
pub fn family_intervals() -> Vec<(&'static str, &'static str, &'static [&'static str; 5])> {
    let mut families: Vec<(&'static str, &'static str, &'static [&'static str; 5])> = Vec::new();
    for kind in [FamilyKind::Numeric, FamilyKind::Text] {
        let frame = if kind == FamilyKind::Numeric { "indicators" } else { "signals" };
        let of_kind = RECIPES.iter().filter(|recipe| FamilyKind::of(recipe) == kind);
        families.extend(of_kind.map(|recipe| (frame, recipe.family, &INDICATOR_INTERVALS)));
    }
    families.extend(pattern_families().map(|(_, family, intervals)| ("patterns", family, intervals)));
    families.push(("ta_updated", "updated_at", &INDICATOR_INTERVALS));
    families
}

/// Splits `rsi14_1h` into its family and interval. Returns `None` for keys that do not end in
/// a known interval suffix (those are either snapshot fields or ignored).
pub fn parse_suffixed_key(key: &str) -> Option<SuffixedKey<'_>> {
    if let Some(rest) = key.strip_prefix("ta_") {
        if let Some(interval) = rest.strip_suffix("_updated_at") {
            return Interval::from_suffix(interval).map(|interval| SuffixedKey::TaUpdated { interval });
        }
    }
    let split = key.rfind('_')?;
    let (prefix, suffix) = (&key[..split], &key[split + 1..]);
    if prefix.is_empty() {
        return None;
    }
    let interval = Interval::from_suffix(suffix)?;
    let known = |name, kind| Some(SuffixedKey::Known { name, kind, interval });
    if let Some(recipe) = recipe(prefix) {
        known(recipe.family, FamilyKind::of(recipe))
    } else if let Some((_, family)) = PATTERN_FAMILIES.iter().find(|(wire, _)| *wire == prefix) {
        known(family, FamilyKind::Patterns)
    } else {
        Some(SuffixedKey::Unknown { name: prefix, interval })
    }
}

/// The suffix of a key of a known family (or `ta_<i>_updated_at`) whose interval is not one of
/// `INTERVALS` (`rsi14_1m`, `ta_2h_updated_at`): such a value has no row to go to.
pub fn unknown_interval(key: &str) -> Option<&str> {
    // Digits, then one unit letter. Checked on the unit first: the key is the service's text, so
    // its last character may be any width.
    let looks_like_interval = |s: &str| match s.strip_suffix(['m', 'h', 'd', 'w', 'M', 'y']) {
        Some(digits) => !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    };
    if let Some(interval) = key.strip_prefix("ta_").and_then(|rest| rest.strip_suffix("_updated_at")) {
        return (looks_like_interval(interval) && Interval::from_suffix(interval).is_none()).then_some(interval);
    }
    let (prefix, suffix) = key.rsplit_once('_')?;
    let known = recipe(prefix).is_some() || PATTERN_FAMILIES.iter().any(|(wire, _)| *wire == prefix);
    (known && looks_like_interval(suffix) && Interval::from_suffix(suffix).is_none()).then_some(suffix)
}

/// What a key of the listing's `data` object is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataKey<'a> {
    /// A snapshot column, by its index in `SNAPSHOT_FIELDS`.
    Snapshot(usize),
    Suffixed(SuffixedKey<'a>),
    /// A known family (or `ta_<i>_updated_at`) on an interval that is not one of `INTERVALS`.
    UnknownInterval(&'a str),
    /// Anything else: not read.
    Other,
}

/// Classifies a key of `data`; the same answer as `classify_uncached`, from a table for the
/// keys the catalogue names (this runs for every key of every body).
pub fn classify_data_key(key: &str) -> DataKey<'_> {
    match CATALOGUE_KEYS.get(key) {
        Some(known) => known.clone(),
        None => classify_uncached(key),
    }
}

fn classify_uncached(key: &str) -> DataKey<'_> {
    if let Some(index) = snapshot_field_index(key) {
        DataKey::Snapshot(index)
    } else if let Some(suffixed) = parse_suffixed_key(key) {
        DataKey::Suffixed(suffixed)
    } else if let Some(interval) = unknown_interval(key) {
        DataKey::UnknownInterval(interval)
    } else {
        DataKey::Other
    }
}

/// Every snapshot field, every known family on every interval and every `ta_<i>_updated_at`,
/// classified once.
static CATALOGUE_KEYS: LazyLock<PlHashMap<String, DataKey<'static>>> = LazyLock::new(|| {
    let families = RECIPES.iter().map(|recipe| recipe.family).chain(PATTERN_FAMILIES.iter().map(|(wire, _)| *wire));
    let mut keys: Vec<String> = SNAPSHOT_FIELDS.iter().map(|(name, _)| name.to_string()).collect();
    for interval in INTERVALS {
        keys.push(format!("ta_{interval}_updated_at"));
        keys.extend(families.clone().map(|family| format!("{family}_{interval}")));
    }
    keys.into_iter()
        .map(|key| {
            let class = match classify_uncached(&key) {
                DataKey::Snapshot(index) => DataKey::Snapshot(index),
                DataKey::Suffixed(SuffixedKey::Known { name, kind, interval }) => {
                    DataKey::Suffixed(SuffixedKey::Known { name, kind, interval })
                }
                DataKey::Suffixed(SuffixedKey::TaUpdated { interval }) => {
                    DataKey::Suffixed(SuffixedKey::TaUpdated { interval })
                }
                other => unreachable!("the catalogue's own key {key:?} classified as {other:?}"),
            };
            (key, class)
        })
        .collect()
});

/// Name in the patterns frame for an unknown family carrying a string array: the `_pattern`
/// tail is dropped, as it is for the known pattern families.
pub fn unknown_pattern_family(name: &str) -> &str {
    name.strip_suffix("_pattern").filter(|s| !s.is_empty()).unwrap_or(name)
}

/// Columns of a market entry: wire name, frame column, type.
pub const MARKET_FIELDS: &[(&str, &str, ScalarType)] = &[
    ("id", "id", Str),
    ("exchangeName", "exchange_name", Str),
    ("exchangeImage", "exchange_image", Str),
    ("marketPair", "market_pair", Str),
    ("marketUrl", "market_url", Str),
    ("price", "price", F64),
    ("volumeUsd", "volume_usd", F64),
    ("liquidity_score", "liquidity_score", I64),
    ("depthUsdPositiveTwo", "depth_usd_positive_two", F64),
    ("depthUsdNegativeTwo", "depth_usd_negative_two", F64),
    ("volumePercent", "volume_percent", F64),
    ("marketReputation", "market_reputation", F64),
];

pub fn market_field_index(key: &str) -> Option<usize> {
    MARKET_FIELDS.iter().position(|(wire, _, _)| *wire == key)
}

/// Index of `marketPair` in `MARKET_FIELDS`; `base` and `quote` are split from it.
pub const MARKET_PAIR_INDEX: usize = 3;

pub const COMMUNITY_KEYS: [&str; 5] = ["twitter", "reddit", "facebook", "github", "telegram"];

/// Splits `BTC/USDT` into (`BTC`, `USDT`). Without a `/` the whole pair is the base.
pub fn split_market_pair(pair: &str) -> (&str, Option<&str>) {
    match pair.split_once('/') {
        Some((base, quote)) => (base.trim(), Some(quote.trim())),
        None => (pair.trim(), None),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn each_family_has_its_intervals_once() {
        let families = family_intervals();
        let names: Vec<(&str, &str)> = families.iter().map(|(frame, name, _)| (*frame, *name)).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "a family is listed twice: {names:?}");
        let intervals_of = |name: &str| families.iter().find(|(_, n, _)| *n == name).map(|(_, _, i)| i.to_vec());
        assert_eq!(intervals_of("rsi14"), Some(vec!["5m", "15m", "1h", "24h", "1w"]));
        assert_eq!(intervals_of("triangle"), Some(vec!["5m", "15m", "1h", "24h", "4h"]));
        assert_eq!(intervals_of("triple"), Some(vec!["5m", "15m", "1h", "24h", "1w"]));
        for (_, _, intervals) in &families {
            assert!(intervals.iter().all(|i| Interval::from_suffix(i).is_some()));
        }
    }

    use super::*;

    fn iv(suffix: &str) -> Interval {
        Interval::from_suffix(suffix).unwrap()
    }

    #[test]
    fn known_families_and_intervals() {
        assert_eq!(
            parse_suffixed_key("rsi14_1h"),
            Some(SuffixedKey::Known { name: "rsi14", kind: FamilyKind::Numeric, interval: iv("1h") })
        );
        assert_eq!(
            parse_suffixed_key("upper_bband_1w"),
            Some(SuffixedKey::Known { name: "upper_bband", kind: FamilyKind::Numeric, interval: iv("1w") })
        );
        assert_eq!(
            parse_suffixed_key("macd_5m"),
            Some(SuffixedKey::Known { name: "macd", kind: FamilyKind::Text, interval: iv("5m") })
        );
        assert_eq!(
            parse_suffixed_key("tripple_pattern_24h"),
            Some(SuffixedKey::Known { name: "triple", kind: FamilyKind::Patterns, interval: iv("24h") })
        );
        assert_eq!(
            parse_suffixed_key("chartpattern_15m"),
            Some(SuffixedKey::Known { name: "chart", kind: FamilyKind::Patterns, interval: iv("15m") })
        );
        assert_eq!(
            parse_suffixed_key("wedge_pattern_4h"),
            Some(SuffixedKey::Known { name: "wedge", kind: FamilyKind::Patterns, interval: iv("4h") })
        );
        assert_eq!(parse_suffixed_key("ta_24h_updated_at"), Some(SuffixedKey::TaUpdated { interval: iv("24h") }));
    }

    #[test]
    fn unknown_families_and_non_suffixed_keys() {
        assert_eq!(parse_suffixed_key("ema50_1h"), Some(SuffixedKey::Unknown { name: "ema50", interval: iv("1h") }));
        assert_eq!(parse_suffixed_key("price_percent_change_30d"), None);
        assert_eq!(parse_suffixed_key("symbol"), None);
        assert_eq!(parse_suffixed_key("_1h"), None);
        assert_eq!(parse_suffixed_key("ta_2h_updated_at"), None);
        assert_eq!(unknown_pattern_family("flag_pattern"), "flag");
        assert_eq!(unknown_pattern_family("_pattern"), "_pattern");
    }

    #[test]
    fn known_families_on_unknown_intervals() {
        assert_eq!(unknown_interval("rsi14_1m"), Some("1m"));
        assert_eq!(unknown_interval("tripple_pattern_3d"), Some("3d"));
        assert_eq!(unknown_interval("ta_2h_updated_at"), Some("2h"));
        assert_eq!(unknown_interval("rsi14_1h"), None);
        assert_eq!(unknown_interval("price_percent_change_30d"), None);
        assert_eq!(unknown_interval("ema50_2h"), None);
        assert_eq!(unknown_interval("rsi14_latest"), None);
        // Found by the fuzzer: a multi-byte last character once split a char in two.
        assert_eq!(unknown_interval("rsi14_1é"), None);
        assert_eq!(unknown_interval("ta_é_updated_at"), None);
        assert_eq!(unknown_interval("rsi14_m"), None);
    }

    #[test]
    fn snapshot_fields_are_unique_and_market_pair_index_is_right() {
        let mut names: Vec<_> = SNAPSHOT_FIELDS.iter().map(|f| f.0).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SNAPSHOT_FIELDS.len());
        assert_eq!(MARKET_FIELDS[MARKET_PAIR_INDEX].0, "marketPair");
    }

    #[test]
    fn snapshot_field_index_matches_the_table() {
        for (index, (name, _)) in SNAPSHOT_FIELDS.iter().enumerate() {
            assert_eq!(snapshot_field_index(name), Some(index), "{name}");
        }
        assert_eq!(snapshot_field_index("rsi14_1h"), None);
    }

    #[test]
    fn the_key_table_agrees_with_the_rules() {
        assert!(CATALOGUE_KEYS.len() > SNAPSHOT_FIELDS.len() + 6 * 20);
        for key in CATALOGUE_KEYS.keys() {
            assert_eq!(classify_data_key(key), classify_uncached(key), "{key}");
        }
        assert_eq!(
            classify_data_key("ema50_1h"),
            DataKey::Suffixed(SuffixedKey::Unknown { name: "ema50", interval: iv("1h") })
        );
        assert_eq!(classify_data_key("rsi14_1m"), DataKey::UnknownInterval("1m"));
        assert_eq!(classify_data_key("unheard_of"), DataKey::Other);
    }

    #[test]
    fn market_pairs_split_at_the_slash() {
        assert_eq!(split_market_pair("BTC/USDT"), ("BTC", Some("USDT")));
        assert_eq!(split_market_pair("WBTC"), ("WBTC", None));
        assert_eq!(split_market_pair("A/B/C"), ("A", Some("B/C")));
    }
}
