"""As-of reads of a collected history: at each decision time, what was knowable then and
nothing after, for any point-in-time frame, computed only for the scope asked for."""

from __future__ import annotations

import datetime as dt
import warnings
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Union

import polars as pl

from .._exceptions import DefiLensWarning, HistoryError
from .._frames import INTERVAL
from .._stack import stacklevel_outside
from .._storage import PathLike
from .._time import UTC_MS, aware
from ..history import State, open_for_reading, scan_table, state
from ._membership import within
from ._panel import _CLOSE, closes, fetches_table, name_absent_tokens, panel_of
from ._scope import CATALOGUE, Names, Scope, candle_times, scope_of

#: Decision times this far past the history's last fetch get a warning: their values are old.
STALE_AFTER = dt.timedelta(days=1)

Moments = Union[dt.datetime, Sequence[dt.datetime], pl.Series]


def moments_of(at: Moments) -> pl.DataFrame:
    """The decision times as a sorted one-column frame ``at`` (naive means UTC). A date, a text
    or a repeated moment is refused: each says what it would have meant."""
    if isinstance(at, pl.Series):
        if not isinstance(at.dtype, pl.Datetime):
            raise TypeError(f"at must hold datetimes, got a Series of {at.dtype}")
        values: List[Any] = at.to_list()
    elif isinstance(at, dt.datetime):
        values = [at]
    elif isinstance(at, (str, bytes, dt.date)):
        hint = (
            ": a date is a day, not a moment; give a datetime such as datetime(2026, 1, 5, 12, tzinfo=timezone.utc)"
            if isinstance(at, dt.date)
            else ""
        )
        raise TypeError(f"at must be a datetime or a sequence of them, got {type(at).__name__}{hint}")
    else:
        try:
            values = list(at)
        except TypeError:
            raise TypeError(f"at must be a datetime or a sequence of them, got {type(at).__name__}") from None
    if not values:
        raise ValueError("at needs at least one datetime")
    for value in values:
        if not isinstance(value, dt.datetime):
            raise TypeError(f"at must be a datetime or a sequence of them, got {type(value).__name__}: {value!r}")
    utc = [aware(v) for v in values]
    moments = pl.DataFrame({"at": utc}).with_columns(pl.col("at").cast(UTC_MS))
    repeated = moments.filter(pl.col("at").is_duplicated())
    if repeated.height:
        raise ValueError(
            f"at repeats {repeated['at'][0]} ({repeated.height} entries share a moment): give each decision time once"
        )
    return moments.sort("at")


