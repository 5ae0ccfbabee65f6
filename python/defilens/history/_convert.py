"""Conversion of a history in the Hive-Parquet layout of earlier versions
(``ROOT/<frame>/date=YYYY-MM-DD/*.parquet``) into Delta tables, in place.

Every table's rows are rewritten by delta-rs through the collector's own commit, so a converted
table has exactly the columns and types a table `collect` writes today (text ``interval``,
microsecond timestamps, ``date`` as the partition column): the old files carry polars' Enum and
millisecond timestamps, which polars' Delta reader refuses under a Delta schema. Converting the
old files in place (delta-rs's ``convert_to_deltalake``) would keep those types.

The steps, each safe to interrupt at any moment (running `convert` again resumes):

1. Before anything changes, every old file is listed and its footer read: a file that is not a
   day's Parquet file, a column of a type the table cannot take, or a ``date`` column that
   disagrees with its folder stops the conversion, naming the file.
2. The list of old files, cut into batches, is written to the marker ``_defilens/converting``
   (gzipped JSON). From then on `collect` and `scan` refuse the root, and a rerun works from
   that list, never from a new listing (files written by an interrupted commit are not old).
3. Each batch is one idempotent commit (app transaction ``defilens-convert``, the batch's number).
4. A table's rows are compared with its old files' rows, every row (a hash of each row), and the
   table is recorded as checked in the marker.
5. Its old files are deleted, then a full vacuum deletes what interrupted commits left behind.
6. ``info`` is kept only where it changes (one rewrite), and a full vacuum deletes the files it
   replaced.
7. The marker is deleted.

Steps 2 to 7 hold the compaction lock: a compaction beside the full vacuum of step 5 could lose
the files it is writing.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Optional, Tuple

import polars as pl

from .._exceptions import HistoryError
from .._storage import PathLike, Root, one_line, require
from ._info import keep_changes_only
from ._layout import CONVERTING, State, check_tables, state, states
from ._lock import Busy, compaction_lock
from ._panics import engine_writes
from ._root import require_history, root_of
from ._tables import PARTITION, TABLES, commit, create, frame_schema, load

#: The app id of the commits that rewrite the old files during conversion.
CONVERT_APP = "defilens-convert"
#: The marker's format (a marker of another format was written by another defilens).
MANIFEST_FORMAT = 1
#: At most this many bytes of old Parquet files go into one commit (a batch never spans two days).
BATCH_BYTES = 32 * 2**20
#: The seed of the row hashes that compare a converted table with its old files.
_SEED = 36
_DAY = re.compile(r"date=(\d{4}-\d{2}-\d{2})")
#: Old files whose footers are read at once (object storage answers each in tens of milliseconds).
_READERS = 16

#: One batch: (day, [file names relative to the table's folder]).
Batch = Tuple[str, List[str]]


class _Failed(Exception):
    """A problem with one old file, found before anything was changed."""


# -- the types a table holds on disk ----------------------------------------------------------


def _disk_type(dtype: pl.DataType) -> pl.DataType:
    """What the collector's commit leaves in a table's files for a frame's dtype: text for Enum
    and Categorical, microseconds in UTC for timestamps (Delta's one timestamp type)."""
    if isinstance(dtype, (pl.Enum, pl.Categorical)):
        return pl.String()
    if isinstance(dtype, pl.Datetime):
        return pl.Datetime("us", "UTC")
    return dtype


@functools.lru_cache(maxsize=None)
def _disk_schema(name: str) -> Dict[str, pl.DataType]:
    return {column: _disk_type(dtype) for column, dtype in frame_schema(name).items()}


_TEXT = (pl.String, pl.Enum, pl.Categorical)


def _compatible(old: pl.DataType, new: pl.DataType) -> bool:
    """Whether a column of type ``old`` converts to ``new`` without losing anything."""
    if old == new:
        return True
    if isinstance(new, pl.Datetime):
        return isinstance(old, pl.Datetime)
    if isinstance(new, _TEXT):
        return isinstance(old, _TEXT)
    if new.is_float():
        return old.is_numeric()
    if new.is_integer():
        return old.is_integer()
    return False


def _cast(column: str, old: pl.DataType, new: pl.DataType) -> pl.Expr:
    expr = pl.col(column)
    if isinstance(new, pl.Datetime) and isinstance(old, pl.Datetime):
        if old.time_zone is None:
            expr = expr.dt.replace_time_zone("UTC")
        return expr.dt.convert_time_zone("UTC").dt.cast_time_unit(new.time_unit or "us")
    return expr.cast(new, strict=True)


def _on_disk(frame: pl.DataFrame, name: str, day: str) -> pl.DataFrame:
    """An old file's rows as the collector writes them: the table's columns in its order (those
    the file lacks as nulls), then any column of the file that defilens does not write now, and
    ``date`` from the file's folder."""
    target = _disk_schema(name)
    columns = []
    for column, dtype in target.items():
        if column == PARTITION:
            continue
        if column in frame.columns:
            columns.append(_cast(column, frame.schema[column], dtype))
        else:
            columns.append(pl.lit(None, dtype).alias(column))
    for column, dtype in frame.schema.items():
        if column not in target:
            columns.append(_cast(column, dtype, _disk_type(dtype)) if _disk_type(dtype) != dtype else pl.col(column))
    columns.append(pl.lit(day).str.to_date().alias(PARTITION))
    return frame.select(columns)


# -- the old files ----------------------------------------------------------------------------


def _list_old(root: Root, name: str) -> "Tuple[List[Tuple[str, str, int]], List[str]]":
    """The Parquet files of an old-layout table, (day, name relative to the table's folder,
    size), and what else is in its folder that is not hidden (a foreign file, a broken one).
    Every visible file counts, whatever its name: earlier defilens's, pyarrow's and Spark's
    (``part-*``) alike."""
    obstore = require("obstore")
    files: List[Tuple[str, str, int]] = []
    problems: List[str] = []
    try:
        for batch in obstore.list(root.store(), prefix=f"{name}/"):
            for meta in batch:
                relative = meta["path"][len(name) + 1 :]
                parts = relative.split("/")
                if any(part.startswith((".", "_")) for part in parts):
                    continue  # a temporary file of an interrupted write, Spark's _SUCCESS and .crc files
                match = _DAY.fullmatch(parts[0]) if len(parts) == 2 else None
                if match is None or not parts[1].endswith(".parquet"):
                    problems.append(f"{name}/{relative} (not a day's Parquet file)")
                elif meta["size"] < 12:
                    problems.append(f"{name}/{relative} ({meta['size']} bytes: not a Parquet file)")
                else:
                    files.append((match.group(1), relative, int(meta["size"])))
    except Exception as error:  # obstore's errors, OSError
        raise HistoryError(f"cannot list {root.path(name)!r}: {one_line(error)}") from None
    return sorted(files), problems


def _uri(root: Root, name: str, relative: str) -> str:
    return f"{root.url}/{name}/{relative}"


def _scan_old(root: Root, name: str, relative: str) -> pl.LazyFrame:
    return pl.scan_parquet(
        _uri(root, name, relative), storage_options=root.options(), hive_partitioning=False, glob=False
    )


def _read_batch(root: Root, name: str, day: str, files: List[str]) -> pl.DataFrame:
    """The rows of a batch of old files, as the collector writes them. Files of one schema (the
    usual case: one defilens wrote them) are read in one scan, others one by one."""
    try:
        frame = pl.scan_parquet(
            [_uri(root, name, relative) for relative in files],
            storage_options=root.options(),
            hive_partitioning=False,
            glob=False,
            missing_columns="insert",
            extra_columns="raise",
        ).collect()
    except pl.exceptions.PolarsError:
        frames = [
            _on_disk(_scan_old(root, name, relative).collect().drop(PARTITION, strict=False), name, day)
            for relative in files
        ]
        return pl.concat(frames, how="diagonal_relaxed")
    return _on_disk(frame.drop(PARTITION, strict=False), name, day)


def _day_of(dtype: pl.DataType) -> Optional[pl.Expr]:
    column = pl.col(PARTITION)
    if dtype == pl.Date:
        return column
    if isinstance(dtype, pl.Datetime):
        return column.dt.date()
    if isinstance(dtype, _TEXT):
        return column.cast(pl.String).str.to_date(strict=False)
    return None


def _inspect(root: Root, name: str, day: str, relative: str) -> Optional[str]:
    """What stops this old file from converting, or None. Reads the footer only (and the
    ``date`` column of a file that carries one)."""
    where = f"{name}/{relative}"
    try:
        schema = _scan_old(root, name, relative).collect_schema()
    except Exception as error:  # polars' and object_store's errors
        return f"{where} (not a readable Parquet file: {one_line(error)[:120]})"
    target = _disk_schema(name)
    for column, dtype in schema.items():
        if column == PARTITION:
            day_of = _day_of(dtype)
            if day_of is None:
                return f"{where} (its column date is {dtype}, not a day)"
            try:
                days = _scan_old(root, name, relative).select(day_of.unique()).collect().to_series()
            except Exception as error:
                return f"{where} (its date column cannot be read: {one_line(error)[:120]})"
            other = sorted({str(value) for value in days if str(value) != day})
            if other:
                return f"{where} (its date column holds {', '.join(other[:3])}, its folder says {day})"
        elif column in target and not _compatible(dtype, target[column]):
            return f"{where} (column {column} is {dtype}, a defilens {name} table holds {target[column]})"
    return None


def _batches(files: List[Tuple[str, str, int]]) -> List[Batch]:
    """The commits a table's old files go into: a day's files, cut at ``BATCH_BYTES``."""
    batches: List[Batch] = []
    size = 0
    for day, relative, bytes_ in files:
        if not batches or batches[-1][0] != day or size + bytes_ > BATCH_BYTES:
            batches.append((day, []))
            size = 0
        batches[-1][1].append(relative)
        size += bytes_
    return batches


def _plan(root: Root, names: List[str]) -> Dict[str, List[Batch]]:
    """The old files of each table in batches, once every file was looked at; a HistoryError
    naming the files that would not convert, before anything was changed."""
    listed: Dict[str, List[Tuple[str, str, int]]] = {}
    problems: List[str] = []
    for name in names:
        listed[name], found = _list_old(root, name)
        problems.extend(found)
    work = [(name, day, relative) for name, files in listed.items() for day, relative, _ in files]
    with ThreadPoolExecutor(max_workers=_READERS) as pool:
        problems.extend(problem for problem in pool.map(lambda job: _inspect(root, *job), work) if problem)
    if problems:
        raise HistoryError(
            f"cannot convert {root.url!r}: {len(problems)} file(s) are not part of a defilens history or do not fit "
            f"its tables: {'; '.join(problems[:5])}. Move them out of the history (or fix them) and run convert "
            "again (nothing was changed)"
        )
    return {name: _batches(files) for name, files in listed.items()}


# -- the marker: what is being converted, and which tables were checked -----------------------


def _write_marker(root: Root, manifest: Dict[str, Any]) -> None:
    obstore = require("obstore")
    data = gzip.compress(json.dumps(manifest, separators=(",", ":")).encode(), compresslevel=6, mtime=0)
    try:
        obstore.put(root.store(), CONVERTING, data)
    except Exception as error:
        raise HistoryError(f"cannot write {root.url}/{CONVERTING}: {one_line(error)}") from None


def _read_marker(root: Root) -> Optional[Dict[str, Any]]:
    obstore = require("obstore")
    try:
        data = bytes(obstore.get(root.store(), CONVERTING).bytes())
    except FileNotFoundError:
        return None
    except Exception as error:
        raise HistoryError(f"cannot read {root.url}/{CONVERTING}: {one_line(error)}") from None
    try:
        manifest = json.loads(gzip.decompress(data))
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(manifest.get("format"))
        return dict(manifest)
    except (OSError, EOFError, ValueError, AttributeError):
        raise HistoryError(
            f"{root.url}/{CONVERTING} says a conversion was started by another version of defilens: finish it with "
            "that version, or restore the history from a copy"
        ) from None


# -- one table --------------------------------------------------------------------------------


def _delta_error(error: BaseException) -> bool:
    return "Delta" in type(error).__name__ or type(error).__module__.startswith("deltalake")


def _rewrite(root: Root, name: str, batches: List[Batch]) -> None:
    """Commits every batch not committed yet (a rerun skips those its app transaction records)."""
    table = load(root, name)
    done = None if table is None else table.transaction_version(CONVERT_APP)
    for number, (day, files) in enumerate(batches):
        if done is not None and number <= done:
            continue  # committed before an interruption (version 0 is a committed batch too)
        frame = _read_batch(root, name, day, files)
        if frame.height:
            commit(root, name, frame, CONVERT_APP, number, {"defilens.convert": f"{day} {number}"})
    if load(root, name) is None:
        # Old files without a row (a frame that never had any): an empty table keeps the folder a table.
        create(root, name, pl.DataFrame(schema=_disk_schema(name)))


def _row_hashes(frame: pl.LazyFrame, schema: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    have = frame.collect_schema()
    columns = [
        pl.col(column).cast(dtype) if column in have else pl.lit(None, dtype).alias(column)
        for column, dtype in schema.items()
    ]
    return frame.select(columns).select(pl.struct(pl.all()).hash(_SEED).alias("row"))


def _check(root: Root, name: str, batches: List[Batch]) -> int:
    """Compares every row of the table with the rows of its old files (a hash of each row in the
    table's types), and returns the number of rows."""
    uri = root.path(name)
    table = pl.scan_delta(root.open_table(name))  # file URIs polars can open under any folder name
    schema = table.collect_schema()
    got = _row_hashes(table, schema).collect(engine="streaming").get_column("row").sort()
    expected_parts = [
        _row_hashes(_read_batch(root, name, day, files).lazy(), schema).collect() for day, files in batches
    ]
    expected = (
        pl.concat(expected_parts).get_column("row").sort() if expected_parts else pl.Series("row", [], dtype=pl.UInt64)
    )
    if got.len() != expected.len():
        raise HistoryError(
            f"converting {uri!r} gave {got.len()} rows where the old files hold {expected.len()}: stopped with the "
            "old files kept (report this; run convert again to retry)"
        )
    differ = int((got != expected).sum())
    if differ:
        raise HistoryError(
            f"converting {uri!r} gave {differ} rows that differ from the old files' rows: stopped with the old files "
            "kept (report this; run convert again to retry)"
        )
    return got.len()


def _delete_old(root: Root, name: str, batches: List[Batch]) -> None:
    """Deletes the old files (only those the marker lists; a file deleted before is fine), then
    lets a full vacuum delete the files that interrupted commits wrote and never committed."""
    obstore = require("obstore")
    store = root.store()
    paths = [f"{name}/{relative}" for _, files in batches for relative in files]
    for start in range(0, len(paths), 1000):
        chunk = paths[start : start + 1000]
        try:
            obstore.delete(store, chunk)
        except FileNotFoundError:
            for path in chunk:  # a local store stops at the first file already deleted
                try:
                    obstore.delete(store, path)
                except FileNotFoundError:
                    pass
    table = load(root, name)
    if table is not None:
        table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True)


# -- the whole root ---------------------------------------------------------------------------


def convert(path: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Turns a history written by an earlier defilens (Hive-partitioned Parquet) into the Delta
    tables `collect` writes now, in place, and returns ``{"tables": converted, "rows": ...,
    "rewritten": [...]}``.

    Every table's rows are rewritten through delta-rs (a batch of old files a commit) with the
    columns and types `collect` writes today, compared row by row with the old files, and then
    the old files are deleted. Idempotent: a history already converted is left alone, and an
    interrupted conversion (Ctrl-C, ``kill -9``, a lost connection) resumes where it stopped
    when run again. Files that would not convert stop it before anything changes, named. Stop
    collectors writing the old layout first (new `collect` runs refuse an old layout until it is
    converted).

    A Delta history whose ``info`` table an earlier version wrote every round gets that table
    rewritten as its change rows (``info`` is kept only when a token's info changes), in one
    commit; the report's ``info_rows_dropped`` says how many rows went. Stop its collectors first.
    """
    require_history()
    root = root_of(path, storage_options)
    found = states(root)
    manifest = _read_marker(root)
    new = manifest is None
    if manifest is None:
        if all(value is State.MISSING for value in found.values()):
            raise FileNotFoundError(f"no history at {root.url!r}")
        foreign = [name for name, value in found.items() if value is State.FOREIGN]
        if foreign:
            raise HistoryError(f"{root.url!r} has files that are not a defilens history at {', '.join(foreign)}/")
        old = [name for name, value in found.items() if value is State.OLD_LAYOUT]
        if not old:
            with engine_writes(f"converting {root.url!r}"):
                return _info_changes_only(root)
        check_tables(root, found)  # a foreign Delta table here stops the conversion before it changes anything
        manifest = {"format": MANIFEST_FORMAT, "tables": _plan(root, old), "checked": {}}
    try:
        # No compaction meanwhile: the vacuum that deletes what interrupted commits left would
        # delete the files a compaction is writing.
        with compaction_lock(root), engine_writes(f"converting {root.url!r}"):
            if new:
                _write_marker(root, manifest)
            return _convert_tables(root, manifest)
    except Busy:
        raise HistoryError(
            f"a compaction of {root.url!r} is running: run convert again when it has finished"
            + ("" if new else " (the conversion started before resumes then)")
        ) from None


def _convert_tables(root: Root, manifest: Dict[str, Any]) -> Dict[str, Any]:
    obstore = require("obstore")
    plan = {name: [(day, list(files)) for day, files in batches] for name, batches in manifest["tables"].items()}
    checked: Dict[str, int] = dict(manifest["checked"])
    for name in (name for name in TABLES if name in plan):
        try:
            if name not in checked:
                _rewrite(root, name, plan[name])
                checked[name] = _check(root, name, plan[name])
                manifest["checked"] = checked
                _write_marker(root, manifest)
            _delete_old(root, name, plan[name])
        except HistoryError:
            raise
        except (OSError, ValueError, pl.exceptions.PolarsError) as error:
            raise HistoryError(
                f"could not convert {root.path(name)!r}: {one_line(error)} (run convert again to resume)"
            ) from None
        except Exception as error:
            if _delta_error(error):
                raise HistoryError(
                    f"could not convert {root.path(name)!r}: {one_line(error)} (run convert again to resume)"
                ) from None
            raise
    # Under the marker, so that a kill between the rewrite and its vacuum is finished by the next
    # run, which finds nothing left to drop: an info table converted now is vacuumed whatever
    # this run dropped, and what was dropped is counted from the rows it was converted with.
    dropped = keep_changes_only(root)
    info = load(root, "info") if dropped or "info" in checked else None
    if info is not None:
        # Tables converted just now: no version before the rewrite is worth keeping, and a glob
        # must read what Delta reads (as after _delete_old).
        info.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True)
        if "info" in checked:
            dropped = checked["info"] - pl.scan_delta(info).select(pl.len()).collect().item()
    try:
        obstore.delete(root.store(), CONVERTING)
    except FileNotFoundError:
        pass
    names = [name for name in TABLES if name in plan]
    return {
        "tables": len(names),
        "rows": sum(checked.values()),
        "rewritten": names,
        "info_rows_dropped": dropped,
    }


def _info_changes_only(root: Root) -> Dict[str, Any]:
    """A Delta history whose ``info`` table an earlier defilens wrote every round: its rows kept
    only where a token's info changed (`_info.keep_changes_only`), under the compaction lock."""
    if state(root, "info") is not State.DELTA:
        return {"tables": 0, "rows": 0, "rewritten": [], "info_rows_dropped": 0}
    try:
        with compaction_lock(root):
            dropped = keep_changes_only(root)
    except Busy:
        raise HistoryError(f"a compaction of {root.url!r} is running: run convert again when it has finished") from None
    except (OSError, pl.exceptions.PolarsError) as error:
        raise HistoryError(f"could not rewrite {root.path('info')!r}: {one_line(error)} (run convert again)") from None
    except Exception as error:
        if _delta_error(error):
            raise HistoryError(
                f"could not rewrite {root.path('info')!r}: {one_line(error)} (run convert again)"
            ) from None
        raise
    return {
        "tables": 1 if dropped else 0,
        "rows": 0,
        "rewritten": ["info"] if dropped else [],
        "info_rows_dropped": dropped,
    }


__all__ = ["convert", "TABLES"]
