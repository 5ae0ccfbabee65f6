//! `defilens.testing.Sandbox` and the bodies it serves.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::model::Endpoint;
use crate::sandbox::{self, SandboxConfig};

/// A local fake of the DeFi Lens service, served from Rust on 127.0.0.1.
#[pyclass(frozen, module = "defilens._core", name = "Sandbox")]
pub struct PySandbox {
    server: Mutex<Option<sandbox::Sandbox>>,
    url: String,
    port: u16,
}

#[pymethods]
impl PySandbox {
    #[new]
    #[pyo3(signature = (*, latency=0.0, api_key=None, seed=0, error_rate=0.0, rate_limit_rate=0.0, retry_after=1, drop_rate=0.0, truncate_rate=0.0, invalid_json_rate=0.0, host=None, port=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        latency: f64,
        api_key: Option<String>,
        seed: u64,
        error_rate: f64,
        rate_limit_rate: f64,
        retry_after: u64,
        drop_rate: f64,
        truncate_rate: f64,
        invalid_json_rate: f64,
        host: Option<String>,
        port: u16,
    ) -> PyResult<Self> {
        if !(latency.is_finite() && latency >= 0.0) {
            return Err(PyValueError::new_err(format!(
                "latency must be a non-negative number of seconds, got {latency}"
            )));
        }
        let config = SandboxConfig {
            latency: Duration::from_secs_f64(latency),
            api_key,
            seed,
            error_rate,
            rate_limit_rate,
            retry_after,
            drop_rate,
            truncate_rate,
            invalid_json_rate,
            host: host.unwrap_or_else(|| SandboxConfig::default().host),
            port,
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
