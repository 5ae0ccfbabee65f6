//! The reference reader: serde visitors over serde_json, which read every valid body and say
//! where an invalid one goes wrong (the fast path hands a body here whenever it declines).

use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};

use super::routing::{read_data_field, FieldValues};
use crate::model::value::{BorrowedStr, Value};
use crate::parse::document::seed_from_visitor;
use super::general_info::GeneralInfo;
use super::pending::PendingListing;

pub(super) struct ListingDocument<'a, 'de>(pub(super) &'a mut PendingListing<'de>);

seed_from_visitor!(ListingDocument, deserialize_map);

impl<'de> Visitor<'de> for ListingDocument<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object with `data` and `generalInfo`")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            match key.as_ref() {
                "data" => {
                    pending.field = Some(("", key));
                    map.next_value_seed(ListingData(pending))?;
                    pending.saw_data = true;
                }
                "generalInfo" => {
                    pending.field = Some(("", key));
                    map.next_value_seed(GeneralInfo(pending))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            pending.field = None;
        }
        Ok(())
    }
}

struct ListingData<'a, 'de>(&'a mut PendingListing<'de>);

seed_from_visitor!(ListingData, deserialize_map);

impl<'de> Visitor<'de> for ListingData<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the token listing object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let pending = self.0;
        while let Some(BorrowedStr(key)) = map.next_key()? {
            read_data_field(pending, key, &mut SerdeValues(&mut map))?;
        }
        Ok(())
    }
}

struct SerdeValues<'a, A>(&'a mut A);

impl<'de, A: MapAccess<'de>> FieldValues<'de> for SerdeValues<'_, A> {
    type Error = A::Error;
    fn value(&mut self) -> Result<Value<'de>, A::Error> {
        self.0.next_value()
    }
    fn skip(&mut self) -> Result<(), A::Error> {
        self.0.next_value::<IgnoredAny>().map(drop)
    }
}
