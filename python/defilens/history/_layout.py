"""What a root holds: the one list of its paths (below), and at each table's path a Delta table,
nothing, a folder of the Hive-Parquet layout of earlier versions, or files of somebody else's."""

from __future__ import annotations

import enum
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Dict, List, Optional

from .._exceptions import HistoryError
from .._storage import DELTA_LOG, Root, one_line, require
from ._tables import TABLES, check_ours, load

if TYPE_CHECKING:
    from deltalake import DeltaTable

# What a root holds besides its tables (`TABLES`, one Delta table each, at its name): the only
# place these paths are written. Delta and the other engines skip folders starting with "_".

#: The spool: rounds written ahead of their commits, one object each (`_spool`).
SPOOL = "_spool"
#: Where spool entries that cannot be read as a round of this version are moved, their names kept.
SET_ASIDE = "_spool/set_aside"
#: A running collector's hold (`_liveness`): a locked file locally, a lease object in object storage.
COLLECTORS = "_defilens/collectors"
#: The compaction lock (`_lock`): a locked file locally, a lease object in object storage.
COMPACTION_LOCK = "_defilens/compaction.lock"
#: An empty object a lease's taker writes to read the store's clock (its last-modified time, `_lease`).
STORE_CLOCK = "_defilens/store.clock"
#: Present while `convert` is turning an old layout into tables (and after it was interrupted).
CONVERTING = "_defilens/converting"
#: Where compaction remembers the days it has sorted (`_compact`).
SORTED = "_defilens/sorted"
#: The audit's day summaries (`defilens.research`), Delta tables by the version of what they hold
#: (a new version summarizes every day again; the old folder can go).
AUDIT_CACHE = "_audit/v2"

#: The evaluations run on the history (`defilens.research`): a Delta table, one row an evaluation,
#: so that a verdict can count the signals tried on the same data.
JOURNAL = "_defilens/journal"


class State(enum.Enum):
    MISSING = "missing"
    DELTA = "delta"
    OLD_LAYOUT = "old layout"
    FOREIGN = "foreign"


def _children(root: Root, prefix: str) -> "tuple[List[str], List[str]]":
    """(folder names, file names) directly under ``prefix``."""
    obstore = require("obstore")
    try:
        listed = obstore.list_with_delimiter(root.store(), prefix=prefix)
    except FileNotFoundError:
        return [], []
    except Exception as error:  # obstore's errors, OSError
        raise HistoryError(f"cannot list {root.url}/{prefix}: {one_line(error)}") from None
    folders = [path.rstrip("/").rsplit("/", 1)[-1] for path in listed["common_prefixes"]]
    files = [meta["path"].rsplit("/", 1)[-1] for meta in listed["objects"]]
    return folders, files


def state(root: Root, name: str) -> State:
    if root.is_local:
        folder = os.path.join(root.url, name)
        if not os.path.isdir(folder):
            return State.MISSING
        if os.path.isdir(os.path.join(folder, DELTA_LOG)):
            return State.DELTA
        entries = os.listdir(folder)
        folders = [entry for entry in entries if os.path.isdir(os.path.join(folder, entry))]
        files = [entry for entry in entries if entry not in folders]
    else:
        folders, files = _children(root, f"{name}/")
        if DELTA_LOG in folders:
            return State.DELTA
    if not folders and not files:
        return State.MISSING
    if any(folder.startswith("date=") for folder in folders):
        return State.OLD_LAYOUT
    return State.FOREIGN


def states(root: Root) -> Dict[str, State]:
    return {name: state(root, name) for name in TABLES}


def converting(root: Root) -> bool:
    if root.is_local:
        return os.path.exists(os.path.join(root.url, CONVERTING))
    obstore = require("obstore")
    try:
        obstore.head(root.store(), CONVERTING)
        return True
    except FileNotFoundError:
        return False


def check_not_converting(root: Root) -> None:
    if converting(root):
        raise HistoryError(
            f"a conversion of {root.url!r} to Delta tables was started and has not finished: run `defilens convert "
            f"{root.url}` again to finish it"
        )


def convert_hint(root: Root) -> str:
    return (
        f"{root.url!r} holds a history in the layout of an earlier defilens (Hive-partitioned Parquet): run "
        f"`defilens convert {root.url}` (or defilens.convert) once to turn it into Delta tables in place"
    )


def foreign_files(root: Root, names: List[str]) -> HistoryError:
    return HistoryError(
        f"{root.url!r} has files that are not a defilens history at {', '.join(names)}/: give collect an empty "
        "folder or an existing history, or move those files away (nothing was written)"
    )


def check_writable_layout(root: Root) -> Dict[str, State]:
    """Refuses a root that collect must not write into, before anything is sent or written: an
    old layout, foreign files at a table's path (writing a table there would hide them, and vacuum
    would delete them), and every Delta table that is not ours or cannot be written (`check_tables`)."""
    found = states(root)
    if any(value is State.OLD_LAYOUT for value in found.values()):
        raise HistoryError(convert_hint(root))
    check_not_converting(root)
    foreign = [name for name, value in found.items() if value is State.FOREIGN]
    if foreign:
        raise foreign_files(root, foreign)
    check_tables(root, found)
    return found


def check_tables(root: Root, found: Dict[str, State]) -> None:
    """Loads every Delta table of ``found`` (side by side) and refuses the first that is not ours
    (`_tables.check_ours`) or, locally, cannot be written."""
    tables = [name for name, value in found.items() if value is State.DELTA]
    if not tables:
        return
    with ThreadPoolExecutor(max_workers=min(4, len(tables))) as pool:
        for _ in pool.map(lambda name: ready(root, name), tables):
            pass


def ready(root: Root, name: str) -> "Optional[DeltaTable]":
    """The table ``name`` loaded and checked for a commit (ours, writable), or None when nothing
    is at its path yet (the commit creates it). Refuses foreign files or an old layout that
    appeared there. Writes nothing."""
    table = load(root, name)
    if table is None:
        found = state(root, name)
        if found is State.OLD_LAYOUT:
            raise HistoryError(convert_hint(root))
        if found is State.FOREIGN:
            raise foreign_files(root, [name])
        # Nothing there, or a log without a first commit (a creation cut short): the commit creates it.
        return None
    try:
        check_ours(table, name, root.path(name))
    except HistoryError as error:
        raise HistoryError(f"{error} (nothing was written)") from None
    if root.is_local:
        check_writable_table(root.path(name), str(table.metadata().id))
    return table


#: Local tables found writable in this process: (path, table id).
_WRITABLE: "set[tuple[str, str]]" = set()
_WRITABLE_LOCK = threading.Lock()


def check_writable_table(folder: str, table_id: str) -> None:
    """Refuses a local table whose folder or log cannot be written (a file made and removed in
    each: permissions, a read-only or immutable folder, a full disk), once a table a process."""
    if (folder, table_id) in _WRITABLE:
        return
    for where in (folder, os.path.join(folder, DELTA_LOG)):
        try:
            handle, probe = tempfile.mkstemp(prefix=".defilens-probe-", dir=where)
            os.close(handle)
            os.unlink(probe)
        except OSError as error:
            raise HistoryError(
                f"the table {folder!r} cannot be written ({error.strerror or error} in {where}): make it writable "
                "and run collect again (nothing was written)"
            ) from None
    with _WRITABLE_LOCK:
        _WRITABLE.add((folder, table_id))
