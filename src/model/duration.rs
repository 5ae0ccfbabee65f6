//! Durations as users write them: `"250ms"`, `"30s"`, `"5m"`, `"1h"`, `"1d"`, or a number of
//! seconds. One rule for the collector's `every`, the Sandbox's `advance` and every other place
//! a user gives a span of time.

/// Seconds in each unit a duration may carry (none means seconds).
const UNITS: [(&str, f64); 5] = [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3_600.0), ("d", 86_400.0)];

/// A positive, finite number of seconds, or why not.
pub fn check_seconds(seconds: f64) -> Result<f64, &'static str> {
    if seconds.is_finite() && seconds > 0.0 {
        Ok(seconds)
    } else {
        Err("must be a positive, finite duration")
    }
}

/// `"5m"` -> 300.0; spaces around the number and the unit are allowed. The error says what a
/// duration looks like.
pub fn parse_seconds(text: &str) -> Result<f64, &'static str> {
    const SHAPE: &str = "must look like 30s, 5m, 1h or 1d";
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = (&text[..split], text[split..].trim_start());
    let valid_number = !number.is_empty()
        && !number.starts_with('.')
        && !number.ends_with('.')
        && number.bytes().filter(|&b| b == b'.').count() <= 1;
    if !valid_number {
        return Err(SHAPE);
    }
    let factor = match unit {
        "" => 1.0,
        unit => UNITS.iter().find(|(name, _)| *name == unit).map(|(_, factor)| *factor).ok_or(SHAPE)?,
    };
    let value: f64 = number.parse().map_err(|_| SHAPE)?;
    check_seconds(value * factor)
}

/// `seconds` as the grammar writes it, in its largest unit that holds it whole: `7d`, `90m`,
/// `45s`, `250ms`; a single day is `24h`, as the service's interval is. What no unit holds whole
/// (less than a millisecond) is plain seconds, which the grammar reads too.
// Only the bindings write durations back (the plain core reads them).
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub fn format_seconds(seconds: f64) -> String {
    let ms = (seconds * 1000.0).round();
    if (1.0..1e15).contains(&ms) && (ms / 1000.0 - seconds).abs() <= 1e-9 * seconds.abs().max(1.0) {
        let ms = ms as i64;
        for (unit, size) in UNITS.iter().rev() {
            let size = (size * 1000.0).round() as i64;
            if ms % size == 0 && !(*unit == "d" && ms < 2 * size) {
                return format!("{}{unit}", ms / size);
            }
        }
    }
    format!("{seconds}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_in_their_largest_whole_unit() {
        for (seconds, text) in [
            (604_800.0, "7d"),
            (172_800.0, "2d"),
            (86_400.0, "24h"),
            (5_400.0, "90m"),
            (3_600.0, "1h"),
            (45.0, "45s"),
            (1.5, "1500ms"),
            (0.25, "250ms"),
            (0.0005, "0.0005"),
        ] {
            assert_eq!(format_seconds(seconds), text, "{seconds}");
            assert_eq!(parse_seconds(text), Ok(seconds), "{text} reads back");
        }
    }

    #[test]
    fn the_units_users_write() {
        for (text, seconds) in
            [("250ms", 0.25), ("30s", 30.0), ("5m", 300.0), (" 1.5 h ", 5_400.0), ("2d", 172_800.0), ("7", 7.0)]
        {
            assert_eq!(parse_seconds(text), Ok(seconds), "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_the_shape() {
        for text in ["", "m", "5 minutes", "-5m", "1e3s", ".5s", "5.s", "1.2.3s", "0s", "0", "5w"] {
            assert!(parse_seconds(text).is_err(), "{text:?} was accepted");
        }
        assert!(check_seconds(f64::INFINITY).is_err() && check_seconds(f64::NAN).is_err());
    }
}
