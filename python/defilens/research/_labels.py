"""Labels for a study: decision times on a candle grid, and forward returns from the prices the
collector fetched, entered strictly after a signal became knowable and never filled across a
missing round.

Prices are the snapshot's, one per fetch. Fetches are placed on the history's rounds: the
cadence (the spacing of a token's consecutive fetches, or the one given) lays a grid from the
first fetch, and each fetch belongs to the nearest grid time (its ``bar``). A horizon is counted
on that grid, from the entry's round to the first round at or after it plus the horizon, so a
round's fetches spreading over its first seconds cannot push an exit a whole round late, and
alphalens or vectorbt, which count bars, see the same returns."""

from __future__ import annotations

import datetime as dt
from typing import Any, List, Mapping, Optional, Sequence, Union

import polars as pl

from .._core import INTERVAL_MS
from .._duration import format_duration, parse_every
from .._exceptions import HistoryError
from .._storage import PathLike, Root
from ..history import open_for_reading, scan_table
from ._membership import within
from ._scope import CANDLE_INTERVALS, scope_of

UTC_MS = pl.Datetime("ms", "UTC")
Horizon = Union[str, dt.timedelta]

#: Why a label is null: each is counted in the evaluation.
MISSING_ENTRY = "no entry round"  # the token was not fetched in the first round after the signal
MISSING_EXIT = "no exit round"  # the token was not fetched in the round the horizon ends in
PAST_END = "past the history's end"  # the exit lies after the last round collected
NO_PRICE = "no price"  # the fetch had no price, or one of 0 or below (a service's "unknown")

#: The columns `forward_returns` adds, in order.
LABEL_COLUMNS = [
    "horizon",
    "entry_at",
    "entry_price",
    "exit_at",
    "exit_price",
    "forward_return",
    "missing",
]
PATH_COLUMNS = ["max_return", "min_return"]


def _duration(what: str, value: Any) -> dt.timedelta:
    if isinstance(value, dt.timedelta):
        duration = value
    elif isinstance(value, str):
        duration = dt.timedelta(seconds=parse_every(value, what))
    else:
        raise TypeError(f"{what} must be a duration such as '4h' or a timedelta, got {type(value).__name__}: {value!r}")
    if duration <= dt.timedelta(0):
        raise ValueError(f"{what} must be positive, got {value!r}")
    return duration


def horizons_of(horizons: Union[Horizon, Sequence[Horizon]]) -> List[dt.timedelta]:
    """The horizons as timedeltas, each once, in increasing order."""
    if isinstance(horizons, (str, dt.timedelta)):
        given: List[Any] = [horizons]
    else:
        try:
            given = list(horizons)
        except TypeError:
            raise TypeError(
                f"horizons must be a duration such as '4h', a timedelta, or a list of them, got "
                f"{type(horizons).__name__}: {horizons!r}"
            ) from None
    if not given:
        raise ValueError("horizons is empty: name at least one, such as ['1h', '4h', '24h']")
    return sorted({_duration("horizon", value) for value in given})


def fetched_prices(root: Any, tokens: Optional[Sequence[str]], price: str) -> pl.DataFrame:
    """Every fetch's ``price`` (a snapshot column), per token, sorted by time. A price of 0 or
    below (what a service reports for a token it cannot price) is null: a return from it would
    be infinite, or a -100% that never happened."""
    scope = scope_of("snapshot", tokens=tokens, columns=price)
    where = [pl.col("fetched_at").is_not_null(), *scope.filters("snapshot")]
    value = pl.col(price).cast(pl.Float64)
    prices = (
        scan_table(root, "snapshot", where=where)
        .select("token", "fetched_at", pl.when((value > 0) & value.is_finite()).then(value).alias("price"))
        .unique(["token", "fetched_at"], keep="first")
        .sort("token", "fetched_at")
        .collect()
    )
    if prices.height == 0:
        raise HistoryError(f"the history at {root.url!r} has no snapshot rows{' for those tokens' if tokens else ''}")
    return prices


