"""The rounds a history's collectors made: the one answer to "what is a round" for labels, the
backtesters' hand-offs and the audit.

A round is what a collector's commits record (its collector, its start, the cadence of its run);
rounds older than the kept log, or in a history whose commits name none, are inferred from the
fetches themselves (a round is a burst of fetches, rounds are further apart than a round is long).
A run's cadence is the one it recorded, unless its rounds kept a longer spacing (its clock was
moved by somebody else, or its rounds overran their ticks): then the spacing they kept.

Each fetch belongs to the latest round that started at or before it, and each token to the rounds
of the collectors that fetched it, from its first fetch by each: a round of its collector without
its fetch is a round it missed. Nothing here lays a grid: a collector restarted off its old grid,
or at another cadence, is followed round by round.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Dict, Optional

import polars as pl

from .._storage import Root
from .._time import UTC_MS
from ..history import history_cut, rounds, runs

#: How much further apart than its cadence a run's rounds (or a token's fetches) may be before
#: the rounds between count as not made: a slow round or a late fetch within one is not.
LATE = 1.5
#: A round that starts this share of a cadence before a moment counts as starting at it: rounds
#: start a few milliseconds after their tick, so a horizon counted from one round's start to
#: another's may fall that much short.
ON_TIME = 0.05
#: What a round without a recorded collector (an inferred one) is filed under.
INFERRED_COLLECTOR = ""

#: The runs: one row a collector's rounds under one cadence.
RUNS_SCHEMA: Dict[str, pl.DataType] = {
    "collector": pl.String(),
    "first_start": UTC_MS,
    "last_start": UTC_MS,
    "every": pl.Duration("ms"),
    "source": pl.String(),
}
#: The rounds: one row a round made, by start.
ROUNDS_SCHEMA: Dict[str, pl.DataType] = {
    "collector": pl.String(),
    "start": UTC_MS,
    "every": pl.Duration("ms"),
    "source": pl.String(),
}


def inferred_every(fetches: pl.DataFrame) -> Optional[dt.timedelta]:
    """The median time between a token's consecutive fetches, over every token."""
    steps = (
        fetches.sort("token", "fetched_at")
        .select((pl.col("fetched_at").diff().over("token")).dt.total_milliseconds().alias("step"))
        .filter(pl.col("step") > 0)["step"]
    )
    median = steps.median() if steps.len() else None
    return None if median is None else dt.timedelta(milliseconds=round(float(median)))  # type: ignore[arg-type]


def _recorded() -> pl.Expr:
    """A run's cadence: recorded, unless its rounds were more than `LATE` times further apart."""
    return pl.col("spacing").dt.total_milliseconds() > LATE * pl.col("every").dt.total_milliseconds()


def recorded_rounds(root: Root) -> pl.DataFrame:
    """The rounds the kept log records (`ROUNDS_SCHEMA`), with each run's cadence as it was kept;
    on a cut history (the look-ahead check), those started by the cut only."""
    found = rounds(root)
    cut = history_cut()
    if cut is not None:
        found = found.filter(pl.col("start") <= cut)
    apart = _recorded()
    return found.with_columns(
        pl.when(apart).then(pl.lit("inferred")).otherwise(pl.col("source")).alias("source"),
        pl.when(apart).then(pl.col("spacing")).otherwise(pl.col("every")).alias("every"),
    ).select(list(ROUNDS_SCHEMA))


def runs_made(root: Root, fetches: pl.DataFrame) -> pl.DataFrame:
    """The runs of the history (`RUNS_SCHEMA`), oldest first: recorded in the commits of its
    rounds, else inferred from them; fetches older than the first recorded round (or a history
    whose commits name no rounds) make one run whose cadence is inferred from the fetches."""
    apart = _recorded()
    found = (
        runs(root, spacing=True)
        .with_columns(
            pl.when(apart).then(pl.lit("inferred")).otherwise(pl.col("source")).alias("source"),
            pl.when(apart).then(pl.col("spacing")).otherwise(pl.col("every")).alias("every"),
        )
        .select(list(RUNS_SCHEMA))
    )
    fetches = fetches.select("token", "fetched_at").unique()
    earliest = fetches["fetched_at"].min() if fetches.height else None
    if earliest is not None and (found.is_empty() or found["first_start"].min() > earliest):  # type: ignore[operator]
        before = fetches if found.is_empty() else fetches.filter(pl.col("fetched_at") < found["first_start"].min())
        head = pl.DataFrame(
            [
                {
                    "collector": None,
                    "first_start": earliest,
                    "last_start": before["fetched_at"].max(),
                    "every": inferred_every(before) or inferred_every(fetches),
                    "source": "inferred",
                }
            ],
            schema=RUNS_SCHEMA,
            orient="row",
        )
        found = pl.concat([head, found])
    if found["every"].null_count():
        found = found.with_columns(pl.col("every").fill_null(inferred_every(fetches)))
    return found


