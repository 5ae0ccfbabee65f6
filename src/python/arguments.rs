//! Arguments from Python: their types checked, with one wording per rule (the rules for their
//! values are in `client::config` and `sandbox`).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};

pub(super) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map_or_else(|_| "?".into(), |name| name.to_string())
}

/// An int or a float (a bool is neither here).
pub(super) fn number(name: &str, value: &Bound<'_, PyAny>) -> PyResult<f64> {
    let is_number = value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>();
    if value.is_instance_of::<PyBool>() || !is_number {
        return Err(PyTypeError::new_err(format!("{name} must be a number, got {}: {value}", type_name(value))));
    }
    value.extract()
}

/// An int (not a bool), within i64.
pub(super) fn integer(name: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!("{name} must be an int, got {}: {value}", type_name(value))));
    }
    value.extract().map_err(|_| PyValueError::new_err(format!("{name} is out of range, got {value}")))
}

/// `None` stays `None` (the setting is off).
pub(super) fn optional<T>(
    value: &Bound<'_, PyAny>,
    read: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    if value.is_none() {
        Ok(None)
    } else {
        read(value).map(Some)
    }
}