def asof(
    source: PathLike,
    at: Moments,
    *,
    frame: str = "indicators",
    tokens: Names = None,
    intervals: Names = None,
    indicators: Names = None,
    families: Names = None,
    columns: Names = None,
    lazy: bool = False,
    universe: Optional[pl.DataFrame] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> Union[pl.DataFrame, pl.LazyFrame]:
    """What was knowable at each decision time in ``at`` (a datetime or several, on the history's
    clock; naive means UTC), for one frame of a collected history. Never a value before it was
    seen: rows are chosen by ``first_seen_at`` (``fetched_at`` for the snapshot), the moment the
    collector had them, never by a candle's time.

    - ``indicators`` / ``signals``: per (``token``, ``interval``, ``indicator``), the latest
      candle whose ``first_seen_at <= at``: ``at``, the keys, ``candle_close``, ``candle_open``,
      ``first_seen_at``, ``value`` (as first seen).
    - ``patterns``: per (``token``, ``interval``), the latest candle first seen by ``at`` and the
      patterns shown for it by then: ``at``, ``token``, ``interval``, ``family``, ``pattern``,
      ``candle_close``, ``candle_open``, ``first_seen_at``.
    - ``snapshot``: per token, the latest fetch at or before ``at``: ``at``, ``token``,
      ``fetched_at`` and the ``columns`` asked for (default price, market cap, rank, volume).

    Scoped by ``tokens``, ``intervals``, ``indicators`` (or ``families`` for patterns, ``columns``
    for the snapshot): the filters and ``fetched_at <= max(at)`` reach the Delta scans, so the
    memory follows the answer, not the history. ``lazy=True`` returns the plan as a LazyFrame;
    for indicators and signals it is another algorithm than the eager call's, with the same
    answer (both are held to a brute force): the eager call reads only the fetches that first
    showed a current candle and collects between its steps, which keeps a year's read within
    about 1 GB where one lazy plan of it ran out of 24.

    A decision time before the first fetch gets no rows; if every one is, or one lies more than
    a day after the last fetch, you are told (a wall-clock time against a history collected on a
    Sandbox's simulated clock is the usual cause). Rows are sorted by ``at`` and the keys.

    ``universe`` (what `defilens.universe` gives) keeps, at each decision time, only the tokens
    that were members then.
    """
    scope = scope_of(
        frame, tokens=tokens, intervals=intervals, indicators=indicators, families=families, columns=columns
    )
    moments = moments_of(at)
    root = open_for_reading(source, storage_options)
    _check_has(root, scope)
    latest = moments["at"].max()
    before = [pl.col("fetched_at") <= latest]
    # An eager read of a candle frame reads ta_updated once for the clock check and the current
    # candles (a day's scoped read spent 20-30 ms of its 0.1 s reading it a second time); a lazy
    # plan reads it where the plan needs it.
    candles = None if lazy or scope.frame == "snapshot" else _candles_seen(root, scope)
    _check_clock(root, scope, moments, None if candles is None else _spans_of(candles))
    if scope.frame == "snapshot":
        plan = _snapshot_asof(root, scope, moments, before)
    elif scope.frame == "patterns":
        plan = _patterns_asof(root, scope, moments, before, candles)
    elif not lazy:
        found = _values_asof_near(root, scope, moments, before, candles)
        return found if universe is None else within(found, universe, "at")
    else:
        plan = _values_asof(root, scope, moments, before)
    answer = plan if lazy else _collect(plan)
    return answer if universe is None else within(answer, universe, "at")


def _check_has(root: Any, scope: Scope) -> None:
    tables = ["snapshot"] if scope.frame == "snapshot" else [scope.frame, "ta_updated"]
    missing = [table for table in tables if state(root, table) is State.MISSING]
    if missing:
        raise HistoryError(
            f"the history at {root.url!r} has no {' or '.join(missing)} table: nothing was ever collected into it, so "
            f"{scope.frame} cannot be read as of a moment"
        )


def _candles_seen(root: Any, scope: Scope) -> pl.DataFrame:
    """Per (token, interval, candle close) in scope, its first and last fetch, over every fetch
    (a fetch that reported no candle under a null close): what the clock check and the current
    candles both read from ``ta_updated``."""
    return _collect(
        scan_table(root, "ta_updated", where=scope.filters("ta_updated"))
        .select("token", "interval", "fetched_at", pl.col("updated_at").alias(_CLOSE))
        .group_by("token", "interval", _CLOSE)
        .agg(pl.col("fetched_at").min().alias("candle_seen_at"), pl.col("fetched_at").max().alias("last_fetch"))
    )


def _spans_of(candles: pl.DataFrame) -> pl.DataFrame:
    return candles.group_by("token").agg(
        pl.col("candle_seen_at").min().alias("first"), pl.col("last_fetch").max().alias("last")
    )


def _check_clock(root: Any, scope: Scope, moments: pl.DataFrame, spans: Optional[pl.DataFrame] = None) -> None:
    """Says so when the decision times cannot be on the history's clock, or the scope names
    tokens the history does not hold: never an empty answer without a word. ``spans``: each
    token's first and last fetch, when already read."""
    if spans is None:
        table = fetches_table(scope)
        spans = (
            scan_table(root, table, where=scope.filters(table))
            .group_by("token")
            .agg(pl.col("fetched_at").min().alias("first"), pl.col("fetched_at").max().alias("last"))
            .collect()
        )
    name_absent_tokens(root, scope, spans["token"].to_list(), strict=True)
    if not spans.height:
        return  # an empty history: nothing in it, nothing to say about clocks
    first, last = spans.select(pl.col("first").min()).item(), spans.select(pl.col("last").max()).item()
    earliest, latest = moments.select(pl.col("at").min()).item(), moments.select(pl.col("at").max()).item()
    if latest < first:
        raise ValueError(
            f"every decision time (the latest {latest}) is before the history's first fetch ({first}): nothing was "
            "knowable then. Is at on the history's clock? A history of a Sandbox on a simulated clock is stamped in "
            "its time only when collected on it: Client(base_url=sandbox) in Python, collect --sandbox --now T on "
            "the command line, or --base-url URL --clock sandbox against a `defilens sandbox`"
        )
    if latest - last > STALE_AFTER:
        clock = " (is at on the history's clock?)" if earliest > last else ""
        warnings.warn(
            f"decision times up to {latest - last} after the history's last fetch ({last}): their values are that "
            f"old{clock}",
            DefiLensWarning,
            stacklevel=stacklevel_outside(),
        )


def _grid(moments: pl.DataFrame, keys: pl.LazyFrame) -> pl.LazyFrame:
    return moments.lazy().join(keys, how="cross").sort("at")


def _frontier(candles: pl.LazyFrame, keys: List[str], time: str) -> pl.LazyFrame:
    """Of a key's candles in the order they were first seen, only those newer than every candle
    seen before them can be the latest at some moment (an older candle seen late never is)."""
    return candles.sort(time, _CLOSE).filter(pl.col(_CLOSE) >= pl.col(_CLOSE).cum_max().over(keys)).sort(time)


def _latest(moments: pl.DataFrame, rows: pl.LazyFrame, keys: List[str], time: str) -> pl.LazyFrame:
    found = _grid(moments, rows.select(keys).unique()).join_asof(
        rows, left_on="at", right_on=time, by=keys, strategy="backward"
    )
    return found.filter(pl.col(time).is_not_null())


def _values_asof(root: Any, scope: Scope, moments: pl.DataFrame, before: Iterable[pl.Expr]) -> pl.LazyFrame:
    keys = scope.keys
    candles = panel_of(root, scope, list(before)).select(*keys, _CLOSE, "candle_open", "first_seen_at", "value")
    return (
        _latest(moments, _frontier(candles, keys, "first_seen_at"), keys, "first_seen_at")
        .select("at", *keys, _CLOSE, "candle_open", "first_seen_at", "value")
        .sort("at", *keys)
    )


def _current_candles(
    root: Any, scope: Scope, moments: pl.DataFrame, before: Iterable[pl.Expr], seen: Optional[pl.DataFrame] = None
) -> pl.LazyFrame:
    """Per decision time and (token, interval): the latest candle any fetch had shown by then,
    and when it was first shown (from ``ta_updated``, the small table; ``seen``: that table's
    candles as `_candles_seen` read them)."""
    series = ["token", "interval"]
    if seen is None:
        fetched = (
            closes(root, scope, list(before))
            .group_by(*series, _CLOSE)
            .agg(pl.col("fetched_at").min().alias("candle_seen_at"))
        )
    else:
        # A candle's first fetch by the latest decision time is its first fetch, if it was seen by then.
        latest = moments["at"].max()
        fetched = (
            seen.lazy()
            .filter(pl.col(_CLOSE).is_not_null(), pl.col("candle_seen_at") <= latest)
            .select(*series, _CLOSE, "candle_seen_at")
        )
    return _latest(moments, _frontier(fetched, series, "candle_seen_at"), series, "candle_seen_at").select(
        "at", *series, _CLOSE, "candle_seen_at"
    )


def _values_asof_near(
    root: Any, scope: Scope, moments: pl.DataFrame, before: List[pl.Expr], seen: Optional[pl.DataFrame] = None
) -> pl.DataFrame:
    """`_values_asof`, exactly, reading only the fetches that first showed a current candle.

    The answer for a key is never newer than its (token, interval)'s current candle in
    ``ta_updated`` (an indicator's candles are candles of ``ta_updated``, seen no earlier), and it
    is that candle, first seen when the candle was, whenever the fetch that first showed the
    candle holds the key's value: so the values are read from those fetches alone (a join with
    the current candles, no per-candle fold of the history). The (token, interval) pairs where
    some key has no such value (a value the service left out, an indicator it stopped sending)
    are read again from all their rows. A year of 5-minute rounds is read once, filtered, and
    never joined whole."""
    current = _collect(_current_candles(root, scope, moments, before, seen))
    if current.is_empty():
        return _collect(_values_asof(root, scope, moments, before))
    firsts = current.select("token", "interval", _CLOSE, pl.col("candle_seen_at").alias("fetched_at")).unique()
    lower = firsts.select(pl.col("fetched_at").min()).item()
    near = [*before, pl.col("fetched_at") >= lower, pl.col("date") >= (lower - dt.timedelta(days=1)).date()]
    # Collected before the join with the current candles: planned as one lazy query with it,
    # polars 2.1 ran out of 24 GB on a year's history; collected first, 1.2 GB.
    values = _collect(
        scan_table(root, scope.frame, where=[*scope.filters(scope.frame), *near])
        .select(*scope.keys, "value", "fetched_at")
        .join(firsts.lazy(), on=["token", "interval", "fetched_at"], how="inner")
    )
    found = (
        current.join(values, on=["token", "interval", _CLOSE], how="inner")
        .with_columns(*candle_times())
        .select("at", *scope.keys, _CLOSE, "candle_open", pl.col("candle_seen_at").alias("first_seen_at"), "value")
        # Two fetches at the very same instant (two collectors, a still simulated clock) show the
        # same candle: one row a key.
        .unique(subset=["at", *scope.keys], keep="first")
    )
    series = ["token", "interval"]
    # Every key the catalogue expects of each current candle must have been answered from it.
    names = pl.DataFrame(
        [
            (interval, name)
            for name, intervals in CATALOGUE[scope.frame].items()
            if scope.names is None or name in scope.names
            for interval in intervals
        ],
        schema={"interval": pl.String, scope.name_column: pl.String},
        orient="row",
    ).with_columns(pl.col("interval").cast(INTERVAL))
    expected = current.select("at", *series).join(names, on="interval")
    redo = expected.join(found, on=["at", *series, scope.name_column], how="anti").select(series).unique()
    if redo.is_empty():
        return found.sort("at", *scope.keys)
    again = Scope(
        scope.frame,
        tuple(redo["token"].unique().sort()),
        tuple(redo["interval"].unique().sort()),
        scope.names,
    )
    redone = _collect(_values_asof(root, again, moments, before)).join(redo, on=series, how="semi")
    kept = found.join(redo, on=series, how="anti")
    return pl.concat([kept, redone]).sort("at", *scope.keys)


def _collect(plan: pl.LazyFrame) -> pl.DataFrame:
    with warnings.catch_warnings():
        # Both sides of an as-of join are sorted by the plan; polars cannot check that within groups.
        warnings.filterwarnings("ignore", message="Sortedness of columns cannot be checked")
        return plan.collect(engine="streaming")


def _patterns_asof(
    root: Any, scope: Scope, moments: pl.DataFrame, before: Iterable[pl.Expr], seen: Optional[pl.DataFrame] = None
) -> pl.LazyFrame:
    series = ["token", "interval"]
    current = _current_candles(root, scope, moments, before, seen).select("at", *series, _CLOSE)
    patterns = panel_of(root, scope, list(before)).select(*scope.keys, _CLOSE, "candle_open", "first_seen_at")
    return (
        current.join(patterns, on=[*series, _CLOSE], how="inner")
        .filter(pl.col("first_seen_at") <= pl.col("at"))
        .select("at", *scope.keys, _CLOSE, "candle_open", "first_seen_at")
        .sort("at", *scope.keys)
    )


def _snapshot_asof(root: Any, scope: Scope, moments: pl.DataFrame, before: Iterable[pl.Expr]) -> pl.LazyFrame:
    rows = panel_of(root, scope, list(before)).sort("fetched_at")
    return (
        _latest(moments, rows, ["token"], "fetched_at")
        .select("at", "token", "fetched_at", *scope.columns)
        .sort("at", "token")
    )
