//! `defilens.Client` and `AsyncClient` in Rust: the engine that holds the HTTP client, and the
//! batch jobs it starts.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3_polars::PyDataFrame;

use super::arguments::{integer, number, optional, type_name};
use super::errors::exception_for;
use crate::batch::{FetchOutcome, Job, RawStore};
use crate::client::clock::SharedClock;
use crate::client::{sandbox_clock_at, validate_token_id, ClientConfig, HttpClient, Settings};
use crate::frames::{self, ListingFrames};
use crate::model::Endpoint;
use crate::runtime::runtime;

/// How often a blocked call wakes up to check for Ctrl-C and draw progress.
const WAIT_SLICE: Duration = Duration::from_millis(50);

pub(super) fn listing_frames_dict<'py>(py: Python<'py>, frames: ListingFrames) -> PyResult<Bound<'py, PyDict>> {
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
    result.set_item(frames::MARKETS, PyDataFrame(outcome.markets))?;
    result.set_item(frames::LOG, PyDataFrame(outcome.log))?;
    let errors = outcome.errors.iter().map(|e| exception_for(py, e)).collect::<PyResult<Vec<_>>>()?;
    result.set_item("_errors", errors)?;
    result.set_item("_raw", Py::new(py, RawBodies { bodies: outcome.raw })?)?;
    Ok(result)
}

/// A clock other than the wall clock that a client can be bound to (a Sandbox hands out its own
/// with `_clock()`): the client then stamps `fetched_at` with that clock's time.
#[pyclass(frozen, module = "defilens._core")]
pub struct BoundClock {
    pub(super) clock: SharedClock,
}

#[pymethods]
impl BoundClock {
    /// The clock's time, in milliseconds since the epoch.
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

/// The Rust side of `defilens.Client` and `defilens.AsyncClient`: settings are resolved by
/// the Python layer (environment variables, defaults) and passed in explicitly.
#[pyclass(frozen, module = "defilens._core")]
pub struct Engine {
    client: Arc<HttpClient>,
    /// The speed of the Sandbox clock the engine follows (`follow_sandbox_clock`), else None.
    followed_clock_speed: Option<f64>,
}

#[pymethods]
impl Engine {
    /// Settings arrive as the user gave them (environment variables already resolved); their
    /// types are checked here and their values by `ClientConfig::new`.
    #[new]
    #[pyo3(signature = (*, base_url, api_key, timeout, max_retries, concurrency, rate_limit, cache_ttl, cache_max_bytes, proxy, max_response_bytes, backoff, cache_dir=None, clock=None, follow_sandbox_clock=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        base_url: String,
        api_key: Option<String>,
        timeout: &Bound<'_, PyAny>,
        max_retries: &Bound<'_, PyAny>,
        concurrency: &Bound<'_, PyAny>,
        rate_limit: &Bound<'_, PyAny>,
        cache_ttl: &Bound<'_, PyAny>,
        cache_max_bytes: &Bound<'_, PyAny>,
        proxy: Option<String>,
        max_response_bytes: &Bound<'_, PyAny>,
        backoff: &Bound<'_, PyAny>,
        cache_dir: Option<std::path::PathBuf>,
        clock: Option<PyRef<'_, BoundClock>>,
        follow_sandbox_clock: bool,
    ) -> PyResult<Self> {
        let backoff: (Bound<'_, PyAny>, Bound<'_, PyAny>) = backoff.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "backoff must be a (first, maximum) pair of seconds, got {}",
                type_name(backoff)
            ))
        })?;
        // "auto" learns the rate; any other text is a mistake worth naming.
        let rate_limit_auto = match rate_limit.extract::<String>() {
            Ok(text) if text == "auto" => true,
            Ok(text) => {
                return Err(PyValueError::new_err(format!(
                    "rate_limit must be a number of requests per second, \"auto\" or None, got {text:?}"
                )))
            }
            Err(_) => false,
        };
        let settings = Settings {
            base_url: Some(base_url),
            api_key,
            timeout: Some(number("timeout", timeout)?),
            max_retries: Some(integer("max_retries", max_retries)?),
            concurrency: Some(integer("concurrency", concurrency)?),
            rate_limit: if rate_limit_auto { None } else { optional(rate_limit, |v| number("rate_limit", v))? },
            rate_limit_auto,
            cache_ttl: optional(cache_ttl, |v| number("cache_ttl", v))?,
            cache_max_bytes: Some(integer("cache_max_bytes", cache_max_bytes)?),
            cache_dir: cache_dir.map(|dir| dir.to_string_lossy().into_owned()),
            proxy,
            max_response_bytes: Some(integer("max_response_bytes", max_response_bytes)?),
            backoff: Some((number("backoff", &backoff.0)?, number("backoff", &backoff.1)?)),
            clock: clock.map_or_else(SharedClock::wall, |bound| bound.clock.clone()),
        };
        let mut config = ClientConfig::new(settings)?;
        // Only once every setting is checked: a bad one is named before anything is sent.
        let mut followed_clock_speed = None;
        if follow_sandbox_clock {
            let (base_url, timeout) = (config.base_url.clone(), config.timeout);
            let followed = py.detach(|| runtime().block_on(sandbox_clock_at(&base_url, timeout)))?;
            followed_clock_speed = Some(followed.speed());
            config.clock = SharedClock::bound(Arc::new(followed));
        }
        let client = HttpClient::new(config)?;
        Ok(Engine { client: Arc::new(client), followed_clock_speed })
    }

    /// With `follow_sandbox_clock`: the followed clock's speed (simulated seconds a real second;
    /// 0 when it stands still). None otherwise.
    #[getter]
    fn followed_clock_speed(&self) -> Option<f64> {
        self.followed_clock_speed
    }

    /// The time on the client's clock (the wall clock unless it was bound), in ms since the epoch.
    fn now_ms(&self) -> i64 {
        self.client.now_ms()
    }

    /// Starts fetching `token_ids` (validated, duplicates dropped) and returns the running job.
    #[pyo3(signature = (token_ids, *, listing, markets))]
    fn start(&self, token_ids: Vec<String>, listing: bool, markets: bool) -> PyResult<FetchJob> {
        Ok(FetchJob { job: Job::start(self.client.clone(), token_ids, listing, markets)? })
    }

    /// The URL a request for `token_id` goes to (for tests and debugging).
    fn url_for(&self, token_id: &str, endpoint: &str) -> PyResult<String> {
        let endpoint = Endpoint::from_name(endpoint).ok_or_else(|| {
            PyValueError::new_err(format!("endpoint must be 'listing' or 'markets', got {endpoint:?}"))
        })?;
        validate_token_id(token_id)?;
        Ok(self.client.url_for(token_id, endpoint))
    }

    fn clear_cache(&self) {
        self.client.clear_cache();
    }

    /// What the disk cache had to ignore since the last call (damaged or foreign entries, a
    /// failed write), for `Client` to warn about.
    fn take_cache_warnings(&self) -> Vec<String> {
        self.client.take_cache_warnings()
    }

    /// The rate requests go at now (requests a second): the fixed `rate_limit`, what
    /// `rate_limit="auto"` has learned so far, or None.
    #[getter]
    fn rate_limit_now(&self) -> Option<f64> {
        self.client.rate_limit_now()
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
            Some(Err(error)) => Err(error.into()),
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
            });
        }));
    }
}

