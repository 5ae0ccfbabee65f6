//! The listing's indicator families and how each is computed from closes: the one recipe table.
//! The catalogue (`fields`) knows the families from it and whether each is a number or a text,
//! the Sandbox writes each family from it (through `crate::ta`), `defilens.ta`'s kinds are its
//! `KINDS`, and `defilens.research.verify` recomputes every numeric family from it
//! (`_core.INDICATOR_RECIPES`). A family added here is known, served and verified.

/// What a family computes over closes (oldest first), with its parameters by the names
/// `defilens.ta` gives them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Indicator {
    /// Wilder's RSI over `n` closes.
    Rsi { n: usize },
    /// The simple mean of the last `n` closes.
    Sma { n: usize },
    /// Bollinger bands over `n` closes at `k` population standard deviations.
    Bbands { n: usize, k: f64 },
    /// MACD(fast, slow, signal).
    Macd { fast: usize, slow: usize, signal: usize },
}

/// Every kind of indicator by its name: `defilens.ta`'s functions and `_core.ta_series`'s `kind`.
// Read by the bindings only.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub const KINDS: [&str; 4] = ["rsi", "sma", "bbands", "macd"];

impl Indicator {
    /// The kind's name, one of `KINDS`.
    pub fn kind(&self) -> &'static str {
        match self {
            Indicator::Rsi { .. } => "rsi",
            Indicator::Sma { .. } => "sma",
            Indicator::Bbands { .. } => "bbands",
            Indicator::Macd { .. } => "macd",
        }
    }

    /// The names of the columns of a kind that gives several series at once, in the order
    /// `crate::ta::columns` gives them; empty for a kind that gives one series.
    pub fn columns(&self) -> &'static [&'static str] {
        match self {
            Indicator::Rsi { .. } | Indicator::Sma { .. } => &[],
            Indicator::Bbands { .. } => &["upper", "middle", "lower"],
            Indicator::Macd { .. } => &["macd", "signal", "hist"],
        }
    }

    /// How many closes its window spans (`n`; the slow EMA's for MACD): what a "warm-up of N
    /// candles" counts in.
    pub fn period(&self) -> usize {
        match *self {
            Indicator::Rsi { n } | Indicator::Sma { n } | Indicator::Bbands { n, .. } => n,
            Indicator::Macd { slow, .. } => slow,
        }
    }

    /// The fewest closes that give a value of every column, as `crate::ta` starts them (TA-Lib's
    /// way): an RSI needs `n` changes, a MACD's signal line `signal` values of its line.
    pub fn warm_up(&self) -> usize {
        match *self {
            Indicator::Rsi { n } => n + 1,
            Indicator::Sma { n } | Indicator::Bbands { n, .. } => n,
            Indicator::Macd { slow, signal, .. } => slow + signal - 1,
        }
    }
}

/// How the service writes a family's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reported {
    /// The number.
    Number,
    /// A text by the number's sign: `above` when it is positive, else `below` (MACD's histogram:
    /// whether the line is above its signal line).
    Sign { above: &'static str, below: &'static str },
}

impl Reported {
    /// The text the service writes for `value`; `None` for a family written as its number.
    pub fn text(self, value: f64) -> Option<&'static str> {
        match self {
            Reported::Number => None,
            Reported::Sign { above, below } => Some(if value > 0.0 { above } else { below }),
        }
    }
}

/// One indicator family of the listing (`<family>_<interval>`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recipe {
    /// The wire prefix, which is also its name in the frames.
    pub family: &'static str,
    pub indicator: Indicator,
    /// Which of `indicator.columns()` the family reports (`None` for a one-series kind).
    pub column: Option<&'static str>,
    pub reported: Reported,
}

const fn number(family: &'static str, indicator: Indicator, column: Option<&'static str>) -> Recipe {
    Recipe { family, indicator, column, reported: Reported::Number }
}

const BANDS: Indicator = Indicator::Bbands { n: 20, k: 2.0 };

/// Every indicator family of the service's reference, in the order its listings carry them.
/// `middle_bband` is `sma20` by definition: the same number by two recipes (`crate::ta` makes the
/// middle band exactly the SMA).
pub const RECIPES: &[Recipe] = &[
    number("rsi7", Indicator::Rsi { n: 7 }, None),
    number("rsi14", Indicator::Rsi { n: 14 }, None),
    number("rsi25", Indicator::Rsi { n: 25 }, None),
    number("sma5", Indicator::Sma { n: 5 }, None),
    number("sma20", Indicator::Sma { n: 20 }, None),
    number("sma100", Indicator::Sma { n: 100 }, None),
    number("upper_bband", BANDS, Some("upper")),
    number("middle_bband", BANDS, Some("middle")),
    number("lower_bband", BANDS, Some("lower")),
    Recipe {
        family: "macd",
        indicator: Indicator::Macd { fast: 12, slow: 26, signal: 9 },
        column: Some("hist"),
        reported: Reported::Sign { above: "Cross Above", below: "Cross Below" },
    },
];

/// The recipe of `family`, if it is one of the indicator families.
pub fn recipe(family: &str) -> Option<&'static Recipe> {
    RECIPES.iter().find(|recipe| recipe.family == family)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recipe_names_a_kind_and_one_of_its_columns() {
        let mut families: Vec<&str> = RECIPES.iter().map(|r| r.family).collect();
        families.sort_unstable();
        families.dedup();
        assert_eq!(families.len(), RECIPES.len(), "a family has two recipes");
        for recipe in RECIPES {
            assert!(KINDS.contains(&recipe.indicator.kind()), "{recipe:?}");
            match recipe.column {
                None => assert!(recipe.indicator.columns().is_empty(), "{recipe:?} needs a column"),
                Some(column) => assert!(recipe.indicator.columns().contains(&column), "{recipe:?}"),
            }
        }
        // Every kind is some family's, so `KINDS` lists no kind the enum lacks.
        for kind in KINDS {
            assert!(RECIPES.iter().any(|r| r.indicator.kind() == kind), "{kind}");
        }
        assert_eq!(recipe("sma100").map(|r| r.indicator.period()), Some(100));
        assert_eq!(recipe("ema50"), None);
    }
}
