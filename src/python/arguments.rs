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

/// A duration: text such as `"5m"` or `"250ms"`, a number of seconds, or a `datetime.timedelta`,
/// checked by the core's one rule (`model::duration`). `name` is the argument's name in errors.
pub(super) fn duration_seconds(name: &str, value: &Bound<'_, PyAny>) -> PyResult<f64> {
    use crate::model::duration::{check_seconds, parse_seconds};
    let seconds = if let Ok(text) = value.extract::<String>() {
        parse_seconds(&text).map_err(|rule| PyValueError::new_err(format!("{name} {rule}, got {text:?}")))?
    } else if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a str such as '5m', seconds or a timedelta, got bool"
        )));
    } else if value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>() {
        value.extract::<f64>()?
    } else if value.hasattr("total_seconds")? && value.hasattr("days")? {
        value.call_method0("total_seconds")?.extract::<f64>()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a str such as '5m', seconds or a timedelta, got {}",
            type_name(value)
        )));
    };
    check_seconds(seconds).map_err(|rule| PyValueError::new_err(format!("{name} {rule}, got {value}")))
}
