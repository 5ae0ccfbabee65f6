//! The contract's frames: their names, schemas and column builders. The only code that knows
//! which columns a frame has and in which order; the parsers hand it one body's rows at a time.

pub mod buffer_bytes;
pub mod columns;
pub mod drift;
pub mod listing;
pub mod log;
pub mod markets;
pub mod string_views;

use polars::prelude::DataFrame;

pub use drift::DriftRow;
pub use listing::{ListingColumns, ListingRows};
pub use log::{log_frame, LogColumns, LogRecord};
pub use markets::{MarketRow, MarketsColumns};

pub const SNAPSHOT: &str = "snapshot";
pub const INDICATORS: &str = "indicators";
pub const SIGNALS: &str = "signals";
pub const PATTERNS: &str = "patterns";
pub const TA_UPDATED: &str = "ta_updated";
pub const INFO: &str = "info";
pub const MARKETS: &str = "markets";
pub const LOG: &str = "log";
pub const DRIFT: &str = "drift";

/// Every frame of `Frames`, in order (`errors` is `log` filtered, so it is not built here).
pub const FRAME_NAMES: [&str; 9] = [SNAPSHOT, INDICATORS, SIGNALS, PATTERNS, TA_UPDATED, INFO, MARKETS, LOG, DRIFT];

/// The frames built from listing bodies.
pub struct ListingFrames {
    pub snapshot: DataFrame,
    pub indicators: DataFrame,
    pub signals: DataFrame,
    pub patterns: DataFrame,
    pub ta_updated: DataFrame,
    pub info: DataFrame,
    /// Values of the bodies that did not fit their columns.
    pub drift: DataFrame,
}

/// The frames built from markets bodies.
pub struct MarketsFrames {
    pub markets: DataFrame,
    pub drift: DataFrame,
}

impl MarketsFrames {
    /// `(name, frame)` pairs, named as in `FRAME_NAMES`.
    pub fn into_named(self) -> [(&'static str, DataFrame); 2] {
        [(MARKETS, self.markets), (DRIFT, self.drift)]
    }

    pub fn vstack(&mut self, other: MarketsFrames) {
        self.markets.vstack_mut_owned(other.markets).expect("frames of one schema");
        self.drift.vstack_mut_owned(other.drift).expect("frames of one schema");
    }
}

impl ListingFrames {
    pub fn vstack(&mut self, other: ListingFrames) {
        for (mine, theirs) in [
            (&mut self.snapshot, other.snapshot),
            (&mut self.indicators, other.indicators),
            (&mut self.signals, other.signals),
            (&mut self.patterns, other.patterns),
            (&mut self.ta_updated, other.ta_updated),
            (&mut self.info, other.info),
            (&mut self.drift, other.drift),
        ] {
            mine.vstack_mut_owned(theirs).expect("frames of one schema");
        }
    }

    /// `(name, frame)` pairs, named as in `FRAME_NAMES`.
    pub fn into_named(self) -> [(&'static str, DataFrame); 7] {
        [
            (SNAPSHOT, self.snapshot),
            (INDICATORS, self.indicators),
            (SIGNALS, self.signals),
            (PATTERNS, self.patterns),
            (TA_UPDATED, self.ta_updated),
            (INFO, self.info),
            (DRIFT, self.drift),
        ]
    }
}

/// The frames of an empty result, with their full schemas.
pub fn empty_frames() -> Vec<(&'static str, DataFrame)> {
    let mut frames: Vec<_> = ListingColumns::new(0).finish().into_named().into_iter().collect();
    frames.push((MARKETS, MarketsColumns::new(0).finish().markets));
    frames.push((LOG, log_frame(&[])));
    frames.sort_by_key(|(name, _)| FRAME_NAMES.iter().position(|n| n == name));
    frames
}

/// Reading columns back in tests.
#[cfg(test)]
pub(crate) mod test_columns {
    use polars::prelude::*;

    /// Any column as text (an Enum by its category names).
    pub fn strings(frame: &DataFrame, column: &str) -> Vec<Option<String>> {
        let column = frame.column(column).unwrap().cast(&DataType::String).unwrap();
        column.str().unwrap().iter().map(|s| s.map(str::to_owned)).collect()
    }

    pub fn floats(frame: &DataFrame, column: &str) -> Vec<Option<f64>> {
        frame.column(column).unwrap().f64().unwrap().iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_frames_are_named_in_order() {
        let names: Vec<_> = empty_frames().iter().map(|(name, _)| *name).collect();
        assert_eq!(names, FRAME_NAMES);
    }
}