/// The base URL as requests will use it; ValueError for anything but an http(s) URL with a host.
#[pyfunction]
pub(super) fn check_base_url(base_url: &Bound<'_, PyAny>) -> PyResult<String> {
    let text: String = base_url.extract().map_err(|_| {
        PyTypeError::new_err(format!("base_url must be a str (or a Sandbox), got {}", type_name(base_url)))
    })?;
    Ok(crate::client::config::check_base_url(&text)?)
}

/// Whether `url` points at this machine (`localhost` or a loopback address): where the client
/// sends no key warnings and needs no key. False for anything that is not a URL.
#[pyfunction]
pub(super) fn is_loopback(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|url| crate::client::url::is_loopback_url(&url))
}

/// A disk cache folder (`Client(cache_dir=...)`) as a recording for `Sandbox.replay`:
/// `(endpoints, tokens, fetched_at_ms, bodies, start_ms)`, starting when the last entry arrived
/// (so that every entry is served). ValueError for a folder that is not a cache.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(super) fn read_cache_folder(
    py: Python<'_>,
    path: std::path::PathBuf,
) -> PyResult<(Vec<&'static str>, Vec<String>, Vec<i64>, Vec<Py<pyo3::types::PyBytes>>, i64)> {
    let (entries, _skipped) =
        py.detach(|| crate::client::disk_cache::read_folder(&path)).map_err(PyValueError::new_err)?;
    if entries.is_empty() {
        return Err(PyValueError::new_err(format!(
            "the cache folder {:?} holds no responses",
            path.display().to_string()
        )));
    }
    let start_ms = entries.iter().map(|e| e.fetched_at).max().unwrap_or(0);
    let mut endpoints = Vec::with_capacity(entries.len());
    let mut tokens = Vec::with_capacity(entries.len());
    let mut times = Vec::with_capacity(entries.len());
    let mut bodies = Vec::with_capacity(entries.len());
    for entry in entries {
        endpoints.push(entry.endpoint.as_str());
        tokens.push(entry.token);
        times.push(entry.fetched_at);
        bodies.push(pyo3::types::PyBytes::new(py, &entry.body).unbind());
    }
    Ok((endpoints, tokens, times, bodies, start_ms))
}
