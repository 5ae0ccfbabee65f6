//! The Python module `defilens._core`: the only code that knows about Python, compiled with
//! the `python` feature. Every entry point releases the GIL around network and parsing work;
//! errors cross into Python through the one `From<Error> for PyErr` in `errors`.

mod arguments;
mod client;
mod errors;
mod parsing;
#[cfg(feature = "sandbox")]
mod sandbox;
mod ta;

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict};

use crate::client::config;
use crate::frames::FRAME_NAMES;
use crate::model::{INTERVALS, INTERVAL_MS};

/// The client's defaults, for `Client`, `AsyncClient`, the command line and the stubs.
fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let defaults = PyDict::new(py);
    defaults.set_item("base_url", config::DEFAULT_BASE_URL)?;
    defaults.set_item("timeout", config::DEFAULT_TIMEOUT_SECS)?;
    defaults.set_item("max_retries", config::DEFAULT_MAX_RETRIES)?;
    defaults.set_item("concurrency", config::DEFAULT_CONCURRENCY)?;
    defaults.set_item("max_response_bytes", config::DEFAULT_MAX_RESPONSE_BYTES)?;
    defaults.set_item("backoff", config::DEFAULT_BACKOFF_SECS)?;
    defaults.set_item("cache_max_bytes", config::DEFAULT_CACHE_MAX_BYTES)?;
    Ok(defaults)
}

/// A duration given by a user (`"5m"`, seconds, a timedelta) in seconds; `name` is the
/// argument's name in the error.
#[pyfunction]
#[pyo3(signature = (value, name="every"))]
fn parse_duration(value: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    arguments::duration_seconds(name, value)
}

/// A duration (as `parse_duration` takes it) as the grammar writes it: `7d`, `90m`, `250ms`.
#[pyfunction]
fn format_duration(value: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(crate::model::duration::format_seconds(arguments::duration_seconds("duration", value)?))
}

/// The wait in seconds after failed try number `attempt` (1-based), by the client's backoff rule
/// (`client::retry::backoff`, jitter included) between `first` and `maximum` seconds: for the
/// history's commits, which retry in Python.
#[pyfunction]
fn backoff_seconds(attempt: u32, first: f64, maximum: f64) -> PyResult<f64> {
    let seconds = |name: &str, value: f64| {
        Duration::try_from_secs_f64(value)
            .map_err(|_| pyo3::exceptions::PyValueError::new_err(format!("{name} must be seconds >= 0, got {value}")))
    };
    let (first, maximum) = (seconds("first", first)?, seconds("maximum", maximum)?);
    Ok(crate::client::retry::backoff(first, maximum, attempt, crate::client::retry::jitter()).as_secs_f64())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULTS", defaults(m.py())?)?;
    m.add("INTERVALS", INTERVALS.to_vec())?;
    let lengths: Vec<(&str, i64)> = INTERVALS.into_iter().zip(INTERVAL_MS).collect();
    m.add("INTERVAL_MS", lengths.into_py_dict(m.py())?)?;
    m.add("FRAME_NAMES", FRAME_NAMES.to_vec())?;
    let families: Vec<(&str, &str, Vec<&str>)> = crate::model::fields::family_intervals()
        .into_iter()
        .map(|(frame, name, intervals)| (frame, name, intervals.to_vec()))
        .collect();
    m.add("FAMILY_INTERVALS", families)?;
    m.add("INDICATOR_KINDS", crate::model::indicators::KINDS.to_vec())?;
    m.add("INDICATOR_RECIPES", ta::recipes(m.py())?)?;
    m.add_class::<client::Engine>()?;
    m.add_class::<client::BoundClock>()?;
    m.add_class::<client::FetchJob>()?;
    m.add_class::<client::RawBodies>()?;
    m.add_function(wrap_pyfunction!(parsing::parse_token, m)?)?;
    m.add_function(wrap_pyfunction!(parsing::parse_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(parsing::parse_markets, m)?)?;
    m.add_function(wrap_pyfunction!(parsing::parse_many, m)?)?;
    m.add_function(wrap_pyfunction!(ta::ta_series, m)?)?;
    m.add_function(wrap_pyfunction!(ta::indicator_text, m)?)?;
    m.add_function(wrap_pyfunction!(parsing::empty_frames, m)?)?;
    m.add_function(wrap_pyfunction!(parsing::frame_buffer_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(client::check_base_url, m)?)?;
    m.add_function(wrap_pyfunction!(client::is_loopback, m)?)?;
    m.add_function(wrap_pyfunction!(client::read_cache_folder, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(format_duration, m)?)?;
    m.add_function(wrap_pyfunction!(backoff_seconds, m)?)?;
    m.add("MAX_TOKEN_ID_CHARS", crate::client::url::MAX_TOKEN_ID_CHARS)?;
    #[cfg(feature = "sandbox")]
    {
        m.add_class::<sandbox::PySandbox>()?;
        m.add_function(wrap_pyfunction!(sandbox::sandbox_listing_body, m)?)?;
        m.add_function(wrap_pyfunction!(sandbox::sandbox_markets_body, m)?)?;
    }
    Ok(())
}
