"""Hand-offs to backtesters: the signals and prices of a history in the wide pandas shapes that
alphalens and vectorbt take, on the history's rounds, with the entry already a round after the
signal was knowable (so the backtester's "enter at this bar" cannot look ahead).

Each needs pandas (and pyarrow to convert): ``pip install "defilens[alphalens]"`` or
``"defilens[vectorbt]"`` brings them with the backtester."""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping, Optional, Tuple, Union

import polars as pl

from .._storage import PathLike
from ..history import open_for_reading
from ._labels import Horizon, _duration, cadence_of, fetched_prices, with_bars

UTC_MS = pl.Datetime("ms", "UTC")


def _pandas(extra: str) -> Any:
    try:
        import pandas  # type: ignore[import-untyped]  # noqa: F401
        import pyarrow  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f'this hand-off needs pandas and pyarrow ({error.name} is not installed): pip install "defilens[{extra}]"'
        ) from None
    import pandas as pd  # type: ignore[import-untyped]

    return pd


def _bars(
    source: PathLike, tokens: Any, price: str, cadence: Optional[Horizon], storage_options: Optional[Mapping[str, Any]]
) -> Tuple[pl.DataFrame, dt.timedelta]:
    root = open_for_reading(source, storage_options)
    prices = fetched_prices(root, tokens, price)
    step = _duration("cadence", cadence) if cadence is not None else cadence_of(prices)
    return with_bars(prices, step), step


def _wide_prices(pd: Any, bars: pl.DataFrame, step: dt.timedelta) -> Any:
    """One row per round of the whole grid (a missing round is a row of NaN, never a copy of
    the round before), one column per token; the index is tz-aware UTC."""
    first, last = bars["bar"].min(), bars["bar"].max()
    grid = pl.datetime_range(first, last, step, eager=True, time_unit="ms", time_zone="UTC").alias("bar")  # type: ignore[call-overload]
    wide = (
        grid.to_frame()
        .join(bars.pivot(on="token", index="bar", values="price", sort_columns=True), on="bar", how="left")
        .sort("bar")
    )
    frame = wide.to_pandas().set_index("bar")
    frame.index = pd.DatetimeIndex(frame.index, freq=pd.Timedelta(step), name="date")
    frame.columns.name = "asset"
    return frame


