"""The tables of a history: one Delta table a frame, what their columns are on disk, and the
one way a round is appended to them (idempotently, by app transaction).

On disk a table holds its frame's columns, ``fetched_at`` and ``date`` (the UTC day of the round,
the partition column), with two changes delta-rs needs: ``interval`` is text (delta-rs cannot
write a ``pl.Enum``) and timestamps are microseconds (Delta's unit). `restore` undoes both when a
table is read, so `scan` gives the frames' own dtypes back.
"""

from __future__ import annotations

import functools
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Mapping, Optional, Protocol, Tuple

import polars as pl

from .. import _waiting
from .._core import FRAME_NAMES, backoff_seconds, empty_frames
from .._exceptions import HistoryError
from .._frames import BODIES_SCHEMA, interval_restored
from .._storage import DELTA_LOG, Root, one_line, require
from .._time import UTC_MS
from ._defaults import TABLE_PROPERTIES
from ._panics import engine_writes, quiet_panics
from ._round_info import RoundInfo

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: The table of response bodies that ``collect(raw=True)`` keeps beside the frames.
RAW = "raw"
#: Every table a history can hold, in the order rounds are committed to them.
TABLES: Tuple[str, ...] = (*FRAME_NAMES, RAW)
#: The partition column: the UTC date of the round's start.
PARTITION = "date"
#: What the frames of a round without a listing time of their own are given: the token's
#: listing ``fetched_at``, else the round's start.
FETCHED_AT = "fetched_at"


#: The raw table: one row a response body (`Frames.bodies`), with the round's start.
RAW_SCHEMA: Dict[str, pl.DataType] = {"round_start": UTC_MS, **BODIES_SCHEMA}


#: What marks a table as one of a defilens history: its Delta name, ``defilens.<table>``, set
#: when it is created (and kept by every later commit, compaction and checkpoint). Not a table
#: property: delta-rs refuses, at creation, every property it does not know ("Error parsing
#: property 'defilens.table'"). Tables created before the marker are known by their schema.
MARKER = "defilens."
DESCRIPTION = "a table of a defilens history: one frame of every round collected (docs/history.md)"

#: Columns a table of ours may lack without a marker: the raw table converted by the version that
#: introduced Delta tables from the old layout, which kept no ``error`` column (the first collect
#: after the conversion adds it).
ADDED_SINCE: Dict[str, Tuple[str, ...]] = {RAW: ("error",)}


def marker(name: str) -> str:
    """The Delta name of the table ``name`` of a history."""
    return f"{MARKER}{name}"


def round_commit_hooks() -> Any:
    """A round's commit makes checkpoints but never cleans the log: delta-rs's cleanup lists the
    whole log after every commit (a cost that grows with the log: a round's commit took three
    times as long at 1,200 entries), and it has no margin for the loads under way. The collector
    (`_compact.LogKeeper`) and compaction clean the log instead, behind an older checkpoint."""
    return require("deltalake").PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)


#: How often loading a table is tried when a log file it listed was removed meanwhile.
LOAD_ATTEMPTS = 4

#: How often one table's commit of a round is tried when it keeps conflicting, and the (first,
#: longest) wait between tries in seconds, by the client's backoff rule (`_core.backoff_seconds`;
#: delta-rs already retries a conflict 15 times on its own).
COMMIT_ATTEMPTS = 8
COMMIT_BACKOFF = (0.05, 2.0)
#: The names of the threads that commit a round (the command line waits for none of them after
#: a second Ctrl-C).
COMMIT_THREADS = "defilens-commit"


def commits_in_flight() -> bool:
    """Whether a commit's calls into delta-rs or obstore are still under way in their threads (a
    collector stopped at once leaves them unfinished: a process exiting now would wait for them)."""
    return any(thread.name.startswith(COMMIT_THREADS) and thread.is_alive() for thread in threading.enumerate())


def frame_schema(name: str) -> Dict[str, pl.DataType]:
    """A table's columns as `scan` gives them (the frame's, ``fetched_at``, ``date``)."""
    return dict(_frame_schemas()[name])


