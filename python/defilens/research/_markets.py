"""What each markets fetch of a token says about trading it: on how many venues and pairs, with how
much volume, how much depth within 2% of the price on each side, and how far apart its venues'
prices were (the half-spread proxy of the cost model, `_costs`). One row per (token, fetch): the
universe's rules and the costs read the latest one at or before a moment, never a later one."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import polars as pl

from .._storage import Root
from .._time import UTC_MS
from ..history import scan_table

#: What a markets fetch gives, per (token, fetched_at), besides those keys.
FETCH_COLUMNS: Dict[str, pl.DataType] = {
    "venues": pl.Int64(),  # exchanges listing the token
    "pairs": pl.Int64(),  # (exchange, pair) rows
    "volume_usd": pl.Float64(),  # their 24-hour volume, summed
    "depth_usd_positive_two": pl.Float64(),  # asks within +2% of each pair's price, summed: what a buy can walk
    "depth_usd_negative_two": pl.Float64(),  # bids within -2%, summed: what a sale can walk
    "half_spread": pl.Float64(),  # the venues' prices' volume-weighted mean absolute deviation, as a share
}


def _usable(column: str) -> pl.Expr:
    value = pl.col(column)
    return pl.when(value.is_finite() & (value > 0)).then(value)


def markets_fetches(root: Root, tokens: Optional[Sequence[str]] = None) -> pl.DataFrame:
    """Every markets fetch of the history (of ``tokens``), one row per (``token``,
    ``fetched_at``) with `FETCH_COLUMNS`, sorted by token and time.

    A pair's price, volume or depth that is missing, not finite, or 0 or below counts as none.
    ``half_spread`` is the mean of ``|price - consensus| / consensus`` over the pairs with a
    price, weighted by their volume (equally when none has a volume), the consensus being their
    volume-weighted mean price: 0 for a token listed once, null for one with no price. A side's
    depth is null when no pair has any."""
    where = [pl.col("fetched_at").is_not_null()]
    if tokens is not None:
        where.append(pl.col("token").is_in(list(tokens)))
    rows = (
        scan_table(root, "markets", where=where)
        .select(
            "token",
            "fetched_at",
            "exchange_name",
            _usable("price").alias("_price"),
            _usable("volume_usd").alias("_volume"),
            _usable("depth_usd_positive_two").alias("_up"),
            _usable("depth_usd_negative_two").alias("_down"),
        )
        .collect()
    )
    priced = pl.col("_price").is_not_null()
    any_volume = (pl.col("_volume").filter(priced).sum() > 0).over("token", "fetched_at")
    weight = pl.when(priced).then(pl.when(any_volume).then(pl.col("_volume").fill_null(0.0)).otherwise(1.0))
    rows = rows.with_columns(weight.alias("_weight"))
    consensus = (pl.col("_weight") * pl.col("_price")).sum() / pl.col("_weight").sum()
    rows = rows.with_columns(consensus.over("token", "fetched_at").alias("_consensus"))
    deviation = (pl.col("_price") - pl.col("_consensus")).abs() / pl.col("_consensus")
    return (
        rows.group_by("token", "fetched_at")
        .agg(
            pl.col("exchange_name").drop_nulls().n_unique().cast(pl.Int64).alias("venues"),
            pl.len().cast(pl.Int64).alias("pairs"),
            pl.col("_volume").sum().alias("volume_usd"),
            pl.when(pl.col("_up").is_not_null().any()).then(pl.col("_up").sum()).alias("depth_usd_positive_two"),
            pl.when(pl.col("_down").is_not_null().any()).then(pl.col("_down").sum()).alias("depth_usd_negative_two"),
            pl.when(pl.col("_weight").sum() > 0)
            .then((pl.col("_weight") * deviation).sum() / pl.col("_weight").sum())
            .alias("half_spread"),
        )
        .with_columns(pl.col("fetched_at").cast(UTC_MS))
        .select("token", "fetched_at", *[pl.col(name).cast(dtype) for name, dtype in FETCH_COLUMNS.items()])
        .sort("token", "fetched_at")
    )
