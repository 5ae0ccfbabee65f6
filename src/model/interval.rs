//! Candle intervals: the `interval` Enum of every frame.

/// Candle intervals, ordered by duration. The position is the physical value of the
/// `interval` Enum in every frame.
pub const INTERVALS: [&str; 6] = ["5m", "15m", "1h", "4h", "24h", "1w"];

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
}
