//! The Python module `defilens._core`: the only file that knows about Python.
//!
//! Every entry point releases the GIL around network and parsing work, turns `Error` into the
//! package's exception hierarchy in one place (`to_py_err`), and turns a Rust panic into
//! `DefiLensError` rather than letting it reach the interpreter.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3_polars::PyDataFrame;

use crate::error::{Endpoint, Error};
use crate::fetch::{dedupe, FetchOutcome, Job};
use crate::raw_store::RawStore;
use crate::flatten::{self, ListingBody, MarketsBody};
use crate::frames::ListingFrames;
use crate::http::{validate_token_id, ClientConfig, HttpClient};
use crate::retry::RetryPolicy;
use crate::sandbox::{self, SandboxConfig};

/// How often a blocked call wakes up to check for Ctrl-C and draw progress.
const WAIT_SLICE: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------------
// Errors

fn exception_class(error: &Error) -> &'static str {
    match error {
        Error::Api { status, .. } => match status {
            400 => "BadRequestError",
            401 => "AuthenticationError",
            402 => "RequestFailedError",
            403 => "PermissionDeniedError",
            404 => "NotFoundError",
            409 => "ConflictError",
            429 => "RateLimitError",
            500..=599 => "ServerError",
            _ => "APIError",
        },
        Error::Timeout { .. } => "TimeoutError",
        Error::Connection { .. } => "ConnectionError",
        Error::Decode { .. } => "DecodeError",
        Error::InvalidArgument(_) | Error::Internal(_) => "DefiLensError",
    }
}

/// Builds the exception instance for `error` (not raised).
fn exception_for(py: Python<'_>, error: &Error) -> PyResult<Py<PyAny>> {
    let module = py.import("defilens._exceptions")?;
    let class = module.getattr(exception_class(error))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("kind", error.kind())?;
    kwargs.set_item("token", error.token())?;
    kwargs.set_item("endpoint", error.endpoint().map(Endpoint::as_str))?;
    match error {
        Error::Api { status, body, retry_after, .. } => {
            kwargs.set_item("status", status)?;
            kwargs.set_item("body", body)?;
            if *status == 429 {
                kwargs.set_item("retry_after", retry_after)?;
            }
        }
        Error::Decode { field, offset, .. } => {
            kwargs.set_item("field", field)?;
            kwargs.set_item("offset", offset)?;
        }
        _ => {}
    }
    Ok(class.call((error.to_string(),), Some(&kwargs))?.unbind())
}

fn to_py_err(error: Error) -> PyErr {
    if let Error::InvalidArgument(message) = error {
        return PyValueError::new_err(message);
    }
    Python::attach(|py| match exception_for(py, &error) {
        Ok(instance) => PyErr::from_value(instance.into_bound(py)),
        Err(import_failed) => import_failed,
    })
}

/// Runs Rust work with the GIL released; a panic becomes `Error::Internal`.
fn detached<T: Send>(py: Python<'_>, work: impl FnOnce() -> Result<T, Error> + Send) -> PyResult<T> {
    py.detach(|| {
        catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(Error::Internal(message))
        })
    })
    .map_err(to_py_err)
}

// ---------------------------------------------------------------------------------------------
// Frames to Python

fn listing_frames_dict<'py>(py: Python<'py>, frames: ListingFrames) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, frame) in frames.into_named() {
        dict.set_item(name, PyDataFrame(frame))?;
    }
    Ok(dict)
}

/// Response bodies kept for `Frames.raw` (compressed), parsed only when asked for.
#[pyclass(frozen, module = "defilens._core")]
pub struct RawBodies {
    bodies: RawStore,
}

#[pymethods]
impl RawBodies {
    fn __len__(&self) -> usize {
        self.bodies.len()
    }

    /// Bytes held for the bodies (they are kept compressed).
    fn stored_bytes(&self) -> usize {
        self.bodies.stored_bytes()
    }

    /// `[(token, endpoint, body_bytes), ...]` in fetch order.
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = self
            .bodies
            .iter()
            .map(|(token, endpoint, body)| (token, endpoint.as_str(), PyBytes::new(py, &body)))
            .map(|t| t.into_pyobject(py))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }
}

