"""Conversion of a history in the Hive-Parquet layout of earlier versions
(``ROOT/<frame>/date=YYYY-MM-DD/*.parquet``) into Delta tables, in place.

Most tables are converted without copying a byte: delta-rs's ``convert_to_deltalake`` writes a
first commit that adds the existing files. The tables with an ``interval`` column are the
exception: earlier versions wrote it as polars' Enum (a Parquet dictionary with polars' own
type in the file's Arrow schema), which polars' Delta reader refuses to take as the table's
text column, so their rows are rewritten by delta-rs (one idempotent commit a day), and the old
files are deleted by vacuum once every day is in. A marker under ``_defilens/`` says a conversion
is under way; `collect` and `scan` refuse the root until `convert` has finished, and running
`convert` again resumes where it stopped.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional

import polars as pl

from .._exceptions import HistoryError
from ._layout import CONVERTING, State, check_tables, states
from ._layout import converting as _converting
from ._root import PathLike, Root, require, require_history, root_of
from ._tables import DESCRIPTION, PARTITION, TABLE_PROPERTIES, TABLES, create, load, marker, one_line, to_disk

#: The app id of the commits that rewrite a day during conversion.
CONVERT_APP = "defilens-convert"
_DAY = re.compile(r"date=(\d{4}-\d{2}-\d{2})")


def _old_files(root: Root, name: str) -> "Dict[str, List[str]]":
    """The day partitions of an old-layout table and their Parquet files (URIs). Anything else
    in the table's folder that is not hidden (a foreign file, a broken one) stops the conversion
    with its name, before anything is changed."""
    obstore = require("obstore")
    store = root.store()
    days: Dict[str, List[str]] = {}
    problems: List[str] = []
    for batch in obstore.list(store, prefix=f"{name}/"):
        for meta in batch:
            relative = meta["path"][len(name) + 1 :]
            parts = relative.split("/")
            if any(part.startswith((".", "_")) for part in parts) or parts[-1].startswith("part-"):
                # A temporary file of an interrupted write, the Delta log, or a file delta-rs wrote.
                continue
            match = _DAY.fullmatch(parts[0]) if len(parts) == 2 else None
            if match is None or not parts[1].endswith(".parquet"):
                problems.append(f"{name}/{relative} (not a day's Parquet file)")
            elif meta["size"] < 12:
                problems.append(f"{name}/{relative} ({meta['size']} bytes: not a Parquet file)")
            else:
                days.setdefault(match.group(1), []).append(f"{root.url}/{name}/{relative}")
    if problems:
        raise HistoryError(
            f"cannot convert {root.url!r}: {len(problems)} file(s) are not part of a defilens history: "
            f"{'; '.join(problems[:5])}. Move them out of the history and run convert again (nothing was changed)"
        )
    return {day: sorted(files) for day, files in sorted(days.items())}


def _has_enum(root: Root, files: List[str]) -> bool:
    schema = (
        pl.read_parquet_schema(files[0])
        if root.is_local
        else pl.scan_parquet(files[0], storage_options=root.options()).collect_schema()
    )
    return any(isinstance(dtype, pl.Enum) for dtype in schema.values())


def _rows(root: Root, files: List[str]) -> int:
    return int(
        pl.scan_parquet(files, storage_options=root.options(), missing_columns="insert")
        .select(pl.len())
        .collect()
        .item()
    )


def _rewrite(root: Root, name: str, days: "Dict[str, List[str]]") -> None:
    """Rewrites an old table day by day through delta-rs, each day an idempotent commit, then
    lets vacuum delete the old files."""
    deltalake = require("deltalake")
    ordered = list(days)
    table = load(root, name)
    done = -1 if table is None else (table.transaction_version(CONVERT_APP) or -1)
    for index, day in enumerate(ordered):
        if index <= done:
            continue
        frames = [pl.read_parquet(file, storage_options=root.options()) for file in days[day]]
        frame = pl.concat(frames, how="diagonal_relaxed").with_columns(pl.lit(day).str.to_date().alias(PARTITION))
        table = load(root, name) or create(root, name, to_disk(frame))
        deltalake.write_deltalake(
            table,
            to_disk(frame),
            mode="append",
            partition_by=[PARTITION],
            schema_mode="merge",
            commit_properties=deltalake.CommitProperties(app_transactions=[deltalake.Transaction(CONVERT_APP, index)]),
        )
    table = load(root, name)
    assert table is not None
    table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)


def _in_place(root: Root, name: str) -> None:
    deltalake = require("deltalake")
    from deltalake.schema import Field, PrimitiveType, Schema

    deltalake.convert_to_deltalake(
        root.table(name),
        partition_by=Schema([Field(PARTITION, PrimitiveType("date"))]),
        partition_strategy="hive",
        name=marker(name),
        description=DESCRIPTION,
        configuration=TABLE_PROPERTIES,
        storage_options=root.options(),
    )


def convert(path: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Turns a history written by an earlier defilens (Hive-partitioned Parquet) into the Delta
    tables `collect` writes now, in place, and returns ``{"tables": converted, "rows": ...,
    "rewritten": [...]}``.

    Idempotent: tables already converted are left alone, and an interrupted conversion resumes
    where it stopped. The rows of each table are counted before and after; a difference stops
    the conversion with an error. Tables whose files carry polars' Enum type (``interval``) are
    rewritten by delta-rs; the others keep their files. Stop collectors writing the old layout
    first (new `collect` runs refuse an old layout until it is converted).
    """
    require_history()
    obstore = require("obstore")
    root = root_of(path, storage_options)
    found = states(root)
    if all(value is State.MISSING for value in found.values()):
        raise FileNotFoundError(f"no history at {root.url!r}")
    foreign = [name for name, value in found.items() if value is State.FOREIGN]
    if foreign:
        raise HistoryError(f"{root.url!r} has files that are not a defilens history at {', '.join(foreign)}/")
    store = root.store()
    resuming = _converting(root)
    report: Dict[str, Any] = {"tables": 0, "rows": 0, "rewritten": []}
    todo = {name: _old_files(root, name) for name, value in found.items() if value is State.OLD_LAYOUT}
    partial = {}
    if resuming:
        # A conversion stopped half-way: its rewritten tables are Delta already, with old files left.
        for name, value in found.items():
            if value is State.DELTA:
                table = load(root, name)
                if table is not None and table.transaction_version(CONVERT_APP) is not None:
                    partial[name] = _old_files(root, name)
    if not todo and not partial:
        return report
    if not resuming:
        check_tables(root, found)  # a foreign table here stops the conversion before it changes anything
    obstore.put(store, CONVERTING, b"")
    for name, days in {**partial, **todo}.items():
        if not days:
            continue
        files = [file for day_files in days.values() for file in day_files]
        expected = _rows(root, files)
        try:
            if name in partial or _has_enum(root, files):
                _rewrite(root, name, days)
                report["rewritten"].append(name)
            else:
                _in_place(root, name)
        except (OSError, ValueError, pl.exceptions.PolarsError) as error:
            raise HistoryError(
                f"could not convert {root.table(name)!r}: {one_line(error)} (run convert again)"
            ) from None
        except Exception as error:
            if "Delta" in type(error).__name__ or type(error).__module__.startswith("deltalake"):
                raise HistoryError(
                    f"could not convert {root.table(name)!r}: {one_line(error)} (run convert again)"
                ) from None
            raise
        table = load(root, name)
        got = (
            0
            if table is None
            else int(pl.scan_delta(root.table(name), storage_options=root.options()).select(pl.len()).collect().item())
        )
        if got != expected:
            raise HistoryError(
                f"converting {root.table(name)!r} gave {got} rows where the old files hold {expected}: stopped"
            )
        report["tables"] += 1
        report["rows"] += got
    obstore.delete(store, CONVERTING)
    return report


__all__ = ["convert", "TABLES"]
