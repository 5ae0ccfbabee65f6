//! The state of one listing body on its way through the reader: its rows so far, the field
//! being read (for error messages and drift rows), and whether `data` was seen. Its own file so
//! that the listing reader and the generalInfo reader can both fill it without importing each
//! other.

use crate::parse::document::{field_label, FieldPath};
use crate::frames::{DriftRow, ListingRows};
use crate::model::value::Mismatch;

/// One body on its way through the visitors.
pub(super) struct PendingListing<'de> {
    pub(super) saw_data: bool,
    pub(super) rows: ListingRows<'de>,
    pub(super) field: FieldPath<'de>,
}

impl<'de> PendingListing<'de> {
    pub(super) fn new(rows: ListingRows<'de>) -> Self {
        Self { saw_data: false, rows, field: None }
    }

    /// The value of the field being read did not fit: its cell stays null, a drift row says why.
    pub(super) fn drifted(&mut self, mismatch: Mismatch) {
        let field = field_label(&self.field).unwrap_or_default();
        self.rows.drift.push(DriftRow { field, mismatch });
    }
}
