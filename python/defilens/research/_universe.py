"""A point-in-time universe: which tokens were, say, the top 100 by market cap rank at each
moment, judged from what the history knew then (each token's latest snapshot fetched at or
before the moment), as membership intervals; and the filter the research reads take from it."""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping, Optional

import polars as pl

from .._core import empty_frames
from .._storage import PathLike
from ..history import open_for_reading, scan_table
from ._asof import Moments, moments_of
from ._labels import Horizon, _duration
from ._membership import UNIVERSE_SCHEMA, UTC_MS, check_universe, member_rows
from ._scope import _unknown

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
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be a positive int (the universe's size), got {top!r}")
    if not isinstance(by, str):
        raise TypeError(f"by must be the name of a snapshot column, got {type(by).__name__}")
    columns = _ordered_columns()
    if by not in columns:
        raise _unknown("snapshot column", by, list(columns))
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


def universe(
    source: PathLike,
    top: int,
    by: str = "market_cap_rank",
    *,
    descending: Optional[bool] = None,
    max_age: Optional[Horizon] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.DataFrame:
    """The point-in-time universe of a collected history: which tokens were the ``top`` by the
    snapshot column ``by`` at each moment, judged from what was knowable then (each token's latest
    snapshot fetched at or before the moment), never from today's ranking.

    Returns one row per stretch of a token's membership at one rank: ``token``, ``valid_from``
    (the fetch that showed it in, or at that rank), ``valid_to`` (the fetch that showed it out or
    at another rank; null while it is still a member at its last snapshot) and ``rank``. A token is
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

    A token whose latest snapshot has no value for ``by`` is not a member. ``max_age`` (a
    duration) ends a token's membership that long after its last snapshot when no newer one came
    (a token the collector stopped fetching); without it a snapshot stands until the token's next
    one. A ``by`` the snapshot does not have is a `ValueError` naming the closest column.
    """
    descend = _check(top, by, descending)
    lapse = None if max_age is None else _duration("max_age", max_age)
    root = open_for_reading(source, storage_options)
    rows = (
        scan_table(root, "snapshot")
        .select("token", "fetched_at", pl.col(by).alias("_value"))
        .collect()
        .with_columns(pl.col("_value").cast(pl.Float64))
        .unique(subset=["token", "fetched_at"], keep="first")
        .sort("token", "fetched_at")
    )
    if lapse is not None:
        rows = _with_lapses(rows, lapse)
    if rows.height == 0:
        return pl.DataFrame(schema=UNIVERSE_SCHEMA)
    if is_rank(by) and descending is None:
        states = rows.select(
            "token",
            pl.col("fetched_at").alias("moment"),
            # A rank below 1 is a service's "unranked" (some send 0), never a place at the top.
            pl.when(pl.col("_value").is_between(1, top)).then(pl.col("_value")).cast(pl.Int64).alias("rank"),
        )
    else:
        states = _cross_section(rows, top, descend)
    return _intervals(states)


def _with_lapses(rows: pl.DataFrame, lapse: dt.timedelta) -> pl.DataFrame:
    """Adds a row without a value ``lapse`` after each snapshot not followed by another in time."""
    ends = (
        rows.with_columns(pl.col("fetched_at").shift(-1).over("token").alias("_next"))
        .filter(pl.col("_next").is_null() | (pl.col("_next") - pl.col("fetched_at") > lapse))
        .select("token", (pl.col("fetched_at") + lapse).alias("fetched_at"), pl.lit(None, pl.Float64).alias("_value"))
    )
    return pl.concat([rows, ends]).sort("token", "fetched_at")


def _cross_section(rows: pl.DataFrame, top: int, descending: bool) -> pl.DataFrame:
    """Per moment of the history (every fetch) and token known by then: its place by the value of
    its latest snapshot among every token's, the rank when it is within ``top``."""
    moments = rows.select(pl.col("fetched_at").alias("moment")).unique().sort("moment")
    firsts = rows.group_by("token").agg(pl.col("fetched_at").min().alias("_first"))
    grid = (
        moments.join(firsts, how="cross")
        .filter(pl.col("moment") >= pl.col("_first"))
        .drop("_first")
        .sort("token", "moment")
    )
    latest = grid.join_asof(
        rows.rename({"fetched_at": "moment"}),
        on="moment",
        by="token",
        strategy="backward",
        check_sortedness=False,  # sorted by moment within each token, which polars cannot check with by=
    )
    value = -pl.col("_value") if descending else pl.col("_value")
    placed = latest.sort("moment", value, "token", nulls_last=True).with_columns(
        pl.int_range(1, pl.len() + 1).over("moment").alias("_place")
    )
    return placed.select(
        "token",
        "moment",
        pl.when(pl.col("_value").is_not_null() & (pl.col("_place") <= top))
        .then(pl.col("_place"))
        .cast(pl.Int64)
        .alias("rank"),
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
