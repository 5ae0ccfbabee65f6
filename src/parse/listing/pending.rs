//! The state of one listing body on its way through the reader: its rows so far, whether
//! `data` was seen, and, if reading failed, the field it failed in (for the error). Its own
//! file so that the `data` reader and the generalInfo reader can both fill it without
//! importing each other.

use std::borrow::Cow;

use crate::frames::{DriftRow, ListingRows};
use crate::model::value::Mismatch;
use crate::parse::document::FieldPath;

/// One body on its way through the reader.
pub(super) struct PendingListing<'de> {
    pub(super) saw_data: bool,
    pub(super) rows: ListingRows<'de>,
    /// The field reading failed in: set on the way out of a failed read, by the innermost
    /// reader that knows it (`label`).
    pub(super) field: FieldPath<'de>,
}

impl<'de> PendingListing<'de> {
    pub(super) fn new(rows: ListingRows<'de>) -> Self {
        Self { saw_data: false, rows, field: None }
    }

    /// The value of `section.key` did not fit: its cell stays null, a drift row says why.
    pub(super) fn drifted(&mut self, section: &str, key: &str, mismatch: Mismatch) {
        let field = if section.is_empty() { key.to_owned() } else { format!("{section}.{key}") };
        self.rows.drift.push(DriftRow { field, mismatch });
    }

    /// Reading failed in `section.key`, unless a reader inside it said where first. Returns
    /// `None`, the failure, for the caller to pass on.
    #[cold]
    pub(super) fn failed_in<T>(&mut self, section: &'static str, key: impl Into<Cow<'de, str>>) -> Option<T> {
        if self.field.is_none() {
            self.field = Some((section, key.into()));
        }
        None
    }
}
