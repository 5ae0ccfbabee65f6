"""Compaction by the engine: delta-rs's optimize, z-order of closed days, checkpoints, log
cleanup and vacuum. Safe at any moment on any partition while collectors append: optimize
replaces files without changing rows and delta-rs checks its commit against the appends that
landed meanwhile; vacuum only deletes files no version within the retention refers to."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Union

import polars as pl

from .._duration import format_duration, parse_every
from .._exceptions import HistoryError
from .._storage import PathLike, Root, one_line, require
from .._time import aware
from ._defaults import DEFAULT_MEMORY_BUDGET, DEFAULT_RETENTION, DEFAULT_TARGET_SIZE, MIN_RETENTION, delta_interval
from ._fence import ATTEMPTS, COMPACTION, epoch_of
from ._layout import DELTA_LOG, SORTED, State, states
from ._lock import Lease, LeaseLost, compaction_lock, took_over
from ._panics import engine_writes
from ._retained import kept_for_time_travel
from ._root import require_history, root_of
from ._tables import PARTITION, RAW, TABLES, check_ours, load

#: A day is closed (no round of a running collect lands in it any more) this long after it ends.
CLOSED_AFTER = dt.timedelta(hours=1)


def _before_commit(step: str, table: str) -> None:
    """Called right before each commit of a compaction: tests stall a compaction here."""


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*", re.IGNORECASE)


def parse_bytes(value: Union[int, str], name: str) -> int:
    """``1GB``, ``512MiB``, ``300mb`` or a number of bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and (match := _SIZE.fullmatch(value)):
        unit = match.group(2).lower().rstrip("b").rstrip("i")
        number = float(match.group(1)) * 1024 ** " kmgt".index(unit or " ")
    else:
        raise ValueError(f"{name} must be a number of bytes or a size such as 1GB or 512MB, got {value!r}")
    if not 1 << 20 <= number <= 1 << 50:
        raise ValueError(f"{name} must be between 1MB and 1PB, got {value!r}")
    return int(number)


def format_bytes(size: int) -> str:
    """A size as `parse_bytes` reads it, in its largest whole unit: ``1GB``, ``512MB``, ``300KB``."""
    for power, unit in ((4, "TB"), (3, "GB"), (2, "MB"), (1, "KB")):
        if size % 1024**power == 0:
            return f"{size // 1024**power}{unit}"
    return f"{size}B"


def _retention(value: Union[str, float, dt.timedelta]) -> dt.timedelta:
    retention = dt.timedelta(seconds=parse_every(value, "retention"))
    if retention < MIN_RETENTION:
        raise ValueError(
            f"retention must be at least {format_duration(MIN_RETENTION)} so that vacuum never deletes files a collector is still "
            f"committing, got {value!r}"
        )
    return retention


def _closed(day: dt.date, now: dt.datetime) -> bool:
    day_end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.timezone.utc)
    return now - day_end >= CLOSED_AFTER


def _sorted_days(root: Root, name: str) -> "set[str]":
    obstore = require("obstore")
    try:
        listed = [meta["path"] for batch in obstore.list(root.store(), prefix=f"{SORTED}/{name}/") for meta in batch]
    except FileNotFoundError:
        return set()
    return {path.rsplit("/", 1)[-1] for path in listed}


def _mark_sorted(root: Root, name: str, day: str) -> None:
    require("obstore").put(root.store(), f"{SORTED}/{name}/{day}", b"")