def _entries(signals: pl.DataFrame, bars: pl.DataFrame, step: dt.timedelta, knowable: str, value: str) -> pl.DataFrame:
    """Each signal with the round it can first be acted on: the first round strictly after it
    became knowable (a missing round drops the signal rather than delay it)."""
    keyed = signals.select("token", pl.col(knowable).cast(UTC_MS).alias("_knowable"), value).sort("_knowable")
    entered = keyed.join_asof(
        bars.select("token", "fetched_at", "bar"),
        left_on="_knowable",
        right_on="fetched_at",
        by="token",
        strategy="forward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    late = pl.col("bar") - pl.col("_knowable") > pl.lit(step)
    return entered.filter(pl.col("bar").is_not_null() & ~late)


def to_alphalens(
    source: PathLike,
    signals: Union[pl.DataFrame, pl.LazyFrame],
    *,
    value: str = "value",
    knowable: str = "at",
    price: str = "current_price",
    cadence: Optional[Horizon] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> Tuple[Any, Any]:
    """``(factor, prices)`` for ``alphalens.utils.get_clean_factor_and_forward_returns``.

    ``factor`` is a pandas Series of ``signals[value]`` indexed by (``date``, ``asset``), where
    ``date`` is the round each signal can first be traded in (the first round strictly after
    ``knowable``); ``prices`` has one row per round of the history's grid (tz-aware UTC, a missing
    round is NaN, never filled) and one column per token. alphalens's ``periods`` then count
    rounds: with a 15-minute cadence, ``periods=(4, 16)`` are 1 and 4 hours, and its IC equals
    `evaluate`'s on the same signals (entries in the same round, exits the same rounds later).
    """
    pd = _pandas("alphalens")
    frame = signals.collect() if isinstance(signals, pl.LazyFrame) else signals
    for column in ("token", knowable, value):
        if column not in frame.columns:
            raise ValueError(f"signals has no {column!r} column; its columns are {', '.join(frame.columns)}")
    bars, step = _bars(source, frame["token"].unique().to_list(), price, cadence, storage_options)
    entered = _entries(frame, bars, step, knowable, value)
    duplicated = entered.select("bar", "token").is_duplicated().sum()
    if duplicated:
        raise ValueError(
            f"{duplicated:,} signals share a token and an entry round: alphalens takes one factor value per token and "
            "date (give one signal per token and decision, on decisions at least one round apart)"
        )
    factor = (
        entered.select(pl.col("bar").alias("date"), pl.col("token").alias("asset"), pl.col(value).alias("factor"))
        .sort("date", "asset")
        .to_pandas()
        .set_index(["date", "asset"])["factor"]
    )
    return factor, _wide_prices(pd, bars, step)


def to_vectorbt(
    source: PathLike,
    labels: Union[pl.DataFrame, pl.LazyFrame],
    horizon: Horizon,
    *,
    signal: Optional[str] = None,
    price: str = "current_price",
    cadence: Optional[Horizon] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> Tuple[Any, Any, Any]:
    """``(close, entries, exits)`` for ``vectorbt.Portfolio.from_signals(close, entries, exits)``:
    wide pandas frames on one tz-aware index (the history's rounds, missing rounds NaN), one
    column per token.

    ``labels`` is what `forward_returns` gave; the rows of ``horizon`` with a forward return
    (and, with ``signal``, a true ``signal``: an event column) become an entry in the round of
    their ``entry_at`` and an exit in the round of their ``exit_at``. For trades that do not
    overlap, vectorbt's per-trade returns are the labels' ``forward_return``; vectorbt ignores
    an entry while a position is open, so overlapping events become fewer, longer trades.
    """
    pd = _pandas("vectorbt")
    frame = labels.collect() if isinstance(labels, pl.LazyFrame) else labels
    for column in ("token", "horizon", "entry_at", "exit_at", "forward_return", *([signal] if signal else [])):
        if column not in frame.columns:
            hint = " (label the signals with defilens.forward_returns first)" if column != signal else ""
            raise ValueError(f"labels has no {column!r} column{hint}; its columns are {', '.join(frame.columns)}")
    wanted = _duration("horizon", horizon)
    chosen = frame.filter((pl.col("horizon") == wanted) & pl.col("forward_return").is_not_null())
    if signal is not None:
        if frame.schema[signal] != pl.Boolean:
            raise TypeError(f"signal {signal!r} must be a boolean column (an event), got {frame.schema[signal]}")
        chosen = chosen.filter(pl.col(signal))
    if chosen.height == 0:
        horizons = ", ".join(str(h) for h in frame["horizon"].unique().sort().to_list())
        raise ValueError(f"no labelled trade at horizon {horizon!r} (the labels' horizons: {horizons})")
    bars, step = _bars(source, frame["token"].unique().to_list(), price, cadence, storage_options)
    close = _wide_prices(pd, bars, step)
    at_bar = bars.select("token", "fetched_at", "bar")
    entry_bars = chosen.select("token", pl.col("entry_at").cast(UTC_MS).alias("fetched_at")).join(
        at_bar, on=["token", "fetched_at"], how="inner"
    )
    exit_bars = chosen.select("token", pl.col("exit_at").cast(UTC_MS).alias("fetched_at")).join(
        at_bar, on=["token", "fetched_at"], how="inner"
    )
    return close, _marks(pd, close, entry_bars), _marks(pd, close, exit_bars)


def _marks(pd: Any, close: Any, rows: pl.DataFrame) -> Any:
    marks = pd.DataFrame(False, index=close.index, columns=close.columns)
    for token, bar in rows.select("token", "bar").iter_rows():
        marks.at[pd.Timestamp(bar), token] = True
    return marks
