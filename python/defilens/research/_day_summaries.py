"""What the audit keeps of each day of a history, so that the next audit reads only the days that
changed.

A day is a ``date`` partition (the rounds that began on it). Its summary holds exactly what the
audit needs and no more, per token and interval: the span of candle closes it saw (``spans``:
the first, the last, how many), the gaps within that span (``gaps``), its stale fetches
(``stale``), and the candles a day alone cannot judge or has judged repainted (``candles``: those
of its first and last close, which are the only ones another day can share unless the spans of
two days overlap, and those seen with more than one value within the day, the distinct values in
``values``), and per token the moments it was fetched (``fetches``) and those that showed no close
of an interval (``blind``), which the cadence is judged by. The audit stitches the days together (`defilens.research._audit`), exactly, from
these alone.

The summaries live under ``ROOT/_audit/`` as Delta tables, beside the history. A day's summary is
keyed by a fingerprint of its data files in ``ta_updated`` and ``indicators``: a round added to
the day, a compaction, anything that touches its files, and the day is summarized again. Each
audit that summarizes days appends them under an id of its own and records the day in ``days``
last, so a summary cut off half-written is never read, and two audits at once only duplicate
work.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
import warnings
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import polars as pl

from .._core import INTERVAL_MS
from .._frames import INTERVAL
from .._progress import progress_callback
from .._stack import stacklevel_outside
from .._storage import Root, one_line
from .._time import UTC_MS
from ..history import AUDIT_CACHE, PARTITION, append_table, load_ours, read_table, restore

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: The summaries of a day, in the order they are written (``days`` last: it makes them valid).
SUMMARIES = ("spans", "gaps", "stale", "candles", "fetches", "blind")
DAYS = "days"
#: The tables a day's fingerprint covers: everything the summaries are made of.
SOURCES = ("ta_updated", "indicators")
#: How many indicator rows one pass over the history reads at most (a day of 15-minute rounds
#: for 150 tokens is about 650,000; a larger day is read alone): bounds memory. At 10 million a
#: pass, the audit of ten such days read them in one pass and peaked at 1.7 GB.
BATCH_ROWS = 1_000_000
#: How many indicator rows' summaries are kept at once (one append to each summary table): what a
#: crash can cost, and a commit each table for every so many rows.
KEEP_ROWS = 10_000_000


def step() -> pl.Expr:
    """Each row's candle length in milliseconds."""
    return pl.col("interval").cast(pl.String).replace_strict(INTERVAL_MS, return_dtype=pl.Int64)


class Sources:
    """The history's ``ta_updated`` and ``indicators`` at one version each: the fingerprints
    and the rows summarized are read from the same snapshot."""

    def __init__(self, root: Root) -> None:
        self.tables: Dict[str, Optional["DeltaTable"]] = {name: load_ours(root, name) for name in SOURCES}

    def scan(self, name: str) -> Optional[pl.LazyFrame]:
        table = self.tables[name]
        return None if table is None else restore(pl.scan_delta(table))

    def days(self) -> pl.DataFrame:
        """``date``, ``fingerprint`` and the day's indicator ``rows``, one row per day."""
        files = []
        for name, table in self.tables.items():
            if table is None:
                continue
            actions = pl.DataFrame(table.get_add_actions(flatten=True))
            files.append(
                actions.select(
                    pl.col(f"partition.{PARTITION}").cast(pl.Date).alias("date"),
                    (pl.lit(name + "/") + pl.col("path")).alias("file"),
                    pl.when(pl.lit(name == "indicators")).then(pl.col("num_records")).otherwise(0).alias("rows"),
                )
            )
        if not files:
            return pl.DataFrame(schema={"date": pl.Date, "fingerprint": pl.String, "rows": pl.Int64})
        per_day = (
            pl.concat(files)
            .filter(pl.col("date").is_not_null())
            .group_by("date")
            .agg(pl.col("file").sort(), pl.col("rows").sum().cast(pl.Int64))
            .sort("date")
        )
        fingerprints = [
            hashlib.blake2b("\n".join(day_files).encode(), digest_size=16).hexdigest() for day_files in per_day["file"]
        ]
        return per_day.select("date", pl.Series("fingerprint", fingerprints, pl.String), "rows")


