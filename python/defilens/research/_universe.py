"""A point-in-time universe: which tokens were, say, the top 100 by market cap rank at each
moment, judged from what the history knew then (each token's latest snapshot fetched at or
before the moment), as membership intervals, with the ids and the rule that exclude tokens (over
the snapshot, the info and the markets as they stood then) and the rule's text; and the filter the
research reads take from it."""

from __future__ import annotations

import datetime as dt
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import polars as pl

from .._core import empty_frames
from .._duration import positive_duration
from .._names import unknown_name
from .._storage import PathLike, Root
from .._time import UTC_MS
from ..history import open_for_reading, scan_table
from ._asof import Moments, moments_of
from ._labels import Horizon
from ._markets import FETCH_COLUMNS, markets_fetches
from ._membership import RULE, UNIVERSE_SCHEMA, check_universe, member_rows

#: The columns of `members`.
MEMBERS_SCHEMA = {"at": UTC_MS, "token": pl.String(), "rank": pl.Int64()}
#: The snapshot columns that are about the fetch, not a figure to rank by.
_NOT_FIGURES = ("token", "fetched_at", "date")


def is_rank(column: str) -> bool:
    """Whether a snapshot column is a rank the service made over the whole market (1 is first)."""
    return column.endswith("_rank")


def _ordered_columns() -> "dict[str, pl.DataType]":
    schema = empty_frames()["snapshot"].schema
    return {name: dtype for name, dtype in schema.items() if name not in _NOT_FIGURES}


def _check(top: Any, by: Any, descending: Optional[bool]) -> bool:
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(
            f"top must be a positive int (the universe's size) or None (every token the rule keeps), got {top!r}"
        )
    if not isinstance(by, str):
        raise TypeError(f"by must be the name of a snapshot column, got {type(by).__name__}")
    columns = _ordered_columns()
    if by not in columns:
        raise unknown_name("snapshot column", by, list(columns))
    dtype = columns[by]
    if not (dtype.is_numeric() or isinstance(dtype, pl.Datetime)):
        numeric = [name for name, kind in columns.items() if kind.is_numeric()]
        raise ValueError(
            f"by={by!r} is a {dtype} column: a universe ranks tokens by a number; the numeric snapshot columns are "
            f"{', '.join(numeric)}"
        )
    if descending is not None and not isinstance(descending, bool):
        raise TypeError(f"descending must be True, False or None, got {descending!r}")
    return (not is_rank(by)) if descending is None else descending


def _rule_columns() -> Dict[str, Tuple[str, pl.DataType]]:
    """The columns a rule may name: the snapshot's, the info's it lacks, and what a markets fetch
    gives (`FETCH_COLUMNS`), each with the table it comes from."""
    frames = empty_frames()
    columns: Dict[str, Tuple[str, pl.DataType]] = {
        name: ("snapshot", dtype) for name, dtype in _ordered_columns().items()
    }
    for name, dtype in frames["info"].schema.items():
        columns.setdefault(name, ("info", dtype))
    for name, dtype in FETCH_COLUMNS.items():
        columns.setdefault(name, ("markets", dtype))
    columns.pop("token", None)
    return columns


