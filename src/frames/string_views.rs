//! String columns whose values repeat, written as Arrow string views: each distinct value's
//! bytes are stored once and every row holds a 16-byte view of them. A body's token is the
//! same on all of its hundred-odd long rows, and indicator names, pattern families and pattern
//! names come from small sets, so this makes the long frames both cheaper to build and smaller.

use polars::prelude::*;
use polars_arrow::array::{MutableBinaryViewArray, View};

use crate::short_bytes::{same_bytes, slot_of, text_bits};

/// Distinct values remembered per column, at most: past this (only a hostile stream of bodies
/// gets there) values are stored per row as any string column stores them.
const MAX_REMEMBERED: usize = 4096;

/// Slots of the direct-mapped caches of views (`catalogue`, `recent`): a power of two, several
/// per name of a service's catalogue, so that few of its names share one.
const SLOTS_LOG2: u32 = 9;
const CATALOGUE_SLOTS: usize = 1 << SLOTS_LOG2;

pub struct StringViews {
    name: PlSmallStr,
    array: MutableBinaryViewArray<str>,
    /// Views of values already stored, by their text.
    remembered: PlHashMap<Box<str>, View>,
    /// The last remembered value met in each slot, with its view: most values are found here
    /// without hashing the whole text (a collision only costs the lookup in `remembered`).
    recent: Vec<(Box<str>, View)>,
    /// Views of the catalogue's names, by the address of their text: a direct-mapped cache
    /// (a collision only stores the name again).
    catalogue: Box<[(usize, View); CATALOGUE_SLOTS]>,
    /// Bytes of the values of views pushed with `push_view` and `push_repeated`, added to the array's count at the end.
    view_bytes: usize,
}

impl StringViews {
    pub fn new(column: &str, capacity: usize) -> Self {
        Self {
            name: PlSmallStr::from_str(column),
            array: MutableBinaryViewArray::with_capacity(capacity),
            remembered: PlHashMap::default(),
            recent: Vec::new(),
            catalogue: Box::new([(0, View::default()); CATALOGUE_SLOTS]),
            view_bytes: 0,
        }
    }

    /// Stores `value` once; push the view it returns on as many rows as hold the value.
    pub fn store(&mut self, value: &str) -> View {
        self.array.push_value_into_buffer(value.as_bytes())
    }

    /// A row holding a value `store` returned.
    #[inline]
    fn push_view(&mut self, view: View) {
        self.view_bytes += view.length as usize;
        // SAFETY: the view came from `store` on this array, so it points into its own buffers;
        // its bytes are counted in `finish`.
        unsafe { self.array.views_mut().push(view) };
        if let Some(validity) = self.array.validity() {
            validity.push(true);
        }
    }

    /// `count` rows holding a value `store` returned (a body's token on all of its rows).
    #[inline]
    pub fn push_repeated(&mut self, view: View, count: usize) {
        self.view_bytes += view.length as usize * count;
        // SAFETY: as in `push_view`.
        unsafe { self.array.views_mut().extend(std::iter::repeat_n(view, count)) };
        if let Some(validity) = self.array.validity() {
            validity.extend_constant(count, true);
        }
    }

    /// A row holding a name of the catalogue: a `'static` text, known by its address.
    #[inline]
    pub fn push_static(&mut self, value: &'static str) {
        let address = value.as_ptr() as usize;
        let slot = slot_of(address as u64, SLOTS_LOG2);
        let (cached, view) = self.catalogue[slot];
        if cached == address && view.length as usize == value.len() {
            return self.push_view(view);
        }
        let view = self.store(value);
        self.catalogue[slot] = (address, view);
        self.push_view(view);
    }

    /// A row holding `value`, stored once for all the rows of the column that hold it.
    #[inline]
    pub fn push_remembered(&mut self, value: &str) {
        if value.len() <= View::MAX_INLINE_SIZE as usize {
            // Short values live inside the view itself: nothing to share.
            return self.push_view(View::new_inline(value.as_bytes()));
        }
        if self.recent.is_empty() {
            self.recent = vec![(Box::default(), View::default()); CATALOGUE_SLOTS];
        }
        let slot = slot_of(text_bits(value.as_bytes()), SLOTS_LOG2);
        let (cached, view) = &self.recent[slot];
        if same_bytes(cached.as_bytes(), value.as_bytes()) {
            let view = *view;
            return self.push_view(view);
        }
        let view = match self.remembered.get(value) {
            Some(view) => *view,
            None if self.remembered.len() < MAX_REMEMBERED => {
                let view = self.store(value);
                self.remembered.insert(value.into(), view);
                view
            }
            None => return self.array.push_value(value),
        };
        self.recent[slot] = (value.into(), view);
        self.push_view(view);
    }

    pub fn push_option_remembered(&mut self, value: Option<&str>) {
        match value {
            Some(value) => self.push_remembered(value),
            None => self.array.push_null(),
        }
    }

    pub fn finish(mut self) -> Column {
        let bytes = self.array.total_bytes_len() + self.view_bytes;
        // SAFETY: the count of `push_view`'s rows, as `push_value` would have kept it.
        unsafe { self.array.set_total_bytes_len(bytes) };
        StringChunked::with_chunk(self.name, self.array.freeze()).into_column()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_read_back_as_the_values_pushed() {
        let mut column = StringViews::new("name", 4);
        let token = column.store("a-token-longer-than-twelve-bytes");
        let short = column.store("btc");
        column.push_repeated(token, 1);
        column.push_remembered("bearish_engulfing_pattern");
        column.push_option_remembered(None);
        column.push_view(short);
        column.push_remembered("bearish_engulfing_pattern");
        column.push_view(token);
        let column = column.finish();
        let values: Vec<_> = column.str().unwrap().iter().collect();
        assert_eq!(
            values,
            [
                Some("a-token-longer-than-twelve-bytes"),
                Some("bearish_engulfing_pattern"),
                None,
                Some("btc"),
                Some("bearish_engulfing_pattern"),
                Some("a-token-longer-than-twelve-bytes"),
            ]
        );
        assert_eq!(column.null_count(), 1);
        let text: usize = values.iter().flatten().map(|s| s.len()).sum();
        // Each long value's bytes once, however many rows hold it.
        let array = column.str().unwrap().downcast_iter().next().unwrap();
        assert_eq!(array.total_bytes_len(), text);
        assert_eq!(
            array.total_buffer_len(),
            "a-token-longer-than-twelve-bytes".len() + "bearish_engulfing_pattern".len()
        );
    }
}