def compact(
    path: PathLike,
    *,
    retention: Union[str, float, dt.timedelta] = DEFAULT_RETENTION,
    sort: bool = True,
    memory_budget: Union[int, str] = DEFAULT_MEMORY_BUDGET,
    target_size: Union[int, str] = DEFAULT_TARGET_SIZE,
    now: Optional[dt.datetime] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> Dict[str, int]:
    """Compacts every table of the history at ``path`` with the engine (delta-rs), and returns
    counts: ``files_before``, ``files_after``, ``files_removed``/``files_added`` by optimize,
    ``days_sorted``, ``files_vacuumed``, and what is on disk afterwards: ``files_live``/``bytes_live``
    (what the tables read now) and ``files_kept``/``bytes_kept`` (replaced files that time travel
    may still read: a later compaction vacuums them once ``retention`` has passed, so disk use
    grows at first).

    1. optimize: each partition's small files (a round is one file a table) are packed into files
       of about ``target_size`` (default 128MB), partitions side by side on every core; today's
       partition too.
    2. sort: each closed day (ended over an hour ago, UTC) not sorted yet, in a table that holds
       more than `SORT_FROM_ROWS` rows that day, is z-ordered by token, spilling to disk past
       ``memory_budget`` (default 1GB; ``sort=False`` skips it): one token's query then reads a
       fraction of the files. Smaller days are not sorted: the sort would cost more than it saves.
    3. a checkpoint, and log entries older than ``retention`` are cleaned up.
    4. vacuum: files that no version within ``retention`` refers to are deleted.

    ``retention`` (default 7d, at least 1h) is how far `scan(..., as_of=...)` reaches
    back afterwards. Safe at any moment, also while collectors append to the same partitions:
    rows are never lost or doubled, and an interrupted compaction leaves the tables as they were.
    ``now`` (default: the wall clock) decides which days are closed. One compaction of a history
    runs at a time: a second one raises `HistoryError` at once (two would both rewrite the same
    files, doubling rows), and one that stalled past its lease while another took over commits
    nothing more (each compaction fences every table with a metadata commit first) and raises
    `HistoryError` saying to run it again. Log cleanup keeps every entry from the checkpoint that
    was the newest before this compaction's on, so concurrent loads find what they listed.
    """
    require_history()
    retention_span = _retention(retention)
    budget = parse_bytes(memory_budget, "memory_budget")
    target = parse_bytes(target_size, "target_size")
    now = aware(now) if now is not None else dt.datetime.now(dt.timezone.utc)
    root = root_of(path, storage_options)
    found = states(root)
    if all(value is State.MISSING for value in found.values()):
        raise FileNotFoundError(f"no history at {root.url!r}")
    if any(value is State.OLD_LAYOUT for value in found.values()):
        from ._layout import convert_hint

        raise HistoryError(convert_hint(root))
    for name in TABLES:
        table = load(root, name) if found[name] is State.DELTA else None
        if table is not None:  # another dataset's table is not ours to rewrite
            check_ours(table, name, root.path(name), "compact only a defilens history: move that table away")
    with compaction_lock(root, lambda: _highest_fence(root, found)) as lease, engine_writes(f"compacting {root.url!r}"):
        report = _compact(root, found, lease, retention_span, sort, budget, target, now)
    report.update(kept_for_time_travel(root))
    return report


def _highest_fence(root: Root, found: Dict[str, State]) -> int:
    """The highest epoch any table's fence records: where a new lock's epochs start."""
    highest = 0
    for name in TABLES:
        table = load(root, name) if found[name] is State.DELTA else None
        if table is not None:
            highest = max(highest, epoch_of(table.metadata().configuration.get(COMPACTION)) or 0)
    return highest


def _fresh(root: Root, name: str, table: Any) -> Any:
    """``table`` brought up to date (delta-rs reads only the log entries committed since: a load
    from scratch reads the newest checkpoint and every entry after it, in object storage a
    request each), or loaded anew when that fails."""
    deltalake = require("deltalake")
    try:
        table.update_incremental()
        return table
    except (OSError, deltalake.exceptions.DeltaError):
        return load(root, name)


def _checked(root: Root, name: str, lease: Lease, table: Any = None, *, current: bool = True) -> Any:
    """The table, once the lease is checked and the table's fence shows this compaction's token:
    no other compaction started on the table since this one's fence. ``table`` is brought up to
    date first (loaded now when not given), unless ``current=False`` says it is the snapshot of
    this compaction's own last commit. The commit that follows is made from this very snapshot, so
    a fence that lands after it makes the engine refuse that commit."""
    lease.check()
    if table is None:
        table = load(root, name)
    elif current:
        table = _fresh(root, name, table)
    if table is None:
        raise HistoryError(f"the table {root.path(name)!r} disappeared during its compaction; run it again")
    if table.metadata().configuration.get(COMPACTION) != lease.token:
        raise took_over(root)
    return table


def _conflicted(root: Root, name: str, lease: Lease, error: BaseException) -> HistoryError:
    """What a commit of this compaction refused by the engine means: another compaction's fence
    (this one stalled past its lease), or another writer."""
    table = load(root, name)
    if table is not None and table.metadata().configuration.get(COMPACTION) != lease.token:
        return took_over(root)
    return HistoryError(
        f"compaction of {root.path(name)!r} conflicted with another writer ({one_line(error)}); nothing was lost: "
        "run it again"
    )


def _fence(root: Root, name: str, lease: Lease, retention: Optional[dt.timedelta]) -> Any:
    """This compaction's first commit to a table: its token in the table's `_fence.COMPACTION` property (and
    the log retention time travel needs, unless ``retention`` is None: the table's own), a metadata change that makes the engine refuse every
    commit of an earlier compaction planned before it. A collector's append that lands first
    only makes it try again. Returns the table as of that commit (None: there is no table)."""
    deltalake = require("deltalake")
    for attempt in range(ATTEMPTS):
        lease.check()
        table = load(root, name)
        if table is None:
            return None
        if (epoch_of(table.metadata().configuration.get(COMPACTION)) or 0) > lease.epoch:
            raise took_over(root)
        changes = {COMPACTION: lease.token, **_log_retention(table, retention)}
        _before_commit("fence", name)
        try:
            table.alter.set_table_properties(changes, raise_if_not_exists=False)
            return table
        except deltalake.exceptions.CommitFailedError as error:
            if attempt == ATTEMPTS - 1:
                raise _conflicted(root, name, lease, error) from None
    return None


def _compact(
    root: Root,
    found: Dict[str, State],
    lease: Lease,
    retention_span: dt.timedelta,
    sort: bool,
    budget: int,
    target: int,
    now: dt.datetime,
) -> Dict[str, int]:
    deltalake = require("deltalake")
    report = {
        "files_before": 0,
        "files_after": 0,
        "files_removed": 0,
        "files_added": 0,
        "days_sorted": 0,
        "files_vacuumed": 0,
    }
    workers = os.cpu_count() or 1
    for name in TABLES:
        if found[name] is not State.DELTA:
            continue
        try:
            table = _fence(root, name, lease, retention_span)
            if table is None:
                continue
            table = _checked(root, name, lease, table, current=False)  # the snapshot of the fence's own commit
            report["files_before"] += len(table.file_uris())
            _before_commit("optimize", name)
            try:
                metrics = table.optimize.compact(target_size=target, max_concurrent_tasks=workers)
            except deltalake.exceptions.CommitFailedError as error:
                raise _conflicted(root, name, lease, error) from None
            report["files_removed"] += int(metrics.get("numFilesRemoved", 0))
            report["files_added"] += int(metrics.get("numFilesAdded", 0))
            if sort:
                _sort_closed_days(root, name, lease, table, now, budget, workers, report)
                table = _fresh(root, name, table)
            # Checkpoint, log cleanup and vacuum rewrite no rows: no fence needed, the lease still.
            lease.check()
            _before_commit("checkpoint", name)
            previous = last_checkpoint(root, name)
            table.create_checkpoint()
            _clean_log_behind(root, name, previous, lease)
            lease.check()
            _before_commit("vacuum", name)
            vacuumed = vacuum_within_log(root, name, table, retention_span)
            report["files_vacuumed"] += len(vacuumed)
            report["files_after"] += len(_fresh(root, name, table).file_uris())
        except deltalake.exceptions.CommitFailedError as error:
            raise _conflicted(root, name, lease, error) from None
        except (OSError, deltalake.exceptions.DeltaError) as error:
            raise HistoryError(f"could not compact {root.path(name)!r}: {one_line(error)}") from None
    return report


def pack_closed_days(root: Root, now: dt.datetime) -> Dict[str, int]:
    """A collector's own packing, for a history nobody compacts: in every table, the small files
    of each closed day (ended over `CLOSED_AFTER` ago by ``now``) are packed into files of about
    `DEFAULT_TARGET_SIZE` (a round is a file a table; a day of 15-minute rounds, 96), then a
    checkpoint is written and what no version within the table's retention refers to is vacuumed.
    Without it every commit grew with the files the table has (a wide table's commit took 3.6
    times as long at a thousand files as at forty). Today is left alone, days are not sorted and
    the tables' retention is not changed: that is `compact`'s work.

    Under the compaction lock and fenced as a compaction is (raises `Busy` at once when a
    compaction or another collector's packing holds the lock). Returns ``days`` (partitions
    packed, over all tables) and ``files_removed``/``files_added``."""
    report = {"days": 0, "files_removed": 0, "files_added": 0}
    found = states(root)
    todo = {name: days for name in TABLES if found[name] is State.DELTA and (days := _unpacked_days(root, name, now))}
    if not todo:
        return report
    deltalake = require("deltalake")
    with (
        compaction_lock(root, lambda: _highest_fence(root, found)) as lease,
        engine_writes(f"packing the closed days of {root.url!r}"),
    ):
        for name, days in todo.items():
            try:
                table = _fence(root, name, lease, None)
                if table is None:
                    continue
                table = _checked(root, name, lease, table, current=False)
                _before_commit("pack", name)
                metrics = table.optimize.compact(
                    partition_filters=[(PARTITION, "in", days)], target_size=DEFAULT_TARGET_SIZE, max_concurrent_tasks=1
                )
                report["days"] += len(days)
                report["files_removed"] += int(metrics.get("numFilesRemoved", 0))
                report["files_added"] += int(metrics.get("numFilesAdded", 0))
                lease.check()
                table = _fresh(root, name, table)
                table.create_checkpoint()  # the next load reads the few files, not the many
                lease.check()
                vacuum_within_log(root, name, table, None)  # within the table's retention and its kept log
            except deltalake.exceptions.CommitFailedError as error:
                raise _conflicted(root, name, lease, error) from None
            except (OSError, deltalake.exceptions.DeltaError) as error:
                raise HistoryError(
                    f"could not pack the closed days of {root.path(name)!r}: {one_line(error)}"
                ) from None
    return report


#: How much older than the oldest kept log entry a file's removal must be for vacuum to delete
#: it: room for the writers' clocks (which stamp removals) against the store's (which stamps entries).
CLOCK_MARGIN = dt.timedelta(hours=1)


def _oldest_log_entry(root: Root, name: str) -> Optional[dt.datetime]:
    """When the oldest entry (commit or checkpoint) still in the table's log was written."""
    obstore = require("obstore")
    stamps = [
        meta["last_modified"]
        for batch in obstore.list(root.store(), prefix=f"{name}/{DELTA_LOG}/")
        for meta in batch
        if re.fullmatch(r"\d{20}\.(json|checkpoint\.parquet)", meta["path"].rsplit("/", 1)[-1])
    ]
    return min(stamps) if stamps else None


def vacuum_within_log(root: Root, name: str, table: Any, retention: Optional[dt.timedelta]) -> List[str]:
    """Vacuum that deletes only what no version the log still lists refers to: files removed
    over ``retention`` ago (None: the table's own file retention) and before the oldest kept log
    entry. Vacuum alone goes by the retention, and log cleanup keeps every entry from a checkpoint
    on, however old: versions stayed listed after their files were deleted, and time travel to
    them failed at ``.collect()``. Returns the files deleted."""
    if retention is None:
        seconds = _seconds(table.metadata().configuration.get("delta.deletedFileRetentionDuration"))
        retention = dt.timedelta(seconds=seconds if seconds is not None else DEFAULT_RETENTION.total_seconds())
    oldest = _oldest_log_entry(root, name)
    if oldest is not None:
        retention = max(retention, dt.datetime.now(dt.timezone.utc) - oldest + CLOCK_MARGIN)
    hours = max(1, math.ceil(retention.total_seconds() / 3600))
    return list(table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False))


