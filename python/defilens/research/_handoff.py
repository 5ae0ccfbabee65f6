"""Hand-offs to backtesters: the signals and prices of a history in the wide pandas shapes that
alphalens and vectorbt take, on the history's rounds, with the entry already a round after the
signal was knowable (so the backtester's "enter at this bar" cannot look ahead).

Each needs pandas (and pyarrow to convert): ``pip install "defilens[alphalens]"`` or
``"defilens[vectorbt]"`` brings them with the backtester."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any, Mapping, Optional, Tuple, Union

import polars as pl

from .._duration import positive_duration
from .._storage import PathLike
from .._time import UTC_MS
from ..history import open_for_reading
from ._labels import Horizon, entries_of, fetched_prices
from ._rounds import ON_TIME, Rounds, rounds_made

#: vectorbt's simulations that numba compiles without its on-disk cache (``@njit`` without
#: ``cache=True``): seconds to half a minute in every new process. They take arrays only, so
#: numba can keep them on disk; `to_vectorbt` turns that on.
UNCACHED_SIMULATIONS = ("simulate_from_signals_nb", "simulate_from_orders_nb")


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


def _rounds(
    source: PathLike, tokens: Any, price: str, cadence: Optional[Horizon], storage_options: Optional[Mapping[str, Any]]
) -> Rounds:
    root = open_for_reading(source, storage_options)
    prices = fetched_prices(root, tokens, price)
    return rounds_made(root, prices, positive_duration("cadence", cadence) if cadence is not None else None)


def _wide_prices(pd: Any, made: Rounds) -> Any:
    """One row per round made (a round a token missed is NaN there, never a copy of the round
    before), one column per token; the index is tz-aware UTC, the rounds' starts. When every
    round kept one cadence on one grid, the index is that grid (a round's start a few
    milliseconds after its tick is put on it) and carries it as its ``freq``."""
    starts = made.rounds["start"].unique().sort()
    grid, step = _grid(starts, made.rounds["every"])
    placed = made.token_rounds.filter(pl.col("fetched_at").is_not_null()).select("token", "start", "price")
    wide = (
        starts.to_frame()
        .join(placed.pivot(on="token", index="start", values="price", sort_columns=True), on="start", how="left")
        .sort("start")
    )
    frame = wide.to_pandas().set_index("start")
    if grid is not None:
        frame.index = pd.DatetimeIndex(grid.to_list(), freq=pd.Timedelta(step), name="date")
    else:
        frame.index = pd.DatetimeIndex(frame.index, name="date")
    frame.columns.name = "asset"
    return frame


def _grid(starts: pl.Series, every: pl.Series) -> "Tuple[Optional[pl.Series], Optional[dt.timedelta]]":
    """The rounds' starts on their common grid (first start + k * cadence), when they keep one
    cadence with no round left out and none off the grid by more than `ON_TIME` of it."""
    step = every.unique()
    if step.len() != 1 or starts.len() < 2:
        return None, None
    cadence = step[0]
    assert isinstance(cadence, dt.timedelta)
    grid = pl.datetime_range(
        starts[0], starts[0] + cadence * (starts.len() - 1), cadence, eager=True, time_unit="ms", time_zone="UTC"
    )
    off = (starts - grid).dt.total_milliseconds().abs().max()
    if off is None or off > ON_TIME * cadence.total_seconds() * 1000:  # type: ignore[operator]
        return None, None
    return grid.alias("start"), cadence


def _on_grid(frame: pl.DataFrame, made: Rounds, column: str) -> pl.DataFrame:
    """``column`` (a round's start) put on the rounds' grid, when they keep one (`_grid`)."""
    starts = made.rounds["start"].unique().sort()
    grid, _ = _grid(starts, made.rounds["every"])
    if grid is None:
        return frame
    mapping = pl.DataFrame({column: starts, "_grid": grid})
    return frame.join(mapping, on=column, how="left").with_columns(pl.col("_grid").alias(column)).drop("_grid")


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
    made = _rounds(source, frame["token"].unique().to_list(), price, cadence, storage_options)
    decisions = frame.select("token", pl.col(knowable).cast(UTC_MS).alias("_moment"), value).sort("_moment")
    entered = _on_grid(
        entries_of(decisions, made.token_rounds, strict=True).filter(pl.col("_entry_missing").is_null()),
        made,
        "_entry_start",
    )
    duplicated = entered.select("_entry_start", "token").is_duplicated().sum()
    if duplicated:
        raise ValueError(
            f"{duplicated:,} signals share a token and an entry round: alphalens takes one factor value per token and "
            "date (give one signal per token and decision, on decisions at least one round apart)"
        )
    factor = (
        entered.select(
            pl.col("_entry_start").alias("date"), pl.col("token").alias("asset"), pl.col(value).alias("factor")
        )
        .sort("date", "asset")
        .to_pandas()
        .set_index(["date", "asset"])["factor"]
    )
    return factor, _wide_prices(pd, made)


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

    When vectorbt is installed, its simulations are kept in numba's on-disk cache from here on,
    so ``from_signals`` compiles once per environment, not in every new process.
    """
    pd = _pandas("vectorbt")
    cache_vectorbt()
    frame = labels.collect() if isinstance(labels, pl.LazyFrame) else labels
    for column in ("token", "horizon", "entry_at", "exit_at", "forward_return", *([signal] if signal else [])):
        if column not in frame.columns:
            hint = " (label the signals with defilens.forward_returns first)" if column != signal else ""
            raise ValueError(f"labels has no {column!r} column{hint}; its columns are {', '.join(frame.columns)}")
    wanted = positive_duration("horizon", horizon)
    chosen = frame.filter((pl.col("horizon") == wanted) & pl.col("forward_return").is_not_null())
    if signal is not None:
        if frame.schema[signal] != pl.Boolean:
            raise TypeError(f"signal {signal!r} must be a boolean column (an event), got {frame.schema[signal]}")
        chosen = chosen.filter(pl.col(signal))
    if chosen.height == 0:
        horizons = ", ".join(str(h) for h in frame["horizon"].unique().sort().to_list())
        raise ValueError(f"no labelled trade at horizon {horizon!r} (the labels' horizons: {horizons})")
    made = _rounds(source, frame["token"].unique().to_list(), price, cadence, storage_options)
    close = _wide_prices(pd, made)
    fetched = made.token_rounds.filter(pl.col("fetched_at").is_not_null()).select("token", "fetched_at", "start")
    marks = []
    for column in ("entry_at", "exit_at"):
        at = chosen.select("token", pl.col(column).cast(UTC_MS).alias("fetched_at")).join(
            fetched, on=["token", "fetched_at"], how="inner"
        )
        marks.append(_marks(pd, close, _on_grid(at, made, "start")))
    return close, marks[0], marks[1]


@functools.cache
def cache_vectorbt() -> None:
    """Keeps vectorbt's simulations (`UNCACHED_SIMULATIONS`) in numba's on-disk cache (beside
    vectorbt, or numba's user-wide cache folder where that is read-only), so they compile once
    per environment; nothing when vectorbt is not installed."""
    try:
        from vectorbt.portfolio import nb  # type: ignore[import-untyped]
    except ImportError:
        return
    for name in UNCACHED_SIMULATIONS:
        dispatcher = getattr(nb, name, None)
        if dispatcher is not None and hasattr(dispatcher, "enable_caching"):
            dispatcher.enable_caching()


def _marks(pd: Any, close: Any, rows: pl.DataFrame) -> Any:
    marks = pd.DataFrame(False, index=close.index, columns=close.columns)
    for token, start in rows.select("token", "start").iter_rows():
        marks.at[pd.Timestamp(start), token] = True
    return marks
