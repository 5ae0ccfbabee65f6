//! The byte scanner every body is read with: a pull reader (`peek`, then read or skip what
//! comes) over the JSON of a response body, total over valid JSON. It reads the same `Value`s
//! that serde_json reads, bit for bit (strings borrowed from the body unless they hold
//! escapes), and checks what it steps over as serde_json checks what it ignores. It answers
//! `None` only where serde_json would fail the body; the reader that called it then records the
//! innermost part it was reading (`Unit`, with where it starts), and `document.rs` runs
//! serde_json over that part alone for the error's wording and offset. The tests below and in
//! `proptests.rs` hold the values and the failures equal to serde_json's.

use std::borrow::Cow;

use crate::model::value::Value;
use crate::short_bytes::same_bytes;

/// Bytes that end the fast scan of a string: the closing quote, an escape, a control character
/// (which JSON forbids inside strings).
static STRING_STOPS: [bool; 256] = {
    let mut stops = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        stops[byte] = true;
        byte += 1;
    }
    stops[b'"' as usize] = true;
    stops[b'\\' as usize] = true;
    stops
};

/// The text of a string's bytes. The body's UTF-8 is checked string by string, where it
/// matters: JSON outside strings is ASCII (the grammar checks every byte of it), and skipped
/// strings are not kept.
#[inline]
fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        simdutf8::basic::from_utf8(bytes).ok()
    }
}

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
enum Number {
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

/// What the reader was reading where the scanner failed, as the serde_json call that reads it
/// (see `document::word_failure`): the same bytes through that call fail where and as the body
/// failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// The whole body: an object (else "invalid type: ..., expected" the text), then nothing.
    Document(&'static str),
    /// An object the reader walks (else "invalid type: ..., expected" the text).
    Object(&'static str),
    /// An array the reader walks (else "invalid type: ..., expected" the text).
    Array(&'static str),
    /// A part read whatever its type (generalInfo, its community and chains, a market entry).
    Any,
    /// A value read as a `Value`: strings checked, numbers converted.
    Value,
    /// A value stepped over (serde's `IgnoredAny`).
    Ignored,
    /// A value kept as its text (serde's `RawValue`: a chain).
    Raw,
}

/// Where reading failed: the innermost unit being read, and where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    pub start: usize,
    pub unit: Unit,
}

pub struct Scanner<'de> {
    bytes: &'de [u8],
    pos: usize,
    failure: Option<Failure>,
}

impl<'de> Scanner<'de> {
    pub fn new(body: &'de [u8]) -> Self {
        Self { bytes: body, pos: 0, failure: None }
    }

    /// Reads one unit with `read`; if it fails, records the unit (unless a unit inside it was
    /// recorded first).
    /// (The unit starts where the scanner stands, whitespace before it included: serde_json
    /// skips it as the reader does.)
    #[inline]
    pub fn unit<T>(&mut self, unit: Unit, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        let start = self.pos;
        let read = read(self);
        if read.is_none() {
            self.failed(start, unit);
        }
        read
    }

    #[cold]
    fn failed(&mut self, start: usize, unit: Unit) {
        self.failure.get_or_insert(Failure { start, unit });
    }

    /// Where reading failed (`None` if nothing failed in a unit).
    pub fn failure(&self) -> Option<Failure> {
        self.failure
    }

    /// The text from `start` to here (a value just skipped).
    pub fn slice_from(&self, start: usize) -> &'de [u8] {
        &self.bytes[start..self.pos]
    }

    /// The position of the next token.
    pub fn position(&mut self) -> usize {
        self.skip_whitespace();
        self.pos
    }

    /// Goes back to `position` (from `position`) to read a value again another way.
    pub fn rewind(&mut self, position: usize) {
        self.pos = position;
    }

    fn skip_whitespace_at(&self, mut pos: usize) -> usize {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(pos) {
            pos += 1;
        }
        pos
    }

