//! `Sandbox.candles()`: the candles behind the Sandbox's indicators, one row per candle.

use polars::prelude::*;

use super::Candle;
use crate::frames::columns::{frame, millis_column};

/// Columns of the candles frame, in order.
pub const CANDLE_COLUMNS: [&str; 6] = ["open_time", "open", "high", "low", "close", "volume"];

pub fn candles_frame(candles: &[Candle]) -> DataFrame {
    let [open_time, open, high, low, close, volume] = CANDLE_COLUMNS;
    let float = |column: &str, value: fn(&Candle) -> f64| {
        Column::new(column.into(), candles.iter().map(value).collect::<Vec<f64>>())
    };
    frame(vec![
        millis_column(open_time, candles.iter().map(|c| Some(c.open_ms)).collect()),
        float(open, |c| c.open),
        float(high, |c| c.high),
        float(low, |c| c.low),
        float(close, |c| c.close),
        float(volume, |c| c.volume),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_per_candle_with_a_utc_open_time() {
        let candle = Candle { open_ms: 1_000, open: 1.0, high: 2.0, low: 0.5, close: 1.5, volume: 10.0 };
        let frame = candles_frame(&[candle, candle]);
        let names: Vec<&str> = frame.get_column_names().iter().map(|n| n.as_str()).collect();
        assert_eq!(names, CANDLE_COLUMNS);
        assert_eq!(frame.height(), 2);
        assert_eq!(
            frame.column("open_time").map(|c| c.dtype().clone()).ok(),
            Some(DataType::Datetime(TimeUnit::Milliseconds, Some(TimeZone::UTC)))
        );
    }
}
