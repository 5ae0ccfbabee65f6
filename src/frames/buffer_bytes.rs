//! The memory a frame's Arrow buffers really hold, for the memory benchmark: polars'
//! `estimated_size()` counts a string column's characters, not its 16-byte views, and counts a
//! string shared by many rows once per row.

use std::collections::HashSet;

use polars::prelude::*;
use polars_arrow::array::{Array, BinaryViewArrayGeneric, ListArray, PrimitiveArray, Utf8ViewArray};

/// Bytes of every buffer of every column of `frame`, each shared buffer counted once.
pub fn buffer_bytes(frame: &DataFrame) -> usize {
    let mut seen = HashSet::new();
    frame
        .columns()
        .iter()
        .map(|column| {
            // The chunks are the physical arrays (an Enum's are its u8 indices).
            let series = column.as_materialized_series();
            series.chunks().iter().map(|array| array_bytes(array.as_ref(), &mut seen)).sum::<usize>()
        })
        .sum()
}

fn array_bytes(array: &dyn Array, seen: &mut HashSet<usize>) -> usize {
    let validity = array.validity().map_or(0, |bits| bits.len().div_ceil(8));
    let any = array.as_any();
    let values = if let Some(strings) = any.downcast_ref::<Utf8ViewArray>() {
        views_bytes(strings, seen)
    } else if let Some(list) = any.downcast_ref::<ListArray<i64>>() {
        list.offsets().len() * 8 + array_bytes(list.values().as_ref(), seen)
    } else if let Some(numbers) = any.downcast_ref::<PrimitiveArray<i64>>() {
        numbers.len() * 8
    } else if let Some(numbers) = any.downcast_ref::<PrimitiveArray<f64>>() {
        numbers.len() * 8
    } else if let Some(numbers) = any.downcast_ref::<PrimitiveArray<u8>>() {
        numbers.len()
    } else if let Some(numbers) = any.downcast_ref::<PrimitiveArray<u32>>() {
        numbers.len() * 4
    } else {
        // Booleans (and anything else): a bit or more a row.
        array.len().div_ceil(8)
    };
    values + validity
}

fn views_bytes(strings: &BinaryViewArrayGeneric<str>, seen: &mut HashSet<usize>) -> usize {
    let shared: usize =
        strings.data_buffers().iter().filter(|buffer| seen.insert(buffer.as_ptr() as usize)).map(|b| b.len()).sum();
    strings.len() * 16 + shared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_of_a_parse_is_measured() {
        let body = String::from_utf8(crate::model::samples::LISTING.to_vec()).unwrap();
        let inputs = [crate::parse::ListingBody { body: body.as_bytes(), token: Some("t"), fetched_at: Some(1) }];
        let (frames, _) = crate::parse::parse_listings(&inputs);
        for (name, frame) in frames.into_named() {
            let bytes = buffer_bytes(&frame);
            assert!(frame.height() == 0 || bytes >= frame.height() * frame.width(), "{name}: {bytes}");
        }
    }

    #[test]
    fn views_and_shared_strings_are_counted_once() {
        let long = "a string longer than twelve bytes";
        let frame = df!("s" => [long; 1000], "x" => [1.5f64; 1000]).unwrap();
        let bytes = buffer_bytes(&frame);
        // 16-byte views, the long string at most once per buffer written, 8-byte floats.
        assert!(bytes >= 1000 * 16 + 1000 * 8, "{bytes}");
        assert!(bytes <= 1000 * 16 + 1000 * 8 + 1000 * long.len(), "{bytes}");
    }
}
