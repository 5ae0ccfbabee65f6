//! Candle intervals: the `interval` Enum of every frame.

/// Candle intervals, ordered by duration. The position is the physical value of the
/// `interval` Enum in every frame.
pub const INTERVALS: [&str; 6] = ["5m", "15m", "1h", "4h", "24h", "1w"];

/// How long a candle of each of `INTERVALS` is, in milliseconds (for the Sandbox's market and
/// the research functions; the client itself needs no lengths).
#[cfg_attr(not(any(feature = "python", feature = "sandbox")), allow(dead_code))]
pub const INTERVAL_MS: [i64; 6] = [300_000, 900_000, 3_600_000, 14_400_000, 86_400_000, 604_800_000];

/// One of `INTERVALS`, by position. Only `from_suffix` makes one, so every value is a valid
/// index: the column builder relies on that to build the Enum without checking each row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interval(u8);

impl Interval {
    /// `"1h"` -> the interval; `None` for a suffix that is not one of `INTERVALS`.
    pub fn from_suffix(suffix: &str) -> Option<Self> {
        INTERVALS.iter().position(|i| *i == suffix).map(|p| Interval(p as u8))
    }

    /// The position in `INTERVALS`, always `< INTERVALS.len()`.
    pub fn index(self) -> u8 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_round_trip() {
        for (index, name) in INTERVALS.iter().enumerate() {
            let interval = Interval::from_suffix(name).unwrap();
            assert_eq!(interval.index() as usize, index, "{name}");
        }
        assert_eq!(Interval::from_suffix("2h"), None);
        assert!(Interval::from_suffix("5m") < Interval::from_suffix("1w"));
    }

    #[test]
    fn lengths_follow_the_names() {
        for (name, ms) in INTERVALS.iter().zip(INTERVAL_MS) {
            let (count, unit) = name.split_at(name.len() - 1);
            let unit_ms = match unit {
                "m" => 60_000,
                "h" => 3_600_000,
                "w" => 604_800_000,
                _ => unreachable!("{name}"),
            };
            assert_eq!(count.parse::<i64>().unwrap() * unit_ms, ms, "{name}");
        }
    }
}