def summarize(sources: Sources, dates: List[dt.date]) -> Dict[str, pl.DataFrame]:
    """The summaries of some days, each row with its ``date``."""
    ta_updated = sources.scan("ta_updated")
    if ta_updated is None:
        return empty()
    closes = (
        ta_updated.filter(pl.col("date").is_in(dates), pl.col("updated_at").is_not_null())
        .select("date", "token", "interval", "fetched_at", "updated_at")
        .collect()
    )
    # The moments each token was fetched, and those that showed no close of an interval: what the
    # cadence is judged by (`_cadence`). A fetch is in one day, so the days stitch by concatenation.
    fetches = closes.select("date", "token", "fetched_at").unique().sort("date", "token", "fetched_at")
    blind = (
        ta_updated.filter(pl.col("date").is_in(dates), pl.col("updated_at").is_null())
        .select("date", "token", "interval", "fetched_at")
        .unique()
        .collect()
    )
    distinct = (
        closes.select("date", "token", "interval", "updated_at")
        .unique()
        .sort("date", "token", "interval", "updated_at")
        .with_columns(step().alias("_step"))
    )
    spans = (
        distinct.group_by("date", "token", "interval")
        .agg(
            pl.col("updated_at").min().alias("first"),
            pl.col("updated_at").max().alias("last"),
            pl.len().cast(pl.Int64).alias("seen"),
        )
        .sort("date", "token", "interval", "first")
    )
    gaps = gaps_of(
        distinct.lazy().with_columns(
            pl.col("updated_at").shift(1).over("date", "token", "interval").alias("_previous")
        ),
        "date",
    ).collect()
    stale = (
        closes.with_columns((pl.col("fetched_at") - pl.col("updated_at")).alias("behind"))
        .filter(pl.col("behind").dt.total_milliseconds() > step())
        .select("date", "token", "interval", "fetched_at", "updated_at")
    )
    ends = pl.concat(
        [
            spans.select("date", "token", "interval", pl.col("first").alias("updated_at")),
            spans.select("date", "token", "interval", pl.col("last").alias("updated_at")),
        ]
    ).unique()
    # Which fetches showed a day's first or last close, marked on the few ta_updated rows
    # rather than looked up for each of the many indicator rows.
    marked = closes.join(
        ends.with_columns(pl.lit(True).alias("_end")), on=["date", "token", "interval", "updated_at"], how="left"
    ).with_columns(pl.col("_end").fill_null(False))
    return {
        "spans": spans,
        "gaps": gaps,
        "stale": stale,
        "candles": _candles(sources, dates, marked),
        "fetches": fetches,
        "blind": blind,
    }


def gaps_of(rows: pl.LazyFrame, *keys: str) -> pl.LazyFrame:
    """Gaps from rows that each hold a close (``updated_at``), the one seen before it
    (``_previous``) and ``_step``: the candles between the two, where there are any."""
    return (
        rows.with_columns(
            ((pl.col("updated_at") - pl.col("_previous")).dt.total_milliseconds() // pl.col("_step") - 1).alias(
                "missing"
            )
        )
        .filter(pl.col("missing") > 0)
        .select(
            *keys,
            "token",
            "interval",
            (pl.col("_previous") + pl.duration(milliseconds=pl.col("_step"))).alias("gap_start"),
            (pl.col("updated_at") - pl.duration(milliseconds=pl.col("_step"))).alias("gap_end"),
            pl.col("missing").cast(pl.Int64),
        )
    )


CANDLE = ["date", "token", "interval", "indicator", "updated_at"]


def _first_and_last() -> List[pl.Expr]:
    return [
        pl.col("fetched_at").min().alias("first_seen_at"),
        pl.col("value").get(pl.col("fetched_at").arg_min()).alias("value"),
        pl.col("fetched_at").max().alias("last_seen_at"),
        pl.col("value").get(pl.col("fetched_at").arg_max()).alias("last_value"),
    ]


