"""Reading a history: one table as a `pl.LazyFrame`, now or as it was (time travel), and the
versions a table keeps.

Time travel goes by the tables' own commit timestamps (the ``timestamp`` each commit records,
which `versions` lists), not by the log files' modification times that delta-rs's
``load_as_version(datetime)`` uses: a history copied or synced elsewhere keeps its moments, and
what `versions` shows is what ``as_of`` means. A moment that the kept log does not reach, or
that is before a table's first round, is refused with how far time travel reaches, never
answered with another version's rows.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union
from urllib.parse import unquote

import polars as pl

from .._exceptions import HistoryError
from .._names import did_you_mean
from .._storage import PathLike, Root, one_line, require
from .._time import aware
from ._info import INFO, changes_in
from ._kept import kept_for_reading
from ._layout import DELTA_LOG, State, check_not_converting, convert_hint, state, states
from ._root import require_history, root_of
from ._round_info import RoundInfo
from ._rounds import empty_table
from ._tables import RAW, TABLES, check_ours, frame_schema, load, restore

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: A moment (naive means UTC) or a table version number.
AsOf = Union[dt.datetime, int, None]


@dataclass
class _Cut:
    """The history as it stood at ``moment``: every table read sees rows fetched by then only."""

    moment: dt.datetime
    reads: int = 0


_CUT: "contextvars.ContextVar[Optional[_Cut]]" = contextvars.ContextVar("defilens_history_cut", default=None)


@contextlib.contextmanager
def history_cut_at(moment: dt.datetime) -> "Iterator[_Cut]":
    """Within it, every table this module reads holds only rows with ``fetched_at <= moment``:
    the history as a collector stopped then would have left it (the look-ahead check's way to
    re-run a study on a shorter history without copying it). Yields the cut, which counts the
    table reads that went through it."""
    cut = _Cut(moment)
    token = _CUT.set(cut)
    try:
        yield cut
    finally:
        _CUT.reset(token)


def history_cut() -> Optional[dt.datetime]:
    """The moment reads are cut at (`history_cut_at`), if any."""
    cut = _CUT.get()
    return None if cut is None else cut.moment


def _as_of(as_of: AsOf) -> "Union[dt.datetime, int, None]":
    if as_of is None:
        return None
    if isinstance(as_of, dt.datetime):
        return aware(as_of)
    if isinstance(as_of, int) and not isinstance(as_of, bool):
        if as_of < 0:
            raise ValueError(f"as_of must be a table version >= 0 or a datetime, got {as_of}")
        return as_of
    hint = (
        ": a date is a day, not a moment; give a datetime such as datetime(2026, 1, 5, 12)"
        if isinstance(as_of, dt.date)
        else ""
    )
    raise TypeError(
        f"as_of must be a datetime (naive means UTC) or a table version number, got {type(as_of).__name__}{hint}"
    )


def open_for_reading(path: PathLike, storage_options: Optional[Mapping[str, Any]]) -> Root:
    require_history()
    root = root_of(path, storage_options)
    found = states(root)
    if all(value is State.MISSING for value in found.values()):
        raise FileNotFoundError(f"no history at {root.url!r} (is it the folder `defilens collect --out` wrote?)")
    if any(value is State.OLD_LAYOUT for value in found.values()):
        raise HistoryError(convert_hint(root))
    check_not_converting(root)
    return root


#: What to do about a foreign table, for a reader.
READER_ADVICE = "read it with polars or deltalake directly, or give a root that `defilens collect --out` wrote"


def load_ours(root: Root, name: str) -> "Optional[DeltaTable]":
    """The table ``name`` at its newest version (kept loaded between reads while nothing is
    committed to it, `kept_for_reading`), or None when there is none; a Delta table of another
    dataset at its path is refused (`check_ours`), never read as if it were the frame."""
    table = kept_for_reading(root, name, lambda: load(root, name))
    if table is not None:
        check_ours(table, name, root.path(name), READER_ADVICE)
    return table


def scan_table(root: Root, name: str, as_of: AsOf = None, where: "Sequence[pl.Expr]" = ()) -> pl.LazyFrame:
    """One table as a LazyFrame; ``where`` filters the columns as they are on disk, below the
    casts that give the frames' dtypes, so that they reach the Delta scan (files skipped by
    their statistics, row groups by theirs)."""
    as_of = _as_of(as_of)
    cut = _CUT.get()
    if cut is not None:
        cut.reads += 1
        where = [*where, pl.col("fetched_at") <= cut.moment]
    found = state(root, name)
    if found is State.MISSING:
        # A table nothing was ever committed to (no drift yet, raw not kept): empty, typed.
        return empty_table(name).lazy().filter(*where) if where else empty_table(name).lazy()
    if found is State.OLD_LAYOUT:
        raise HistoryError(convert_hint(root))
    if found is State.FOREIGN:
        raise HistoryError(f"{root.path(name)!r} is not a Delta table of a defilens history")
    table = load_ours(root, name)
    if table is None:
        return empty_table(name).lazy()
    if as_of is not None:
        table = travel(root, name, table, as_of)  # what the log does not reach fails here, saying how far it does
    try:
        scanned = pl.scan_delta(table)
        lazy = restore(scanned.filter(*where) if where else scanned)
    except (OSError, ValueError, pl.exceptions.PolarsError) as error:
        raise HistoryError(f"cannot read {root.path(name)!r}{_when(as_of)}: {one_line(error)}") from None
    except Exception as error:  # deltalake's own errors
        if type(error).__module__.startswith("deltalake") or "Delta" in type(error).__name__:
            raise HistoryError(f"cannot read {root.path(name)!r}{_when(as_of)}: {one_line(error)}") from None
        raise
    return changes_in(lazy) if name == INFO else lazy  # a change stored twice (rounds out of order) reads once


# -- time travel ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """One kept version of a table: its number, its commit timestamp and what its commit recorded."""

    version: int
    at: dt.datetime
    info: Mapping[str, Any]


def _moment(milliseconds: Any) -> dt.datetime:
    return dt.datetime.fromtimestamp(int(milliseconds) / 1000, dt.timezone.utc)


def _show(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def commits(root: Root, name: str, table: "DeltaTable") -> List[Commit]:
    """The table's kept commits, oldest first, from its log (``DeltaTable.history``)."""
    deltalake = require("deltalake")
    try:
        entries = table.history()
    except (OSError, deltalake.exceptions.DeltaError) as error:
        raise HistoryError(f"cannot read the log of {root.path(name)!r}: {one_line(error)}") from None
    if not entries:
        # delta-rs 1.6 lists no history at all for a table under a folder whose name has a '#'.
        entries = _history_from_log(root, name)
    found = [
        Commit(int(entry["version"]), _moment(entry["timestamp"]), entry)
        for entry in entries
        if entry.get("version") is not None and entry.get("timestamp") is not None
    ]
    return sorted(found, key=lambda commit: commit.version)


