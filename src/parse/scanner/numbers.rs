//! JSON numbers as serde_json reads them: integers in range as `UInt` or `Int`, the rest as a
//! correctly rounded `f64` (a quick exact path for short significands, an exact 128-bit check of
//! long ones, fast-float2 for the rest), and numbers stepped over with their grammar checked.

use super::Scanner;

/// Exact powers of ten as f64 (10^22 is the largest).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// The same powers of ten as integers (10^22 < 2^74, so a 54-bit factor still fits in 128 bits).
const POW10_EXACT: [u128; 23] = {
    let mut powers = [1u128; 23];
    let mut k = 1;
    while k < 23 {
        powers[k] = powers[k - 1] * 10;
        k += 1;
    }
    powers
};

/// `significand / 10^k` correctly rounded (to nearest, ties to even), for `k <= 22` and a
/// significand above 2^53, where one division of doubles can be an ulp off (the significand is
/// rounded first). That quotient is the first guess; exact 128-bit comparisons of the decimal
/// with the midpoints to the guess's neighbours move it to the right double. `None` (the caller
/// falls back to fast-float2) where a comparison would not fit in 128 bits: results below 2^-11
/// or at a power of two.
fn divide_by_power_of_ten(significand: u64, k: usize) -> Option<f64> {
    let power = POW10_EXACT[k];
    let mut guess = significand as f64 / POW10[k];
    // Two steps at most: the guess is within about one ulp.
    for _ in 0..3 {
        let bits = guess.to_bits();
        let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
        // guess = mantissa * 2^exponent
        let exponent = ((bits >> 52) & 0x7FF) as i64 - 1075;
        if mantissa == 1 << 52 {
            return None; // the gap below a power of two is half the one above
        }
        // decimal vs a midpoint (2 * mantissa ± 1) * 2^(exponent - 1), both times 2^(1 - exponent) * 10^k
        let shift = 1 - exponent;
        if !(0..=64).contains(&shift) {
            return None;
        }
        let decimal = u128::from(significand) << shift;
        let odd = mantissa & 1 == 1;
        let upper = u128::from(2 * mantissa + 1) * power;
        if decimal > upper || (decimal == upper && odd) {
            guess = guess.next_up();
            continue;
        }
        let lower = u128::from(2 * mantissa - 1) * power;
        if decimal < lower || (decimal == lower && odd) {
            guess = guess.next_down();
            continue;
        }
        return Some(guess);
    }
    None
}

/// A JSON number as serde_json reads it (small enough to come back in registers).
#[derive(Clone, Copy)]
pub(super) enum Number {
    UInt(u64),
    Int(i64),
    Float(f64),
}

/// The value of eight ASCII digits, or `None` if any of the bytes is not a digit (SWAR: all
/// eight combined in three multiplications).
#[inline]
fn eight_digits(chunk: &[u8]) -> Option<u64> {
    let word = u64::from_le_bytes(chunk.try_into().ok()?);
    let all_digits = (word & 0xF0F0_F0F0_F0F0_F0F0) == 0x3030_3030_3030_3030
        && (word.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) == 0x3030_3030_3030_3030;
    if !all_digits {
        return None;
    }
    let mut value = word - 0x3030_3030_3030_3030;
    value = (value.wrapping_mul(10) + (value >> 8)) & 0x00FF_00FF_00FF_00FF;
    value = (value.wrapping_mul(100) + (value >> 16)) & 0x0000_FFFF_0000_FFFF;
    value = (value.wrapping_mul(10_000) + (value >> 32)) & 0xFFFF_FFFF;
    Some(value)
}

