"""Checking a vendor's precomputed indicators against candles: "why does my RSI differ from the
vendor's?" answered row by row, with the warm-up sensitivity that is its usual cause."""

from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Tuple

import polars as pl

from .. import _core
from .._core import INDICATOR_RECIPES, INTERVAL_MS
from .._exceptions import DefiLensWarning
from .._frames import INTERVAL
from .._stack import stacklevel_outside

#: The families verify recomputes, from the core's recipe table (`model::indicators::RECIPES`,
#: which the catalogue and the Sandbox read too): the numbers of the indicators frame, and the
#: texts of the signals frame (a text is the sign of a number: MACD's line above its signal line).
NUMBERS = {family: recipe for family, recipe in INDICATOR_RECIPES.items() if recipe["text"] is None}
TEXTS = {family: recipe for family, recipe in INDICATOR_RECIPES.items() if recipe["text"] is not None}


def _last(recipe: "_core._Recipe", closes: pl.Series) -> Optional[float]:
    out = _core.ta_series(recipe["kind"], closes, **recipe["params"])
    series = out[recipe["column"] or ""] if isinstance(out, pl.DataFrame) else out
    value = series[-1]
    return None if value is None else float(value)


def _text(family: str, value: Optional[float]) -> Optional[str]:
    return None if value is None else _core.indicator_text(family, value)


def _check_candles(candles: pl.DataFrame) -> pl.DataFrame:
    needed = {"token", "interval", "open_time", "close"}
    missing = needed - set(candles.columns)
    if missing:
        raise ValueError(f"candles needs the columns {sorted(needed)}; {sorted(missing)} are missing")
    odd = candles.filter(~pl.col("close").cast(pl.Float64).is_finite().fill_null(False))
    if odd.height:
        token, interval, at, close = odd.select("token", "interval", "open_time", "close").row(0)
        raise ValueError(
            f"candles has {odd.height} closes that are not prices ({token} {interval} at {at}: {close}): "
            "an indicator needs every close"
        )
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
    """Recomputes each indicator value from ``candles`` and compares it with the vendor's: every
    family of the service's reference, the numbers (RSI, SMA, Bollinger bands) given the
    indicators frame, the texts (MACD's ``Cross Above``/``Cross Below``) given the signals frame.

    ``indicators`` is any frame with ``token``, ``interval``, ``indicator``, ``value`` (for
    example ``frames.indicators`` or ``frames.signals``: one value a token and interval, as of the
    last candle); ``candles`` has ``token``, ``interval``, ``open_time`` and ``close`` (what
    `Sandbox.candles` gives, or your own OHLCV), consecutive, the last one the candle the values
    are as of.

    One row per value: ``token``, ``interval``, ``indicator``, ``vendor``, ``recomputed``,
    ``diff``, ``ok`` (``|diff| <= tolerance * max(1, |recomputed|)``), and the warm-up
    sensitivity: ``from_1x``, ``from_2x``, ``from_3x``, the value recomputed from only the last
    W, W + N and W + 2N candles (W the fewest that give a value: N + 1 for an RSI of N, 34 for
    MACD(12, 26, 9); N the period): an RSI that changes between them depends on how much history
    it was started with, the usual reason two vendors disagree. For texts, ``vendor``,
    ``recomputed`` and the warm-ups are texts, and ``margin`` (instead of ``diff``) is the number
    whose sign gives the text (MACD - signal); ``ok`` when the texts agree or ``|margin| <=
    tolerance`` (a tie that rounding may tip either way).

    Rows without candles of their token and interval, or of families it cannot recompute, are
    left out; a `DefiLensWarning` says so when nothing at all could be checked, and names the
    values left out because the candles were too few to fill the window. Several values of one
    series (a history's rows, a panel) raise `ValueError`: each would be compared with the last
    candle.
    """
    _check_indicators(indicators)
    textual = indicators.schema["value"] in (pl.String, pl.Categorical)
    families = TEXTS if textual else NUMBERS
    candles = _check_candles(candles)
    series: Dict[Tuple[str, str], pl.Series] = {
        (token, interval): group["close"] for (token, interval), group in candles.group_by("token", "interval")
    }
    values = indicators.select("token", pl.col("interval").cast(pl.String), "indicator", "value")
    rows, left_out, too_few = _compared(values, series, families, textual, tolerance)
    _warn_left_out(values, candles, len(rows), left_out, too_few, families, textual)
    return _verified(rows, textual)


