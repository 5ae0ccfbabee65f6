"""What a collected history is missing: candles never seen, failed requests, stale answers and
repainted values, per token and interval, with a one-screen summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import polars as pl

from .._exceptions import HistoryError
from .._storage import PathLike, Root
from .._text import with_separators
from ..history import history_cut, open_for_reading, scan_table
from ._cadence import CADENCE_SCHEMA, Cadence, Expect, Rule, cadence_of, describe, expectations, missed_closes
from ._day_summaries import day_summaries, gaps_of, step
from ._panel import VALUE_COLUMNS, per_candle
from ._scope import candle_times

KEYS = ["token", "interval", "indicator"]


@dataclass(frozen=True)
class Audit:
    """A history's coverage and problems; ``print(audit)`` is a one-screen summary.

    Attributes:
        coverage: per (token, interval): ``expected`` candle closes between the first and last
            seen, ``seen``, ``missing`` (expected and not seen), ``observable`` (those a round
            fell on or should have: `cadence`), ``missed`` (observable and not seen) and
            ``unobservable`` (closes no round of the cadence could see: ``missing = missed +
            unobservable``).
        gaps: each run of missed candle closes: token, interval, gap_start and gap_end (the first
            and last missed close of a run of closes never seen), missing (how many were missed;
            closes the cadence could not see are not counted).
        failures: failed requests from ``log``: token, endpoint, kind, rounds (how many).
        stale: fetches whose ``fetched_at - updated_at`` exceeds the interval: token, interval,
            fetched_at, updated_at, behind.
        revisions: repainted candles (more than one value for the same candle), as `panel` gives
            them: token, interval, indicator, candle_close, candle_open, first_seen_at, value,
            last_value, revisions, lag.
        cadence: the runs the audit assumed, oldest first: collector, first_start, last_start,
            every, source (``"recorded"`` in the history's commits, or ``"inferred"`` from the
            rounds of a history that recorded no settings).
        assumed: the summary's line on the cadence and what ``expect=`` changed.
    """

    coverage: pl.DataFrame
    gaps: pl.DataFrame
    failures: pl.DataFrame
    stale: pl.DataFrame
    revisions: pl.DataFrame
    cadence: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CADENCE_SCHEMA))
    assumed: str = ""

    def worst(self, n: int = 5) -> pl.DataFrame:
        """The (token, interval) pairs that missed the most observable candle closes."""
        return self.coverage.filter(pl.col("missed") > 0).sort("missed", "token", descending=[True, False]).head(n)

    def max_missing(self) -> int:
        """The most observable candle closes one (token, interval) missed (what ``defilens audit
        --max-missing`` compares)."""
        worst = self.coverage["missed"].max() if self.coverage.height else 0
        return int(worst) if isinstance(worst, int) else 0

    def __str__(self) -> str:
        cov = self.coverage
        lines = []
        tokens = cov["token"].n_unique() if cov.height else 0
        observable = int(cov["observable"].sum() or 0)
        seen = int(cov["seen"].sum() or 0)
        unobservable = int(cov["unobservable"].sum() or 0)
        share = f"{seen / observable:.1%}" if observable else "-"
        if self.assumed:
            lines.append(self.assumed)
        lines.append(
            f"coverage: {seen:,} of {observable:,} observable candle closes seen ({share}) across {tokens} tokens and "
            f"{cov.height} token-interval pairs; {self.gaps.height} gaps; {unobservable:,} closes unobservable at "
            "this cadence (not counted)"
        )
        worst = self.worst()
        if worst.height:
            lines.append(
                "most missed: "
                + ", ".join(f"{t} {i} ({m})" for t, i, m in worst.select("token", "interval", "missed").iter_rows())
            )
            by_interval = (
                cov.group_by("interval").agg(pl.col("missed").sum()).filter(pl.col("missed") > 0).sort("interval")
            )
            lines.append("missed by interval: " + ", ".join(f"{i} {m}" for i, m in by_interval.iter_rows()))
        else:
            lines.append("no observable candle close missed between the first and last seen")
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
        return with_separators("\n".join(lines))

    def __repr__(self) -> str:
        return f"<Audit {self.coverage.height} token-interval pairs, {self.gaps.height} gaps, max missed {self.max_missing()}>"


def audit(
    source: PathLike,
    *,
    storage_options: Optional[Mapping[str, Any]] = None,
    cache: bool = True,
    progress: Optional[bool] = None,
    expect: Expect = None,
) -> Audit:
    """Audits the history at ``source``: coverage and gaps of the candle closes seen per token and
    interval (from ``ta_updated``), failed requests (from ``log``), stale fetches, and repainted
    candles (the rows of `panel` with more than one value). An empty history gives empty frames.

    The audit knows the cadence: a close is observable when a round fell inside the window in
    which it was the current candle, or should have (a round not made: a pause, a killed round, a
    failed request). Rounds every 15 minutes cannot see two 5m closes in three: those are
    ``unobservable``, not missed. The cadence is each run's own, as its commits recorded it
    (`defilens.history.settings`), or inferred from the rounds of a history that recorded none;
    the summary says which. ``expect`` replaces it: ``"every"`` (every close between the first
    and last seen is expected), ``"none"``, a cadence (``"1h"``, seconds, a timedelta), or a
    mapping of candle intervals to those (``{"5m": "none", "1h": "every"}``; an interval left out
    keeps the runs' cadence).

    Each day of the history is summarized once and the summaries are kept under
    ``source/_audit/`` (``cache=False``: neither read nor kept); a day is summarized again when
    its files change (a late round, a compaction). So the first audit of a long history reads all
    of it (a year of 5-minute rounds for 200 tokens: a few minutes) and the next ones only the
    new days. ``progress`` shows a bar over the days to summarize (None: when there are many, in
    a notebook or a terminal)."""
    _refuse_a_cut_history()
    rules = expectations(expect)
    root = open_for_reading(source, storage_options)
    summaries = day_summaries(root, cache=cache, progress=progress)
    tangled, plain = _tangled_and_plain(summaries["spans"])
    coverage_parts = [_day_coverage(plain)]
    revision_parts = [_day_revisions(summaries["candles"], plain, tangled)]
    within = summaries["gaps"].drop("date").join(tangled, on=["token", "interval"], how="anti")
    gap_parts = [_day_gaps(plain), within]
    if tangled.height:
        exact = _recomputed(root, tangled)
        coverage_parts.append(exact[0])
        gap_parts.append(exact[1])
        revision_parts.append(exact[2])
    stale = _stale_of(summaries["stale"])
    failures = _failures_of(root)
    cadence = cadence_of(root, summaries["fetches"], summaries["blind"])
    coverage_found, gaps_found = _against_cadence(
        cadence, rules, pl.concat(coverage_parts), pl.concat(gap_parts), stale
    )
    return Audit(
        coverage_found.sort("token", "interval"),
        gaps_found.sort("token", "interval", "gap_start"),
        failures,
        stale,
        pl.concat(revision_parts).sort(*KEYS, "candle_close"),
        cadence.runs,
        describe(cadence.runs, rules),
    )


def _refuse_a_cut_history() -> None:
    if history_cut() is not None:
        raise HistoryError(
            "audit cannot run inside a look-ahead check: it reads its day summaries, which a cut history does not "
            "have; check the study's signals (scan, panel, asof), not its audit"
        )


def _tangled_and_plain(spans: pl.DataFrame) -> "tuple[pl.DataFrame, pl.LazyFrame]":
    """The (token, interval) pairs whose days cannot be stitched, and the spans of the others,
    each with ``_step`` and ``_before`` (the last close of the days before it)."""
    ordered = (
        spans.lazy()
        .with_columns(step().alias("_step"))
        .sort("token", "interval", "first", "last")
        .with_columns(pl.col("last").cum_max().shift(1).over("token", "interval").alias("_before"))
    )
    # The spans of two days share one close where a candle spans midnight (a 1w candle: every
    # day of its week): the last of the one and the first of the other, whose candles both days
    # kept, so the days stitch exactly. A pair whose spans overlap by more (a round that began
    # before midnight and fetched after, a stale fetch of an old candle) is recomputed from its
    # rows instead.
    tangled = ordered.filter(pl.col("first") < pl.col("_before")).select("token", "interval").unique().collect()
    return tangled, ordered.join(tangled.lazy(), on=["token", "interval"], how="anti")


def _day_coverage(plain: pl.LazyFrame) -> pl.DataFrame:
    """The coverage (`COVERAGE` and ``first``) of the stitched days, a close two days share
    counted once."""
    return (
        plain.group_by("token", "interval")
        .agg(
            pl.col("first").min(),
            pl.col("last").max(),
            (pl.col("seen").sum() - (pl.col("first") == pl.col("_before")).sum()).cast(pl.Int64).alias("seen"),
            pl.col("_step").first(),
        )
        .with_columns(_expected())
        .collect()
        .select(*COVERAGE, "first")
    )


def _day_gaps(plain: pl.LazyFrame) -> pl.DataFrame:
    """The gaps between the stitched days (those within a day are in its summary)."""
    gaps = plain.rename({"_before": "_previous", "first": "updated_at"}).filter(
        (pl.col("updated_at") - pl.col("_previous")).dt.total_milliseconds() >= 2 * pl.col("_step")
    )
    return gaps_of(gaps).collect()


def _day_revisions(candles: pl.DataFrame, plain: pl.LazyFrame, tangled: pl.DataFrame) -> pl.DataFrame:
    """The repainted candles of the stitched days, from the days' candles: their values on every
    day, and one shared close once."""
    shared = plain.filter(pl.col("first") == pl.col("_before")).select(
        "token", "interval", pl.col("first").alias("updated_at")
    )
    return (
        candles.lazy()
        .join(tangled.lazy(), on=["token", "interval"], how="anti")
        .join(
            shared.unique().with_columns(pl.lit(True).alias("_shared")),
            on=["token", "interval", "updated_at"],
            how="left",
        )
        .filter(pl.col("_shared").fill_null(False) | pl.col("values").is_not_null())
        # A day that saw one value keeps no list of them: that one is its first.
        .with_columns(pl.coalesce("values", pl.concat_list("value")).alias("values"))
        .group_by(*KEYS, "updated_at")
        .agg(
            pl.col("first_seen_at").min(),
            pl.col("value").get(pl.col("first_seen_at").arg_min()),
            pl.col("last_value").get(pl.col("last_seen_at").arg_max()),
            pl.col("values").explode().n_unique().cast(pl.Int64).alias("revisions"),
        )
        .filter(pl.col("revisions") > 1)
        .rename({"updated_at": "candle_close"})
        .with_columns(*candle_times(), (pl.col("first_seen_at") - pl.col("candle_close")).alias("lag"))
        .select(*KEYS, *VALUE_COLUMNS)
        .collect()
    )


def _stale_of(stale: pl.DataFrame) -> pl.DataFrame:
    return (
        stale.select("token", "interval", "fetched_at", "updated_at")
        .with_columns((pl.col("fetched_at") - pl.col("updated_at")).alias("behind"))
        .sort("token", "interval", "fetched_at")
    )


def _failures_of(root: Root) -> pl.DataFrame:
    return (
        scan_table(root, "log")
        .filter(~pl.col("ok"))
        .group_by("token", "endpoint", "kind")
        .agg(pl.len().cast(pl.Int64).alias("rounds"))
        .sort("rounds", "token", descending=[True, False])
        .collect()
    )


def _against_cadence(
    cadence: Cadence, rules: Dict[str, Rule], counted: pl.DataFrame, unseen: pl.DataFrame, stale: pl.DataFrame
) -> "tuple[pl.DataFrame, pl.DataFrame]":
    """The coverage with `CADENCE_COLUMNS`, and the gaps of the closes the cadence could see."""
    missed = missed_closes(
        cadence, rules, counted.select("token", "interval", "first", step().alias("_step")), unseen, stale
    )
    per_pair = missed.group_by("token", "interval").agg(pl.col("missed").sum().alias("_missed"))
    coverage = (
        counted.join(per_pair, on=["token", "interval"], how="left")
        .with_columns(pl.col("_missed").fill_null(0).cast(pl.Int64).alias("missed"))
        .with_columns((pl.col("seen") + pl.col("missed")).alias("observable"))
        .with_columns((pl.col("expected") - pl.col("observable")).alias("unobservable"))
        .select(*COVERAGE, *CADENCE_COLUMNS)
    )
    gaps = missed.select(
        "token",
        "interval",
        pl.col("first_missed").alias("gap_start"),
        pl.col("last_missed").alias("gap_end"),
        pl.col("missed").alias("missing"),
    )
    return coverage, gaps


COVERAGE = ["token", "interval", "expected", "seen", "missing"]
#: What `audit` adds to ``coverage`` from the cadence.
CADENCE_COLUMNS = ["observable", "missed", "unobservable"]


def _expected() -> List[pl.Expr]:
    """``expected`` and ``missing`` from ``first``, ``last``, ``seen`` and ``_step``."""
    expected = ((pl.col("last") - pl.col("first")).dt.total_milliseconds() // pl.col("_step") + 1).cast(pl.Int64)
    return [expected.alias("expected"), (expected - pl.col("seen")).alias("missing")]


def _recomputed(root: Root, pairs: pl.DataFrame) -> Tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Coverage, gaps and repainted candles of some (token, interval) pairs, from all their rows."""
    tokens = pairs["token"].unique().implode()
    intervals = pairs["interval"].unique().implode()

    def only(frame: pl.LazyFrame) -> pl.LazyFrame:
        return frame.filter(pl.col("token").is_in(tokens), pl.col("interval").is_in(intervals)).join(
            pairs.lazy(), on=["token", "interval"], how="semi"
        )

    closes = only(scan_table(root, "ta_updated")).filter(pl.col("updated_at").is_not_null())
    distinct = (
        closes.select("token", "interval", "updated_at")
        .unique()
        .with_columns(step().alias("_step"))
        .sort("token", "interval", "updated_at")
    )
    coverage = (
        distinct.group_by("token", "interval")
        .agg(
            pl.col("updated_at").min().alias("first"),
            pl.col("updated_at").max().alias("last"),
            pl.len().cast(pl.Int64).alias("seen"),
            pl.col("_step").first(),
        )
        .with_columns(_expected())
        .select(*COVERAGE, "first")
        .collect()
    )
    gaps = gaps_of(
        distinct.with_columns(pl.col("updated_at").shift(1).over("token", "interval").alias("_previous"))
    ).collect()
    rows = only(scan_table(root, "indicators")).select(*KEYS, "value", "fetched_at")
    revisions = per_candle(
        rows.join(
            closes.select("token", "interval", "fetched_at", pl.col("updated_at").alias("candle_close")),
            on=["token", "interval", "fetched_at"],
        ),
        KEYS,
    ).filter(pl.col("revisions") > 1)
    return coverage, gaps, revisions.collect()
