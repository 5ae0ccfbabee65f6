//! `defilens.testing.Sandbox` and the bodies it serves.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use pyo3_polars::PyDataFrame;

use super::arguments::{duration_seconds, integer, number};
use crate::client::clock::SharedClock;
use crate::client::config::int_in;
use crate::model::timestamp::parse_timestamp_ms;
use crate::model::{Endpoint, INTERVALS};
use crate::sandbox::candles_frame::candles_frame;
use crate::sandbox::{self, ClockConfig, Recording, SandboxConfig};

/// The longest latency a Sandbox adds, in seconds.
const MAX_LATENCY_SECS: f64 = 3_600.0;

/// A local fake of the DeFi Lens service, served from Rust on 127.0.0.1.
#[pyclass(frozen, subclass, module = "defilens._core", name = "Sandbox")]
pub struct PySandbox {
    server: Mutex<Option<sandbox::Sandbox>>,
    url: String,
    port: u16,
    seed: u64,
}

/// A time given as ISO 8601 text or a `datetime` (naive ones are taken as UTC), in ms.
fn time_ms(name: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = value.py();
    if value.is_instance_of::<PyString>() {
        let text: String = value.extract()?;
        return parse_timestamp_ms(&text).map_err(|reason| {
            PyValueError::new_err(format!(
                "{name} must be a time such as \"2026-01-01T00:00:00Z\" ({reason}), got {text:?}"
            ))
        });
    }
    let datetime = py.import("datetime")?;
    if !value.is_instance(&datetime.getattr("datetime")?)? {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a datetime or ISO 8601 text such as \"2026-01-01T00:00:00Z\", got {}",
            value.get_type().name()?
        )));
    }
    let value = if value.getattr("tzinfo")?.is_none() {
        let utc = datetime.getattr("timezone")?.getattr("utc")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("tzinfo", utc)?;
        value.call_method("replace", (), Some(&kwargs))?
    } else {
        value.clone()
    };
    let seconds: f64 = value.call_method0("timestamp")?.extract()?;
    Ok((seconds * 1000.0).round() as i64)
}

/// `(endpoints, tokens, fetched_at_ms, bodies, start_ms)`: what `defilens.testing.Sandbox.replay`
/// reads from a recording and hands down.
fn recording_of(value: &Bound<'_, PyAny>) -> PyResult<Recording> {
    type Lists = (Vec<String>, Vec<String>, Vec<i64>, Vec<Vec<u8>>, i64);
    let (endpoints, tokens, times, bodies, start_ms): Lists = value.extract()?;
    let mut recording = Recording::starting_at(start_ms);
    for (((endpoint, token), at), body) in endpoints.into_iter().zip(tokens).zip(times).zip(bodies) {
        let endpoint = Endpoint::from_name(&endpoint).ok_or_else(|| {
            PyValueError::new_err(format!("a recorded endpoint must be listing or markets, got {endpoint:?}"))
        })?;
        recording.add(endpoint, token, at, bytes::Bytes::from(body));
    }
    if recording.len() == 0 {
        return Err(PyValueError::new_err("the recording holds no bodies"));
    }
    Ok(recording.seal())
}

fn datetime_of(py: Python<'_>, ms: i64) -> PyResult<Py<PyAny>> {
    let datetime = py.import("datetime")?;
    let utc = datetime.getattr("timezone")?.getattr("utc")?;
    let class = datetime.getattr("datetime")?;
    let seconds = ms.div_euclid(1000) as f64;
    let moment = class.call_method1("fromtimestamp", (seconds, utc))?;
    let timedelta = datetime.getattr("timedelta")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("milliseconds", ms.rem_euclid(1000))?;
    Ok(moment.add(timedelta.call((), Some(&kwargs))?)?.unbind())
}

impl PySandbox {
    fn with_server<T>(&self, action: impl FnOnce(&sandbox::Sandbox) -> T) -> PyResult<T> {
        let server = self.server.lock().unwrap_or_else(|p| p.into_inner());
        match server.as_ref() {
            Some(server) => Ok(action(server)),
            None => Err(PyRuntimeError::new_err("this Sandbox is stopped; start a new one")),
        }
    }
}

