"""Rows of a research read kept only while their token was a member of a point-in-time universe
(`defilens.universe`): the filter `panel`, `asof` and `forward_returns` take as ``universe=``."""

from __future__ import annotations

from typing import Any, Optional, Union

import polars as pl

from .._time import UTC_MS

#: The columns of a universe: one row per stretch of a token's membership at one rank.
UNIVERSE_SCHEMA = {"token": pl.String(), "valid_from": UTC_MS, "valid_to": UTC_MS, "rank": pl.Int64()}
#: The column of a universe that says how it was chosen (`universe`'s rule, in words).
RULE = "rule"
#: What labels say of a universe given without a rule (typed or filtered by hand).
NO_RULE = "given without a rule"


def rule_of(frame: Any) -> str:
    """How a universe was chosen: its ``rule`` column's text (several joined), or `NO_RULE`."""
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    if not isinstance(frame, pl.DataFrame) or RULE not in frame.columns:
        return NO_RULE
    texts = sorted(text for text in frame[RULE].unique().to_list() if text)
    return " | ".join(texts) if texts else NO_RULE


def check_universe(frame: Any) -> pl.DataFrame:
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    if not isinstance(frame, pl.DataFrame):
        raise TypeError(f"universe must be the DataFrame defilens.universe gives, got {type(frame).__name__}")
    missing = [column for column in ("token", "valid_from", "valid_to") if column not in frame.columns]
    if missing:
        raise ValueError(
            f"universe has no {', '.join(missing)} column: give the DataFrame defilens.universe(root, top=N) gives "
            f"(token, valid_from, valid_to, rank); its columns are {', '.join(frame.columns)}"
        )
    if "rank" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias("rank"))
    return frame.select(
        pl.col("token").cast(pl.String),
        pl.col("valid_from").cast(UTC_MS),
        pl.col("valid_to").cast(UTC_MS),
        pl.col("rank").cast(pl.Int64),
    )


def member_rows(rows: pl.LazyFrame, universe: pl.DataFrame, time: str, token: Optional[str] = None) -> pl.LazyFrame:
    """The rows of ``rows`` whose ``token`` was a member at the row's ``time``; with ``token``
    None, each row once per token that was a member at its ``time``, with the token's ``rank``."""
    intervals = universe.lazy().sort("valid_from")
    inside = pl.col("valid_to").is_null() | (pl.col("_time") < pl.col("valid_to"))
    keyed = rows.with_row_index("_row").with_columns(pl.col(time).cast(UTC_MS).alias("_time"))
    if token is None:
        found = keyed.join(intervals, how="cross").filter((pl.col("valid_from") <= pl.col("_time")) & inside)
        return found.sort("_row").drop("_row", "_time", "valid_from", "valid_to")
    members = (
        keyed.select("_row", pl.col(token).alias("token"), "_time")
        .sort("_time")
        .join_asof(
            intervals,
            left_on="_time",
            right_on="valid_from",
            by="token",
            strategy="backward",
            check_sortedness=False,  # sorted by time within each token, which polars cannot check with by=
        )
        .filter(pl.col("valid_from").is_not_null() & inside)
        .select("_row")
    )
    return keyed.join(members, on="_row", how="semi").sort("_row").drop("_row", "_time")


def within(rows: Union[pl.DataFrame, pl.LazyFrame], universe: Any, time: str) -> Union[pl.DataFrame, pl.LazyFrame]:
    """``rows`` (with a ``token`` column) kept only while their token was a member of
    ``universe`` at their ``time``, in their order; a DataFrame stays a DataFrame."""
    checked = check_universe(universe)
    if isinstance(rows, pl.LazyFrame):
        return member_rows(rows, checked, time, "token")
    return member_rows(rows.lazy(), checked, time, "token").collect()
