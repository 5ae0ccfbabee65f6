//! `defilens.ta`: the indicator series of `crate::ta` over a polars Series of closes.

use polars::prelude::*;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3_polars::{PyDataFrame, PySeries};

use crate::frames::columns::frame;

fn closes(series: &Series) -> PyResult<Vec<f64>> {
    let floats = series.cast(&DataType::Float64).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let floats = floats.f64().map_err(|e| PyValueError::new_err(e.to_string()))?;
    if floats.null_count() > 0 {
        return Err(PyValueError::new_err(format!(
            "{:?} has {} nulls: an indicator needs every close (drop or fill the gaps first)",
            series.name().as_str(),
            floats.null_count()
        )));
    }
    Ok(floats.into_no_null_iter().collect())
}

fn period(name: &str, value: i64) -> PyResult<usize> {
    if !(1..=100_000).contains(&value) {
        return Err(PyValueError::new_err(format!("{name} must be a whole number from 1 to 100,000, got {value}")));
    }
    Ok(value as usize)
}

fn column(name: &str, values: impl Iterator<Item = Option<f64>>) -> Column {
    Column::new(name.into(), values.collect::<Vec<Option<f64>>>())
}

/// One indicator series over `values`: `kind` is `rsi` or `sma` (a Series back), `bbands`
/// (upper/middle/lower) or `macd` (macd/signal/hist) (a DataFrame back).
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
    let name = values.0.name().clone();
    match kind {
        "rsi" | "sma" => {
            let n = period("n", n)?;
            let out = py.detach(|| if kind == "rsi" { crate::ta::rsi(&closes, n) } else { crate::ta::sma(&closes, n) });
            Ok(PySeries(Series::new(name, out)).into_pyobject(py)?.into_any().unbind())
        }
        "bbands" => {
            let n = period("n", n)?;
            if !(k.is_finite() && k >= 0.0) {
                return Err(PyValueError::new_err(format!("k must be a number of standard deviations >= 0, got {k}")));
            }
            let bands = py.detach(|| crate::ta::bollinger(&closes, n, k));
            let frame = frame(vec![
                column("upper", bands.iter().map(|b| b.map(|b| b.0))),
                column("middle", bands.iter().map(|b| b.map(|b| b.1))),
                column("lower", bands.iter().map(|b| b.map(|b| b.2))),
            ]);
            Ok(PyDataFrame(frame).into_pyobject(py)?.into_any().unbind())
        }
        "macd" => {
            let (fast, slow, signal) = (period("fast", fast)?, period("slow", slow)?, period("signal", signal)?);
            if fast >= slow {
                return Err(PyValueError::new_err(format!("fast must be shorter than slow, got {fast} and {slow}")));
            }
            let lines = py.detach(|| crate::ta::macd(&closes, fast, slow, signal));
            let frame = frame(vec![
                column("macd", lines.iter().map(|l| l.map(|l| l.0))),
                column("signal", lines.iter().map(|l| l.map(|l| l.1))),
                column("hist", lines.iter().map(|l| l.map(|l| l.2))),
            ]);
            Ok(PyDataFrame(frame).into_pyobject(py)?.into_any().unbind())
        }
        other => Err(PyValueError::new_err(format!("kind must be rsi, sma, bbands or macd, got {other:?}"))),
    }
}
