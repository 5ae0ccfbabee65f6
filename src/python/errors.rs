//! The one mapping of `Error` onto the Python hierarchy (`defilens._exceptions`), whose
//! classes are looked up once per process; and `detached`, which runs Rust work with the GIL
//! released and turns a panic into an error instead of letting it reach the interpreter.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::error::Error;
use crate::model::Endpoint;

/// Every class `defilens._exceptions` exports, by name.
static CLASSES: PyOnceLock<HashMap<String, Py<PyType>>> = PyOnceLock::new();

fn exception_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let classes = CLASSES.get_or_try_init(py, || -> PyResult<_> {
        let module = py.import("defilens._exceptions")?;
        let names: Vec<String> = module.getattr("__all__")?.extract()?;
        names
            .into_iter()
            .map(|name| {
                let class = module.getattr(name.as_str())?.cast_into::<PyType>()?.unbind();
                Ok((name, class))
            })
            .collect()
    })?;
    let class = classes.get(name).ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err(format!("defilens._exceptions has no class {name}"))
    })?;
    Ok(class.bind(py).clone())
}

/// The exception instance for `error` (not raised): for the `_errors` of a batch, and for
/// `From<Error> for PyErr`.
pub(super) fn exception_for(py: Python<'_>, error: &Error) -> PyResult<Py<PyAny>> {
    let Some(class_name) = error.exception_class() else {
        return Ok(PyValueError::new_err(error.to_string()).into_value(py).into_any());
    };
    let class = exception_class(py, class_name)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("kind", error.kind())?;
    kwargs.set_item("token", error.token())?;
    kwargs.set_item("endpoint", error.endpoint().map(Endpoint::as_str))?;
    match error {
        Error::Api { status, body, retry_after, .. } => {
            kwargs.set_item("status", status)?;
            kwargs.set_item("body", body)?;
            kwargs.set_item("retry_after", retry_after)?;
        }
        Error::Decode { field, offset, .. } => {
            kwargs.set_item("field", field)?;
            kwargs.set_item("offset", offset)?;
        }
        _ => {}
    }
    Ok(class.call((error.to_string(),), Some(&kwargs))?.unbind())
}

impl From<Error> for PyErr {
    fn from(error: Error) -> PyErr {
        if let Error::InvalidArgument(message) = error {
            return PyValueError::new_err(message);
        }
        Python::attach(|py| match exception_for(py, &error) {
            Ok(instance) => PyErr::from_value(instance.into_bound(py)),
            Err(lookup_failed) => lookup_failed,
        })
    }
}

/// Runs Rust work with the GIL released; a panic becomes `Error::Internal`.
pub(super) fn detached<T: Send>(py: Python<'_>, work: impl FnOnce() -> Result<T, Error> + Send) -> PyResult<T> {
    let result = py.detach(|| {
        catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(Error::Internal(message))
        })
    });
    Ok(result?)
}