@functools.lru_cache(maxsize=1)
def _frame_schemas() -> Dict[str, Dict[str, pl.DataType]]:
    # Built once: every round asks for each table's schema, and making the empty frames is not free.
    schemas: Dict[str, Dict[str, pl.DataType]] = {}
    for name, frame in empty_frames().items():
        schema = dict(frame.schema)
        schema.setdefault(FETCHED_AT, UTC_MS)
        schemas[name] = schema
    schemas[RAW] = dict(RAW_SCHEMA)
    for schema in schemas.values():
        schema[PARTITION] = pl.Date()
    return schemas


def to_disk(frame: pl.DataFrame) -> pl.DataFrame:
    """A frame as delta-rs writes it: Enum columns as text."""
    enums = [name for name, dtype in frame.schema.items() if isinstance(dtype, (pl.Enum, pl.Categorical))]
    return frame.with_columns(pl.col(enums).cast(pl.String)) if enums else frame


def restore(lazy: pl.LazyFrame) -> pl.LazyFrame:
    """A table as the frames have it: ``interval`` as the Enum, timestamps in milliseconds."""
    schema = lazy.collect_schema()
    casts = interval_restored(schema)
    for name, dtype in schema.items():
        if isinstance(dtype, pl.Datetime) and dtype != UTC_MS:
            casts.append(pl.col(name).dt.cast_time_unit("ms").dt.replace_time_zone("UTC"))
    return lazy.with_columns(casts) if casts else lazy


def load(root: Root, name: str, version: Optional[int] = None) -> "Optional[DeltaTable]":
    """The table ``name`` of ``root`` (at table version ``version``), or None when there is none.

    A version is loaded as it is asked for: which versions time travel may ask for, and what a
    moment means, `defilens.history._scan` decides (from the kept log) and says."""
    deltalake = require("deltalake")
    for attempt in range(LOAD_ATTEMPTS):
        try:
            table = root.open_table(name)
            break
        except deltalake.exceptions.TableNotFoundError:
            return None
        except (OSError, deltalake.exceptions.DeltaError) as error:
            # A log entry or checkpoint listed a moment ago and removed since by log cleanup: the
            # table's newer state is there, load that.
            if attempt + 1 < LOAD_ATTEMPTS and _vanished(error):
                continue
            raise HistoryError(f"cannot read the table {root.path(name)!r}: {one_line(error)}") from None
    if version is not None:
        try:
            table.load_as_version(version)
        except (OSError, ValueError, deltalake.exceptions.DeltaError) as error:
            raise HistoryError(f"cannot load version {version} of {root.path(name)!r}: {one_line(error)}") from None
    return table


def read_table(root: Root, name: str) -> Optional[pl.LazyFrame]:
    """The Delta table at ``name`` under ``root`` (a table of the history, or one beside it such
    as the audit's) as the frames have its columns (`restore`), or None when there is none."""
    table = load(root, name)
    return None if table is None else restore(pl.scan_delta(table))


def append_table(root: Root, name: str, frame: pl.DataFrame, *, merge_schema: bool = False) -> None:
    """Appends ``frame`` to the Delta table at ``name`` under ``root`` (created by the first
    append, with the history's table properties). For tables beside the history, such as the
    audit's; a round is committed to the history's own tables by `commit_round`. ``merge_schema``
    adds the frame's new columns to the table (its older rows read them as null)."""
    with engine_writes(f"appending to {root.path(name)!r}"):
        require("deltalake").write_deltalake(
            root.path(name),
            to_disk(frame),
            mode="append",
            storage_options=root.options(),
            configuration=TABLE_PROPERTIES,
            schema_mode="merge" if merge_schema else None,
        )


def _vanished(error: BaseException) -> bool:
    """Whether ``error`` says a log entry or checkpoint the snapshot listed is gone (log cleanup)."""
    text = str(error)
    return DELTA_LOG in text and "not found" in text.lower()


