"""The point-in-time panel: polls turned into one row per candle, with the moment each value
became knowable, and as-of reads of it that never look ahead."""

from __future__ import annotations

import datetime as dt
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

import polars as pl

from ..history import scan
from ..history._root import PathLike

KEYS = ["token", "interval", "indicator"]
UTC_MS = pl.Datetime("ms", "UTC")


def panel(source: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> pl.LazyFrame:
    """One row per (``token``, ``interval``, ``indicator``, ``updated_at``) of a collected history:
    ``updated_at`` is the candle close that ``ta_updated`` reported in the same fetch,
    ``first_seen_at`` the earliest ``fetched_at`` that showed this candle, ``value`` the value first
    seen, ``last_value`` the value last seen for the same candle, ``revisions`` how many distinct
    values the service gave for it (more than 1: it repainted), ``lag`` ``first_seen_at -
    updated_at``.

    Lazy end to end: filters on ``token``, ``interval`` or ``indicator`` go down into the scans.

    Examples:
        >>> defilens.panel("history/").filter(pl.col("token") == "bitcoin").collect()  # doctest: +SKIP
    """
    return per_candle(seen(source, storage_options))


def seen(source: PathLike, storage_options: Optional[Mapping[str, Any]]) -> pl.LazyFrame:
    """Every indicator value fetched, beside the candle close ``ta_updated`` gave in that fetch."""
    indicators = scan(source, "indicators", storage_options=storage_options).select(
        "token", "interval", "indicator", "value", "fetched_at"
    )
    closes = scan(source, "ta_updated", storage_options=storage_options).select(
        "token", "interval", "fetched_at", "updated_at"
    )
    return indicators.join(closes, on=["token", "interval", "fetched_at"], how="inner").filter(
        pl.col("updated_at").is_not_null()
    )


def per_candle(rows: pl.LazyFrame) -> pl.LazyFrame:
    """`seen` rows folded into the panel's one row per candle."""
    return (
        rows.group_by([*KEYS, "updated_at"])
        .agg(
            pl.col("fetched_at").min().alias("first_seen_at"),
            pl.col("value").get(pl.col("fetched_at").arg_min()).alias("value"),
            pl.col("value").get(pl.col("fetched_at").arg_max()).alias("last_value"),
            pl.col("value").n_unique().cast(pl.Int64).alias("revisions"),
        )
        .with_columns((pl.col("first_seen_at") - pl.col("updated_at")).alias("lag"))
        .select(*KEYS, "updated_at", "first_seen_at", "value", "last_value", "revisions", "lag")
    )


def _moments(at: Union[dt.datetime, Sequence[dt.datetime]]) -> pl.DataFrame:
    moments = [at] if isinstance(at, dt.datetime) else list(at)
    if not moments:
        raise ValueError("at needs at least one datetime")
    for moment in moments:
        if not isinstance(moment, dt.datetime):
            raise TypeError(f"at must be a datetime or a sequence of them, got {type(moment).__name__}")
    aware = [m if m.tzinfo is not None else m.replace(tzinfo=dt.timezone.utc) for m in moments]  # naive means UTC
    return pl.DataFrame({"at": aware}).with_columns(pl.col("at").cast(UTC_MS)).unique().sort("at")


def asof(
    source: PathLike,
    at: Union[dt.datetime, Sequence[dt.datetime]],
    *,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.DataFrame:
    """For each decision time in ``at`` (a datetime or several; naive means UTC), per
    (``token``, ``interval``, ``indicator``), the latest candle whose ``first_seen_at <= at``:
    ``at``, ``token``, ``interval``, ``indicator``, ``updated_at``, ``first_seen_at``, ``value``.

    Never a value before it was seen: the join a backtest can trust. A decision time before the
    first fetch gets no rows.
    """
    moments = _moments(at)
    rows = panel(source, storage_options=storage_options).select(*KEYS, "updated_at", "first_seen_at", "value")
    # Of a key's candles in the order they were first seen, only those newer than every candle
    # seen before them can be the latest at some moment (an older candle seen late never is).
    frontier = (
        rows.sort("first_seen_at", "updated_at")
        .filter(pl.col("updated_at") >= pl.col("updated_at").cum_max().over(KEYS))
        .collect()
    )
    keys = frontier.select(KEYS).unique()
    grid = moments.join(keys, how="cross").sort("at")
    with warnings.catch_warnings():
        # Both sides are sorted just above; polars says it cannot check that within groups.
        warnings.filterwarnings("ignore", message="Sortedness of columns cannot be checked")
        found = grid.join_asof(
            frontier.sort("first_seen_at"), left_on="at", right_on="first_seen_at", by=KEYS, strategy="backward"
        )
    return (
        found.filter(pl.col("first_seen_at").is_not_null())
        .select("at", *KEYS, "updated_at", "first_seen_at", "value")
        .sort("at", *KEYS)
    )