def _check_rule(exclude: Any, where: Any) -> Tuple[List[str], Optional[pl.Expr]]:
    if exclude is None:
        ids: List[str] = []
    elif isinstance(exclude, str) or not isinstance(exclude, (list, tuple, set, frozenset, pl.Series)):
        raise TypeError(
            f"exclude must be a list of token ids (exclude=['tether', 'usd-coin']), got {type(exclude).__name__}: "
            f"{exclude!r}"
        )
    else:
        ids = list(exclude)
        wrong = [value for value in ids if not isinstance(value, str)]
        if wrong:
            raise TypeError(f"exclude must be a list of token ids (strings), got {wrong[0]!r} in it")
    if where is None:
        return sorted(set(ids)), None
    rules = list(where) if isinstance(where, (list, tuple)) else [where]
    if not rules or not all(isinstance(rule, pl.Expr) for rule in rules):
        raise TypeError(
            "where must be a polars expression (or a list of them, all to hold) over the snapshot, info and markets "
            f"columns, such as ~pl.col('categories').list.contains('Stablecoins') & (pl.col('venues') >= 5); got "
            f"{type(where).__name__}: {where!r}"
        )
    combined = rules[0]
    for rule in rules[1:]:
        combined = combined & rule
    known = _rule_columns()
    for name in combined.meta.root_names():
        if name != "token" and name not in known:
            raise unknown_name("column in where", name, ["token", *known])
    sample = pl.DataFrame(schema={"token": pl.String(), **{name: dtype for name, (_, dtype) in known.items()}})
    try:
        dtype = sample.select(combined.alias("_rule")).schema["_rule"]
    except pl.exceptions.PolarsError as error:
        raise ValueError(f"where cannot be evaluated on the columns it names: {error}") from None
    if dtype != pl.Boolean:
        raise TypeError(
            f"where must say true or false for each token (a boolean expression), but {combined} gives {dtype}"
        )
    return sorted(set(ids)), combined


def rule_text(top: Optional[int], by: str, exclude: Sequence[str], where: Optional[pl.Expr]) -> str:
    """How a universe was chosen, in words: what the journal records with a study over it."""
    text = f"top {top} by {by}" if top is not None else f"every token ranked by {by}"
    if exclude:
        text += f"; excluding {', '.join(exclude)}"
    if where is not None:
        text += f"; where {where}"
    return text


