"""The tables of a history: one Delta table a frame, what their columns are on disk, and the
one way a round is appended to them (idempotently, by app transaction).

On disk a table holds its frame's columns, ``fetched_at`` and ``date`` (the UTC day of the round,
the partition column), with two changes delta-rs needs: ``interval`` is text (delta-rs cannot
write a ``pl.Enum``) and timestamps are microseconds (Delta's unit). `restore` undoes both when a
table is read, so `scan` gives the frames' own dtypes back.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple

import polars as pl

from .. import _waiting
from .._core import FRAME_NAMES, empty_frames
from .._exceptions import HistoryError
from .._frames import BODIES_SCHEMA, INTERVAL
from ._root import Root, require

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

UTC_MS = pl.Datetime("ms", "UTC")

#: The raw table: one row a response body (`Frames.bodies`), with the round's start.
RAW_SCHEMA: Dict[str, pl.DataType] = {"round_start": UTC_MS, **BODIES_SCHEMA}

#: Set when a table is created. Time travel reaches back as far as both retentions (a week by
#: default, `compact(retention=...)` changes what compaction removes); the log's own retention
#: keeps commit latency flat (delta-rs lists the whole log otherwise: latency doubled past
#: 3,000 entries in a trial) and checkpoints every 100 commits keep a snapshot's load short.
TABLE_PROPERTIES = {
    "delta.logRetentionDuration": "interval 7 days",
    "delta.deletedFileRetentionDuration": "interval 7 days",
    "delta.checkpointInterval": "100",
}

#: How often loading a table is tried when a log file it listed was removed meanwhile.
LOAD_ATTEMPTS = 4

#: How often one table's commit of a round is tried when it keeps conflicting, and how long the
#: waits between tries grow (delta-rs already retries a conflict 15 times on its own).
COMMIT_ATTEMPTS = 8
COMMIT_BACKOFF = (0.05, 2.0)


def frame_schema(name: str) -> Dict[str, pl.DataType]:
    """A table's columns as `scan` gives them (the frame's, ``fetched_at``, ``date``)."""
    if name == RAW:
        schema = dict(RAW_SCHEMA)
    else:
        schema = dict(empty_frames()[name].schema)
        schema.setdefault(FETCHED_AT, UTC_MS)
    schema[PARTITION] = pl.Date()
    return schema


def to_disk(frame: pl.DataFrame) -> pl.DataFrame:
    """A frame as delta-rs writes it: Enum columns as text."""
    enums = [name for name, dtype in frame.schema.items() if isinstance(dtype, (pl.Enum, pl.Categorical))]
    return frame.with_columns(pl.col(enums).cast(pl.String)) if enums else frame


def restore(lazy: pl.LazyFrame) -> pl.LazyFrame:
    """A table as the frames have it: ``interval`` as the Enum, timestamps in milliseconds."""
    schema = lazy.collect_schema()
    casts = []
    for name, dtype in schema.items():
        if name == "interval" and dtype != INTERVAL:
            casts.append(pl.col(name).cast(pl.String).cast(INTERVAL))
        elif isinstance(dtype, pl.Datetime) and dtype != UTC_MS:
            casts.append(pl.col(name).dt.cast_time_unit("ms").dt.replace_time_zone("UTC"))
    return lazy.with_columns(casts) if casts else lazy


def load(root: Root, name: str, version: Any = None) -> "Optional[DeltaTable]":
    """The table ``name`` of ``root`` (at ``version``: a number or a datetime), or None."""
    deltalake = require("deltalake")
    for attempt in range(LOAD_ATTEMPTS):
        try:
            table = deltalake.DeltaTable(root.table(name), storage_options=root.options())
            break
        except deltalake.exceptions.TableNotFoundError:
            return None
        except (OSError, deltalake.exceptions.DeltaError) as error:
            # A log entry or checkpoint listed a moment ago and removed since by log cleanup (a
            # collector's own every 100 commits): the table's newer state is there, load that.
            if attempt + 1 < LOAD_ATTEMPTS and _vanished(error):
                continue
            raise HistoryError(f"cannot read the table {root.table(name)!r}: {one_line(error)}") from None
    if version is not None:
        try:
            table.load_as_version(version)
        except (OSError, ValueError, deltalake.exceptions.DeltaError) as error:
            raise HistoryError(
                f"{root.table(name)!r} has no version at {version!r} ({one_line(error)}): time travel reaches back as "
                "far as the log and data files kept (a week by default; see defilens.compact's retention)"
            ) from None
    return table


def _vanished(error: BaseException) -> bool:
    """Whether ``error`` says a log entry or checkpoint the snapshot listed is gone (log cleanup)."""
    text = str(error)
    return "_delta_log" in text and "not found" in text.lower()


def one_line(error: BaseException) -> str:
    # obstore appends a Debug dump of the error after the message: the message is enough.
    text = " ".join(str(error).split("Debug source:", 1)[0].split())
    return text[:400] if text else type(error).__name__


def check_ours(table: "DeltaTable", name: str, uri: str) -> None:
    """Refuses a Delta table at a frame's path that is not a defilens history table: writing
    our rounds into it would mix two datasets."""
    fields = {field.name for field in table.schema().fields}
    partitions = list(table.metadata().partition_columns)
    missing = [column for column in ("token", PARTITION) if column not in fields]
    if missing or partitions != [PARTITION]:
        raise HistoryError(
            f"{uri!r} is a Delta table of another dataset (columns {sorted(fields)[:6]}..., partitioned by "
            f"{partitions}), not a defilens {name!r} table: give collect a root of its own"
        )


def commit(root: Root, name: str, frame: pl.DataFrame, app_id: str, version: int, metadata: Mapping[str, str]) -> bool:
    """Appends ``frame`` to the table ``name`` as round ``version`` of the collector ``app_id``,
    unless that round is already there. Returns whether it was appended now.

    Idempotent: the commit carries the app transaction (``app_id``, ``version``); a round whose
    version the table already records is skipped, and two processes committing the same round
    at once conflict in delta-rs, so exactly one of them lands. Appends of other collectors
    never conflict with it. A commit that keeps conflicting is tried again after a growing wait.
    """
    deltalake = require("deltalake")
    data = to_disk(frame)
    uri = root.table(name)
    delay = COMMIT_BACKOFF[0]
    last_error: Optional[BaseException] = None
    for _ in range(COMMIT_ATTEMPTS):
        table = load(root, name) or create(root, name, data)
        check_ours(table, name, uri)
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return False
        properties = deltalake.CommitProperties(
            app_transactions=[deltalake.Transaction(app_id, version)], custom_metadata=dict(metadata)
        )
        try:
            # Written against the very snapshot whose transaction version was read above: a commit
            # of the same round by another process after that snapshot is a conflict, not a twin.
            deltalake.write_deltalake(
                table, data, mode="append", partition_by=[PARTITION], schema_mode="merge", commit_properties=properties
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
        _waiting.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, COMMIT_BACKOFF[1])
    raise HistoryError(
        f"could not commit to {uri!r} after {COMMIT_ATTEMPTS} tries: {one_line(last_error or RuntimeError())} (the "
        "round waits in the spool and the next collect commits it)"
    )


def create(root: Root, name: str, like: pl.DataFrame) -> "DeltaTable":
    """Creates the table empty, with the columns of ``like``. Rows are never written by the commit
    that creates a table: two processes creating it at once would both succeed in delta-rs (the
    second as a plain append), and an app transaction in either would then not guard its round."""
    deltalake = require("deltalake")
    uri = root.table(name)
    try:
        deltalake.write_deltalake(
            uri,
            like.head(0),
            mode="append",
            partition_by=[PARTITION],
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


def commit_round(
    root: Root, tables: Mapping[str, pl.DataFrame], app_id: str, version: int, metadata: Mapping[str, str]
) -> Dict[str, bool]:
    """Commits one round to each of its tables at once (a commit waits mostly on storage), one
    commit a table. Empty frames are not committed: there is nothing of the round to lose.
    Raises the first failure once every commit has finished."""
    work = {name: frame for name, frame in tables.items() if frame.height}
    if not work:
        return {}
    with ThreadPoolExecutor(max_workers=min(4, len(work))) as pool:
        futures = {
            name: pool.submit(commit, root, name, frame, app_id, version, metadata) for name, frame in work.items()
        }
        results: Dict[str, bool] = {}
        first_error: Optional[BaseException] = None
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except BaseException as error:
                first_error = first_error or error
    if first_error is not None:
        raise first_error
    return results