impl Scanner<'_> {
    /// Steps over a number, checking its grammar only (as serde_json ignores one).
    pub(super) fn skip_number(&mut self) -> Option<()> {
        let bytes = self.bytes;
        let mut pos = self.pos;
        let digits = |mut pos: usize| {
            while let Some(b'0'..=b'9') = bytes.get(pos) {
                pos += 1;
            }
            pos
        };
        if bytes.get(pos) == Some(&b'-') {
            pos += 1;
        }
        match bytes.get(pos) {
            Some(b'0') => {
                pos += 1;
                if let Some(b'0'..=b'9') = bytes.get(pos) {
                    return None;
                }
            }
            Some(b'1'..=b'9') => pos = digits(pos + 1),
            _ => return None,
        }
        if bytes.get(pos) == Some(&b'.') {
            let end = digits(pos + 1);
            if end == pos + 1 {
                return None;
            }
            pos = end;
        }
        if let Some(b'e' | b'E') = bytes.get(pos) {
            pos += 1;
            if let Some(b'+' | b'-') = bytes.get(pos) {
                pos += 1;
            }
            let end = digits(pos);
            if end == pos {
                return None;
            }
            pos = end;
        }
        self.pos = pos;
        Some(())
    }

    /// A JSON number, as serde_json reads it: unsigned integers as `UInt`, negative ones as
    /// `Int`, anything with a fraction or exponent (and `-0`, and integers out of the range of
    /// both) as a correctly rounded `Float`. `None` for a number out of the range of `f64`.
    #[inline]
    pub(super) fn number(&mut self) -> Option<Number> {
        let bytes = self.bytes;
        let start = self.pos;
        let mut pos = start;
        let negative = bytes[pos] == b'-';
        if negative {
            pos += 1;
        }
        // Integer part: "0" or a non-zero digit followed by digits.
        let int_start = pos;
        let mut significand: u64 = 0;
        match bytes.get(pos) {
            Some(b'0') => pos += 1,
            Some(b'1'..=b'9') => {
                while let Some(&digit @ b'0'..=b'9') = bytes.get(pos) {
                    significand = significand.wrapping_mul(10).wrapping_add(u64::from(digit - b'0'));
                    pos += 1;
                }
            }
            _ => return None,
        }
        let int_digits = pos - int_start;
        if let Some(b'0'..=b'9') = bytes.get(pos) {
            return None; // a leading zero: serde_json's error
        }
        let mut digits = int_digits;
        let mut exponent: i64 = 0;
        let mut is_float = false;
        if bytes.get(pos) == Some(&b'.') {
            pos += 1;
            let fraction_start = pos;
            // Indicator values carry fifteen-odd decimals: eight digits at a time first.
            while let Some(eight) = bytes.get(pos..pos + 8).and_then(eight_digits) {
                significand = significand.wrapping_mul(100_000_000).wrapping_add(eight);
                pos += 8;
            }
            while let Some(&digit @ b'0'..=b'9') = bytes.get(pos) {
                significand = significand.wrapping_mul(10).wrapping_add(u64::from(digit - b'0'));
                pos += 1;
            }
            let fraction_digits = pos - fraction_start;
            if fraction_digits == 0 {
                return None;
            }
            digits += fraction_digits;
            exponent -= fraction_digits as i64;
            is_float = true;
        }
        if let Some(b'e' | b'E') = bytes.get(pos) {
            pos += 1;
            let exponent_negative = match bytes.get(pos) {
                Some(b'-') => {
                    pos += 1;
                    true
                }
                Some(b'+') => {
                    pos += 1;
                    false
                }
                _ => false,
            };
            let exponent_start = pos;
            let mut written: i64 = 0;
            while let Some(&digit @ b'0'..=b'9') = bytes.get(pos) {
                written = (written * 10 + i64::from(digit - b'0')).min(1_000_000);
                pos += 1;
            }
            if pos == exponent_start {
                return None;
            }
            exponent += if exponent_negative { -written } else { written };
            is_float = true;
        }
        self.pos = pos;
        if !is_float {
            if int_digits > 18 {
                return long_integer(&bytes[start..pos], negative);
            }
            return Some(match (negative, significand) {
                (false, n) => Number::UInt(n),
                (true, 0) => Number::Float(-0.0), // `-0` is a float to serde_json
                (true, n) => Number::Int(-(n as i64)),
            });
        }
        // Exact when the significand and the power of ten are both exact doubles: one rounding.
        // Seventeen significant digits and more (most indicator values) are checked exactly.
        let fits = digits <= 19 && exponent.abs() <= 22;
        let quick = if fits && significand < (1 << 53) {
            let value = significand as f64;
            Some(if exponent < 0 { value / POW10[(-exponent) as usize] } else { value * POW10[exponent as usize] })
        } else if fits && exponent < 0 {
            divide_by_power_of_ten(significand, (-exponent) as usize)
        } else {
            None
        };
        let Some(magnitude) = quick else {
            // fast-float2 (Eisel-Lemire, then exact arithmetic) is correctly rounded too.
            let value: f64 = fast_float2::parse(&bytes[start..pos]).ok()?;
            if value.is_infinite() {
                return None; // serde_json: "number out of range"
            }
            return Some(Number::Float(value));
        };
        Some(Number::Float(if negative { -magnitude } else { magnitude }))
    }
}