def _candles(sources: Sources, dates: List[dt.date], marked: pl.DataFrame) -> pl.DataFrame:
    """The candles of some days at the ends of runs (``values`` null: one value) and those
    seen with more than one value (``values``: the distinct ones)."""
    indicators = sources.scan("indicators")
    if indicators is None:
        return empty()["candles"]
    rows = (
        indicators.filter(pl.col("date").is_in(dates))
        .select("date", "token", "interval", "indicator", "value", "fetched_at")
        .join(marked.lazy(), on=["date", "token", "interval", "fetched_at"], how="inner")
        .collect()
    )
    # Only the ends' candles need their first and last values (the dearest aggregation); of
    # the others only those that moved. Those are found by grouping on a 64-bit hash of the
    # candle (three times faster than on its five columns): a collision can only add values to
    # a group, so it never hides a candle that moved, and the exact count below drops it.
    ends = rows.filter("_end").group_by(CANDLE).agg(*_first_and_last(), pl.col("value").n_unique().alias("_n"))
    inner = rows.filter(~pl.col("_end")).with_columns(
        pl.reduce(lambda a, b: a ^ b, [pl.col(c).to_physical().hash(seed) for seed, c in enumerate(CANDLE)]).alias(
            "_candle"
        )
    )
    suspects = (
        inner.group_by("_candle").agg((pl.col("value").n_unique() > 1).alias("_moved")).filter("_moved")["_candle"]
    )
    inner_moved = (
        inner.filter(pl.col("_candle").is_in(suspects.implode()))
        .group_by(CANDLE)
        .agg(pl.col("value").n_unique().alias("_n"))
        .filter(pl.col("_n") > 1)
        if suspects.len()
        else inner.clear()
    )
    moved_keys = pl.concat([inner_moved.select(CANDLE), ends.filter(pl.col("_n") > 1).select(CANDLE)])
    schema = empty()["candles"].schema
    steady = ends.filter(pl.col("_n") == 1).select(*CANDLE, "first_seen_at", "value", "last_seen_at", "last_value")
    steady = steady.with_columns(pl.lit(None, schema["values"]).alias("values"))
    if moved_keys.is_empty():
        return steady
    moved = (
        rows.join(moved_keys, on=CANDLE, how="semi")
        .group_by(CANDLE)
        .agg(*_first_and_last(), pl.col("value").unique().alias("values"))
    )
    return pl.concat([steady, moved.select(steady.columns)])


def empty() -> Dict[str, pl.DataFrame]:
    """The summaries of no day, typed."""
    base: Dict[str, pl.DataType] = {"date": pl.Date(), "token": pl.String(), "interval": INTERVAL}
    return {
        "spans": pl.DataFrame(schema={**base, "first": UTC_MS, "last": UTC_MS, "seen": pl.Int64()}),
        "gaps": pl.DataFrame(schema={**base, "gap_start": UTC_MS, "gap_end": UTC_MS, "missing": pl.Int64()}),
        "stale": pl.DataFrame(schema={**base, "fetched_at": UTC_MS, "updated_at": UTC_MS}),
        "fetches": pl.DataFrame(schema={"date": pl.Date(), "token": pl.String(), "fetched_at": UTC_MS}),
        "blind": pl.DataFrame(schema={**base, "fetched_at": UTC_MS}),
        "candles": pl.DataFrame(
            schema={
                **base,
                "indicator": pl.String,
                "updated_at": UTC_MS,
                "first_seen_at": UTC_MS,
                "value": pl.Float64,
                "last_seen_at": UTC_MS,
                "last_value": pl.Float64,
                "values": pl.List(pl.Float64),
            }
        ),
    }


def _cache(name: str) -> str:
    """The path under the root of one table of the audit's day summaries."""
    return f"{AUDIT_CACHE}/{name}"


