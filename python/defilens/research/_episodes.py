"""Events as episodes: the events of one token that follow each other within a gap are one
episode (RSI below 30 for five hours running is one oversold spell, not five), so that an
evaluation can say how many distinct bets its events are, and test each once."""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

import polars as pl

from .._duration import positive_duration

#: The columns of `Evaluation.episodes`: one row an episode.
EPISODE_COLUMNS = ("episode", "token", "start", "end", "events")


def episode_gap_of(value: Any, spacing: Optional[dt.timedelta]) -> dt.timedelta:
    """The gap (``evaluate(episode_gap=)``) as a timedelta: None is the decisions' spacing
    (events at consecutive decisions are one episode)."""
    if value is None:
        return spacing if spacing is not None else dt.timedelta(0)
    if isinstance(value, bool) or not isinstance(value, (str, dt.timedelta)):
        raise TypeError(
            f"episode_gap must be a duration such as '4h' or a timedelta (the longest time between two events "
            f"of one episode), got {type(value).__name__}: {value!r}"
        )
    try:
        return positive_duration("episode_gap", value)
    except ValueError as error:
        raise ValueError(f"{error} (the longest time between two events of one episode)") from None


def episodes_of(labels: pl.DataFrame, signal: str, by: str, gap: dt.timedelta) -> pl.DataFrame:
    """Each event (a row whose boolean ``signal`` is true, once per token and ``by``, whatever
    its label) with its ``episode``: a new one wherever the token's next event comes more than
    ``gap`` after its previous one. Episodes are numbered from 1 by their start, then token."""
    events = (
        labels.filter(pl.col(signal).fill_null(False))
        .select("token", by)
        .unique()
        .sort("token", by)
        .with_columns(((pl.col(by).diff().over("token") > pl.lit(gap)).fill_null(True)).cum_sum().alias("_run"))
    )
    starts = (
        events.group_by("_run")
        .agg(pl.col("token").first(), pl.col(by).min().alias("_start"))
        .sort("_start", "token")
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("episode"))
    )
    return events.join(starts.select("_run", "episode"), on="_run").select("episode", "token", by).sort("episode", by)


def episode_table(events: pl.DataFrame, by: str) -> pl.DataFrame:
    """One row an episode (`EPISODE_COLUMNS`) from `episodes_of`'s events."""
    return (
        events.group_by("episode", "token")
        .agg(pl.col(by).min().alias("start"), pl.col(by).max().alias("end"), pl.len().cast(pl.Int64).alias("events"))
        .sort("episode")
        .select(*EPISODE_COLUMNS)
    )


def entered(rows: pl.DataFrame, events: pl.DataFrame, by: str) -> pl.DataFrame:
    """Of ``rows`` (one horizon's labelled rows), each episode's first: where it is entered (its
    first event with a forward return; an episode none of whose events has one is not entered)."""
    return rows.join(events, on=["token", by]).sort(by, "token").group_by("episode", maintain_order=True).first()