fn outcome_to_py<'py>(py: Python<'py>, outcome: FetchOutcome) -> PyResult<Bound<'py, PyDict>> {
    let result = listing_frames_dict(py, outcome.listing)?;
    result.set_item("markets", PyDataFrame(outcome.markets))?;
    result.set_item("log", PyDataFrame(outcome.log))?;
    let errors = outcome.errors.iter().map(|e| exception_for(py, e)).collect::<PyResult<Vec<_>>>()?;
    result.set_item("_errors", errors)?;
    result.set_item("_raw", Py::new(py, RawBodies { bodies: outcome.raw })?)?;
    Ok(result)
}

// ---------------------------------------------------------------------------------------------
// Client

/// The Rust side of `defilens.Client` and `defilens.AsyncClient`: settings are resolved by
/// the Python layer (environment variables, defaults) and passed in explicitly.
#[pyclass(frozen, module = "defilens._core")]
pub struct Engine {
    client: Arc<HttpClient>,
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (*, base_url, api_key, timeout, max_retries, concurrency, rate_limit, cache_ttl, proxy, max_response_bytes, backoff))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        base_url: String,
        api_key: Option<String>,
        timeout: f64,
        max_retries: u32,
        concurrency: usize,
        rate_limit: Option<f64>,
        cache_ttl: Option<f64>,
        proxy: Option<String>,
        max_response_bytes: usize,
        backoff: (f64, f64),
    ) -> PyResult<Self> {
        let seconds = |name: &str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(Duration::from_secs_f64(value))
            } else {
                Err(PyValueError::new_err(format!("{name} must be a positive number of seconds, got {value}")))
            }
        };
        let config = ClientConfig {
            base_url,
            api_key,
            timeout: seconds("timeout", timeout)?,
            retry: RetryPolicy {
                max_retries,
                initial_delay: seconds("backoff", backoff.0)?,
                max_delay: seconds("backoff", backoff.1)?,
                ..RetryPolicy::default()
            },
            concurrency,
            rate_limit,
            cache_ttl: cache_ttl.map(|ttl| seconds("cache_ttl", ttl)).transpose()?,
            proxy,
            max_response_bytes,
        };
        let client = HttpClient::new(config).map_err(to_py_err)?;
        Ok(Engine { client: Arc::new(client) })
    }

    /// Starts fetching `token_ids` (validated, duplicates dropped) and returns the running job.
    #[pyo3(signature = (token_ids, *, listing, markets))]
    fn start(&self, token_ids: Vec<String>, listing: bool, markets: bool) -> PyResult<FetchJob> {
        for id in &token_ids {
            validate_token_id(id).map_err(to_py_err)?;
        }
        let ids = dedupe(token_ids);
        Ok(FetchJob { job: Job::spawn(self.client.clone(), ids, listing, markets) })
    }

    /// The URL a request for `token_id` goes to (for tests and debugging).
    fn url_for(&self, token_id: &str, endpoint: &str) -> PyResult<String> {
        let endpoint = match endpoint {
            "listing" => Endpoint::Listing,
            "markets" => Endpoint::Markets,
            other => return Err(PyValueError::new_err(format!("endpoint must be 'listing' or 'markets', got {other:?}"))),
        };
        validate_token_id(token_id).map_err(to_py_err)?;
        Ok(self.client.url_for(token_id, endpoint))
    }

    fn clear_cache(&self) {
        self.client.clear_cache();
    }
}

/// A batch running in Rust.
#[pyclass(frozen, module = "defilens._core")]
pub struct FetchJob {
    job: Job,
}

#[pymethods]
impl FetchJob {
    /// Blocks until the batch ends, with the GIL released. Checks for Ctrl-C every 50 ms
    /// (cancelling the batch and raising KeyboardInterrupt) and calls `progress(done, total)`
    /// whenever the count changes.
    #[pyo3(signature = (progress=None))]
    fn wait<'py>(&self, py: Python<'py>, progress: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyDict>> {
        let mut reported = (usize::MAX, usize::MAX);
        loop {
            let finished = py.detach(|| self.job.wait(WAIT_SLICE));
            if let Err(interrupt) = py.check_signals() {
                self.job.cancel();
                return Err(interrupt);
            }
            if let Some(callback) = &progress {
                let now = self.job.progress();
                if now != reported {
                    callback.call1(now)?;
                    reported = now;
                }
            }
            if finished {
                return self.result(py);
            }
        }
    }

