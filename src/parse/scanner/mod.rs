//! The byte scanner every body is read with: a pull reader (`peek`, then read or skip what
//! comes) over the JSON of a response body, total over valid JSON. It reads the same `Value`s
//! that serde_json reads, bit for bit (strings borrowed from the body unless they hold
//! escapes), and checks what it steps over as serde_json checks what it ignores. It answers
//! `None` only where serde_json would fail the body; the reader that called it then records the
//! innermost part it was reading (`Unit`, with where it starts), and `document.rs` runs
//! serde_json over that part alone for the error's wording and offset. `tests.rs` and
//! `proptests.rs` hold the values and the failures equal to serde_json's. Numbers are read in
//! `numbers.rs`; the fast scan of a string's bytes is `string_stop/`, one module an instruction tier.

mod numbers;
mod string_stop;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use self::numbers::Number;
use self::string_stop::string_stop;
use crate::model::value::Value;
use crate::short_bytes::same_bytes;

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
        let end = string_stop(self.bytes, start)?;
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
        let mut end = string_stop(self.bytes, start)?;
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
            end = string_stop(self.bytes, end)?;
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
            pos = string_stop(self.bytes, pos)?;
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
}
