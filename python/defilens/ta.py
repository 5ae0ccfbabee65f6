"""Technical indicators as polars expressions, by the service's definitions: the Rust core's one
implementation, the same one the Sandbox computes its listings with (checked against TA-Lib).

Each function takes the closes (oldest first), as a column name or an expression, as polars'
own functions do, and returns an expression of the same length; a value exists once its window
is full (null before), as TA-Lib. Use them per token with ``.over("token")`` on a frame sorted
by time::

    candles.with_columns(defilens.ta.rsi("close", 14).over("token").alias("rsi14"))

A null close (or a NaN or infinite one, which is not a price) is a gap no indicator computes
through: every window that holds it is null, and the indicator starts again on the closes after
it, as on a series that began there (an RSI or an EMA carries state a gap would break). Fill the
gaps first if a value there is wanted.

Examples:
    >>> closes = pl.DataFrame({"close": [float(i) for i in range(1, 41)]})
    >>> closes.select(defilens.ta.sma(pl.col("close"), 5)).tail(1).item()
    38.0
"""

from __future__ import annotations

from typing import Any, Union

import polars as pl

from . import _core

__all__ = ["rsi", "sma", "bbands", "macd"]

#: The closes: a column name or an expression.
Closes = Union[pl.Expr, str]


def _expression(expr: Closes, kind: str, **params: Any) -> pl.Expr:
    if isinstance(expr, str):
        expr = pl.col(expr)
    elif not isinstance(expr, pl.Expr):
        raise TypeError(
            f'ta.{kind}: expr must be a column name (e.g. "close") or a polars expression, got {type(expr).__name__}'
        )
    # The parameters are checked now, by the core's own rule (on no closes), so that a bad one is
    # one line here rather than a polars error with the expression appended when the query runs;
    # that empty answer also gives the dtype (a struct of the core's columns for a kind with several).
    try:
        empty = _core.ta_series(kind, pl.Series("close", [], dtype=pl.Float64), **params)
    except TypeError as error:
        raise TypeError(f"ta.{kind}: {error}") from None
    except ValueError as error:
        raise ValueError(f"ta.{kind}: {error}") from None
    dtype = empty.to_struct().dtype if isinstance(empty, pl.DataFrame) else empty.dtype

    def apply(series: pl.Series) -> pl.Series:
        out = _core.ta_series(kind, series, **params)
        if isinstance(out, pl.DataFrame):
            return out.to_struct(series.name)
        return out

    return expr.map_batches(apply, return_dtype=dtype)


def rsi(expr: Closes, n: int = 14) -> pl.Expr:
    """Wilder's RSI over ``n`` closes (0 to 100; 0 when nothing moved, as TA-Lib)."""
    return _expression(expr, "rsi", n=n)


def sma(expr: Closes, n: int) -> pl.Expr:
    """The simple moving average of the last ``n`` closes."""
    return _expression(expr, "sma", n=n)


def bbands(expr: Closes, n: int = 20, k: float = 2.0) -> pl.Expr:
    """Bollinger bands: a struct of ``upper``, ``middle`` (the SMA of ``n``) and ``lower``, at
    ``k`` population standard deviations."""
    return _expression(expr, "bbands", n=n, k=k)


def macd(expr: Closes, fast: int = 12, slow: int = 26, signal: int = 9) -> pl.Expr:
    """MACD(fast, slow, signal): a struct of ``macd`` (fast EMA - slow EMA), ``signal`` (its EMA)
    and ``hist`` (their difference). The service's ``macd`` signal says whether the line is above
    the signal line (``Cross Above``) or below (``Cross Below``)."""
    return _expression(expr, "macd", fast=fast, slow=slow, signal=signal)