def _unpacked_days(root: Root, name: str, now: dt.datetime) -> List[str]:
    """The closed days of the table that hold more than one file."""
    table = load(root, name)
    if table is None:
        return []
    files = pl.DataFrame(table.get_add_actions(flatten=True)).get_column(f"partition.{PARTITION}").alias(PARTITION)
    crowded = files.drop_nulls().value_counts().filter(pl.col("count") > 1).get_column(PARTITION)
    return sorted(day for day in crowded.cast(pl.String) if _closed(dt.date.fromisoformat(day), now))


def last_checkpoint(root: Root, name: str) -> Optional[int]:
    """The version of the table's newest checkpoint (its log's ``_last_checkpoint``), or None."""
    obstore = require("obstore")
    try:
        hint = json.loads(bytes(obstore.get(root.store(), f"{name}/{DELTA_LOG}/_last_checkpoint").bytes()))
        return int(hint["version"])
    except Exception:  # none yet, or unreadable: nothing is cleaned this time
        return None


def _clean_log_behind(root: Root, name: str, previous: Optional[int], lease: Lease) -> None:
    lease.check()
    _before_commit("cleanup", name)
    clean_log_behind(root, name, previous)


def clean_log_behind(root: Root, name: str, previous: Optional[int]) -> None:
    """Log cleanup with a margin: only entries older than the retention and older than the
    checkpoint that was the newest before this compaction's (``previous``). A collector or reader
    that started loading the table before this compaction's checkpoint was written is reading
    that one, or entries after it: neither is removed under it. (delta-rs's own cleanup goes up
    to the newest checkpoint, and readers of the one before failed to load.)"""
    if previous is None:
        return
    deltalake = require("deltalake")
    try:
        behind = deltalake.DeltaTable(root.path(name), version=previous, storage_options=root.options())
    except (OSError, deltalake.exceptions.DeltaError):
        return  # that checkpoint is gone already (a collector's own cleanup): cleaned next time
    with engine_writes(f"cleaning the log of {root.path(name)!r}"):
        behind.cleanup_metadata()