_COMMIT_FILE = re.compile(r"(\d{20})\.json")


def _history_from_log(root: Root, name: str) -> "List[Dict[str, Any]]":
    """What ``DeltaTable.history`` gives, read from the log's commit files through obstore."""
    obstore = require("obstore")
    store = root.store()
    entries: "List[Dict[str, Any]]" = []
    try:
        listed = [meta for batch in obstore.list(store, prefix=f"{name}/{DELTA_LOG}/") for meta in batch]
        for meta in listed:
            match = _COMMIT_FILE.fullmatch(meta["path"].rsplit("/", 1)[-1])
            if not match:
                continue
            entry: "Dict[str, Any]" = {"timestamp": int(meta["last_modified"].timestamp() * 1000)}
            for line in bytes(obstore.get(store, meta["path"]).bytes()).splitlines():
                action = json.loads(line) if line.strip() else {}
                if "commitInfo" in action:
                    entry.update(action["commitInfo"])
                    break
            entry["version"] = int(match.group(1))
            entries.append(entry)
    except FileNotFoundError:
        return []
    except Exception as error:  # obstore's errors, OSError, a commit that is not JSON
        raise HistoryError(f"cannot read the log of {root.path(name)!r}: {one_line(error)}") from None
    return entries


def oldest_kept(root: Root, name: str, history: List[Commit]) -> Commit:
    """The oldest commit whose version can still be loaded: log cleanup removes the commits before
    a checkpoint, and the checkpoint's own version is the first that loads."""
    for commit in history:
        if commit.version == 0:
            return commit  # the whole log from the start
        try:
            load(root, name, commit.version)
        except HistoryError:
            continue
        return commit
    raise HistoryError(f"the log of {root.path(name)!r} holds no version that can be loaded")


