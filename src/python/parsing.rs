//! Offline parsing: response bodies given by the caller into frames.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString, PyTuple};
use pyo3_polars::PyDataFrame;

use super::client::listing_frames_dict;
use super::errors::detached;
use crate::client::validate_token_id;
use crate::error::Error;
use crate::frames::empty_frames as all_empty_frames;
use crate::model::Endpoint;
use crate::parse::{self, ListingBody, MarketsBody};

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

fn body_bytes<'a>(body: &'a Bound<'_, PyAny>) -> PyResult<BodyBytes<'a>> {
    if let Ok(bytes) = body.cast::<PyBytes>() {
        return Ok(BodyBytes::Borrowed(bytes.as_bytes()));
    }
    if let Ok(text) = body.cast::<PyString>() {
        return match text.to_cow() {
            Ok(text) => Ok(BodyBytes::Owned(text.into_owned().into_bytes())),
            Err(_) => Err(PyErr::from(Error::Decode {
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
    Err(PyTypeError::new_err(format!("a response body must be bytes or str, got {}", body.get_type().name()?)))
}

fn optional_token(token_id: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match token_id {
        None => Ok(None),
        Some(value) if value.is_none() => Ok(None),
        Some(value) => {
            let id: String = value.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "token_id must be a str, got {}",
                    value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ))
            })?;
            validate_token_id(&id)?;
            Ok(Some(id))
        }
    }
}

/// Parses one listing body into the listing frames (`dict[str, DataFrame]`).
#[pyfunction]
#[pyo3(signature = (body, token_id=None, fetched_at_ms=None))]
pub(super) fn parse_token<'py>(
    py: Python<'py>,
    body: Bound<'py, PyAny>,
    token_id: Option<Bound<'py, PyAny>>,
    fetched_at_ms: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let token = optional_token(token_id.as_ref())?;
    let bytes = body_bytes(&body)?;
    let slice = bytes.as_slice();
    let frames = detached(py, || {
        let input = ListingBody { body: slice, token: token.as_deref(), fetched_at: fetched_at_ms };
        let (frames, mut results) = parse::parse_listings(std::slice::from_ref(&input));
        results.pop().expect("one result per body")?;
        Ok(frames)
    })?;
    listing_frames_dict(py, frames)
}

/// Parses many listing bodies into one set of frames in one call.
#[pyfunction]
#[pyo3(signature = (bodies, token_ids=None, fetched_at_ms=None))]
pub(super) fn parse_tokens<'py>(
    py: Python<'py>,
    bodies: Vec<Bound<'py, PyAny>>,
    token_ids: Option<Vec<Option<Bound<'py, PyAny>>>>,
    fetched_at_ms: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    // One time for every body, or one per body.
    let fetched_at: Vec<Option<i64>> = match fetched_at_ms {
        None => vec![None; bodies.len()],
        Some(value) => match value.extract::<i64>() {
            Ok(ms) => vec![Some(ms); bodies.len()],
            Err(_) => {
                let times: Vec<Option<i64>> = value.extract().map_err(|_| {
                    PyTypeError::new_err(
                        "fetched_at_ms must be an int (ms since the epoch) or a list of them, one per body",
                    )
                })?;
                if times.len() != bodies.len() {
                    return Err(PyValueError::new_err(format!(
                        "got {} bodies but {} fetched_at_ms",
                        bodies.len(),
                        times.len()
                    )));
                }
                times
            }
        },
    };
    let tokens: Vec<Option<String>> = match &token_ids {
        Some(ids) => {
            if ids.len() != bodies.len() {
                return Err(PyValueError::new_err(format!("got {} bodies but {} token_ids", bodies.len(), ids.len())));
            }
            ids.iter().map(|id| optional_token(id.as_ref())).collect::<PyResult<_>>()?
        }
        None => vec![None; bodies.len()],
    };
    let bytes = bodies.iter().map(|b| body_bytes(b)).collect::<PyResult<Vec<_>>>()?;
    let inputs: Vec<ListingBody> = bytes
        .iter()
        .zip(&tokens)
        .zip(&fetched_at)
        .map(|((b, token), fetched_at)| ListingBody {
            body: b.as_slice(),
            token: token.as_deref(),
            fetched_at: *fetched_at,
        })
        .collect();
    let frames = detached(py, || {
        let (frames, results) = parse::parse_listings(&inputs);
        for result in results {
            result?;
        }
        Ok(frames)
    })?;
    listing_frames_dict(py, frames)
}