def _log_retention(table: Any, retention: Optional[dt.timedelta]) -> Dict[str, str]:
    """The table properties, where the table's differ, that make log cleanup and vacuum keep what
    time travel needs (``retention`` None: the table's own stays), and that leave log cleanup to
    compaction alone: delta-rs's own cleanup
    after a collector's commit (each checkpoint interval) would go up to the newest checkpoint, under the
    feet of collectors and readers still loading the one before."""
    properties = table.metadata().configuration
    changes = {}
    seconds = None if retention is None else int(retention.total_seconds())
    wanted = delta_interval(dt.timedelta(seconds=seconds or 0))
    if seconds is not None and _seconds(properties.get("delta.logRetentionDuration")) != seconds:
        changes = {
            key: wanted
            for key in ("delta.logRetentionDuration", "delta.deletedFileRetentionDuration")
            if properties.get(key) != wanted
        }
    if properties.get("delta.enableExpiredLogCleanup") != "false":
        changes["delta.enableExpiredLogCleanup"] = "false"
    return changes


def _seconds(interval: Optional[str]) -> Optional[int]:
    match = re.fullmatch(r"interval (\d+) (seconds?|minutes?|hours?|days?|weeks?)", interval or "")
    if not match:
        return None
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)[0]]
    return int(match.group(1)) * unit


