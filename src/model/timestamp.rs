//! Timestamps as the service writes them, to milliseconds since the Unix epoch (UTC).
//!
//! Two forms occur: ISO 8601 with a `T`, milliseconds and `Z` (`2024-05-01T12:34:56.789Z`), and
//! the technical-analysis form `2024-05-01 12:34:56+00`. Both are read by one small parser that
//! also accepts any fraction length and `±HH`, `±HHMM`, `±HH:MM` offsets, so that a change of
//! style on the service's side does not turn into nulls.

/// Parses a timestamp; `Err` carries a short reason for the error message.
pub fn parse_timestamp_ms(text: &str) -> Result<i64, &'static str> {
    if let Some(ms) = parse_service_form(text.as_bytes()) {
        return Ok(ms);
    }
    let b = text.trim().as_bytes();
    let mut pos = 0usize;
    let year = i64::from(digits(b, &mut pos, 4).ok_or("expected a 4-digit year")?);
    expect(b, &mut pos, b'-')?;
    let month = digits(b, &mut pos, 2).ok_or("expected a 2-digit month")?;
    expect(b, &mut pos, b'-')?;
    let day = digits(b, &mut pos, 2).ok_or("expected a 2-digit day")?;
    let days = checked_days(year, month, day)?;
    let mut millis_of_day = 0i64;
    if pos < b.len() {
        if b[pos] != b'T' && b[pos] != b' ' && b[pos] != b't' {
            return Err("expected 'T' or ' ' between date and time");
        }
        pos += 1;
        let hour = digits(b, &mut pos, 2).ok_or("expected a 2-digit hour")?;
        expect(b, &mut pos, b':')?;
        let minute = digits(b, &mut pos, 2).ok_or("expected 2-digit minutes")?;
        let mut second = 0;
        if pos < b.len() && b[pos] == b':' {
            pos += 1;
            second = digits(b, &mut pos, 2).ok_or("expected 2-digit seconds")?;
        }
        let time_ms = checked_time_ms(i64::from(hour), i64::from(minute), i64::from(second))?;
        let mut fraction_ms = 0i64;
        if pos < b.len() && (b[pos] == b'.' || b[pos] == b',') {
            pos += 1;
            let start = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                if pos - start < 3 {
                    fraction_ms = fraction_ms * 10 + i64::from(b[pos] - b'0');
                }
                pos += 1;
            }
            if pos == start {
                return Err("expected digits after the decimal point");
            }
            for _ in (pos - start)..3 {
                fraction_ms *= 10;
            }
        }
        millis_of_day = time_ms + fraction_ms;
        millis_of_day -= parse_offset_ms(b, &mut pos)?;
    }
    if pos != b.len() {
        return Err("unexpected text after the timestamp");
    }
    Ok(days * 86_400_000 + millis_of_day)
}

/// Days since the epoch of a date, if it exists.
fn checked_days(year: i64, month: u32, day: u32) -> Result<i64, &'static str> {
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err("date out of range");
    }
    Ok(days_from_civil(year, month, day))
}

/// Milliseconds since midnight of a time of day (a leap second allowed).
fn checked_time_ms(hour: i64, minute: i64, second: i64) -> Result<i64, &'static str> {
    if hour > 23 || minute > 59 || second > 60 {
        return Err("time out of range");
    }
    Ok(((hour * 60 + minute) * 60 + second) * 1000)
}

/// The two forms the service writes, read at their fixed positions (a listing body holds eight
/// timestamps, and the general parser below costs several times more); `None` for anything
/// else, which the general parser then reads (and rejects where it must).
#[inline]
fn parse_service_form(b: &[u8]) -> Option<i64> {
    let millis = match b.len() {
        // 2024-05-01T12:34:56.789Z
        24 if b[10] == b'T' && b[19] == b'.' && b[23] == b'Z' => two_digits(b, 20)? * 10 + digit(b, 22)?,
        // 2024-05-01 12:34:56+00
        22 if b[10] == b' ' && &b[19..] == b"+00" => 0,
        _ => return None,
    };
    if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = two_digits(b, 0)? * 100 + two_digits(b, 2)?;
    let (month, day) = (two_digits(b, 5)? as u32, two_digits(b, 8)? as u32);
    let (hour, minute, second) = (two_digits(b, 11)?, two_digits(b, 14)?, two_digits(b, 17)?);
    let days = checked_days(year, month, day).ok()?;
    Some(days * 86_400_000 + checked_time_ms(hour, minute, second).ok()? + millis)
}

/// The ASCII digit at `at` (`b` has a fixed length, so it is there).
#[inline(always)]
fn digit(b: &[u8], at: usize) -> Option<i64> {
    let value = b[at].wrapping_sub(b'0');
    (value < 10).then_some(i64::from(value))
}

#[inline(always)]
fn two_digits(b: &[u8], at: usize) -> Option<i64> {
    Some(digit(b, at)? * 10 + digit(b, at + 1)?)
}

