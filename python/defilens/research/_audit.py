"""What a collected history is missing: candles never seen, failed requests, stale answers and
repainted values, per token and interval, with a one-screen summary."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import polars as pl

from .._core import INTERVAL_MS
from ..history import scan
from ..history._root import PathLike
from ._panel import KEYS, per_candle


def _step() -> pl.Expr:
    """Each row's candle length in milliseconds."""
    return pl.col("interval").cast(pl.String).replace_strict(INTERVAL_MS, return_dtype=pl.Int64)


@dataclass(frozen=True)
class Audit:
    """A history's coverage and problems; ``print(audit)`` is a one-screen summary.

    Attributes:
        coverage: per (token, interval): ``expected`` candle closes between the first and last
            seen, ``seen``, ``missing``.
        gaps: each run of candle closes never seen: token, interval, gap_start, gap_end, missing.
        failures: failed requests from ``log``: token, endpoint, kind, rounds (how many).
        stale: fetches whose ``fetched_at - updated_at`` exceeds the interval: token, interval,
            fetched_at, updated_at, behind.
        revisions: repainted candles (more than one value for the same candle), from `panel`.
    """

    coverage: pl.DataFrame
    gaps: pl.DataFrame
    failures: pl.DataFrame
    stale: pl.DataFrame
    revisions: pl.DataFrame

    def worst(self, n: int = 5) -> pl.DataFrame:
        """The (token, interval) pairs that miss the most candles."""
        return self.coverage.filter(pl.col("missing") > 0).sort("missing", "token", descending=[True, False]).head(n)

    def max_missing(self) -> int:
        worst = self.coverage["missing"].max() if self.coverage.height else 0
        return int(worst) if isinstance(worst, int) else 0

    def __str__(self) -> str:
        cov = self.coverage
        lines = []
        tokens = cov["token"].n_unique() if cov.height else 0
        expected = int(cov["expected"].sum() or 0)
        seen = int(cov["seen"].sum() or 0)
        share = f"{seen / expected:.1%}" if expected else "-"
        lines.append(
            f"coverage: {seen:,} of {expected:,} candle closes seen ({share}) across {tokens} tokens and "
            f"{cov.height} token-interval pairs; {self.gaps.height} gaps"
        )
        worst = self.worst()
        if worst.height:
            lines.append(
                "most missing: "
                + ", ".join(f"{t} {i} ({m})" for t, i, m in worst.select("token", "interval", "missing").iter_rows())
            )
            by_interval = (
                cov.group_by("interval").agg(pl.col("missing").sum()).filter(pl.col("missing") > 0).sort("interval")
            )
            lines.append("missing by interval: " + ", ".join(f"{i} {m}" for i, m in by_interval.iter_rows()))
        else:
            lines.append("no candle missing between the first and last seen")
        if self.failures.height:
            by_kind = self.failures.group_by("kind").agg(pl.col("rounds").sum()).sort("rounds", descending=True)
            worst_tokens = (
                self.failures.group_by("token").agg(pl.col("rounds").sum()).sort("rounds", descending=True).head(3)
            )
            lines.append(
                "failed requests: "
                + ", ".join(f"{k} {n}" for k, n in by_kind.iter_rows())
                + " (most: "
                + ", ".join(f"{t} {n}" for t, n in worst_tokens.iter_rows())
                + ")"
            )
        else:
            lines.append("failed requests: none")
        lines.append(f"stale fetches (older than their interval): {self.stale.height}")
        lines.append(f"repainted candles: {self.revisions.height}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Audit {self.coverage.height} token-interval pairs, {self.gaps.height} gaps, max missing {self.max_missing()}>"


def audit(source: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> Audit:
    """Audits the history at ``source``: coverage and gaps of the candle closes seen per token and
    interval (from ``ta_updated``), failed requests (from ``log``), stale fetches, and repainted
    candles (from `panel`). An empty history gives empty frames."""
    closes = (
        scan(source, "ta_updated", storage_options=storage_options)
        .select("token", "interval", "fetched_at", "updated_at")
        .filter(pl.col("updated_at").is_not_null())
        .collect()  # read once, then coverage, gaps, stale and the repaint windows each a pass over memory
        .lazy()
    )
    distinct = closes.select("token", "interval", "updated_at").unique().with_columns(_step().alias("_step"))
    coverage = (
        distinct.group_by("token", "interval")
        .agg(
            pl.col("updated_at").min().alias("first"),
            pl.col("updated_at").max().alias("last"),
            pl.len().cast(pl.Int64).alias("seen"),
            pl.col("_step").first(),
        )
        .with_columns(
            ((pl.col("last") - pl.col("first")).dt.total_milliseconds() // pl.col("_step") + 1)
            .cast(pl.Int64)
            .alias("expected")
        )
        .with_columns((pl.col("expected") - pl.col("seen")).alias("missing"))
        .select("token", "interval", "expected", "seen", "missing")
        .sort("token", "interval")
        .collect()
    )
    gaps = (
        distinct.sort("token", "interval", "updated_at")
        .with_columns(pl.col("updated_at").shift(1).over("token", "interval").alias("_previous"))
        .with_columns(
            ((pl.col("updated_at") - pl.col("_previous")).dt.total_milliseconds() // pl.col("_step") - 1).alias(
                "missing"
            )
        )
        .filter(pl.col("missing") > 0)
        .select(
            "token",
            "interval",
            (pl.col("_previous") + pl.duration(milliseconds=pl.col("_step"))).alias("gap_start"),
            (pl.col("updated_at") - pl.duration(milliseconds=pl.col("_step"))).alias("gap_end"),
            pl.col("missing").cast(pl.Int64),
        )
        .sort("token", "interval", "gap_start")
        .collect()
    )
    failures = (
        scan(source, "errors", storage_options=storage_options)
        .group_by("token", "endpoint", "kind")
        .agg(pl.len().cast(pl.Int64).alias("rounds"))
        .sort("rounds", "token", descending=[True, False])
        .collect()
    )
    stale = (
        closes.with_columns(_step().alias("_step"))
        .with_columns((pl.col("fetched_at") - pl.col("updated_at")).alias("behind"))
        .filter(pl.col("behind").dt.total_milliseconds() > pl.col("_step"))
        .select("token", "interval", "fetched_at", "updated_at", "behind")
        .sort("token", "interval", "fetched_at")
        .collect()
    )
    return Audit(coverage, gaps, failures, stale, _repainted(source, storage_options, closes.collect()))


#: Candles are checked for repaints a week of closes at a time: a year of 5-minute rounds is
#: about a billion indicator rows for 200 tokens, more than memory holds at once.
REPAINT_WINDOW = "7d"


def _repainted(source: PathLike, storage_options: Optional[Mapping[str, Any]], closes: pl.DataFrame) -> pl.DataFrame:
    """The panel's rows with more than one value, without building the whole panel.

    A window of candle closes at a time: every fetch that showed one of its candles lies between
    the earliest and the latest ``fetched_at`` that ``ta_updated`` gives for them, so each window
    reads only those days of ``indicators`` and no candle is split between windows. Within a
    window, candles are first grouped by a 64-bit hash of their key (several times faster than
    grouping by the four columns), and only those whose group saw several values are folded
    exactly: a collision can only add values to a group, so it never hides a repaint, and the
    exact pass drops what it adds."""
    indicators = scan(source, "indicators", storage_options=storage_options).select(
        "token", "interval", "indicator", "value", "fetched_at", "date"
    )
    windows = (
        closes.group_by(pl.col("updated_at").dt.truncate(REPAINT_WINDOW).alias("_window"))
        .agg(
            pl.col("updated_at").min().alias("first_close"),
            pl.col("updated_at").max().alias("last_close"),
            pl.col("fetched_at").min().alias("first_fetch"),
            pl.col("fetched_at").max().alias("last_fetch"),
        )
        .sort("_window")
    )
    # Typed and empty without reading anything (a lazy `clear()` is a `limit(0)` of the whole join).
    schema = per_candle(
        indicators.drop("date").join(closes.lazy(), on=["token", "interval", "fetched_at"])
    ).collect_schema()
    found = [pl.LazyFrame(schema=schema)]
    for first_close, last_close, first_fetch, last_fetch in windows.drop("_window").iter_rows():
        window_closes = closes.lazy().filter(pl.col("updated_at").is_between(first_close, last_close))
        rows = (
            indicators.filter(
                # A round's date is the day it began: a fetch just after midnight may carry the day before.
                pl.col("date").is_between(first_fetch.date() - dt.timedelta(days=1), last_fetch.date()),
                pl.col("fetched_at").is_between(first_fetch, last_fetch),
            )
            .drop("date")
            .join(window_closes, on=["token", "interval", "fetched_at"], how="inner")
            .with_columns(pl.struct(*KEYS, "updated_at").hash().alias("_candle"))
        )
        suspects = (
            rows.group_by("_candle")
            .agg((pl.col("value").n_unique() > 1).alias("_moved"))
            .filter(pl.col("_moved"))
            .select("_candle")
        )
        repainted = rows.join(suspects, on="_candle", how="semi").drop("_candle")
        found.append(per_candle(repainted).filter(pl.col("revisions") > 1))
    return pl.concat([part.collect() for part in found]).sort(*KEYS, "updated_at")
