//! `defilens.ta`: the indicator series of `crate::ta` over a polars Series of closes.

use polars::prelude::*;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_polars::{PyDataFrame, PySeries};

use crate::frames::columns::frame;
use crate::model::indicators::{recipe, Indicator, Reported, KINDS, RECIPES};

/// The closes as floats, a null one `None`: a gap, as a NaN is, that `crate::ta::series_over_gaps` does not bridge.
fn closes(series: &Series) -> PyResult<Vec<Option<f64>>> {
    let floats = series.cast(&DataType::Float64).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let floats = floats.f64().map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(floats.iter().collect())
}

fn period(name: &str, value: i64) -> PyResult<usize> {
    if !(1..=100_000).contains(&value) {
        return Err(PyValueError::new_err(format!("{name} must be a whole number from 1 to 100,000, got {value}")));
    }
    Ok(value as usize)
}

/// The indicator `kind` names with the parameters given (those of other kinds are ignored).
fn indicator(kind: &str, n: i64, k: f64, fast: i64, slow: i64, signal: i64) -> PyResult<Indicator> {
    Ok(match kind {
        "rsi" => Indicator::Rsi { n: period("n", n)? },
        "sma" => Indicator::Sma { n: period("n", n)? },
        "bbands" => {
            if !(k.is_finite() && k >= 0.0) {
                return Err(PyValueError::new_err(format!("k must be a number of standard deviations >= 0, got {k}")));
            }
            Indicator::Bbands { n: period("n", n)?, k }
        }
        "macd" => {
            let (fast, slow, signal) = (period("fast", fast)?, period("slow", slow)?, period("signal", signal)?);
            if fast >= slow {
                return Err(PyValueError::new_err(format!("fast must be shorter than slow, got {fast} and {slow}")));
            }
            Indicator::Macd { fast, slow, signal }
        }
        other => {
            return Err(PyValueError::new_err(format!("kind must be one of {}, got {other:?}", KINDS.join(", "))));
        }
    })
}

/// The parameters of `indicator` as `ta_series` takes them (the inverse of `indicator`).
pub(super) fn parameters<'py>(py: Python<'py>, indicator: &Indicator) -> PyResult<Bound<'py, PyDict>> {
    let params = PyDict::new(py);
    match *indicator {
        Indicator::Rsi { n } | Indicator::Sma { n } => params.set_item("n", n)?,
        Indicator::Bbands { n, k } => {
            params.set_item("n", n)?;
            params.set_item("k", k)?;
        }
        Indicator::Macd { fast, slow, signal } => {
            params.set_item("fast", fast)?;
            params.set_item("slow", slow)?;
            params.set_item("signal", signal)?;
        }
    }
    Ok(params)
}

/// Every indicator family's recipe, for `research.verify`: family -> kind, its parameters, the
/// column it reports, its period, its warm-up (the fewest closes that give a value), and the
/// texts it is reported as (`None` for a number).
pub(super) fn recipes(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let recipes = PyDict::new(py);
    for recipe in RECIPES {
        let entry = PyDict::new(py);
        entry.set_item("kind", recipe.indicator.kind())?;
        entry.set_item("params", parameters(py, &recipe.indicator)?)?;
        entry.set_item("column", recipe.column)?;
        entry.set_item("period", recipe.indicator.period())?;
        entry.set_item("warm_up", recipe.indicator.warm_up())?;
        let text = match recipe.reported {
            Reported::Number => None,
            Reported::Sign { above, below } => Some((above, below)),
        };
        entry.set_item("text", text)?;
        recipes.set_item(recipe.family, entry)?;
    }
    Ok(recipes)
}

/// The text the service writes for `value` of the text family `family` (MACD: `Cross Above`
/// when the line is above its signal line, else `Cross Below`), for `research.verify`.
#[pyfunction]
pub(super) fn indicator_text(family: &str, value: f64) -> PyResult<&'static str> {
    let recipe =
        recipe(family).ok_or_else(|| PyValueError::new_err(format!("{family:?} is not an indicator family")))?;
    recipe
        .reported
        .text(value)
        .ok_or_else(|| PyValueError::new_err(format!("{family} is written as a number, not a text")))
}

/// One indicator series over `values`: `kind` is one of `model::indicators::KINDS`; a Series back
/// for a kind of one series (`rsi`, `sma`), else a DataFrame of its columns (`bbands`: upper,
/// middle, lower; `macd`: macd, signal, hist).
#[pyfunction]
#[pyo3(signature = (kind, values, n=14, k=2.0, fast=12, slow=26, signal=9))]
#[allow(clippy::too_many_arguments)]
pub(super) fn ta_series(
    py: Python<'_>,
    kind: &str,
    values: PySeries,
    n: i64,
    k: f64,
    fast: i64,
    slow: i64,
    signal: i64,
) -> PyResult<Py<PyAny>> {
    let closes = closes(&values.0)?;
    let indicator = indicator(kind, n, k, fast, slow, signal)?;
    let mut series = py.detach(|| crate::ta::series_over_gaps(&indicator, &closes));
    let names = indicator.columns();
    if names.is_empty() {
        let out = Series::new(values.0.name().clone(), series.swap_remove(0));
        return Ok(PySeries(out).into_pyobject(py)?.into_any().unbind());
    }
    let columns = names.iter().zip(series).map(|(name, values)| Column::new((*name).into(), values)).collect();
    Ok(PyDataFrame(frame(columns)).into_pyobject(py)?.into_any().unbind())
}
