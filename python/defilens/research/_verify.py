"""Checking a vendor's precomputed indicators against candles: "why does my RSI differ from the
vendor's?" answered row by row, with the warm-up sensitivity that is its usual cause."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import polars as pl

from .. import _core
from .._core import INDICATOR_RECIPES, INTERVAL_MS
from .._frames import INTERVAL

#: The indicator families verify recomputes: every numeric one of the core's recipe table
#: (`model::indicators::RECIPES`, which the catalogue and the Sandbox read too).
CHECKED = {family: recipe for family, recipe in INDICATOR_RECIPES.items() if recipe["text"] is None}


def _last(recipe: "_core._Recipe", closes: pl.Series) -> Optional[float]:
    out = _core.ta_series(recipe["kind"], closes, **recipe["params"])
    series = out[recipe["column"] or ""] if isinstance(out, pl.DataFrame) else out
    value = series[-1]
    return None if value is None else float(value)


def _check_candles(candles: pl.DataFrame) -> pl.DataFrame:
    needed = {"token", "interval", "open_time", "close"}
    missing = needed - set(candles.columns)
    if missing:
        raise ValueError(f"candles needs the columns {sorted(needed)}; {sorted(missing)} are missing")
    if candles["close"].null_count():
        raise ValueError("candles has null closes: an indicator needs every close")
    candles = candles.with_columns(pl.col("interval").cast(pl.String)).sort("token", "interval", "open_time")
    unknown = set(candles["interval"].unique().to_list()) - set(INTERVAL_MS)
    if unknown:
        raise ValueError(f"candles has intervals {sorted(unknown)}; known are {list(INTERVAL_MS)}")
    gaps = candles.with_columns(
        pl.col("open_time").diff().over("token", "interval").dt.total_milliseconds().alias("_step"),
        pl.col("interval").replace_strict(INTERVAL_MS, return_dtype=pl.Int64).alias("_expected"),
    ).filter(pl.col("_step").is_not_null() & (pl.col("_step") != pl.col("_expected")))
    if gaps.height:
        token, interval, at = gaps.select("token", "interval", "open_time").row(0)
        raise ValueError(
            f"candles of {token} {interval} are not consecutive at {at} ({gaps.height} places): a recomputed "
            "indicator would be wrong; give consecutive candles (or verify the candles after the gap only)"
        )
    return candles


def verify(indicators: pl.DataFrame, candles: pl.DataFrame, *, tolerance: float = 1e-6) -> pl.DataFrame:
    """Recomputes each indicator value from ``candles`` (every numeric family of the service's
    reference: RSI, SMA, Bollinger bands) and compares it with the vendor's.

    ``indicators`` is any frame with ``token``, ``interval``, ``indicator``, ``value`` (for
    example ``frames.indicators``: one value a token and interval, as of the last candle);
    ``candles`` has ``token``, ``interval``, ``open_time`` and ``close`` (what `Sandbox.candles`
    gives, or your own OHLCV), consecutive, the last one the candle the values are as of.

    One row per value: ``token``, ``interval``, ``indicator``, ``vendor``, ``recomputed``,
    ``diff``, ``ok`` (``|diff| <= tolerance * max(1, |recomputed|)``), and the warm-up
    sensitivity: ``from_1x``, ``from_2x``, ``from_3x``, the value recomputed from only the last
    N, 2N and 3N candles (N the period): an RSI that changes between them depends on how much
    history it was started with, the usual reason two vendors disagree. Rows without candles,
    or of indicators it cannot recompute, are left out. Several values of one series (a
    history's rows, a panel) raise `ValueError`: each would be compared with the last candle.
    """
    for name in ("token", "interval", "indicator", "value"):
        if name not in indicators.columns:
            raise ValueError(f"indicators needs the columns token, interval, indicator, value; {name!r} is missing")
    repeated = (
        indicators.group_by("token", pl.col("interval").cast(pl.String), "indicator")
        .agg(pl.len().alias("n"))
        .filter(pl.col("n") > 1)
    )
    if repeated.height:
        token, interval, indicator, n = repeated.sort("token", "interval", "indicator").row(0)
        raise ValueError(
            f"indicators has {n} values of {token} {interval} {indicator} ({repeated.height} series repeat): verify "
            "compares one value a series with the last of the candles, so a history's or a panel's rows would all "
            "be compared with that one candle; give one row a series, e.g. the latest: "
            "indicators.sort('fetched_at').group_by('token', 'interval', 'indicator').last()"
        )
    candles = _check_candles(candles)
    series: Dict[Tuple[str, str], pl.Series] = {
        (token, interval): group["close"] for (token, interval), group in candles.group_by("token", "interval")
    }
    rows = []
    for token, interval, indicator, vendor in indicators.select(
        "token", pl.col("interval").cast(pl.String), "indicator", "value"
    ).iter_rows():
        recipe = CHECKED.get(indicator)
        closes = series.get((token, interval))
        if recipe is None or closes is None or closes.is_empty() or vendor is None:
            continue
        recomputed = _last(recipe, closes)
        if recomputed is None:
            continue
        warmups = [_last(recipe, closes.tail(recipe["period"] * times + 1)) for times in (1, 2, 3)]
        diff = vendor - recomputed
        rows.append(
            (
                token,
                interval,
                indicator,
                vendor,
                recomputed,
                diff,
                abs(diff) <= tolerance * max(1.0, abs(recomputed)),
                *warmups,
            )
        )
    schema = {
        "token": pl.String,
        "interval": pl.String,
        "indicator": pl.String,
        "vendor": pl.Float64,
        "recomputed": pl.Float64,
        "diff": pl.Float64,
        "ok": pl.Boolean,
        "from_1x": pl.Float64,
        "from_2x": pl.Float64,
        "from_3x": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row").with_columns(pl.col("interval").cast(INTERVAL))


__all__ = ["verify"]