def _types(schema: Any) -> Dict[str, Any]:
    """A Delta schema's columns and their types, without nullability (which says nothing about
    whose table it is, and which engines set differently)."""

    def bare(kind: Any) -> Any:
        if isinstance(kind, dict):
            return {
                key: bare(value)
                for key, value in kind.items()
                if key not in ("nullable", "containsNull", "valueContainsNull", "metadata")
            }
        if isinstance(kind, list):
            return [bare(value) for value in kind]
        return kind

    return {field["name"]: bare(field["type"]) for field in json.loads(schema.to_json())["fields"]}


@functools.lru_cache(maxsize=None)
def disk_types(name: str) -> Dict[str, Any]:
    """The Delta types of a table's columns as this version writes them (`to_disk` of the frame)."""
    deltalake = require("deltalake")
    arro3 = require("arro3.core")
    frame = to_disk(pl.DataFrame(schema=frame_schema(name)))
    return _types(deltalake.Schema.from_arrow(arro3.Table.from_arrow(frame).schema))


#: Tables found to be ours in this process: (uri, table id, Delta name, schema). A commit checks
#: a table again only when one of them changed (a table replaced, or its schema changed).
_OURS: "set[Tuple[str, str, str, str]]" = set()
_OURS_LOCK = threading.Lock()


#: What to do about a foreign table, for a writer.
WRITER_ADVICE = "give collect a root of its own, or move that table away"


def check_ours(table: "DeltaTable", name: str, uri: str, advice: str = WRITER_ADVICE) -> None:
    """Refuses a Delta table at a frame's path that is not this history's table ``name``: writing
    our rounds into it would mix two datasets (and widen its schema). Ours is a table whose Delta
    name is the marker (`marker`) and whose columns of ours have the types this version writes;
    or, created before the marker, a table with exactly the columns and types of the frame.
    Cheap once a table was found ours: its id, name and schema are compared with what was checked."""
    metadata = table.metadata()
    schema = table.schema()
    key = (uri, str(metadata.id), str(metadata.name or ""), schema.to_json())
    if key in _OURS:
        return
    found = _types(schema)
    expected = disk_types(name)
    partitions = list(metadata.partition_columns)
    label = str(metadata.name or "")
    if label.startswith(MARKER) and label != marker(name):
        raise HistoryError(
            f"{uri!r} is the defilens {label[len(MARKER) :]!r} table, not the {name!r} table: move it back to its own "
            "folder"
        )
    other = sorted(column for column, kind in found.items() if column in expected and kind != expected[column])
    if label == marker(name) and partitions == [PARTITION]:
        if other:
            raise HistoryError(
                f"the defilens table {uri!r} has columns of other types than this version writes ({', '.join(other[:5])}):"
                " collect into a new root"
            )
    else:
        missing = sorted(set(expected) - set(found) - set(ADDED_SINCE.get(name, ())))
        extra = sorted(set(found) - set(expected))
        if partitions != [PARTITION] or missing or extra or other:
            why = "; ".join(
                part
                for part in (
                    f"partitioned by {partitions}" if partitions != [PARTITION] else "",
                    f"columns of its own: {', '.join(extra[:5])}" if extra else "",
                    f"other types: {', '.join(other[:5])}" if other else "",
                    f"without {', '.join(missing[:5])}" if missing else "",
                )
                if part
            )
            raise HistoryError(
                f"{uri!r} is a Delta table of another dataset ({why}), not a defilens {name!r} table: {advice}"
            )
    with _OURS_LOCK:
        _OURS.add(key)


class Fence(Protocol):
    """A writer's right to commit (`_fence.Fence`), as a commit asks it: the table to commit
    from, once it shows the writer's token (or `_fence.TakenOver`)."""

    def admit(self, name: str, table: "DeltaTable") -> "DeltaTable": ...


class Recorded(Protocol):
    """What tells a round's commit from any other: the numbers it may be recorded under (its own,
    and the one it had before it was renumbered) and whether a commit's info is its."""

    @property
    def numbers(self) -> Tuple[int, ...]: ...

    def is_recorded_by(self, info: Mapping[str, Any]) -> bool: ...


class NumberTaken(HistoryError):
    """The round's number is recorded in a table for another round of the same collector id (two
    collectors used one id): the round was not committed there."""


