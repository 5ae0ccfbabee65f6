"""The point-in-time panel: polls turned into one row per candle (indicators, signals, patterns)
or per fetch (snapshot), each with the moment it became knowable.

Two clocks meet here. The service's: a candle's ``candle_close`` (the ``ta_<interval>_updated_at``
that the same fetch reported) and ``candle_open`` (the close less the interval's length). The
collector's: ``first_seen_at``, the ``fetched_at`` of the first fetch that showed the candle,
which is when the value became knowable. A study decides on ``first_seen_at``, never on a
candle's time."""

from __future__ import annotations

import warnings
from typing import Any, Iterable, List, Mapping, Optional, Sequence

import polars as pl

from .._exceptions import DefiLensWarning
from .._stack import stacklevel_outside
from .._storage import PathLike
from ..history import open_for_reading, scan_table
from ._membership import within
from ._scope import Names, Scope, candle_times, scope_of

#: The panel's columns for a frame whose rows carry a value (indicators, signals).
VALUE_COLUMNS = [
    "candle_close",
    "candle_open",
    "first_seen_at",
    "value",
    "last_value",
    "revisions",
    "lag",
]
#: The panel's columns for patterns (one row a pattern a candle showed).
PATTERN_COLUMNS = [
    "candle_open",
    "candle_close",
    "first_seen_at",
    "last_seen_at",
    "shown",
    "fetches",
    "withdrawn",
    "lag",
]
#: What every fetch of a candle frame is joined with: its candle's close, from ta_updated.
_CLOSE = "candle_close"