def cached(root: Root, current: pl.DataFrame) -> Tuple[Dict[str, pl.DataFrame], pl.DataFrame]:
    """The kept summaries of the days whose fingerprint is still ``current``'s, and the days of
    ``current`` that have none."""
    days = read_table(root, _cache(DAYS))
    if days is None:
        return empty(), current
    valid = (
        days.join(current.lazy().select("date", "fingerprint"), on=["date", "fingerprint"], how="inner")
        .group_by("date")
        .agg(pl.col("audit").min())  # two audits that summarized a day at once: either one
        .collect()
    )
    found = {}
    for name, frame in empty().items():
        table = read_table(root, _cache(name))
        if table is None or valid.is_empty():
            found[name] = frame
            continue
        found[name] = (
            table.join(valid.lazy(), on=["date", "audit"], how="semi")
            .select(frame.columns)
            .collect()
            .cast(frame.schema)
        )
    return found, current.join(valid, on="date", how="anti")


def keep(root: Root, audit_id: str, days: pl.DataFrame, summaries: Dict[str, pl.DataFrame]) -> None:
    """Appends some days' summaries under ``audit_id``, then the days themselves."""
    for name in (*SUMMARIES, DAYS):
        frame = days.select("date", "fingerprint") if name == DAYS else summaries[name]
        append_table(root, _cache(name), frame.with_columns(pl.lit(audit_id).alias("audit")))


def batches(todo: pl.DataFrame) -> List[List[dt.date]]:
    """Consecutive days in groups of at most `BATCH_ROWS` indicator rows (a day larger than
    that alone)."""
    groups: List[List[dt.date]] = []
    rows = 0
    for day, day_rows in todo.select("date", "rows").iter_rows():
        if not groups or rows + day_rows > BATCH_ROWS:
            groups.append([])
            rows = 0
        groups[-1].append(day)
        rows += day_rows
    return groups


def day_summaries(root: Root, *, cache: bool, progress: Optional[bool]) -> Dict[str, pl.DataFrame]:
    """The summaries of every day of the history, from the kept ones where they are current.
    With ``cache``, what had to be summarized is kept for the next audit."""
    sources = Sources(root)
    current = sources.days()
    found, todo = cached(root, current) if cache else (empty(), current)
    parts = {name: [frame] for name, frame in found.items()}
    audit_id = uuid.uuid4().hex
    keeping = cache
    done = 0
    # Summarized and not kept yet: kept every `KEEP_ROWS` rows' worth of days, and at the end.
    pending: Dict[str, List[pl.DataFrame]] = {name: [] for name in parts}
    pending_days: List[dt.date] = []
    pending_rows = 0
    groups = batches(todo)
    with progress_callback(progress, todo.height, "audit: summarizing days", unit="days") as on_progress:
        for number, dates in enumerate(groups):
            summaries = summarize(sources, dates)
            for name, frame in summaries.items():
                parts[name].append(frame)
                if keeping:
                    pending[name].append(frame)
            pending_days.extend(dates)
            pending_rows += int(todo.filter(pl.col("date").is_in(dates))["rows"].sum())
            if keeping and (pending_rows >= KEEP_ROWS or number == len(groups) - 1):
                try:
                    keep(
                        root,
                        audit_id,
                        todo.filter(pl.col("date").is_in(pending_days)),
                        {name: pl.concat(frames) for name, frames in pending.items()},
                    )
                except Exception as error:  # a read-only bucket, a full disk: the audit itself is still right
                    warnings.warn(
                        f"the audit's day summaries could not be kept under {root.path(AUDIT_CACHE)!r} "
                        f"({one_line(error)}); this audit is complete, the next one summarizes these days "
                        "again (audit(cache=False) does not try)",
                        stacklevel=stacklevel_outside(),
                    )
                    keeping = False
                pending = {name: [] for name in parts}
                pending_days, pending_rows = [], 0
            done += len(dates)
            if on_progress is not None:
                on_progress(done, todo.height)
    schemas = empty()
    return {name: pl.concat([f.cast(schemas[name].schema) for f in frames]) for name, frames in parts.items()}