    #[inline]
    fn skip_whitespace(&mut self) {
        // Bodies are usually compact: test the common case before looping.
        if let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.pos) {
            self.pos = self.skip_whitespace_at(self.pos);
        }
    }

    /// The next byte that is not whitespace, left unread.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        if self.peek()? == byte {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        (self.bytes.get(self.pos..end)? == word).then(|| self.pos = end)
    }

    /// `null`.
    pub fn null(&mut self) -> Option<()> {
        self.skip_whitespace();
        self.literal(b"null")
    }

    /// Only whitespace is left.
    pub fn finish(&mut self) -> Option<()> {
        self.skip_whitespace();
        (self.pos == self.bytes.len()).then_some(())
    }

    /// Reads an object, calling `each(scanner, key)` after each key: `each` reads the colon
    /// (`colon`) and the value.
    pub fn object(&mut self, mut each: impl FnMut(&mut Self, Cow<'de, str>) -> Option<()>) -> Option<()> {
        self.members(|scanner, _| {
            let key = scanner.key()?;
            each(scanner, key)
        })
    }

    /// Reads an object, calling `each(scanner, position)` for each member: `each` reads the key
    /// (`key` or `key_if`), the colon and the value.
    pub fn members(&mut self, each: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        self.elements::<b'{', b'}'>(each)
    }

    /// Reads an array, calling `each` with the scanner before every element; `each` must
    /// consume the element.
    pub fn array(&mut self, mut each: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.elements::<b'[', b']'>(|scanner, _| each(scanner))
    }

    /// A bracketed, comma-separated sequence (an object's members or an array's elements):
    /// `each(scanner, position)` reads one element. A comma before the closing bracket fails
    /// here, not in `each` (serde_json finds it before the element).
    #[inline]
    fn elements<const OPEN: u8, const CLOSE: u8>(
        &mut self,
        mut each: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        self.eat(OPEN)?;
        if self.peek()? == CLOSE {
            self.pos += 1;
            return Some(());
        }
        let mut position = 0;
        loop {
            each(self, position)?;
            position += 1;
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    if CLOSE == b']' && self.peek()? == CLOSE {
                        return None;
                    }
                }
                byte if byte == CLOSE => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A member's key, borrowed from the body unless it holds escapes (without its colon).
    #[inline]
    pub fn key(&mut self) -> Option<Cow<'de, str>> {
        self.skip_whitespace();
        if let Some(key) = self.plain_string() {
            return Some(Cow::Borrowed(key));
        }
        self.string()
    }

    /// The colon after a key.
    #[inline]
    pub fn colon(&mut self) -> Option<()> {
        self.eat(b':')
    }

    /// A member no reader wants, after its key: the colon, then its value skipped (and checked,
    /// as serde_json's `IgnoredAny` checks what it ignores).
    pub fn skip_member(&mut self) -> Option<()> {
        self.colon()?;
        self.unit(Unit::Ignored, Scanner::skip)
    }

    /// The member's key and its colon if they are `expected`: a key without escapes followed by
    /// `":`, compared in place in one run, without looking for the closing quote first. `None`,
    /// having read nothing, if they are not (also where whitespace stands before the colon).
    #[inline(always)]
    pub fn key_if(&mut self, expected: &[u8]) -> Option<&'de str> {
        self.skip_whitespace();
        let start = self.pos + 1;
        let end = start + expected.len();
        let bytes = self.bytes;
        if bytes.get(self.pos) != Some(&b'"') || end > bytes.len() || !same_bytes(&bytes[start..end], expected) {
            return None;
        }
        self.pos = end;
        // SAFETY: the bytes before the closing quote equal a key `key` read, a `str`.
        Some(unsafe { std::str::from_utf8_unchecked(&bytes[start..end - 2]) })
    }

    /// Does a number come next? (Leaves it unread.)
    pub fn at_number(&mut self) -> bool {
        matches!(self.peek(), Some(b'-' | b'0'..=b'9'))
    }

    /// A number that comes next, as `Value::as_f64` gives it, without building the `Value`.
    pub fn number_as_f64(&mut self) -> Option<f64> {
        self.skip_whitespace();
        Some(match self.number()? {
            Number::UInt(n) => n as f64,
            Number::Int(n) => n as f64,
            Number::Float(x) => x,
        })
    }

    /// Does a string come next? (Leaves it unread.)
    pub fn at_string(&mut self) -> bool {
        self.peek() == Some(b'"')
    }

    /// Does an array come next? (Leaves it unread.)
    pub fn at_array(&mut self) -> bool {
        self.peek() == Some(b'[')
    }

    /// Reads an array of strings and nulls, calling `each` with every string; `None` for an
    /// array holding anything else (or not JSON), where the caller rewinds and reads a `value`.
    pub fn strings(&mut self, mut each: impl FnMut(Cow<'de, str>)) -> Option<()> {
        self.array(|scanner| {
            match scanner.peek()? {
                b'"' => each(scanner.string()?),
                b'n' => scanner.literal(b"null")?,
                _ => return None,
            }
            Some(())
        })
    }

    /// Is the next value an object? (Leaves it unread.)
    pub fn at_object(&mut self) -> bool {
        self.peek() == Some(b'{')
    }

    /// A string without escapes, borrowed from the body (`None` at an escape).
    #[inline]
    fn plain_string(&mut self) -> Option<&'de str> {
        if self.bytes.get(self.pos) != Some(&b'"') {
            return None;
        }
        let start = self.pos + 1;
        let end = self.string_stop(start)?;
        if self.bytes[end] != b'"' {
            return None;
        }
        let text = utf8(&self.bytes[start..end])?;
        self.pos = end + 1;
        Some(text)
    }

    /// A string: borrowed from the body when it has no escape, else decoded as serde_json
    /// decodes it. A lone surrogate, an unknown escape, a control character or bytes that are
    /// not UTF-8 fail, as they fail serde_json.
    #[inline]
    pub fn string(&mut self) -> Option<Cow<'de, str>> {
        if self.bytes.get(self.pos) != Some(&b'"') {
            return None;
        }
        let start = self.pos + 1;
        let mut end = self.string_stop(start)?;
        if self.bytes[end] == b'"' {
            self.pos = end + 1;
            return utf8(&self.bytes[start..end]).map(Cow::Borrowed);
        }
        let mut decoded = String::new();
        let mut run = start;
        loop {
            match self.bytes[end] {
                b'"' => {
                    decoded.push_str(utf8(&self.bytes[run..end])?);
                    self.pos = end + 1;
                    return Some(Cow::Owned(decoded));
                }
                b'\\' => {
                    decoded.push_str(utf8(&self.bytes[run..end])?);
                    end = self.escape(end, &mut decoded)?;
                    run = end;
                }
                _ => return None, // a control character
            }
            end = self.string_stop(end)?;
        }
    }

    /// Decodes the escape at `pos` (a backslash) onto `out`; returns the position after it.
    fn escape(&self, pos: usize, out: &mut String) -> Option<usize> {
        let simple = match *self.bytes.get(pos + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4(pos + 2)?;
                let (code, after) = match unit {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed by an escaped low one.
                        if self.bytes.get(pos + 6..pos + 8)? != b"\\u" {
                            return None;
                        }
                        let low = self.hex4(pos + 8)?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return None;
                        }
                        (0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00), pos + 12)
                    }
                    0xDC00..=0xDFFF => return None,
                    _ => (u32::from(unit), pos + 6),
                };
                out.push(char::from_u32(code)?);
                return Some(after);
            }
            _ => return None,
        };
        out.push(simple);
        Some(pos + 2)
    }

    /// The four hex digits at `pos` as a number.
    fn hex4(&self, pos: usize) -> Option<u16> {
        let digits = self.bytes.get(pos..pos + 4)?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    }

    /// The position of the first quote, backslash or control character at or after `pos`.
    #[inline]
    fn string_stop(&self, mut pos: usize) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        while let Some(chunk) = self.bytes.get(pos..pos + 16) {
            // Sixteen bytes at a time (SSE2, which every x86_64 has).
            use std::arch::x86_64::{
                _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
            };
            // SAFETY: SSE2 is part of x86_64; the load reads the sixteen bytes of `chunk`.
            let flags = unsafe {
                let bytes = _mm_loadu_si128(chunk.as_ptr().cast());
                let quote = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
                let backslash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
                let control = _mm_cmpeq_epi8(_mm_max_epu8(bytes, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F));
                _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control))
            };
            if flags != 0 {
                return Some(pos + flags.trailing_zeros() as usize);
            }
            pos += 16;
        }
        // Eight bytes at a time: a byte is flagged if it is '"', '\\' or below 0x20. The lowest
        // flag is exact (borrows only flag bytes above a real match).
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = 0x8080_8080_8080_8080;
        let zero_bytes = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
        while let Some(chunk) = self.bytes.get(pos..pos + 8) {
            let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            let flags = zero_bytes(word ^ (ONES * u64::from(b'"')))
                | zero_bytes(word ^ (ONES * u64::from(b'\\')))
                | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS);
            if flags != 0 {
                return Some(pos + (flags.trailing_zeros() / 8) as usize);
            }
            pos += 8;
        }
        while !STRING_STOPS[*self.bytes.get(pos)? as usize] {
            pos += 1;
        }
        Some(pos)
    }

    /// The next value, as serde_json reads it into a `Value` (whose `Deserialize` says which
    /// parts of an array or object are read and which are only stepped over).
    pub fn value(&mut self) -> Option<Value<'de>> {
        Some(match self.peek()? {
            b'"' => Value::Str(self.string()?),
            b'n' => self.literal(b"null").map(|()| Value::Null)?,
            b't' => self.literal(b"true").map(|()| Value::Bool(true))?,
            b'f' => self.literal(b"false").map(|()| Value::Bool(false))?,
            b'[' => self.list()?,
            b'{' => {
                self.object(|scanner, _| {
                    scanner.colon()?;
                    scanner.skip()
                })?;
                Value::Other("an object")
            }
            b'-' | b'0'..=b'9' => match self.number()? {
                Number::UInt(n) => Value::UInt(n),
                Number::Int(n) => Value::Int(n),
                Number::Float(x) => Value::Float(x),
            },
            _ => return None,
        })
    }

    /// An array: the strings and nulls it holds, or (from its first element of another type on,
    /// which is read as a value, its own elements stepped over) `Other`.
    fn list(&mut self) -> Option<Value<'de>> {
        let mut items = Vec::new();
        let mut other = false;
        self.array(|scanner| {
            if other {
                return scanner.skip();
            }
            match scanner.peek()? {
                b'"' => items.push(Some(scanner.string()?)),
                b'n' => {
                    scanner.literal(b"null")?;
                    items.push(None);
                }
                b'[' => {
                    scanner.array(Scanner::skip)?;
                    other = true;
                }
                _ => {
                    scanner.value()?;
                    other = true;
                }
            }
            Some(())
        })?;
        Some(if other { Value::Other("an array with a non-string element") } else { Value::StrList(items) })
    }

    /// Steps over any value, checked as serde_json checks what it ignores: its syntax, escapes
    /// and numbers' grammar, not the text of strings (surrogates, UTF-8) nor numbers' range.
    /// Containers of any depth, without recursion.
    pub fn skip(&mut self) -> Option<()> {
        // The containers open: bit d of `objects` says whether level d (below 64) is an object;
        // `deeper` holds the levels from 64 on.
        let mut depth = 0usize;
        let mut objects = 0u64;
        let mut deeper: Vec<bool> = Vec::new();
        loop {
            // A value starts here.
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    let is_object = open == b'{';
                    let close = if is_object { b'}' } else { b']' };
                    self.pos += 1;
                    if self.peek()? != close {
                        if depth < 64 {
                            objects = (objects & !(1 << depth)) | (u64::from(is_object) << depth);
                        } else {
                            deeper.push(is_object);
                        }
                        depth += 1;
                        if is_object {
                            self.skip_key()?;
                        }
                        continue;
                    }
                    self.pos += 1;
                }
                b'"' => self.skip_string()?,
                b'-' | b'0'..=b'9' => self.skip_number()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => return None,
            }
            // A value ended: close the containers it ends, or go on to the next element.
            loop {
                let Some(level) = depth.checked_sub(1) else {
                    return Some(());
                };
                let in_object = if level < 64 { objects >> level & 1 == 1 } else { deeper[level - 64] };
                match self.peek()? {
                    b',' => {
                        self.pos += 1;
                        if in_object {
                            self.skip_key()?;
                        }
                        break;
                    }
                    b'}' if in_object => {}
                    b']' if !in_object => {}
                    _ => return None,
                }
                self.pos += 1;
                depth = level;
                if level >= 64 {
                    deeper.pop();
                }
            }
        }
    }
    /// Steps over a string, escapes included (checked as serde_json checks what it ignores).
    fn skip_string(&mut self) -> Option<()> {
        let mut pos = self.pos + 1;
        loop {
            pos = self.string_stop(pos)?;
            match self.bytes[pos] {
                b'"' => {
                    self.pos = pos + 1;
                    return Some(());
                }
                b'\\' => match self.bytes.get(pos + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => pos += 2,
                    b'u' if self.bytes.get(pos + 2..pos + 6)?.iter().all(u8::is_ascii_hexdigit) => pos += 6,
                    _ => return None,
                },
                _ => return None, // a control character
            }
        }
    }

    /// An object's key (stepped over) and its colon.
    fn skip_key(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.skip_string()?;
        self.colon()
    }

    /// Steps over a number, checking its grammar only (as serde_json ignores one).
    fn skip_number(&mut self) -> Option<()> {
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
    fn number(&mut self) -> Option<Number> {
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
    use super::*;

    fn scan(text: &str) -> Option<Value<'_>> {
        let mut scanner = Scanner::new(text.as_bytes());
        let value = scanner.value()?;
        scanner.finish()?;
        Some(value)
    }

    fn serde(text: &str) -> Option<Value<'_>> {
        serde_json::from_str(text).ok()
    }

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
    fn what_serde_json_rejects_is_never_accepted() {
        for text in [
            "01",
            "1.",
            ".5",
            "+1",
            "1e",
            "1e+",
            "-",
            "--1",
            "1.5.2",
            "\"a\\\"b\"",
            "\"tab\there\"",
            "[1]",
            "[\"a\",]",
            "[,]",
            "nul",
            "tru",
            "falsy",
            "{}",
            "1e400",
            "-1e400",
            "\"unterminated",
            "[\"a\" \"b\"]",
        ] {
            let scanned = scan(text);
            assert!(scanned.is_none() || serde(text) == scanned, "{text}: {scanned:?}");
        }
    }

    #[test]
    fn escapes_decode_as_serde_json_decodes_them() {
        for text in [
            r#""a\"b""#,
            r#""\\ \/ \b \f \n \r \t""#,
            r#""Z\u00fcrich \u2013 \u2713""#,
            r#""\ud83d\ude00 a pair""#,
            r#""caf\u00E9 é""#,
            r#""\u0000 nul""#,
            r#"["x\"y", null, "plain"]"#,
        ] {
            let scanned = scan(text);
            assert!(scanned.is_some(), "{text}: the scanner failed");
            assert_eq!(scanned, serde(text), "{text}");
        }
        // serde_json rejects these, and so does the scanner.
        for text in [r#""\ud800""#, r#""\udc00 low""#, r#""\ud800\u0041""#, r#""\x41""#, r#""\u12g4""#, r#""\u12""#] {
            assert!(scan(text).is_none() && serde(text).is_none(), "{text}");
        }
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

    #[test]
    fn objects_and_skipping() {
        let body = br#" { "a" : [1, {"b": [null, true, "x"]}], "c": "d" , "e": {} } "#;
        let mut scanner = Scanner::new(body);
        let mut seen = Vec::new();
        scanner
            .object(|s, key| {
                s.colon()?;
                let is_c = key == "c";
                seen.push(key);
                if is_c {
                    assert_eq!(s.value(), Some(Value::Str("d".into())));
                    Some(())
                } else {
                    s.skip()
                }
            })
            .unwrap();
        scanner.finish().unwrap();
        assert_eq!(seen, ["a", "c", "e"]);
        for bad in [&br#"{"a": [1,]}"#[..], br#"{"a" 1}"#, br#"{"a": 1,}"#, br#"{"a": 1} x"#, br#"{"a": {"b": 1e}}"#] {
            let mut scanner = Scanner::new(bad);
            let read = scanner.object(|s, _| s.colon().and_then(|()| s.skip())).and_then(|()| scanner.finish());
            assert!(read.is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
