//! `defilens.testing.Sandbox` and the bodies it serves.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::arguments::{integer, number};
use crate::client::config::int_in;
use crate::model::Endpoint;
use crate::sandbox::{self, SandboxConfig};

/// The longest latency a Sandbox adds, in seconds.
const MAX_LATENCY_SECS: f64 = 3_600.0;

/// A local fake of the DeFi Lens service, served from Rust on 127.0.0.1.
#[pyclass(frozen, module = "defilens._core", name = "Sandbox")]
pub struct PySandbox {
    server: Mutex<Option<sandbox::Sandbox>>,
    url: String,
    port: u16,
}

#[pymethods]
impl PySandbox {
    /// Numbers are checked here (TypeError / ValueError naming the argument and its range);
    /// the fault rates by `SandboxConfig`.
    #[new]
    #[pyo3(signature = (*, latency=None, api_key=None, seed=None, error_rate=0.0, rate_limit_rate=0.0, retry_after=None, drop_rate=0.0, truncate_rate=0.0, invalid_json_rate=0.0, host=None, port=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        latency: Option<&Bound<'_, PyAny>>,
        api_key: Option<String>,
        seed: Option<&Bound<'_, PyAny>>,
        error_rate: f64,
        rate_limit_rate: f64,
        retry_after: Option<&Bound<'_, PyAny>>,
        drop_rate: f64,
        truncate_rate: f64,
        invalid_json_rate: f64,
        host: Option<String>,
        port: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let defaults = SandboxConfig::default();
        let latency = match latency {
            None => defaults.latency,
            Some(value) => {
                let seconds = number("latency", value)?;
                if !(seconds.is_finite() && (0.0..=MAX_LATENCY_SECS).contains(&seconds)) {
                    return Err(PyValueError::new_err(format!(
                        "latency must be a number of seconds from 0 to {MAX_LATENCY_SECS}, got {seconds}"
                    )));
                }
                Duration::from_secs_f64(seconds)
            }
        };
        let int = |name: &str, value: Option<&Bound<'_, PyAny>>, default: i64, max: i64| -> PyResult<i64> {
            match value {
                None => Ok(default),
                Some(value) => Ok(int_in(name, integer(name, value)?, 0, max)?),
            }
        };
        let config = SandboxConfig {
            latency,
            api_key,
            seed: int("seed", seed, defaults.seed as i64, i64::MAX)? as u64,
            error_rate,
            rate_limit_rate,
            retry_after: int("retry_after", retry_after, defaults.retry_after as i64, 86_400)? as u64,
            drop_rate,
            truncate_rate,
            invalid_json_rate,
            host: host.unwrap_or(defaults.host),
            port: int("port", port, 0, u16::MAX.into())? as u16,
        };
        let server = py.detach(|| sandbox::Sandbox::start(config)).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => PyValueError::new_err(e.to_string()),
            _ => PyRuntimeError::new_err(format!("could not start the Sandbox: {e}")),
        })?;
        Ok(PySandbox { url: server.url(), port: server.port(), server: Mutex::new(Some(server)) })
    }

    /// Base URL to pass as `base_url=`.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// Number of requests served so far.
    #[getter]
    fn requests(&self) -> u64 {
        self.server.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map_or(0, |s| s.requests())
    }

    /// Stops serving. Idempotent.
    fn stop(&self, py: Python<'_>) {
        let server = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut server) = server {
            py.detach(move || server.stop());
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.stop(py);
        false
    }

    fn __repr__(&self) -> String {
        format!("Sandbox(url={:?})", self.url)
    }
}

/// The body the Sandbox serves for a listing request (deterministic in seed and token).
#[pyfunction]
#[pyo3(signature = (token_id, seed=0))]
pub(super) fn sandbox_listing_body(token_id: &str, seed: u64) -> String {
    sandbox::body(seed, Endpoint::Listing, token_id)
}

/// The body the Sandbox serves for a markets request.
#[pyfunction]
#[pyo3(signature = (token_id, seed=0))]
pub(super) fn sandbox_markets_body(token_id: &str, seed: u64) -> String {
    sandbox::body(seed, Endpoint::Markets, token_id)
}