def panel(
    source: PathLike,
    frame: str = "indicators",
    *,
    tokens: Names = None,
    intervals: Names = None,
    indicators: Names = None,
    families: Names = None,
    columns: Names = None,
    universe: Optional[pl.DataFrame] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.LazyFrame:
    """The point-in-time panel of one frame of a collected history, as a LazyFrame.

    ``indicators`` and ``signals`` (MACD state): one row per (``token``, ``interval``,
    ``indicator``, candle) with ``candle_close`` and ``candle_open`` (the service's candle: the
    close is the ``ta_updated`` time the same fetch reported, the open that less the interval's
    length), ``first_seen_at`` (the ``fetched_at`` of the first fetch that showed this candle:
    when the value became knowable), ``value`` (as first seen), ``last_value`` (as last seen for
    the same candle), ``revisions`` (distinct values the service gave for it: more than 1, it
    repainted) and ``lag`` (``first_seen_at - candle_close``).

    ``patterns``: one row per (``token``, ``interval``, ``family``, ``pattern``, candle) that any
    fetch showed, with ``first_seen_at`` and ``last_seen_at``, ``shown`` (how many fetches of
    the candle showed it), ``fetches`` (how many fetches saw the candle) and ``withdrawn`` (the
    candle's last fetch no longer showed it: a repaint). 4h patterns have no candle time (the
    service sends no 4h ``ta_updated``) and are not in the panel: read them with `scan`.

    ``snapshot``: one row per fetch, ``token``, ``fetched_at`` (when the figures became knowable)
    and the ``columns`` asked for (default price, market cap, rank, volume).

    Scope it with ``tokens``, ``intervals``, ``indicators`` (indicators, signals) or
    ``families`` (patterns): the filters reach the Delta scans, so a scoped panel reads only its
    rows. Names the catalogue does not know are a `ValueError` naming the known ones.

    ``universe`` (what `defilens.universe` gives) keeps a token's rows only while it was a
    member: a candle by its ``first_seen_at``, a fetch by its ``fetched_at``.

    Examples:
        >>> defilens.panel("history/", tokens="bitcoin", intervals="1h", indicators="rsi14").collect()  # doctest: +SKIP
    """
    scope = scope_of(
        frame, tokens=tokens, intervals=intervals, indicators=indicators, families=families, columns=columns
    )
    root = open_for_reading(source, storage_options)
    if scope.tokens is not None:
        table = fetches_table(scope)
        held = scan_table(root, table, where=scope.filters(table)).select("token").unique().collect()
        name_absent_tokens(root, scope, held["token"].to_list(), strict=False)
    found = panel_of(root, scope)
    if universe is None:
        return found
    kept = within(found, universe, "fetched_at" if scope.frame == "snapshot" else "first_seen_at")
    assert isinstance(kept, pl.LazyFrame)
    return kept


def fetches_table(scope: Scope) -> str:
    """The table whose rows say which tokens a read of ``scope`` has fetches of."""
    return "snapshot" if scope.frame == "snapshot" else "ta_updated"


def name_absent_tokens(root: Any, scope: Scope, held: Iterable[str], *, strict: bool) -> None:
    """Never an empty answer without a word: names the tokens of the scope that the history
    holds no rows of (a mistyped id, a token never collected). When it holds none of them, a
    `ValueError` if ``strict``, else a warning."""
    if scope.tokens is None:
        return
    found = set(held)
    absent = [token for token in scope.tokens if token not in found]
    if not absent:
        return
    names = f"{', '.join(absent[:5])}{' (and more)' if len(absent) > 5 else ''}"
    if len(absent) < len(scope.tokens):
        message = f"the history has no {scope.frame} rows for {len(absent)} of the tokens asked for ({names})"
    else:
        message = (
            f"the history at {root.url!r} has no {scope.frame} rows for {names} in this scope: check the token ids and "
            "intervals"
        )
        if strict:
            raise ValueError(message)
    warnings.warn(message, DefiLensWarning, stacklevel=stacklevel_outside())


def panel_of(root: Any, scope: Scope, before: Sequence[pl.Expr] = ()) -> pl.LazyFrame:
    """The panel of a checked scope; ``before`` are further filters for every scan (on
    ``fetched_at``: an as-of read never needs a fetch after its last decision time)."""
    if scope.frame == "snapshot":
        return (
            scan_table(root, "snapshot", where=[*scope.filters("snapshot"), *before])
            .select("token", "fetched_at", *scope.columns)
            .sort("token", "fetched_at")
        )
    fetches = seen(root, scope, before)
    if scope.frame == "patterns":
        return per_pattern(fetches, candles_fetched(root, scope, before))
    return per_candle(fetches, scope.keys)


def closes(root: Any, scope: Scope, before: Sequence[pl.Expr] = ()) -> pl.LazyFrame:
    """Every fetch's candle close per (token, interval), from ``ta_updated``."""
    return (
        scan_table(root, "ta_updated", where=[*scope.filters("ta_updated"), *before])
        .select("token", "interval", "fetched_at", pl.col("updated_at").alias(_CLOSE))
        .filter(pl.col(_CLOSE).is_not_null())
    )


def seen(root: Any, scope: Scope, before: Sequence[pl.Expr] = ()) -> pl.LazyFrame:
    """Every row of a candle frame fetched, beside the candle close the same fetch reported."""
    value = ["pattern"] if scope.frame == "patterns" else ["value"]
    rows = scan_table(root, scope.frame, where=[*scope.filters(scope.frame), *before]).select(
        "token", "interval", scope.name_column, *value, "fetched_at"
    )
    return rows.join(closes(root, scope, before), on=["token", "interval", "fetched_at"], how="inner")


def candles_fetched(root: Any, scope: Scope, before: Sequence[pl.Expr] = ()) -> pl.LazyFrame:
    """Per (token, interval, candle): its first and last fetch and how many fetches saw it."""
    return (
        closes(root, scope, before)
        .group_by("token", "interval", _CLOSE)
        .agg(
            pl.col("fetched_at").min().alias("candle_first_fetch"),
            pl.col("fetched_at").max().alias("candle_last_fetch"),
            pl.col("fetched_at").n_unique().cast(pl.Int64).alias("fetches"),
        )
    )


def per_candle(rows: pl.LazyFrame, keys: List[str]) -> pl.LazyFrame:
    """`seen` rows folded into one row per candle: the value first seen, last seen, revisions."""
    return (
        rows.group_by([*keys, _CLOSE])
        .agg(
            pl.col("fetched_at").min().alias("first_seen_at"),
            pl.col("value").get(pl.col("fetched_at").arg_min()).alias("value"),
            pl.col("value").get(pl.col("fetched_at").arg_max()).alias("last_value"),
            pl.col("value").n_unique().cast(pl.Int64).alias("revisions"),
        )
        .with_columns(*candle_times(), (pl.col("first_seen_at") - pl.col(_CLOSE)).alias("lag"))
        .select(*keys, *VALUE_COLUMNS)
    )


def per_pattern(rows: pl.LazyFrame, candles: pl.LazyFrame) -> pl.LazyFrame:
    """`seen` pattern rows folded into one row per (pattern, candle), beside the candle's fetches."""
    keys = ["token", "interval", "family", "pattern"]
    return (
        rows.group_by([*keys, _CLOSE])
        .agg(
            pl.col("fetched_at").min().alias("first_seen_at"),
            pl.col("fetched_at").max().alias("last_seen_at"),
            pl.col("fetched_at").n_unique().cast(pl.Int64).alias("shown"),
        )
        .join(candles, on=["token", "interval", _CLOSE], how="left")
        .with_columns(
            *candle_times(),
            (pl.col("last_seen_at") < pl.col("candle_last_fetch")).alias("withdrawn"),
            (pl.col("first_seen_at") - pl.col(_CLOSE)).alias("lag"),
        )
        .select(*keys, *PATTERN_COLUMNS)
    )