#: A closed day is sorted by token only when its table holds more rows in it than this (the rows
#: of one Parquet row group as delta-rs writes them). A z-order costs seconds a table and day
#: however small the day (3 to 6 s at load 8, for 14,400 rows as for 648,000), and saves a
#: one-token read about 4 ms a day read: on ten days of 150 tokens every closed day sorted made
#: compaction 15.5 times as long (65.5 s against 4.2 s) for 0.069 -> 0.030 s on one token's
#: query over the ten days. Days of millions of rows, where a long history's queries take
#: seconds, are sorted (a year of 200 tokens' 5-minute rounds: 2.05 -> 0.71 s). docs/history.md.
SORT_FROM_ROWS = 1024 * 1024
#: Tables never sorted by token: their reads are by day (the raw bodies, which `reparse` reads) or
#: whole (the log, which the audit counts failures in).
NEVER_SORTED = (RAW, "log")


def _rows_per_day(table: Any) -> Dict[str, int]:
    """The rows of each day (partition value) of the table, from its log's statistics."""
    actions = pl.DataFrame(table.get_add_actions(flatten=True))
    if actions.is_empty() or "num_records" not in actions.columns:
        return {}
    per_day = actions.group_by(pl.col(f"partition.{PARTITION}").cast(pl.String).alias("day")).agg(
        pl.col("num_records").sum()
    )
    return {str(day): int(rows or 0) for day, rows in per_day.iter_rows() if day is not None}


def _sort_closed_days(
    root: Root,
    name: str,
    lease: Lease,
    table: Any,
    now: dt.datetime,
    budget: int,
    workers: int,
    report: Dict[str, int],
) -> int:
    """Z-orders the closed days not sorted yet that hold more than `SORT_FROM_ROWS` rows, each
    from a snapshot of ``table`` brought up to date and checked as `_checked` does; counts them
    into ``report`` and returns how many."""
    if name in NEVER_SORTED:
        return 0
    table = _checked(root, name, lease, table)
    done = _sorted_days(root, name)
    rows = _rows_per_day(table)
    days = sorted(
        {
            value
            for partition in table.partitions()
            if (value := partition.get(PARTITION)) is not None
            and value not in done
            and _closed(dt.date.fromisoformat(value), now)
            and rows.get(value, 0) > SORT_FROM_ROWS
        }
    )
    deltalake = require("deltalake")
    sorted_now = 0
    for day in days:
        table = _checked(root, name, lease, table)
        _before_commit("sort", name)
        try:
            table.optimize.z_order(
                ["token"],
                partition_filters=[(PARTITION, "=", day)],
                max_spill_size=budget,
                max_concurrent_tasks=workers,
            )
        except deltalake.exceptions.CommitFailedError as error:
            if isinstance(_conflicted(root, name, lease, error), LeaseLost):
                raise took_over(root) from None
            continue  # a late round landed in the day meanwhile: sorted on the next run
        _mark_sorted(root, name, day)
        sorted_now += 1
    report["days_sorted"] += sorted_now
    return sorted_now
