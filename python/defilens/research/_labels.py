"""Labels for a study: decision times on a candle grid, and forward returns from the prices the
collector fetched, entered strictly after a signal became knowable and never filled across a
missing round.

Prices are the snapshot's, one per fetch, on the rounds the collectors made (`_rounds`: recorded
in their commits, inferred only where nothing was recorded). The entry is the token's fetch in the
first round after the decision, if that round comes within one cadence of it; the exit its fetch
in the first round at or after the entry round's start plus the horizon, if that round comes
within one cadence of that moment. A horizon is counted from round start to round start, so a
round's fetches spreading over its first seconds cannot push an exit a whole round late, and
alphalens or vectorbt, which count rounds, see the same returns."""

from __future__ import annotations

import datetime as dt
from typing import Any, List, Mapping, Optional, Sequence, Union

import polars as pl

from .._core import INTERVAL_MS
from .._duration import format_duration, positive_duration
from .._exceptions import HistoryError
from .._storage import PathLike, Root
from .._time import UTC_MS, aware
from ..history import history_cut, open_for_reading, scan_table
from ._costs import BOOK_FIELDS, books_at, fetches_of, fixed_cost_of, net_long, notionals_of, one_way
from ._membership import rule_of, within
from ._rounds import ON_TIME, rounds_made
from ._scope import CANDLE_INTERVALS, scope_of

Horizon = Union[str, dt.timedelta]

#: Why a label is null: each is counted in the evaluation.
MISSING_ENTRY = "no entry round"  # the token was not fetched in the first round after the signal
MISSING_EXIT = "no exit round"  # the token was not fetched in the round the horizon ends in
PAST_END = "past the history's end"  # the exit lies after the last round collected
NO_PRICE = "no price"  # the fetch had no price, or one of 0 or below (a service's "unknown")
SHORT_HORIZON = "horizon under the cadence"  # the entry round's run polled less often than the horizon

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
#: The columns ``notional=`` or ``costs=`` add: the trade's size, its one-way costs at entry (a
#: buy) and exit (a sale), the return net of them, and the markets fetches they were read from.
COST_COLUMNS = ["notional", "entry_cost", "exit_cost", "net_return", "entry_market", "exit_market"]


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
    return sorted({positive_duration("horizon", value) for value in given})


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


def fetch_span(root: Root) -> "tuple[Optional[dt.datetime], Optional[dt.datetime]]":
    """The first and the last fetch of the history (its snapshot's ``fetched_at``), None for none."""
    span = (
        scan_table(root, "snapshot")
        .select(pl.col("fetched_at").min().alias("first"), pl.col("fetched_at").max().alias("last"))
        .collect()
    )
    return span["first"][0], span["last"][0]


#: ``decision_times(offset=OBSERVED)``: decide when the first round after each close is in.
OBSERVED = "observed"