    /// The outcome of a finished batch; raises RuntimeError before it finished.
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        match self.job.take() {
            Some(Ok(outcome)) => outcome_to_py(py, outcome),
            Some(Err(error)) => Err(to_py_err(error)),
            None => Err(PyRuntimeError::new_err("the batch has not finished, or its result was already taken")),
        }
    }

    fn done(&self) -> bool {
        self.job.is_finished()
    }

    /// (finished exchanges, all exchanges)
    fn progress(&self) -> (usize, usize) {
        self.job.progress()
    }

    fn cancel(&self) {
        self.job.cancel();
    }

    /// Calls `callback()` from a Rust thread when the batch ends (at once if it has).
    fn add_done_callback(&self, callback: Py<PyAny>) {
        self.job.on_done(Box::new(move || {
            Python::attach(|py| {
                if let Err(error) = callback.call0(py) {
                    error.write_unraisable(py, None);
                }
            })
        }));
    }
}

// ---------------------------------------------------------------------------------------------
// Offline parsing

enum BodyBytes<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl BodyBytes<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            BodyBytes::Borrowed(b) => b,
            BodyBytes::Owned(v) => v,
        }
    }
}

fn body_bytes<'a>(py: Python<'_>, body: &'a Bound<'_, PyAny>) -> PyResult<BodyBytes<'a>> {
    if let Ok(bytes) = body.cast::<PyBytes>() {
        return Ok(BodyBytes::Borrowed(bytes.as_bytes()));
    }
    if let Ok(text) = body.cast::<PyString>() {
        return match text.to_cow() {
            Ok(text) => Ok(BodyBytes::Owned(text.into_owned().into_bytes())),
            Err(_) => Err(to_py_err(Error::Decode {
                token: None,
                endpoint: Endpoint::Listing,
                field: None,
                offset: None,
                message: "the body is a str that cannot be encoded as UTF-8 (it holds a lone surrogate)".into(),
            })),
        };
    }
    if let Ok(array) = body.cast::<PyByteArray>() {
        return Ok(BodyBytes::Owned(array.to_vec()));
    }
    let _ = py;
    Err(PyTypeError::new_err(format!(
        "a response body must be bytes or str, got {}",
        body.get_type().name()?
    )))
}

fn optional_token(token_id: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match token_id {
        None => Ok(None),
        Some(value) if value.is_none() => Ok(None),
        Some(value) => {
            let id: String = value
                .extract()
                .map_err(|_| PyTypeError::new_err(format!("token_id must be a str, got {}", value.get_type().name().map(|n| n.to_string()).unwrap_or_default())))?;
            validate_token_id(&id).map_err(to_py_err)?;
            Ok(Some(id))
        }
    }
}

/// Parses one listing body into the listing frames (`dict[str, DataFrame]`).
#[pyfunction]
#[pyo3(signature = (body, token_id=None, fetched_at_ms=None))]
fn parse_token<'py>(
    py: Python<'py>,
    body: Bound<'py, PyAny>,
    token_id: Option<Bound<'py, PyAny>>,
    fetched_at_ms: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let token = optional_token(token_id.as_ref())?;
    let bytes = body_bytes(py, &body)?;
    let slice = bytes.as_slice();
    let frames = detached(py, || {
        let input = ListingBody { body: slice, token: token.as_deref(), fetched_at: fetched_at_ms };
        let (frames, mut results) = flatten::parse_listings(std::slice::from_ref(&input));
        results.pop().expect("one result per body")?;
        Ok(frames)
    })?;
    listing_frames_dict(py, frames)
}