def cadence_of(prices: pl.DataFrame) -> dt.timedelta:
    """The history's polling cadence: the median spacing of a token's consecutive fetches."""
    gaps = prices.select((pl.col("fetched_at").diff().over("token")).alias("gap")).drop_nulls()
    gaps = gaps.filter(pl.col("gap") > dt.timedelta(0))
    if gaps.height == 0:
        raise HistoryError("the history holds one round only: a forward return needs at least two")
    median = gaps["gap"].median()
    assert isinstance(median, dt.timedelta)
    # Rounds are scheduled on whole seconds; a few milliseconds of spread are not the cadence.
    return dt.timedelta(seconds=max(1, round(median.total_seconds())))


def with_bars(prices: pl.DataFrame, cadence: dt.timedelta) -> pl.DataFrame:
    """Each fetch with its round's grid time ``bar`` (nearest grid time from the first fetch);
    a second fetch of a token in one round is dropped (the first one counts)."""
    anchor = prices["fetched_at"].min()
    step = int(cadence.total_seconds() * 1000)
    offset = (pl.col("fetched_at") - pl.lit(anchor)).dt.total_milliseconds()
    bar = pl.lit(anchor) + pl.duration(milliseconds=((offset + step // 2) // step) * step)
    return (
        prices.with_columns(bar.cast(UTC_MS).alias("bar")).unique(["token", "bar"], keep="first").sort("token", "bar")
    )


def fetch_span(root: Root) -> "tuple[Optional[dt.datetime], Optional[dt.datetime]]":
    """The first and the last fetch of the history (its snapshot's ``fetched_at``), None for none."""
    span = (
        scan_table(root, "snapshot")
        .select(pl.col("fetched_at").min().alias("first"), pl.col("fetched_at").max().alias("last"))
        .collect()
    )
    return span["first"][0], span["last"][0]


def decision_times(
    source: PathLike,
    interval: str = "1h",
    *,
    offset: Horizon = dt.timedelta(0),
    start: Optional[dt.datetime] = None,
    end: Optional[dt.datetime] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.Series:
    """Decision times on a candle grid: each close of ``interval`` candles (``"1h"``: every hour
    on the hour, UTC) plus ``offset`` (a duration such as ``"5m"``: how long after the close you
    decide), within the history's fetches (or ``start``/``end``). A `pl.Series` named ``at``, for
    `asof` and `forward_returns`."""
    if interval not in CANDLE_INTERVALS:
        scope_of("indicators", intervals=interval)  # words the error for an unknown interval
    length = dt.timedelta(milliseconds=INTERVAL_MS[interval])
    shift = dt.timedelta(0) if offset == dt.timedelta(0) else _duration("offset", offset)
    if shift >= length:
        raise ValueError(f"offset {offset!r} is a whole {interval} candle or more: give less than {interval}")
    root = open_for_reading(source, storage_options)
    first, last = fetch_span(root)
    if first is None or last is None:
        raise HistoryError(f"the history at {root.url!r} has no snapshot rows: nothing to decide on")
    lo = _aware(start, "start") if start is not None else first
    hi = _aware(end, "end") if end is not None else last
    if hi < first or lo > last:
        raise ValueError(f"{lo} to {hi} lies outside the history, which spans {first} to {last}")
    if lo > hi:
        raise ValueError(f"start {lo} is after end {hi}")
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    if interval == "1w":
        epoch = dt.datetime(1970, 1, 5, tzinfo=dt.timezone.utc)  # weekly candles close on Mondays, 00:00 UTC
    steps = -(-(lo - shift - epoch) // length)  # the first close whose decision is at or after lo
    times = []
    moment = epoch + steps * length + shift
    while moment <= hi:
        times.append(moment)
        moment += length
    if not times:
        raise ValueError(f"no {interval} close plus {offset!r} falls between {lo} and {hi}")
    return pl.Series("at", times, dtype=UTC_MS)


def _aware(moment: Any, what: str) -> dt.datetime:
    if not isinstance(moment, dt.datetime):
        raise TypeError(f"{what} must be a datetime, got {type(moment).__name__}: {moment!r}")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)


def forward_returns(
    source: PathLike,
    decisions: Union[pl.DataFrame, pl.LazyFrame],
    horizons: Union[Horizon, Sequence[Horizon]],
    *,
    knowable: str = "at",
    entry_delay: Optional[Horizon] = None,
    price: str = "current_price",
    path: bool = False,
    cadence: Optional[Horizon] = None,
    universe: Optional[pl.DataFrame] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.DataFrame:
    """Forward returns for each decision, from the prices the collector fetched: the labels of
    a study, computed without look-ahead.

    ``decisions`` has a ``token`` column and a ``knowable`` column (default ``at``, as `asof`
    gives; ``first_seen_at`` for a `panel`): the moment each signal could be acted on. Its rows
    come back once per horizon, with every column they had, plus:

    - ``horizon`` (a Duration), ``entry_at`` and ``entry_price``: the token's fetch in the first
      round strictly after ``knowable`` (or at or after ``knowable + entry_delay``);
    - ``exit_at`` and ``exit_price``: its fetch in the first round at or after the entry's round
      plus the horizon; ``forward_return`` is ``exit_price / entry_price - 1``;
    - ``missing``: why a label is null: ``"no entry round"`` or ``"no exit round"`` (the token was
      not fetched in that round: a price is never carried over from another round),
      ``"past the history's end"``, ``"no price"`` (none fetched, or one of 0 or below);
    - with ``path=True``, ``max_return`` and ``min_return`` over the fetches from entry to exit.

    Rounds are the history's polling grid: ``cadence`` (a duration) or, by default, the median
    spacing of a token's fetches. A horizon shorter than the cadence is refused.

    ``universe`` (what `defilens.universe` gives) keeps only the decisions whose token was a
    member at its ``knowable`` moment.
    """
    horizon_list = horizons_of(horizons)
    delay = None if entry_delay is None else _duration("entry_delay", entry_delay)
    frame = decisions.collect() if isinstance(decisions, pl.LazyFrame) else decisions
    if not isinstance(frame, pl.DataFrame):
        raise TypeError(f"decisions must be a polars DataFrame or LazyFrame, got {type(decisions).__name__}")
    for column in ("token", knowable):
        if column not in frame.columns:
            hint = (
                " (a panel's signals are knowable at first_seen_at: pass knowable='first_seen_at')"
                if column == "at" and "first_seen_at" in frame.columns
                else ""
            )
            raise ValueError(
                f"decisions has no {column!r} column{hint}: it needs token and the moment each signal became knowable; "
                f"its columns are {', '.join(frame.columns)}"
            )
    if not isinstance(frame.schema[knowable], pl.Datetime):
        raise TypeError(f"decisions[{knowable!r}] must hold datetimes, got {frame.schema[knowable]}")
    if universe is not None and frame.height:
        kept = within(frame, universe, knowable)
        assert isinstance(kept, pl.DataFrame)
        frame = kept
    if frame.height == 0:
        raise ValueError("decisions is empty: there is nothing to label (an empty universe?)")
    if "horizon" in frame.columns or any(column in frame.columns for column in LABEL_COLUMNS[1:]):
        raise ValueError("decisions already has label columns (horizon, entry_at, ...): pass the signals, not labels")
    root = open_for_reading(source, storage_options)
    tokens = frame["token"].unique().to_list()
    prices = fetched_prices(root, tokens, price)
    step = _duration("cadence", cadence) if cadence is not None else cadence_of(prices)
    short = [h for h in horizon_list if h < step]
    if short:
        raise ValueError(
            f"horizon {format_duration(short[0])} is shorter than the history's polling cadence ({format_duration(step)}): no round "
            f"can price it; use horizons of {format_duration(step)} or more"
        )
    bars = with_bars(prices, step)
    first, last = bars["fetched_at"].min(), bars["fetched_at"].max()
    last_bar = bars["bar"].max()
    times = frame[knowable].cast(UTC_MS)
    earliest, latest = times.min(), times.max()
    if earliest is not None and (latest < first or earliest > last):  # type: ignore[operator]
        raise ValueError(
            f"the decisions ({earliest!s} to {latest!s}) lie outside the history's prices ({first!s} to {last!s})"
        )

    keyed = frame.with_row_index("_decision").with_columns(pl.col(knowable).cast(UTC_MS).alias("_knowable"))
    target = pl.col("_knowable") + (pl.lit(delay) if delay is not None else pl.lit(dt.timedelta(0)))
    keyed = keyed.with_columns(target.alias("_entry_target")).sort("_entry_target")
    entries = keyed.select("_decision", "token", "_entry_target").join_asof(
        bars.select(
            "token",
            pl.col("fetched_at").alias("entry_at"),
            pl.col("bar").alias("_entry_bar"),
            pl.col("price").alias("entry_price"),
        ),
        left_on="_entry_target",
        right_on="entry_at",
        by="token",
        strategy="forward",
        allow_exact_matches=delay is not None,
        check_sortedness=False,  # sorted by the target within each token, which polars cannot check with by=
    )
    # The entry must be the first round after the target, not a later one: a missing round is no
    # entry, never a late one. The first grid time after the target is at most one cadence away.
    late = pl.col("_entry_bar") - pl.col("_entry_target") > pl.lit(step)
    entries = entries.with_columns(
        pl.when(pl.col("entry_at").is_null())
        .then(pl.lit(PAST_END))
        .when(late)
        .then(pl.lit(MISSING_ENTRY))
        .when(pl.col("entry_price").is_null())
        .then(pl.lit(NO_PRICE))
        .alias("_entry_missing")
    )
    by_bar = bars.select("token", "bar", pl.col("fetched_at").alias("exit_at"), pl.col("price").alias("exit_price"))
    step_ms = int(step.total_seconds() * 1000)
    labelled: List[pl.DataFrame] = []
    for horizon in horizon_list:
        # The exit's round: the first grid time at or after the entry's plus the horizon.
        rounds = -(-int(horizon.total_seconds() * 1000) // step_ms)
        exit_bar = pl.col("_entry_bar") + pl.duration(milliseconds=rounds * step_ms)
        one = entries.with_columns(exit_bar.alias("bar"), pl.lit(horizon).alias("horizon")).join(
            by_bar, on=["token", "bar"], how="left"
        )
        reason = (
            pl.when(pl.col("_entry_missing").is_not_null())
            .then(pl.col("_entry_missing"))
            .when(pl.col("bar") > pl.lit(last_bar))
            .then(pl.lit(PAST_END))
            .when(pl.col("exit_at").is_null())
            .then(pl.lit(MISSING_EXIT))
            .when(pl.col("exit_price").is_null())
            .then(pl.lit(NO_PRICE))
        )
        one = one.with_columns(reason.alias("missing"))
        valid = pl.col("missing").is_null()
        one = one.with_columns(
            *[pl.when(valid).then(pl.col(c)).alias(c) for c in ("entry_at", "entry_price", "exit_at", "exit_price")],
            pl.when(valid).then(pl.col("exit_price") / pl.col("entry_price") - 1).alias("forward_return"),
        )
        if path:
            one = _with_path(one, bars)
        labelled.append(one.rename({"bar": "_exit_bar"}))
    labels = pl.concat(labelled)
    columns = LABEL_COLUMNS + (PATH_COLUMNS if path else [])
    out = keyed.drop("_knowable", "_entry_target").join(
        labels.select("_decision", *columns), on="_decision", how="left"
    )
    return out.sort("_decision", "horizon").drop("_decision").select(*[c for c in frame.columns], *columns)


def _with_path(labels: pl.DataFrame, bars: pl.DataFrame) -> pl.DataFrame:
    """``max_return`` and ``min_return``: the best and worst price from entry to exit, as a
    return on the entry price (a range join per token, kept in memory per horizon)."""
    spans = labels.filter(pl.col("missing").is_null()).select("_decision", "token", "_entry_bar", "bar", "entry_price")
    inside = spans.join(bars.select("token", pl.col("bar").alias("_at"), "price"), on="token").filter(
        (pl.col("_at") >= pl.col("_entry_bar")) & (pl.col("_at") <= pl.col("bar"))
    )
    extremes = inside.group_by("_decision").agg(
        (pl.col("price").max() / pl.col("entry_price").first() - 1).alias("max_return"),
        (pl.col("price").min() / pl.col("entry_price").first() - 1).alias("min_return"),
    )
    return labels.join(extremes, on="_decision", how="left")


def spacing_of(times: pl.Series) -> Optional[dt.timedelta]:
    """The median spacing of distinct decision times (None for a single one)."""
    distinct = times.unique().sort()
    if distinct.len() < 2:
        return None
    median = distinct.diff().drop_nulls().median()
    assert isinstance(median, dt.timedelta)
    return median


def overlap_lags(horizon: dt.timedelta, spacing: Optional[dt.timedelta]) -> int:
    """How many decisions' forward returns overlap one's (Newey-West lags): horizon / spacing."""
    if spacing is None or spacing <= dt.timedelta(0):
        return 0
    return max(0, -(-int(horizon.total_seconds() * 1000) // int(spacing.total_seconds() * 1000)))