def _data_files(root: Root, name: str) -> "set[str]":
    """Every data file of the table, by its path within the table (as the log writes it)."""
    obstore = require("obstore")
    prefix = f"{name}/"
    try:
        listed = [meta["path"] for batch in obstore.list(root.store(), prefix=prefix) for meta in batch]
    except FileNotFoundError:
        return set()
    except Exception as error:  # obstore's errors, OSError
        raise HistoryError(f"cannot list {root.path(name)!r}: {one_line(error)}") from None
    return {unquote(path[len(prefix) :]) for path in listed if not path.startswith(f"{prefix}{DELTA_LOG}/")}


class _Readable:
    """Which of a table's kept versions still read: a version reads when every file it refers to
    is there (vacuum deletes the files of old versions, and a log kept longer than the files lists
    versions that no longer read). The table's files are listed once."""

    def __init__(self, root: Root, name: str) -> None:
        self.root, self.name = root, name
        self.present = _data_files(root, name)
        self.known: Dict[int, bool] = {}

    def __call__(self, version: int) -> bool:
        if version not in self.known:
            try:
                table = load(self.root, self.name, version)
            except HistoryError:
                self.known[version] = False
            else:
                paths = [] if table is None else list(table.get_add_actions(flatten=False).column("path").to_pylist())
                self.known[version] = all(unquote(str(path)) in self.present for path in paths)
        return self.known[version]


def oldest_readable(root: Root, name: str, history: List[Commit], readable: Optional[_Readable] = None) -> Commit:
    """The oldest kept commit from which on every version reads (`_Readable`). Vacuum deletes the
    files of the oldest versions first, so the versions that no longer read come first: found by
    bisection (the empty creation, version 0, reads only when the first round does)."""
    oldest = oldest_kept(root, name, history)
    kept = [commit for commit in history if commit.version >= oldest.version]
    readable = readable or _Readable(root, name)
    start = 1 if kept[0].version == 0 and len(kept) > 1 else 0  # version 0 stands or falls with version 1
    if readable(kept[start].version):
        return kept[0]
    low, high = start + 1, len(kept) - 1
    if not readable(kept[high].version):
        raise HistoryError(f"{root.path(name)!r} refers to files that are gone: its newest version cannot be read")
    while low < high:
        middle = (low + high) // 2
        if readable(kept[middle].version):
            high = middle
        else:
            low = middle + 1
    return kept[low]


def _created(table: "DeltaTable") -> Optional[dt.datetime]:
    created = table.metadata().created_time
    return None if created is None else _moment(created)


def _is_empty_creation(root: Root, name: str, commit: Commit) -> bool:
    """Whether ``commit`` is the version 0 that `create` commits: the table without rows."""
    if commit.version != 0:
        return False
    table = load(root, name, 0)
    return table is not None and not table.file_uris()


#: Why versions before the oldest kept one cannot be read, by what removed them.
_VACUUMED = "the files of the versions before it were vacuumed after the retention (see defilens.compact)"
_CLEANED = "compaction removed the versions before it after its retention (see defilens.compact)"