def _check_indicators(indicators: pl.DataFrame) -> None:
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
        # The latest row a series, by the time the rows have: a panel's candle, a history's fetch.
        by = next((column for column in ("candle_close", "fetched_at") if column in indicators.columns), None)
        latest = (
            f"indicators.sort({by!r}).group_by('token', 'interval', 'indicator').last()"
            if by
            else "one row a (token, interval, indicator), the one of the last candle"
        )
        raise ValueError(
            f"indicators has {n} values of {token} {interval} {indicator} ({repeated.height} series repeat): verify "
            "compares one value a series with the last of the candles, so a history's or a panel's rows would all "
            f"be compared with that one candle; give one row a series, e.g. the latest: {latest}"
        )


def _compared(
    values: pl.DataFrame,
    series: Dict[Tuple[str, str], pl.Series],
    families: Dict[str, "_core._Recipe"],
    textual: bool,
    tolerance: float,
) -> "tuple[List[tuple], Dict[str, int], Dict[str, int]]":
    """A row per value recomputed from its closes (see `verify`), how many values were left out
    and why, and per family the fewest closes that were too few to give a value."""
    rows = []
    left_out: Dict[str, int] = {"unknown": 0, "no candles": 0, "no value": 0}
    too_few: Dict[str, int] = {}
    for token, interval, indicator, vendor in values.iter_rows():
        recipe = families.get(indicator)
        closes = series.get((token, interval))
        if vendor is None:
            left_out["no value"] += 1
            continue
        if recipe is None:
            left_out["unknown"] += 1
            continue
        if closes is None or closes.is_empty():
            left_out["no candles"] += 1
            continue
        recomputed = _last(recipe, closes)
        if recomputed is None:
            too_few[indicator] = min(too_few.get(indicator, closes.len()), closes.len())
            continue
        # The fewest closes that give a value, then a period and two more of history.
        warmups = [_last(recipe, closes.tail(recipe["warm_up"] + recipe["period"] * more)) for more in (0, 1, 2)]
        if textual:
            text = _text(indicator, recomputed)
            ok = vendor == text or abs(recomputed) <= tolerance
            rows.append(
                (token, interval, indicator, vendor, text, recomputed, ok, *[_text(indicator, w) for w in warmups])
            )
        else:
            diff = vendor - recomputed
            ok = abs(diff) <= tolerance * max(1.0, abs(recomputed))
            rows.append((token, interval, indicator, vendor, recomputed, diff, ok, *warmups))
    return rows, left_out, too_few


def _verified(rows: List[tuple], textual: bool) -> pl.DataFrame:
    kind = pl.String if textual else pl.Float64
    schema = {
        "token": pl.String,
        "interval": pl.String,
        "indicator": pl.String,
        "vendor": kind,
        "recomputed": kind,
        "margin" if textual else "diff": pl.Float64,
        "ok": pl.Boolean,
        "from_1x": kind,
        "from_2x": kind,
        "from_3x": kind,
    }
    return pl.DataFrame(rows, schema=schema, orient="row").with_columns(pl.col("interval").cast(INTERVAL))


def _warn_left_out(
    values: pl.DataFrame,
    candles: pl.DataFrame,
    checked: int,
    left_out: Dict[str, int],
    too_few: Dict[str, int],
    families: Dict[str, "_core._Recipe"],
    textual: bool,
) -> None:
    # Rows without candles are expected (candles of one interval check that interval), so they are
    # named only when nothing was checked: an empty answer must never look like "all agree".
    reasons = []
    if too_few:
        shortest = ", ".join(
            f"{family}: {n} candles, it needs {families[family]['warm_up']}" for family, n in sorted(too_few.items())
        )
        reasons.append(f"too few candles to fill the window of {shortest}")
    if not checked and values.height:
        if left_out["no candles"]:
            tokens = sorted(candles["token"].unique().to_list())[:5]
            reasons.append(
                f"{left_out['no candles']} have no candles of their token and interval (the candles have tokens "
                f"{tokens}, intervals {sorted(candles['interval'].unique().to_list())})"
            )
        if left_out["unknown"]:
            other = "indicators frame (numbers)" if textual else "signals frame (texts)"
            reasons.append(
                f"{left_out['unknown']} are of families verify cannot recompute from this frame (it knows "
                f"{sorted(families)}; the others are in the {other})"
            )
        if left_out["no value"]:
            reasons.append(f"{left_out['no value']} are null")
        reasons.insert(0, f"none of the {values.height} values could be checked")
    if reasons:
        warnings.warn("verify: " + "; ".join(reasons), DefiLensWarning, stacklevel=stacklevel_outside())


__all__ = ["verify"]