/// Parses one markets body into the markets frame. Returns (frame, total, drift).
#[pyfunction]
#[pyo3(signature = (body, token_id, fetched_at_ms=None))]
pub(super) fn parse_markets<'py>(
    py: Python<'py>,
    body: Bound<'py, PyAny>,
    token_id: Bound<'py, PyAny>,
    fetched_at_ms: Option<i64>,
) -> PyResult<Bound<'py, PyTuple>> {
    let token =
        optional_token(Some(&token_id))?.ok_or_else(|| PyTypeError::new_err("parse_markets needs a token_id (str)"))?;
    let bytes = body_bytes(&body)?;
    let slice = bytes.as_slice();
    let (frame, total) = detached(py, || {
        let input = MarketsBody { body: slice, token: &token, fetched_at: fetched_at_ms };
        let (frame, mut results) = parse::parse_markets(std::slice::from_ref(&input));
        let summary = results.pop().expect("one result per body")?;
        Ok((frame, summary.total))
    })?;
    PyTuple::new(
        py,
        [
            PyDataFrame(frame.markets).into_pyobject(py)?,
            total.into_pyobject(py)?.into_any(),
            PyDataFrame(frame.drift).into_pyobject(py)?,
        ],
    )
}

/// Parses many bodies of one endpoint (`"listing"` or `"markets"`) in one call without stopping
/// at a body that cannot be read: returns (frames, one error message or None per body). A failed
/// body adds no rows. What a history needs to commit a round and to reparse a raw table.
#[pyfunction]
pub(super) fn parse_many<'py>(
    py: Python<'py>,
    endpoint: &str,
    bodies: Vec<Bound<'py, PyAny>>,
    token_ids: Vec<String>,
    fetched_at_ms: Vec<Option<i64>>,
) -> PyResult<(Bound<'py, PyDict>, Vec<Option<String>>)> {
    if token_ids.len() != bodies.len() || fetched_at_ms.len() != bodies.len() {
        return Err(PyValueError::new_err(format!(
            "got {} bodies, {} token_ids and {} fetched_at_ms: give one of each per body",
            bodies.len(),
            token_ids.len(),
            fetched_at_ms.len()
        )));
    }
    let endpoint = Endpoint::from_name(endpoint)
        .ok_or_else(|| PyValueError::new_err(format!("endpoint must be listing or markets, got {endpoint:?}")))?;
    let bytes = bodies.iter().map(|b| body_bytes(b)).collect::<PyResult<Vec<_>>>()?;
    let message = |result: Result<(), Error>| result.err().map(|error| error.to_string());
    match endpoint {
        Endpoint::Listing => {
            let inputs: Vec<ListingBody> = bytes
                .iter()
                .zip(&token_ids)
                .zip(&fetched_at_ms)
                .map(|((b, token), at)| ListingBody { body: b.as_slice(), token: Some(token), fetched_at: *at })
                .collect();
            let (frames, results) = detached(py, || Ok(parse::parse_listings(&inputs)))?;
            let errors = results.into_iter().map(|r| message(r.map(|_| ()))).collect();
            Ok((listing_frames_dict(py, frames)?, errors))
        }
        Endpoint::Markets => {
            let inputs: Vec<MarketsBody> = bytes
                .iter()
                .zip(&token_ids)
                .zip(&fetched_at_ms)
                .map(|((b, token), at)| MarketsBody { body: b.as_slice(), token, fetched_at: *at })
                .collect();
            let (frames, results) = detached(py, || Ok(parse::parse_markets(&inputs)))?;
            let errors = results.into_iter().map(|r| message(r.map(|_| ()))).collect();
            let dict = PyDict::new(py);
            for (name, frame) in frames.into_named() {
                dict.set_item(name, PyDataFrame(frame))?;
            }
            Ok((dict, errors))
        }
    }
}

/// The frames of an empty result, with their full schemas.
#[pyfunction]
pub(super) fn empty_frames(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let result = PyDict::new(py);
    for (name, frame) in all_empty_frames() {
        result.set_item(name, PyDataFrame(frame))?;
    }
    Ok(result)
}

/// The bytes a frame's Arrow buffers hold (16-byte string views included, each shared buffer
/// once): the memory benchmark's measure of a frame's size.
#[pyfunction]
pub(super) fn frame_buffer_bytes(frame: PyDataFrame) -> usize {
    crate::frames::buffer_bytes::buffer_bytes(&frame.0)
}