fn parse_offset_ms(b: &[u8], pos: &mut usize) -> Result<i64, &'static str> {
    if *pos >= b.len() {
        return Ok(0); // no offset: the service's timestamps are UTC
    }
    match b[*pos] {
        b'Z' | b'z' => {
            *pos += 1;
            Ok(0)
        }
        sign @ (b'+' | b'-') => {
            *pos += 1;
            let hours = i64::from(digits(b, pos, 2).ok_or("expected a 2-digit offset hour")?);
            let mut minutes = 0i64;
            if *pos < b.len() && b[*pos] == b':' {
                *pos += 1;
            }
            if *pos < b.len() {
                minutes = i64::from(digits(b, pos, 2).ok_or("expected 2-digit offset minutes")?);
            }
            if hours > 23 || minutes > 59 {
                return Err("offset out of range");
            }
            let ms = (hours * 60 + minutes) * 60_000;
            Ok(if sign == b'-' { -ms } else { ms })
        }
        _ => Err("unexpected text after the time"),
    }
}

fn digits(b: &[u8], pos: &mut usize, n: usize) -> Option<u32> {
    let chunk = b.get(*pos..*pos + n)?;
    let mut value = 0u32;
    for &c in chunk {
        if !c.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(c - b'0');
    }
    *pos += n;
    Some(value)
}

fn expect(b: &[u8], pos: &mut usize, c: u8) -> Result<(), &'static str> {
    if b.get(*pos) == Some(&c) {
        *pos += 1;
        Ok(())
    } else {
        Err("malformed date")
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS+00`, the service's TA form.
#[cfg(any(test, feature = "sandbox"))]
pub fn format_ta_timestamp(ms: i64) -> String {
    let (y, mo, d, h, mi, s) = civil_from_ms(ms);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}+00")
}

/// Formats milliseconds since the epoch as ISO 8601 with milliseconds and `Z`.
#[cfg(any(test, feature = "sandbox"))]
pub fn format_iso_timestamp(ms: i64) -> String {
    let (y, mo, d, h, mi, s) = civil_from_ms(ms);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z", ms.rem_euclid(1000))
}

#[cfg(any(test, feature = "sandbox"))]
fn civil_from_ms(ms: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = ms.div_euclid(86_400_000);
    let secs_of_day = ms.rem_euclid(86_400_000) / 1000;
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    (year, month, day, (secs_of_day / 3600) as u32, (secs_of_day / 60 % 60) as u32, (secs_of_day % 60) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_with_millis_and_z() {
        assert_eq!(parse_timestamp_ms("1970-01-01T00:00:00.000Z"), Ok(0));
        assert_eq!(parse_timestamp_ms("2024-05-01T12:34:56.789Z"), Ok(1_714_566_896_789));
    }

    #[test]
    fn ta_form_and_offsets() {
        assert_eq!(parse_timestamp_ms("2024-05-01 12:34:56+00"), Ok(1_714_566_896_000));
        assert_eq!(parse_timestamp_ms("2024-05-01T14:34:56+02:00"), Ok(1_714_566_896_000));
        assert_eq!(parse_timestamp_ms("2024-05-01T10:34:56-0200"), Ok(1_714_566_896_000));
        assert_eq!(parse_timestamp_ms("2024-05-01T12:34:56.7891234Z"), Ok(1_714_566_896_789));
        assert_eq!(parse_timestamp_ms("2024-05-01"), Ok(1_714_521_600_000));
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_timestamp_ms("yesterday").is_err());
        assert!(parse_timestamp_ms("2024-02-30T00:00:00Z").is_err());
        assert!(parse_timestamp_ms("2024-05-01T25:00:00Z").is_err());
        assert!(parse_timestamp_ms("2024-05-01T12:00:00Zjunk").is_err());
        assert!(parse_timestamp_ms("").is_err());
    }

    #[test]
    fn the_service_forms_read_as_the_general_parser_reads_them() {
        let general = |text: &str| {
            // The general parser alone: what `parse_timestamp_ms` does when the fast form declines.
            let padded = format!(" {text}");
            parse_timestamp_ms(&padded)
        };
        let mut next = crate::test_random::xorshift(0x2545_F491_4F6C_DD1D_u64);
        for _ in 0..20_000 {
            // Any millisecond from 1900 to 2200.
            let ms = (next() % 9_467_280_000_000) as i64 - 2_208_988_800_000;
            for text in [format_iso_timestamp(ms), format_ta_timestamp(ms)] {
                assert!(parse_service_form(text.as_bytes()).is_some(), "{text}");
                assert_eq!(parse_timestamp_ms(&text), general(&text), "{text}");
            }
        }
        for text in [
            "2024-02-29T23:59:60.999Z",
            "2023-02-29T00:00:00.000Z",
            "2024-13-01T00:00:00.000Z",
            "2024-00-10 00:00:00+00",
            "2024-04-31 00:00:00+00",
            "2024-05-01 24:00:00+00",
            "2024-05-01 12:60:00+00",
            "2024-05-01 12:00:61+00",
            "2024-05-01 12:00:00+01",
            "2024-05-01T12:00:00.00aZ",
            "2024-05-01T12:00:00,000Z",
            "2024/05/01 12:00:00+00",
            "2024-05-01x12:00:00+00",
            "+024-05-01 12:00:00+00",
            "2024-05-01 12:00:00-00",
        ] {
            let fast = parse_service_form(text.as_bytes());
            assert!(fast.is_none() || fast == general(text).ok(), "{text}: {fast:?}");
            assert_eq!(parse_timestamp_ms(text), general(text), "{text}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for ms in [0, 1_714_566_896_789, 951_782_400_000, -86_400_000] {
            assert_eq!(parse_timestamp_ms(&format_iso_timestamp(ms)), Ok(ms));
            assert_eq!(parse_timestamp_ms(&format_ta_timestamp(ms)), Ok(ms - ms.rem_euclid(1000)));
        }
    }
}