def travel(root: Root, name: str, table: "DeltaTable", as_of: Union[dt.datetime, int]) -> "DeltaTable":
    """``table`` at ``as_of`` (a table version, or a moment: the newest version whose commit and
    every commit before it were made at or before it), or `HistoryError` saying how far time
    travel reaches: before anything is read, a version whose files are gone included."""
    uri = root.path(name)
    newest = table.version()
    readable = _Readable(root, name)
    if isinstance(as_of, int):
        if as_of > newest:
            raise HistoryError(f"{uri!r} has no version {as_of}: the newest version is {newest}")
        try:
            found = load(root, name, as_of)
        except HistoryError:
            oldest = oldest_kept(root, name, commits(root, name, table))
            if as_of >= oldest.version:
                raise
            raise HistoryError(
                f"version {as_of} of {uri!r} is no longer kept: time travel reaches back to version {oldest.version} "
                f"(committed {_show(oldest.at)}); compaction removes older versions after its retention (see "
                "defilens.compact)"
            ) from None
        assert found is not None
        if not readable(as_of) or (as_of == 0 and newest > 0 and not readable(1)):
            history = commits(root, name, table)
            oldest = oldest_readable(root, name, history, readable)
            raise HistoryError(
                f"version {as_of} of {uri!r} can no longer be read: time travel reaches back to {_show(oldest.at)} "
                f"(version {oldest.version}); {_VACUUMED}"
            )
        return found
    history = commits(root, name, table)
    loadable = oldest_kept(root, name, history)
    oldest = oldest_readable(root, name, history, readable)
    kept = [commit for commit in history if commit.version >= oldest.version]
    chosen: Optional[Commit] = None
    latest: Optional[dt.datetime] = None
    for commit in kept:
        latest = commit.at if latest is None else max(latest, commit.at)
        if latest > as_of:
            break  # a commit after the moment (or one whose clock ran ahead): the versions from here are later
        chosen = commit
    if (
        chosen is not None
        and (chosen.version > 0 or len(kept) == 1 or not _is_empty_creation(root, name, chosen))
        and readable(chosen.version)
    ):
        found = load(root, name, chosen.version)
        assert found is not None
        return found
    # Before the oldest readable version, or at the empty creation before the first round.
    first = kept[1] if len(kept) > 1 and _is_empty_creation(root, name, kept[0]) else kept[0]
    created = _created(table)
    if created is not None and as_of < created:
        why = f"the table was created {_show(created)}"
    elif oldest.version == 0:
        why = "no round had been committed to it yet" + (f" (created {_show(created)})" if created else "")
    else:
        why = (_VACUUMED if oldest.version > loadable.version else _CLEANED) + (
            f"; the table was created {_show(created)}" if created else ""
        )
    raise HistoryError(
        f"time travel in {uri!r} reaches back to {_show(first.at)} (version {first.version}), not to "
        f"{_show(as_of)}: {why}"
    )


def _when(as_of: AsOf) -> str:
    return "" if as_of is None else f" as of {as_of}"