def _already_there(table: "DeltaTable", app_id: str, done: int, round_: Recorded) -> Optional[bool]:
    """Whether the table's log records ``round_`` itself (True), another round under its number
    (False), or cannot tell, the commits of that time being cleaned from the log (None)."""
    wanted = {number for number in round_.numbers if number <= done}
    lowest = min(round_.numbers)
    reaches_back = False
    for info in sorted(table.history(), key=lambda entry: -int(entry.get("version", 0))):
        if int(info.get("version", 0)) == 0:
            reaches_back = True  # the whole log, from the table's creation
        recorded = RoundInfo.of(info)
        if recorded is None or recorded.collector != app_id:
            continue
        if recorded.number in wanted and round_.is_recorded_by(info):
            return True
        if recorded.number < lowest:
            reaches_back = True
            break
    return False if reaches_back else None


def commit(
    root: Root,
    name: str,
    frame: pl.DataFrame,
    app_id: str,
    version: int,
    metadata: Mapping[str, str],
    table: "Optional[DeltaTable]" = None,
    *,
    fence: "Optional[Fence]" = None,
    round_: Optional[Recorded] = None,
) -> bool:
    """Appends ``frame`` to the table ``name`` as round ``version`` of the collector ``app_id``,
    unless that round is already there. Returns whether it was appended now.

    Idempotent: the commit carries the app transaction (``app_id``, ``version``); a round whose
    version the table already records is skipped, and two processes committing the same round
    at once conflict in delta-rs, so exactly one of them lands. Appends of other collectors
    never conflict with it. A commit that keeps conflicting is tried again after a growing wait.
    ``table`` is the table as `commit_round` loaded and checked it, for the first try.

    With ``round_``, a round skipped as already there must be that very round (`Recorded`): a
    number the table records for another round raises `NumberTaken`. With ``fence``, the commit
    is made from a snapshot that shows the fence's token (`_fence.Fence.admit`), so a writer that
    lost its right to commit (`_fence.TakenOver`) commits nothing.
    """
    deltalake = require("deltalake")
    data = to_disk(frame)
    uri = root.path(name)
    last_error: Optional[BaseException] = None
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        if table is None:
            table = load(root, name) or create(root, name, data)
        check_ours(table, name, uri)
        if fence is not None:
            table = fence.admit(name, table)
        done = table.transaction_version(app_id)
        if round_ is not None and done is not None and done >= min(round_.numbers):
            there = _already_there(table, app_id, done, round_)
            if there or (there is None and done >= version):
                return False  # this round (or, past what the log keeps, a round of this number)
            if done >= version:
                raise NumberTaken(
                    f"{uri!r} records round {version} of the collector {app_id!r} for another round: two collectors "
                    "used this id"
                )
        elif done is not None and done >= version:
            return False
        properties = deltalake.CommitProperties(
            app_transactions=[deltalake.Transaction(app_id, version)], custom_metadata=dict(metadata)
        )
        try:
            # Written against the very snapshot whose transaction version was read above: a commit
            # of the same round by another process after that snapshot is a conflict, not a twin.
            deltalake.write_deltalake(
                table,
                data,
                mode="append",
                partition_by=[PARTITION],
                schema_mode="merge",
                commit_properties=properties,
                post_commithook_properties=round_commit_hooks(),
            )
            return True
        except deltalake.exceptions.CommitFailedError as error:
            last_error = error  # another process committed meanwhile (perhaps this very round): look again
        except deltalake.exceptions.SchemaMismatchError as error:
            raise HistoryError(f"the round does not fit the table {uri!r}: {one_line(error)}") from None
        except (OSError, deltalake.exceptions.DeltaError) as error:
            if _vanished(error):
                last_error = error  # log cleanup removed what this snapshot listed: look again
                continue
            raise HistoryError(
                f"could not commit to {uri!r}: {one_line(error)} (the table stays at its last version; the round "
                "waits in the spool and the next collect commits it)"
            ) from None
        table = None
        _waiting.sleep(backoff_seconds(attempt, *COMMIT_BACKOFF))
    raise HistoryError(
        f"could not commit to {uri!r} after {COMMIT_ATTEMPTS} tries: {one_line(last_error or RuntimeError())} (the "
        "round waits in the spool and the next collect commits it)"
    )