/// An integer of 19 digits or more (`text`, its sign included), as serde_json reads it: `UInt`
/// or `Int` where it fits, else the correctly rounded `Float`.
#[cold]
fn long_integer(text: &[u8], negative: bool) -> Option<Number> {
    let digits = std::str::from_utf8(&text[usize::from(negative)..]).ok()?;
    match (digits.parse::<u64>(), negative) {
        (Ok(n), false) => Some(Number::UInt(n)),
        // serde_json's rule: a negative integer whose magnitude fits in `u64` but not in `i64`
        // is the float of the magnitude, negated.
        (Ok(n), true) if n <= 1 << 63 => Some(Number::Int(0i64.wrapping_sub(n as i64))),
        (Ok(n), true) => Some(Number::Float(-(n as f64))),
        (Err(_), _) => {
            let value: f64 = fast_float2::parse(text).ok()?;
            (!value.is_infinite()).then_some(Number::Float(value))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{scan, serde};
    use super::*;

    #[test]
    fn numbers_read_as_serde_json_reads_them() {
        for text in [
            "0",
            "7",
            "-7",
            "123456789012345678",
            "-123456789012345678",
            "0.5",
            "-0.5",
            "1e3",
            "1E-3",
            "2.5e+2",
            "66.13132864306543",
            "0.016160713546945808",
            "0.016124270000000003",
            "1e22",
            "1e23",
            "9007199254740993.0",
            "1e-400",
            "-0.0",
            "0.1",
            "123.456e-7",
            "17976931348623157e292",
            "2.2250738585072014e-308",
            "4.9406564584124654e-324",
            "0.000000000000000000000000000001",
        ] {
            assert_eq!(scan(text), serde(text), "{text}");
            assert!(scan(text).is_some(), "{text} should be read");
        }
    }

    #[test]
    fn long_significands_are_divided_exactly() {
        let mut next = crate::test_random::xorshift(0x9E37_79B9_7F4A_7C15_u64);
        let mut checked = 0;
        for case in 0..300_000 {
            let (significand, k) = match case % 3 {
                // any significand of 17 to 19 digits
                0 => ((1 << 53) + next() % (10_000_000_000_000_000_000 - (1 << 53)), 1 + (next() % 22) as usize),
                // N.0 with N odd in [2^53, 2^54): exactly halfway between two doubles
                1 => (((1 << 53) + (next() % (1 << 52)) * 2 + 1) * 10, 1),
                // N.5 with N in [2^52, 2^53): halfway too
                _ => ((((1 << 52) + next() % (1 << 52)) * 2 + 1) * 5, 1),
            };
            let expected: f64 = format!("{significand}e-{k}").parse().unwrap();
            if let Some(value) = divide_by_power_of_ten(significand, k) {
                assert_eq!(value.to_bits(), expected.to_bits(), "{significand}e-{k}");
                checked += 1;
            }
        }
        assert!(checked > 250_000, "only {checked} cases took the exact division");
    }

    #[test]
    fn eight_digits_at_once() {
        assert_eq!(eight_digits(b"12345678"), Some(12_345_678));
        assert_eq!(eight_digits(b"00000009"), Some(9));
        assert_eq!(eight_digits(b"99999999"), Some(99_999_999));
        for bad in [b"1234567a", b"/2345678", b"1234:678", b"1234567 "] {
            assert_eq!(eight_digits(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