def scan(
    path: PathLike,
    frame: str = "indicators",
    *,
    as_of: AsOf = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.LazyFrame:
    """A `pl.LazyFrame` over one table of the history `collect` writes.

    ``frame`` is a frame's name, ``"errors"`` (the ``log`` table's failed exchanges, as
    `Frames.errors`) or ``"raw"`` (the response bodies kept by ``collect(raw=True)``). The
    columns are the frame's, ``fetched_at`` and ``date`` (the UTC day of the round), with the
    frames' dtypes (``interval`` as the ordered Enum, timestamps in ms). Filters and column
    selections are pushed down into the Delta scan, so a query for one token or one day reads
    only what it needs.

    ``as_of`` reads the table as it was: at a moment (a datetime; naive means UTC), by the commit
    timestamps that `versions` lists, or at a table version number (each table has its own; they
    are the numbers every Delta reader uses: version 0 is the table's creation, without rows, and
    version 1 its first round). Time travel reaches back as far as the table's log is kept (a week by
    default; see `defilens.compact`) and no further back than the table's first round: an older
    moment or version, or a version past the newest, raises `HistoryError` saying how far it
    reaches. `versions` lists what is kept.

    ``path`` may be an object storage URL (``s3://bucket/prefix``) with polars-style
    ``storage_options``. polars' ``pl.scan_delta(path + "/indicators")``, DuckDB's
    ``delta_scan``, Spark and pandas read the same tables directly (polars' own ``scan_delta``
    cannot yet open a table under a folder whose name has a space, ``#`` or a non-ASCII
    character, pola-rs/polars#20944; this function can).

    For example ``defilens.scan("history/", "indicators").filter(pl.col("token") == "bitcoin")``.
    """
    if not isinstance(frame, str) or (frame not in TABLES and frame != "errors"):
        raise ValueError(
            f"frame must be one of {', '.join(TABLES)} or errors, got {frame!r}"
            f"{did_you_mean(frame, [*TABLES, 'errors']) if isinstance(frame, str) else ''}"
        )
    root = open_for_reading(path, storage_options)
    if frame == "errors":
        return scan_table(root, "log", as_of).filter(~pl.col("ok"))
    return scan_table(root, frame, as_of)


def versions(
    path: PathLike,
    frame: str = "indicators",
    *,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.DataFrame:
    """The versions of one table of a history that time travel can still reach, oldest first:
    ``version``, ``committed_at`` (the commit timestamp, what ``scan(..., as_of=moment)`` goes
    by), ``operation`` (``WRITE`` for a round and for the table's creation, ``OPTIMIZE`` for
    compaction, ...), ``rows_added``, ``files_added``, ``files_removed``, and for a round's
    commit its ``collector``, ``round`` number and ``round_start``.

    Version 0 is the table's creation, without rows; after `defilens.compact` versions no longer
    count rounds (compaction commits too), so look a round up here. For example
    ``defilens.history.versions("history/", "indicators").filter(pl.col("round").is_not_null())``.
    """
    if not isinstance(frame, str) or (frame not in TABLES and frame != "errors"):
        raise ValueError(
            f"frame must be one of {', '.join(TABLES)} or errors, got {frame!r}"
            f"{did_you_mean(frame, [*TABLES, 'errors']) if isinstance(frame, str) else ''}"
        )
    root = open_for_reading(path, storage_options)
    name = "log" if frame == "errors" else frame
    rows: "List[Dict[str, Any]]" = []
    found = state(root, name)
    if found is State.FOREIGN:
        raise HistoryError(f"{root.path(name)!r} is not a Delta table of a defilens history")
    table = load_ours(root, name) if found is State.DELTA else None
    if table is not None:
        history = commits(root, name, table)
        oldest = oldest_readable(root, name, history)
        for commit in history:
            if commit.version < oldest.version:
                continue
            info = commit.info
            metrics = info.get("operationMetrics") or {}
            recorded = RoundInfo.of(info)
            rows.append(
                {
                    "version": commit.version,
                    "committed_at": commit.at,
                    "operation": info.get("operation"),
                    "rows_added": _metric(metrics, "num_added_rows", "numOutputRows"),
                    "files_added": _metric(metrics, "num_added_files", "numFilesAdded"),
                    "files_removed": _metric(metrics, "num_removed_files", "numFilesRemoved"),
                    "collector": recorded and recorded.collector,
                    "round": recorded and recorded.number,
                    "round_start": recorded and recorded.start,
                }
            )
    return pl.DataFrame(rows, schema=VERSIONS_SCHEMA, orient="row")


#: The columns of `versions`.
VERSIONS_SCHEMA: Dict[str, pl.DataType] = {
    "version": pl.Int64(),
    "committed_at": pl.Datetime("ms", "UTC"),
    "operation": pl.String(),
    "rows_added": pl.Int64(),
    "files_added": pl.Int64(),
    "files_removed": pl.Int64(),
    "collector": pl.String(),
    "round": pl.Int64(),
    "round_start": pl.Datetime("ms", "UTC"),
}


def _metric(metrics: Mapping[str, Any], *names: str) -> Optional[int]:
    for key in names:
        if metrics.get(key) is not None:
            return int(metrics[key])
    return None


__all__ = ["scan", "versions", "frame_schema", "RAW"]