def create(root: Root, name: str, like: pl.DataFrame) -> "DeltaTable":
    """Creates the table empty, with the columns of ``like`` and the defilens marker (`marker`),
    or returns the table another process created meanwhile. Rows are never written by the commit
    that creates a table (an app transaction in a creating commit would not guard its round), and
    the creating commit is never an append to a table that is there already, ours or not."""
    deltalake = require("deltalake")
    uri = root.path(name)
    try:
        with engine_writes(f"creating {uri!r}"):
            deltalake.write_deltalake(
                uri,
                like.head(0),
                mode="error",
                partition_by=[PARTITION],
                name=marker(name),
                description=DESCRIPTION,
                configuration=TABLE_PROPERTIES,
                storage_options=root.options(),
            )
    except (OSError, deltalake.exceptions.DeltaError) as error:
        table = load(root, name)
        if table is None:
            raise HistoryError(f"could not create the table {uri!r}: {one_line(error)}") from None
        return table
    table = load(root, name)
    if table is None:
        raise HistoryError(f"the table {uri!r} was created and then could not be read")
    return table


def loaded_and_ours(root: Root, name: str) -> "Optional[DeltaTable]":
    """The table ``name`` loaded and found ours (`check_ours`), or None when there is none yet."""
    table = load(root, name)
    if table is not None:
        check_ours(table, name, root.path(name))
    return table


def _wait_all(futures: "Iterable[Future[Any]]") -> None:
    """Waits in slices, so that a Ctrl-C another thread received is seen within one."""
    pending = set(futures)
    while pending:
        _, pending = wait(pending, timeout=_waiting.SLICE_SECONDS)


def commit_round(
    root: Root,
    tables: Mapping[str, pl.DataFrame],
    app_id: str,
    version: int,
    metadata: Mapping[str, str],
    ready: "Callable[[Root, str], Optional[DeltaTable]]" = loaded_and_ours,
    *,
    fence: "Optional[Fence]" = None,
    round_: Optional[Recorded] = None,
) -> Dict[str, bool]:
    """Commits one round to each of its tables at once (a commit waits mostly on storage), one
    commit a table. Empty frames are not committed: there is nothing of the round to lose.
    Every table is loaded and checked by ``ready`` (collect gives `_layout.ready`, which also
    refuses foreign files and unwritable tables) before the first commit, so a table that is not
    ours stops the round before any table has it. ``fence`` and ``round_``: as `commit` takes
    them. Raises the first failure once every commit has finished."""
    work = {name: frame for name, frame in tables.items() if frame.height}
    if not work:
        return {}
    pool = ThreadPoolExecutor(max_workers=min(4, len(work)), thread_name_prefix=COMMIT_THREADS)
    try:
        with quiet_panics():
            checks = {name: pool.submit(ready, root, name) for name in work}
            _wait_all(checks.values())
            loaded = {name: future.result() for name, future in checks.items()}  # the first refusal, if any
            futures = {
                name: pool.submit(
                    commit, root, name, frame, app_id, version, metadata, loaded[name], fence=fence, round_=round_
                )
                for name, frame in work.items()
            }
            _wait_all(futures.values())
    except BaseException:
        # Interrupted or refused: commits under way cannot be stopped inside delta-rs; queued ones are dropped.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    results: Dict[str, bool] = {}
    first_error: Optional[BaseException] = None
    for name, future in futures.items():
        try:
            results[name] = future.result()
        except Exception as error:
            first_error = first_error or error
        except BaseException as error:  # pyo3's PanicException: a panic inside delta-rs
            first_error = first_error or HistoryError(
                f"could not commit to {root.path(name)!r}: delta-rs failed ({one_line(error)}; the round waits in the "
                "spool and the next collect commits it)"
            )
    if first_error is not None:
        raise first_error
    return results