/// Parses many listing bodies into one set of frames in one call.
#[pyfunction]
#[pyo3(signature = (bodies, token_ids=None, fetched_at_ms=None))]
fn parse_tokens<'py>(
    py: Python<'py>,
    bodies: Vec<Bound<'py, PyAny>>,
    token_ids: Option<Vec<Option<Bound<'py, PyAny>>>>,
    fetched_at_ms: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let tokens: Vec<Option<String>> = match &token_ids {
        Some(ids) => {
            if ids.len() != bodies.len() {
                return Err(PyValueError::new_err(format!(
                    "got {} bodies but {} token_ids",
                    bodies.len(),
                    ids.len()
                )));
            }
            ids.iter().map(|id| optional_token(id.as_ref())).collect::<PyResult<_>>()?
        }
        None => vec![None; bodies.len()],
    };
    let bytes = bodies.iter().map(|b| body_bytes(py, b)).collect::<PyResult<Vec<_>>>()?;
    let inputs: Vec<ListingBody> = bytes
        .iter()
        .zip(&tokens)
        .map(|(b, token)| ListingBody { body: b.as_slice(), token: token.as_deref(), fetched_at: fetched_at_ms })
        .collect();
    let frames = detached(py, || {
        let (frames, results) = flatten::parse_listings(&inputs);
        for result in results {
            result?;
        }
        Ok(frames)
    })?;
    listing_frames_dict(py, frames)
}

/// Parses one markets body into the markets frame. Returns (frame, total).
#[pyfunction]
#[pyo3(signature = (body, token_id, fetched_at_ms=None))]
fn parse_markets<'py>(
    py: Python<'py>,
    body: Bound<'py, PyAny>,
    token_id: Bound<'py, PyAny>,
    fetched_at_ms: Option<i64>,
) -> PyResult<Bound<'py, PyTuple>> {
    let token = optional_token(Some(&token_id))?
        .ok_or_else(|| PyTypeError::new_err("parse_markets needs a token_id (str)"))?;
    let bytes = body_bytes(py, &body)?;
    let slice = bytes.as_slice();
    let (frame, total) = detached(py, || {
        let input = MarketsBody { body: slice, token: &token, fetched_at: fetched_at_ms };
        let (frame, mut results) = flatten::parse_markets(std::slice::from_ref(&input));
        let summary = results.pop().expect("one result per body")?;
        Ok((frame, summary.total))
    })?;
    PyTuple::new(py, [PyDataFrame(frame).into_pyobject(py)?, total.into_pyobject(py)?.into_any()])
}

/// The frames of an empty result, with their full schemas.
#[pyfunction]
fn empty_frames(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let result = listing_frames_dict(py, flatten::empty_listing_frames())?;
    result.set_item("markets", PyDataFrame(flatten::empty_markets_frame()))?;
    result.set_item("log", PyDataFrame(crate::frames::log_frame(&[])))?;
    Ok(result)
}

// ---------------------------------------------------------------------------------------------
// Sandbox

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
            return Err(PyValueError::new_err(format!("latency must be a non-negative number of seconds, got {latency}")));
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
        let server = py
            .detach(|| sandbox::Sandbox::start(config))
            .map_err(|e| match e.kind() {
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
fn sandbox_listing_body(token_id: &str, seed: u64) -> String {
    sandbox::listing_body(seed, token_id)
}

/// The body the Sandbox serves for a markets request.
#[pyfunction]
#[pyo3(signature = (token_id, seed=0))]
fn sandbox_markets_body(token_id: &str, seed: u64) -> String {
    sandbox::markets_body(seed, token_id)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_BASE_URL", crate::http::DEFAULT_BASE_URL)?;
    m.add("DEFAULT_MAX_RESPONSE_BYTES", crate::http::DEFAULT_MAX_RESPONSE_BYTES)?;
    m.add("INTERVALS", crate::model::INTERVALS.to_vec())?;
    m.add_class::<Engine>()?;
    m.add_class::<FetchJob>()?;
    m.add_class::<RawBodies>()?;
    m.add_class::<PySandbox>()?;
    m.add_function(wrap_pyfunction!(parse_token, m)?)?;
    m.add_function(wrap_pyfunction!(parse_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(parse_markets, m)?)?;
    m.add_function(wrap_pyfunction!(empty_frames, m)?)?;
    m.add_function(wrap_pyfunction!(sandbox_listing_body, m)?)?;
    m.add_function(wrap_pyfunction!(sandbox_markets_body, m)?)?;
    Ok(())
}