def _inferred_rounds(fetches: pl.DataFrame) -> pl.DataFrame:
    """Rounds found in fetches alone: a new round wherever the next fetch (of any token) comes
    more than half a round's spacing after the one before, the spacing being the shortest a token's
    fetches usually keep (their 5th percentile); each round's cadence is the median spacing of the
    rounds around it, so a change of cadence is followed."""
    times = fetches.select(pl.col("fetched_at").unique().sort())
    if times.is_empty():
        return pl.DataFrame(schema=ROUNDS_SCHEMA)
    steps = (
        fetches.sort("token", "fetched_at")
        .select(pl.col("fetched_at").diff().over("token").dt.total_milliseconds().alias("step"))
        .filter(pl.col("step") > 0)["step"]
    )
    shortest = steps.quantile(0.05, "lower") if steps.len() else None
    gap = pl.col("fetched_at").diff().dt.total_milliseconds()
    new_round = gap.is_null() if shortest is None else gap.is_null() | (gap > max(1.0, float(shortest) / 2))  # type: ignore[arg-type]
    starts = times.filter(new_round).rename({"fetched_at": "start"})
    spacing = pl.coalesce(pl.col("start").shift(-1) - pl.col("start"), pl.col("start") - pl.col("start").shift(1))
    every = spacing.dt.total_milliseconds().rolling_median(window_size=5, center=True, min_samples=1)
    return starts.select(
        pl.lit(INFERRED_COLLECTOR).alias("collector"),
        "start",
        pl.duration(milliseconds=every.round(0).cast(pl.Int64)).cast(pl.Duration("ms")).alias("every"),
        pl.lit("inferred").alias("source"),
    )


@dataclass(frozen=True)
class Rounds:
    """The rounds made (``rounds``: `ROUNDS_SCHEMA` plus ``opened``, the first fetch of the round
    or its start) and, per token, the rounds it belonged to (``token_rounds``: ``token``,
    ``start``, ``opened``, ``every``, and ``fetched_at`` and ``price``, null where it missed the
    round)."""

    rounds: pl.DataFrame
    token_rounds: pl.DataFrame


def rounds_made(root: Root, prices: pl.DataFrame, cadence: Optional[dt.timedelta] = None) -> Rounds:
    """The rounds of the history at ``root`` and each token's part in them, from ``prices`` (one
    row a fetch: ``token``, ``fetched_at``, ``price``). ``cadence`` replaces every run's."""
    recorded = recorded_rounds(root)
    fetches = prices.select("token", "fetched_at", "price").sort("fetched_at")
    first_recorded = recorded["start"].min() if recorded.height else None
    unrecorded = fetches if first_recorded is None else fetches.filter(pl.col("fetched_at") < first_recorded)
    made = (
        pl.concat([_inferred_rounds(unrecorded), recorded])
        .with_columns(pl.col("collector").fill_null(INFERRED_COLLECTOR))
        .sort("start")
    )
    if cadence is not None:
        made = made.with_columns(pl.lit(cadence).cast(pl.Duration("ms")).alias("every"))
    # Each fetch in the latest round started at or before it; a token's second fetch in a round is dropped.
    placed = (
        fetches.join_asof(
            made.select("start", "collector"), left_on="fetched_at", right_on="start", strategy="backward"
        )
        .filter(pl.col("start").is_not_null())
        .unique(["token", "start"], keep="first", maintain_order=True)
    )
    opened = placed.group_by("start").agg(pl.col("fetched_at").min().alias("opened"))
    made = (
        made.join(opened, on="start", how="left")
        .with_columns(pl.coalesce("opened", "start").alias("opened"))
        .unique(["collector", "start"], keep="first")
        .sort("start")
    )
    joined_at = placed.group_by("token", "collector").agg(pl.col("start").min().alias("_since"))
    token_rounds = (
        made.join(joined_at, on="collector")
        .filter(pl.col("start") >= pl.col("_since"))
        .join(placed.select("token", "start", "fetched_at", "price"), on=["token", "start"], how="left")
        .select("token", "start", "opened", "every", "fetched_at", "price")
        .unique(["token", "start"], keep="first")
        .sort("token", "start")
    )
    return Rounds(made, token_rounds)