def universe(
    source: PathLike,
    top: Optional[int],
    by: str = "market_cap_rank",
    *,
    exclude: Optional[Sequence[str]] = None,
    where: Union[pl.Expr, Sequence[pl.Expr], None] = None,
    descending: Optional[bool] = None,
    max_age: Optional[Horizon] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.DataFrame:
    """The point-in-time universe of a collected history: which tokens were the ``top`` by the
    snapshot column ``by`` at each moment, judged from what was knowable then (each token's latest
    snapshot fetched at or before the moment), never from today's ranking.

    Returns one row per stretch of a token's membership at one rank: ``token``, ``valid_from``
    (the fetch that showed it in, or at that rank), ``valid_to`` (the fetch that showed it out or
    at another rank; null while it is still a member at its last snapshot), ``rank`` and ``rule``
    (how the universe was chosen, in words: `forward_returns` carries it to the labels and
    `evaluate(..., history=)` records it in the history's journal). A token is
    a member at ``t`` when ``valid_from <= t < valid_to``: ask with `members`, or pass the frame
    as ``universe=`` to `panel`, `asof` and `forward_returns`, which then keep a token's rows only
    while it was a member.

    - ``by`` a rank the service made over the whole market (a column ending in ``_rank``, such as
      the default ``market_cap_rank``): a token is a member while its latest snapshot's rank is
      from 1 to ``top`` (a rank of 0 or below, some services' "unranked", is not a member), and
      ``rank`` is that rank. The candidate set need not be ranked again:
      collect a broad one (the top 300 for a top 100) and the universe follows the service's rank.
    - any other numeric column (``market_cap``, ``total_volume``): the ``top`` tokens by it among
      the history's tokens known at each moment (largest first unless ``descending=False``; ties
      by token id), ``rank`` their place (1 first). Judged at every fetch of the history.

    ``exclude`` (token ids) and ``where`` (a polars expression, or a list of them that must all
    hold) take tokens out before the ``top`` are chosen, so ``top=100`` gives the 100 best of the
    tokens left (``top=None``: all of them). ``where`` names any snapshot column (``categories``,
    ``total_volume``, ...), any info column (``websites``, ``chains``, ...) and what the token's
    markets fetch gave: ``venues`` (exchanges), ``pairs``, ``volume_usd``,
    ``depth_usd_positive_two`` and ``depth_usd_negative_two`` (summed over its pairs) and
    ``half_spread`` (its venues' price dispersion); each as it stood at the moment (the latest
    fetch at or before it, never a later one), so a token drops out when it lost its venues and
    comes back when it regained them. A token the rule cannot judge (a null, no markets fetch yet)
    is not a member. With a rule, a ``_rank`` column ranks the tokens left among the history's
    (the best ``top`` service ranks of 1 or more), and ``rank`` stays the service's.

    A token whose latest snapshot has no value for ``by`` is not a member. ``max_age`` (a
    duration) ends a token's membership that long after its last snapshot when no newer one came
    (a token the collector stopped fetching); without it a snapshot stands until the token's next
    one. A ``by`` the snapshot does not have is a `ValueError` naming the closest column.
    """
    descend = _check(top, by, descending)
    ids, rule = _check_rule(exclude, where)
    text = rule_text(top, by, ids, rule)
    lapse = None if max_age is None else positive_duration("max_age", max_age)
    root = open_for_reading(source, storage_options)
    named = _rule_columns()
    wanted = [] if rule is None else [name for name in dict.fromkeys(rule.meta.root_names()) if name != "token"]
    from_snapshot = [name for name in wanted if named[name][0] == "snapshot" and name != by]
    rows = (
        scan_table(root, "snapshot")
        .select("token", "fetched_at", pl.col(by).alias("_value"), *from_snapshot)
        .collect()
        .with_columns(pl.col("_value").cast(pl.Float64))
        .unique(subset=["token", "fetched_at"], keep="first")
        .sort("token", "fetched_at")
    )
    if by in wanted:
        rows = rows.with_columns(pl.col("_value").alias(by))
    if lapse is not None:
        rows = _with_lapses(rows, lapse)
    if rows.height == 0:
        return pl.DataFrame(schema={**UNIVERSE_SCHEMA, RULE: pl.String()})
    rank_order = is_rank(by) and descending is None
    if rank_order and not ids and rule is None:
        # A rank below 1 is a service's "unranked" (some send 0), never a place at the top.
        within_top = pl.col("_value") >= 1 if top is None else pl.col("_value").is_between(1, top)
        states = rows.select(
            "token",
            pl.col("fetched_at").alias("moment"),
            pl.when(within_top).then(pl.col("_value")).cast(pl.Int64).alias("rank"),
        )
    else:
        others = _rule_sources(root, wanted, named)
        states = _cross_section(rows, top, descend, ids, rule, others, rank_order)
    return _intervals(states).with_columns(pl.lit(text).alias(RULE))


def _rule_sources(root: Root, wanted: List[str], named: Dict[str, Tuple[str, pl.DataType]]) -> List[pl.DataFrame]:
    """The info and markets rows a rule names (``token``, ``fetched_at``, its columns), each
    sorted by token and time: read as they stood at each moment."""
    sources = []
    from_info = [name for name in wanted if named[name][0] == "info"]
    if from_info:
        sources.append(
            scan_table(root, "info")
            .select("token", pl.col("fetched_at").cast(UTC_MS), *from_info)
            .collect()
            .unique(["token", "fetched_at"], keep="first")
            .sort("token", "fetched_at")
        )
    from_markets = [name for name in wanted if named[name][0] == "markets"]
    if from_markets:
        sources.append(markets_fetches(root).select("token", "fetched_at", *from_markets))
    return sources


def _with_lapses(rows: pl.DataFrame, lapse: dt.timedelta) -> pl.DataFrame:
    """Adds a row without a value ``lapse`` after each snapshot not followed by another in time."""
    ends = (
        rows.with_columns(pl.col("fetched_at").shift(-1).over("token").alias("_next"))
        .filter(pl.col("_next").is_null() | (pl.col("_next") - pl.col("fetched_at") > lapse))
        .select("token", (pl.col("fetched_at") + lapse).alias("fetched_at"), pl.lit(None, pl.Float64).alias("_value"))
    )
    return pl.concat([rows, ends]).sort("token", "fetched_at")


def _cross_section(
    rows: pl.DataFrame,
    top: Optional[int],
    descending: bool,
    exclude: Sequence[str] = (),
    rule: Optional[pl.Expr] = None,
    sources: Sequence[pl.DataFrame] = (),
    service_rank: bool = False,
) -> pl.DataFrame:
    """Per moment of the history (every fetch of the snapshot or of a table the rule reads) and
    token known by then: its place by the value of its latest snapshot among every token's that
    is not excluded and passes the rule (each column as its latest fetch at or before the moment
    gave it), the rank when it is within ``top`` (the service's own with ``service_rank``)."""
    times = [rows.select(pl.col("fetched_at").alias("moment"))]
    times += [source.select(pl.col("fetched_at").alias("moment")) for source in sources]
    moments = pl.concat(times).unique().sort("moment")
    firsts = rows.group_by("token").agg(pl.col("fetched_at").min().alias("_first"))
    grid = (
        moments.join(firsts, how="cross")
        .filter(pl.col("moment") >= pl.col("_first"))
        .drop("_first")
        .sort("token", "moment")
    )
    latest = grid
    for source in [rows, *sources]:
        latest = latest.join_asof(
            source.rename({"fetched_at": "moment"}),
            on="moment",
            by="token",
            strategy="backward",
            check_sortedness=False,  # sorted by moment within each token, which polars cannot check with by=
        )
    eligible = pl.col("_value").is_not_null()
    if service_rank:
        eligible = eligible & (pl.col("_value") >= 1)  # a rank below 1 is a service's "unranked"
    if exclude:
        eligible = eligible & ~pl.col("token").is_in(list(exclude))
    if rule is not None:
        eligible = eligible & rule.fill_null(False)
    value = -pl.col("_value") if descending else pl.col("_value")
    placed = (
        latest.with_columns(eligible.alias("_eligible"))
        .filter(pl.col("_eligible"))
        .sort("moment", value, "token")
        .with_columns(pl.int_range(1, pl.len() + 1).over("moment").alias("_place"))
    )
    rank = pl.col("_value") if service_rank else pl.col("_place")
    member = pl.lit(True) if top is None else pl.col("_place") <= top
    # Every (token, moment) comes back, a member or not: a change of state starts or ends a stretch.
    return latest.select("token", "moment").join(
        placed.select("token", "moment", pl.when(member).then(rank).cast(pl.Int64).alias("rank")),
        on=["token", "moment"],
        how="left",
    )


def _intervals(states: pl.DataFrame) -> pl.DataFrame:
    """Per token, runs of one state (a rank, or null: not a member) in time, as intervals."""
    states = states.sort("token", "moment")
    changed = pl.col("rank").ne_missing(pl.col("rank").shift(1).over("token")) | (
        pl.col("token") != pl.col("token").shift(1)
    ).fill_null(True)
    runs = (
        states.with_columns(changed.fill_null(True).alias("_change"))
        .filter(pl.col("_change"))
        .with_columns(pl.col("moment").shift(-1).over("token").alias("valid_to"))
    )
    return (
        runs.filter(pl.col("rank").is_not_null())
        .select("token", pl.col("moment").alias("valid_from"), "valid_to", "rank")
        .sort("valid_from", "rank", "token")
        .cast(UNIVERSE_SCHEMA)  # type: ignore[arg-type]
    )


def members(universe: pl.DataFrame, at: Moments) -> pl.DataFrame:
    """The members of a `universe` at each moment in ``at`` (a datetime or several; naive means
    UTC): ``at``, ``token``, ``rank``, sorted by ``at`` and rank."""
    moments = moments_of(at)
    found = member_rows(moments.lazy(), check_universe(universe), "at").collect()
    return found.select(*MEMBERS_SCHEMA).sort("at", "rank", "token", nulls_last=True)