def decision_times(
    source: PathLike,
    interval: str = "1h",
    *,
    offset: Union[Horizon, str] = dt.timedelta(0),
    start: Optional[dt.datetime] = None,
    end: Optional[dt.datetime] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.Series:
    """Decision times on a candle grid: each close of ``interval`` candles (``"1h"``: every hour
    on the hour, UTC) plus ``offset`` (a duration such as ``"5m"``: how long after the close you
    decide), within the history's fetches (or ``start``/``end``). A `pl.Series` named ``at``, for
    `asof` and `forward_returns`.

    A decision at the close itself (the default) sees the candle before it: the rounds that show
    a close come after it. ``offset="observed"`` decides instead when the first round that began
    at or after each close is in (its last fetch), so that every token's view of the new candle
    is there: the observed lag, close by close (a close no round saw within one candle is
    skipped). On a history cut by the look-ahead check, decisions run up to the cut."""
    if interval not in CANDLE_INTERVALS:
        scope_of("indicators", intervals=interval)  # words the error for an unknown interval
    length = dt.timedelta(milliseconds=INTERVAL_MS[interval])
    observed = isinstance(offset, str) and offset.strip().lower() == OBSERVED
    shift = dt.timedelta(0) if observed or offset == dt.timedelta(0) else positive_duration("offset", offset)
    if shift >= length:
        raise ValueError(f"offset {offset!r} is a whole {interval} candle or more: give less than {interval}")
    root = open_for_reading(source, storage_options)
    first, last = fetch_span(root)
    if first is None or last is None:
        raise HistoryError(f"the history at {root.url!r} has no snapshot rows: nothing to decide on")
    cut = history_cut()
    if cut is not None and cut >= first:
        last = cut  # the cut history's "now": a decision after its last fetch exists there too
    lo = _aware(start, "start") if start is not None else first
    hi = _aware(end, "end") if end is not None else last
    if hi < first or lo > last:
        raise ValueError(f"{lo} to {hi} lies outside the history, which spans {first} to {last}")
    if lo > hi:
        raise ValueError(f"start {lo} is after end {hi}")
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    if interval == "1w":
        epoch = dt.datetime(1970, 1, 5, tzinfo=dt.timezone.utc)  # weekly candles close on Mondays, 00:00 UTC
    steps = -(-((lo - length if observed else lo - shift) - epoch) // length)  # the first close to consider
    closes = []
    moment = epoch + steps * length
    while moment + shift <= hi:
        closes.append(moment)
        moment += length
    times = _observed(root, closes, length, lo, hi) if observed else [close + shift for close in closes]
    if not times:
        raise ValueError(f"no {interval} close plus {offset!r} falls between {lo} and {hi}")
    return pl.Series("at", times, dtype=UTC_MS)


def _observed(
    root: Root, closes: List[dt.datetime], length: dt.timedelta, lo: dt.datetime, hi: dt.datetime
) -> List[dt.datetime]:
    """For each close, the last fetch of the first round that began at or after it, if that
    round began within one candle of the close; within ``lo`` to ``hi``, each once."""
    fetches = scan_table(root, "snapshot").select("token", "fetched_at", pl.lit(1.0).alias("price")).collect()
    made = rounds_made(root, fetches)
    ends = (
        made.token_rounds.group_by("start")
        .agg(pl.col("fetched_at").max().alias("end"))
        .filter(pl.col("end").is_not_null())
        .sort("start")
    )
    found = (
        pl.DataFrame({"close": closes}, schema={"close": UTC_MS})
        .sort("close")
        .join_asof(ends, left_on="close", right_on="start", strategy="forward")
        .filter(
            pl.col("start").is_not_null(),
            pl.col("start") - pl.col("close") < pl.lit(length),
            pl.col("end").is_between(pl.lit(lo), pl.lit(hi)),
        )
    )
    return sorted(set(found["end"].to_list()))


def _aware(moment: Any, what: str) -> dt.datetime:
    if not isinstance(moment, dt.datetime):
        raise TypeError(f"{what} must be a datetime, got {type(moment).__name__}: {moment!r}")
    return aware(moment)


def entries_of(decisions: pl.DataFrame, rounds: pl.DataFrame, *, strict: bool) -> pl.DataFrame:
    """The one entry rule: each decision (``token``, ``_moment``, sorted by ``_moment``) with the
    first round after it among its token's ``rounds`` (`Rounds.token_rounds`): ``_entry_start``,
    ``_entry_every``, ``entry_at`` and ``entry_price`` (the token's fetch there), and
    ``_entry_missing``, why it cannot be entered (null when it can). ``strict``: the round's
    fetches come strictly after the moment (a round fetched at that very moment is the one the
    signal was computed from); else at or after it (a moment plus a delay)."""
    entries = decisions.join_asof(
        rounds.select(
            "token",
            "opened",
            pl.col("start").alias("_entry_start"),
            pl.col("every").alias("_entry_every"),
            pl.col("fetched_at").alias("entry_at"),
            pl.col("price").alias("entry_price"),
        ).sort("opened"),
        left_on="_moment",
        right_on="opened",
        by="token",
        strategy="forward",
        allow_exact_matches=not strict,
        check_sortedness=False,  # sorted by the moment, and each token's rounds by their opening
    )
    # The first round after the decision, or none: a round further than one cadence away means
    # the collector made none in between (a pause), and a later round is never a late entry.
    wait = pl.col("_entry_start") - pl.col("_moment")
    late = wait > pl.col("_entry_every") if strict else wait >= pl.col("_entry_every")
    return entries.with_columns(
        pl.when(pl.col("_entry_start").is_null())
        .then(pl.lit(PAST_END))
        .when(late | pl.col("entry_at").is_null())
        .then(pl.lit(MISSING_ENTRY))
        .when(pl.col("entry_price").is_null())
        .then(pl.lit(NO_PRICE))
        .alias("_entry_missing")
    )


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
    notional: Optional[float] = None,
    costs: Optional[Union[str, float]] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.DataFrame:
    """Forward returns for each decision, from the prices the collector fetched: the labels of
    a study, computed without look-ahead.

    ``decisions`` has a ``token`` column and a ``knowable`` column (default ``at``, as `asof`
    gives; ``first_seen_at`` for a `panel`): the moment each signal could be acted on. Its rows
    come back once per horizon, with every column they had, plus:

    - ``horizon`` (a Duration), ``entry_at`` and ``entry_price``: the token's fetch in the first
      round after ``knowable`` (its first fetch strictly after it; or at or after ``knowable +
      entry_delay``), if that round started within one cadence of that moment;
    - ``exit_at`` and ``exit_price``: its fetch in the first round that started at or after the
      entry round's start plus the horizon, if it started within one cadence of that moment;
      ``forward_return`` is ``exit_price / entry_price - 1``;
    - ``missing``: why a label is null: ``"no entry round"`` or ``"no exit round"`` (the token was
      not fetched in that round, or no round came within one cadence: the collector was paused;
      a price is never carried over from another round), ``"past the history's end"``,
      ``"no price"`` (none fetched, or one of 0 or below), ``"horizon under the cadence"`` (the
      entry round's run polled less often than the horizon);
    - with ``path=True``, ``max_return`` and ``min_return`` over the fetches from entry to exit.

    Rounds are the ones the collectors made, as their commits record them (each run with its own
    cadence: a restart off the old grid or at another cadence is followed round by round),
    inferred from the fetches only where nothing was recorded; ``cadence`` (a duration) replaces
    every run's. A horizon shorter than every run's cadence is refused.

    ``universe`` (what `defilens.universe` gives) keeps only the decisions whose token was a
    member at its ``knowable`` moment, and adds a ``universe`` column saying how it was chosen
    (its ``rule``; ``"given without a rule"`` for a frame without one), which
    `evaluate(..., history=)` records in the history's journal.

    ``notional`` (USD a trade) prices each trade net of its costs, read from the history's
    markets fetches (`defilens.costs`: the token's latest fetch at or before the entry and the
    exit, never a later one): ``notional``, ``entry_cost`` (buying it, one way, as a share) and
    ``exit_cost`` (selling it), ``net_return`` (bought at the entry price plus its cost, sold at
    the exit price less its), and ``entry_market`` and ``exit_market``, what the costs were read
    from (the fetch's time, half-spread and depths), with which `evaluate` prices the short side,
    the turnover and other notionals. ``costs`` a number instead is a fixed one-way cost as a
    share of each trade (0.001: 10 basis points), as vectorbt's ``fees``.
    """
    horizon_list = horizons_of(horizons)
    delay = None if entry_delay is None else positive_duration("entry_delay", entry_delay)
    size, fixed = _trade_size(notional, costs)
    frame = _signals_of(decisions, knowable, universe)
    root = open_for_reading(source, storage_options)
    tokens = frame["token"].unique().to_list()
    fetches = fetches_of(root, tokens) if size is not None and fixed is None else None
    prices = fetched_prices(root, tokens, price)
    rounds = _token_rounds(root, prices, cadence, horizon_list)
    _check_within_prices(frame[knowable].cast(UTC_MS), prices)
    keyed = _keyed_by_decision(frame, knowable, delay)
    entries = entries_of(keyed.select("_decision", "token", "_moment"), rounds, strict=delay is None)
    exits = _exit_rounds(rounds)
    labelled: List[pl.DataFrame] = []
    for horizon in horizon_list:
        one = _labels_at(entries, exits, horizon)
        labelled.append(_with_path(one, rounds) if path else one)
    out = _decisions_with_labels(keyed, pl.concat(labelled, how="diagonal_relaxed"), frame.columns, path)
    if size is None and fixed is None:
        return out
    return _net_of_costs(out, fetches, size, fixed)


def _trade_size(
    notional: Optional[float], costs: Optional[Union[str, float]]
) -> "tuple[Optional[float], Optional[float]]":
    """The one trade's size in USD and the fixed one-way cost (either None when not given)."""
    size = None if notional is None else notionals_of(notional)[0]
    if notional is not None and isinstance(notional, (list, tuple, pl.Series)):
        raise TypeError(
            "notional is one trade's size in USD here (evaluate(..., notional=) prices the labels at another)"
        )
    return size, fixed_cost_of(costs, size)


def _signals_of(
    decisions: Union[pl.DataFrame, pl.LazyFrame], knowable: str, universe: Optional[pl.DataFrame]
) -> pl.DataFrame:
    """``decisions`` checked and collected, kept to the ``universe``'s members when one is given."""
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
    if universe is not None:
        kept = within(frame, universe, knowable)
        assert isinstance(kept, pl.DataFrame)
        frame = kept if "universe" in kept.columns else kept.with_columns(pl.lit(rule_of(universe)).alias("universe"))
    if frame.height == 0:
        raise ValueError("decisions is empty: there is nothing to label (an empty universe?)")
    if "horizon" in frame.columns or any(column in frame.columns for column in LABEL_COLUMNS[1:] + COST_COLUMNS):
        raise ValueError("decisions already has label columns (horizon, entry_at, ...): pass the signals, not labels")
    return frame


def _token_rounds(
    root: Root, prices: pl.DataFrame, cadence: Optional[Horizon], horizon_list: List[dt.timedelta]
) -> pl.DataFrame:
    """The rounds the collectors made, per token (`Rounds.token_rounds`), once it is sure that
    they can price every horizon."""
    made = rounds_made(root, prices, positive_duration("cadence", cadence) if cadence is not None else None)
    if made.rounds.height < 2:
        raise HistoryError("the history holds one round only: a forward return needs at least two")
    shortest = made.rounds["every"].min()
    short = [h for h in horizon_list if shortest is not None and h < shortest]  # type: ignore[operator]
    if short:
        raise ValueError(
            f"horizon {format_duration(short[0])} is shorter than the history's polling cadence "
            f"({format_duration(shortest)}): no round can price it; use horizons of {format_duration(shortest)} or more"  # type: ignore[arg-type]
        )
    return made.token_rounds


def _check_within_prices(times: pl.Series, prices: pl.DataFrame) -> None:
    """Refuses decisions (their knowable ``times``) that all lie outside the span of ``prices``."""
    first, last = prices["fetched_at"].min(), prices["fetched_at"].max()
    earliest, latest = times.min(), times.max()
    if earliest is not None and (latest < first or earliest > last):  # type: ignore[operator]
        raise ValueError(
            f"the decisions ({earliest!s} to {latest!s}) lie outside the history's prices ({first!s} to {last!s})"
        )


def _keyed_by_decision(frame: pl.DataFrame, knowable: str, delay: Optional[dt.timedelta]) -> pl.DataFrame:
    """The decisions numbered (``_decision``, to put their labels back in their order), with
    ``_knowable`` and ``_moment`` (knowable plus the entry delay), sorted by ``_moment``."""
    keyed = frame.with_row_index("_decision").with_columns(pl.col(knowable).cast(UTC_MS).alias("_knowable"))
    moment = pl.col("_knowable") + (pl.lit(delay) if delay is not None else pl.lit(dt.timedelta(0)))
    return keyed.with_columns(moment.alias("_moment")).sort("_moment")


def _exit_rounds(rounds: pl.DataFrame) -> pl.DataFrame:
    """The token rounds as candidate exits, sorted by their start."""
    return rounds.select(
        "token",
        pl.col("start").alias("_exit_start"),
        pl.col("every").alias("_exit_every"),
        pl.col("fetched_at").alias("exit_at"),
        pl.col("price").alias("exit_price"),
    ).sort("_exit_start")


def _labels_at(entries: pl.DataFrame, exits: pl.DataFrame, horizon: dt.timedelta) -> pl.DataFrame:
    """The entries with their exit round at ``horizon``, why a label is missing, and the forward
    return where none is."""
    # The exit's round: the first that started at or after the entry round's start plus the
    # horizon (less the few milliseconds a round's start may lag its tick).
    on_time = pl.col("_entry_every") * ON_TIME
    target = pl.col("_entry_start") + pl.lit(horizon)
    one = (
        entries.with_columns(pl.lit(horizon).alias("horizon"), target.alias("_target"))
        .with_columns((pl.col("_target") - on_time).alias("_exit_from"))
        .sort("_exit_from")
        .join_asof(
            exits,
            left_on="_exit_from",
            right_on="_exit_start",
            by="token",
            strategy="forward",
            check_sortedness=False,  # sorted by _exit_from, and each token's rounds by start
        )
    )
    one = one.with_columns(_why_missing(horizon, on_time).alias("missing"))
    valid = pl.col("missing").is_null()
    return one.with_columns(
        *[pl.when(valid).then(pl.col(c)).alias(c) for c in ("entry_at", "entry_price", "exit_at", "exit_price")],
        pl.when(valid).then(pl.col("exit_price") / pl.col("entry_price") - 1).alias("forward_return"),
    )


def _why_missing(horizon: dt.timedelta, on_time: pl.Expr) -> pl.Expr:
    """Why a label at ``horizon`` is null (null when it is not): the first reason that holds."""
    paused = pl.col("_exit_start") - pl.col("_target") >= pl.col("_exit_every") - on_time
    return (
        pl.when(pl.col("_entry_missing").is_not_null())
        .then(pl.col("_entry_missing"))
        .when(pl.col("_entry_every") > pl.lit(horizon))
        .then(pl.lit(SHORT_HORIZON))
        .when(pl.col("_exit_start").is_null())
        .then(pl.lit(PAST_END))
        .when(paused | pl.col("exit_at").is_null())
        .then(pl.lit(MISSING_EXIT))
        .when(pl.col("exit_price").is_null())
        .then(pl.lit(NO_PRICE))
    )


def _decisions_with_labels(keyed: pl.DataFrame, labels: pl.DataFrame, columns: List[str], path: bool) -> pl.DataFrame:
    """Each decision's ``columns`` followed by its labels, one row per horizon, in the decisions'
    order."""
    added = LABEL_COLUMNS + (PATH_COLUMNS if path else [])
    out = keyed.drop("_knowable", "_moment").join(labels.select("_decision", *added), on="_decision", how="left")
    return out.sort("_decision", "horizon").drop("_decision").select(*columns, *added)


def _net_of_costs(
    labels: pl.DataFrame, fetches: Optional[pl.DataFrame], notional: Optional[float], fixed: Optional[float]
) -> pl.DataFrame:
    """The labels with `COST_COLUMNS`: costs read from ``fetches`` (the markets history) at the
    entry and the exit for ``notional``, or ``fixed`` on every trade."""
    book = pl.Struct({"fetched_at": UTC_MS, **{f: pl.Float64 for f in BOOK_FIELDS[1:]}})
    entry: pl.Expr
    exit_: pl.Expr
    if fetches is None:
        entry = pl.when(pl.col("entry_at").is_not_null()).then(pl.lit(fixed))
        exit_ = pl.when(pl.col("exit_at").is_not_null()).then(pl.lit(fixed))
        labels = labels.with_columns(
            pl.lit(None, book).alias("entry_market"),
            pl.lit(None, book).alias("exit_market"),
        )
    else:
        labels = labels.with_columns(
            books_at(fetches, labels, "entry_at").alias("entry_market"),
            books_at(fetches, labels, "exit_at").alias("exit_market"),
        )
        assert notional is not None
        side = pl.col("entry_market").struct
        entry = one_way(side.field("half_spread"), side.field("depth_usd_positive_two"), notional)
        side = pl.col("exit_market").struct
        exit_ = one_way(side.field("half_spread"), side.field("depth_usd_negative_two"), notional)
    return (
        labels.with_columns(
            pl.lit(notional, pl.Float64).alias("notional"), entry.alias("entry_cost"), exit_.alias("exit_cost")
        )
        .with_columns(net_long(pl.col("forward_return"), pl.col("entry_cost"), pl.col("exit_cost")).alias("net_return"))
        .select(*[c for c in labels.columns if c not in COST_COLUMNS], *COST_COLUMNS)
    )


def _with_path(labels: pl.DataFrame, rounds: pl.DataFrame) -> pl.DataFrame:
    """``max_return`` and ``min_return``: the best and worst price from entry to exit, as a
    return on the entry price (a range join per token, kept in memory per horizon)."""
    spans = labels.filter(pl.col("missing").is_null()).select(
        "_decision", "token", "_entry_start", "_exit_start", "entry_price"
    )
    fetched = rounds.filter(pl.col("price").is_not_null()).select("token", pl.col("start").alias("_at"), "price")
    inside = spans.join(fetched, on="token").filter(
        (pl.col("_at") >= pl.col("_entry_start")) & (pl.col("_at") <= pl.col("_exit_start"))
    )
    extremes = inside.group_by("_decision").agg(
        (pl.col("price").max() / pl.col("entry_price").first() - 1).alias("max_return"),
        (pl.col("price").min() / pl.col("entry_price").first() - 1).alias("min_return"),
    )
    return labels.join(extremes, on="_decision", how="left")