#[pymethods]
impl PySandbox {
    /// Numbers are checked here (TypeError / ValueError naming the argument and its range);
    /// the fault rates by `SandboxConfig`.
    #[new]
    #[pyo3(signature = (*, latency=None, api_key=None, seed=None, error_rate=0.0, rate_limit_rate=0.0, retry_after=None, drop_rate=0.0, truncate_rate=0.0, invalid_json_rate=0.0, host=None, port=None, now=None, speed=None, max_rps=None, rate_headers=true, repaint_rate=0.0, _recording=None))]
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
        now: Option<&Bound<'_, PyAny>>,
        speed: Option<&Bound<'_, PyAny>>,
        max_rps: Option<&Bound<'_, PyAny>>,
        rate_headers: bool,
        repaint_rate: f64,
        _recording: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let recording = _recording.map(recording_of).transpose()?;
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
            clock: ClockConfig {
                // A replay starts where its recording starts, unless told otherwise.
                start_ms: match now {
                    Some(now) => Some(time_ms("now", now)?),
                    None => recording.as_ref().map(|r| r.start_ms()),
                },
                speed: speed.map(|speed| number("speed", speed)).transpose()?,
            },
            recording: recording.map(Arc::new),
            max_rps: max_rps.map(|rate| number("max_rps", rate)).transpose()?,
            rate_headers,
            repaint_rate,
        };
        let seed = config.seed;
        let server = py.detach(|| sandbox::Sandbox::start(config)).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => PyValueError::new_err(e.to_string()),
            _ => PyRuntimeError::new_err(format!("could not start the Sandbox: {e}")),
        })?;
        Ok(PySandbox { url: server.url(), port: server.port(), seed, server: Mutex::new(Some(server)) })
    }

    /// The ids with realistic levels, tickers and categories (`bitcoin`, `ethereum`, `tether`,
    /// ...); every other lowercase slug is served as a plausible small or mid cap of its own.
    #[classattr]
    fn known_ids() -> Vec<&'static str> {
        sandbox::known_ids()
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

    /// The Sandbox's current time (UTC): the wall clock, or the simulated clock given by `now=`.
    #[getter]
    fn now(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let ms = self.with_server(|server| server.now_ms())?;
        datetime_of(py, ms)
    }

    /// The Sandbox's clock for a client to stamp its responses with (`Client(clock=sandbox)`).
    fn _clock(&self) -> PyResult<super::client::BoundClock> {
        let clock = self.with_server(|server| server.clock())?;
        Ok(super::client::BoundClock { clock: SharedClock::bound(clock) })
    }

    /// Simulated seconds per real second: 0 for a simulated clock that stands still until
    /// `advance`, None for the wall clock.
    #[getter]
    fn speed(&self) -> PyResult<Option<f64>> {
        self.with_server(|server| server.clock_speed())
    }

    /// Moves a simulated clock forward by `step` ("5m", "1h", "2d", seconds or a timedelta)
    /// and returns the new time. Bodies change as candles close: every 5 minutes for the
    /// listing's 5m figures, every hour for the 1h ones, and so on.
    fn advance(&self, py: Python<'_>, step: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let seconds = duration_seconds("step", step)?;
        let ms = (seconds * 1000.0).round() as i64;
        let now = self.with_server(|server| server.advance(ms))?.map_err(PyValueError::new_err)?;
        datetime_of(py, now)
    }

    /// The closed candles of `interval` behind the current time (the last 300, oldest first),
    /// as a DataFrame with `open_time`, `open`, `high`, `low`, `close` and `volume` (in tokens):
    /// the candles every indicator of the listing is computed from.
    fn candles(&self, py: Python<'_>, token_id: &str, interval: &str) -> PyResult<PyDataFrame> {
        if !sandbox::lists(token_id) {
            if let Some(known) = sandbox::typo_of(token_id) {
                return Err(PyValueError::new_err(format!(
                    "{token_id:?} is not listed (did you mean {known:?}?): the Sandbox answers 404 for typos of its known ids"
                )));
            }
            return Err(PyValueError::new_err(format!(
                "{token_id:?} is not listed: the Sandbox serves lowercase slugs such as \"bitcoin\" and answers 404 \
                 for ids beginning with \"unknown\""
            )));
        }
        let seed = self.seed;
        let now = self.with_server(|server| server.now_ms())?;
        let candles = py
            .detach(|| sandbox::candles(seed, token_id, interval, now))
            .ok_or_else(|| PyValueError::new_err(format!("interval must be one of {INTERVALS:?}, got {interval:?}")))?;
        Ok(PyDataFrame(candles_frame(&candles)))
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

fn body_at(endpoint: Endpoint, token_id: &str, seed: u64, now: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    let now_ms = match now {
        Some(now) => time_ms("now", now)?,
        None => sandbox::wall_clock_ms(),
    };
    ClockConfig { start_ms: Some(now_ms), speed: None }.validate().map_err(PyValueError::new_err)?;
    Ok(sandbox::body(seed, endpoint, token_id, now_ms))
}

/// The body the Sandbox serves for a listing request at `now` (default: the wall clock).
#[pyfunction]
#[pyo3(signature = (token_id, seed=0, now=None))]
pub(super) fn sandbox_listing_body(token_id: &str, seed: u64, now: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    body_at(Endpoint::Listing, token_id, seed, now)
}

/// The body the Sandbox serves for a markets request at `now` (default: the wall clock).
#[pyfunction]
#[pyo3(signature = (token_id, seed=0, now=None))]
pub(super) fn sandbox_markets_body(token_id: &str, seed: u64, now: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    body_at(Endpoint::Markets, token_id, seed, now)
}
