"""Tables kept loaded: a collector's from one round to the next (`KeptTables`), and a reader's
from one call to the next in a process (`kept_for_reading`).

Loading a table from scratch lists its log and reads its newest checkpoint and every log entry
since (in object storage, a request each): that grows with the table, and a collector did it for
every table every round. A kept table is brought up to date instead (delta-rs reads only the
entries committed since), once it is known to be the same table: the log entry of the version it
was loaded at must still be the very object it was (its e-tag; one request). A table replaced meanwhile (another
dataset moved to the frame's path), a log entry removed by log cleanup or anything that fails
makes it load from scratch, with every check a first load makes (`_layout.ready`).

A kept table is also loaded from scratch once it was brought `RELOAD_AFTER` versions forward: an
updated snapshot never moves to a newer checkpoint, it replays every entry since its load, so a
commit through it grew with the rounds (the CPU time of an append through a table kept for 300
commits was 2.5 times that of one kept for 100, while a load from the newest checkpoint stays flat).

A reader's table is never brought forward in place: a LazyFrame over it lists the table's files
only when it is collected, so a table handed out must stay at its version. A kept table is handed
out again while the log entry of its version is the very object it was and no entry after it
exists (two HEAD requests, two file checks locally); otherwise the table is loaded anew. A read
of a history in a notebook loaded each table from scratch for every scan of it (68 ms a table on
a day's history, five loads in one as-of call).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from .._storage import Root, require
from ._defaults import CHECKPOINT_INTERVAL
from ._layout import DELTA_LOG, ready
from ._tables import check_ours

if TYPE_CHECKING:
    from deltalake import DeltaTable


#: How many versions a kept table is brought forward before it is loaded from scratch again
#: (from the newest checkpoint): the tables' checkpoint interval.
RELOAD_AFTER = CHECKPOINT_INTERVAL


#: How many tables a process keeps loaded for reading (the least recently read goes first).
READ_KEPT = 64


def _entry(name: str, version: int) -> str:
    return f"{name}/{DELTA_LOG}/{version:020d}.json"


def _e_tag(store: Any, path: str) -> Optional[str]:
    """The e-tag of the object at ``path``; None when it is gone or cannot be read."""
    try:
        e_tag = require("obstore").head(store, path).get("e_tag")
    except Exception:  # gone (log cleanup), or unreadable
        return None
    return str(e_tag) if e_tag else None


def _absent(store: Any, path: str) -> bool:
    """Whether there is surely no object at ``path`` (False when it cannot be told)."""
    try:
        require("obstore").head(store, path)
    except FileNotFoundError:
        return True
    except Exception:  # unreadable: not known to be absent
        return False
    return False


_ReadKey = Tuple[str, Tuple[Tuple[str, str], ...], str]
_READING: "OrderedDict[_ReadKey, Tuple[DeltaTable, int, str]]" = OrderedDict()
_STORES: "Dict[Tuple[str, Tuple[Tuple[str, str], ...]], Any]" = {}
_READING_LOCK = threading.Lock()


def kept_for_reading(root: Root, name: str, load: "Callable[[], Optional[DeltaTable]]") -> "Optional[DeltaTable]":
    """The table ``name`` of ``root`` at its newest version: the one kept from an earlier read
    when nothing was committed to it since, else ``load()`` (kept for the next read)."""
    options = tuple(sorted(root.storage_options.items()))
    key = (root.url, options, name)
    with _READING_LOCK:
        kept = _READING.get(key)
        store = _STORES.get((root.url, options))
    if store is None:
        store = root.store()
        with _READING_LOCK:
            _STORES[(root.url, options)] = store
    if kept is not None:
        table, version, e_tag = kept
        if _e_tag(store, _entry(name, version)) == e_tag and _absent(store, _entry(name, version + 1)):
            with _READING_LOCK:
                if key in _READING:
                    _READING.move_to_end(key)
            return table
    loaded = load()
    found = None if loaded is None else _e_tag(store, _entry(name, loaded.version()))
    with _READING_LOCK:
        if loaded is None or found is None:
            _READING.pop(key, None)
        else:
            _READING[key] = (loaded, loaded.version(), found)
            _READING.move_to_end(key)
            while len(_READING) > READ_KEPT:
                _READING.popitem(last=False)
    return loaded


class KeptTables:
    """The tables of one root as a collector last committed to them; `ready` is what
    `commit_round` calls for each table before a round's first commit."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.store: Any = None
        #: name -> (the table, the version it was loaded at, that version's log entry's e-tag: what
        #: tells the same table from one put in its place, until log cleanup removes the entry)
        self.tables: Dict[str, Tuple["DeltaTable", int, str]] = {}

    def ready(self, root: Root, name: str) -> "Optional[DeltaTable]":
        """The table ``name`` up to date and checked for a commit, or None when there is none yet."""
        table = self._updated(name) if root is self.root else None
        if table is not None:
            check_ours(table, name, root.path(name))
            return table
        table = ready(root, name)
        if table is not None and root is self.root:
            self._keep(name, table)
        return table

    def _head(self, name: str, version: int) -> Optional[str]:
        if self.store is None:
            self.store = self.root.store()
        return _e_tag(self.store, _entry(name, version))  # None: gone or unreadable, loaded from scratch

    def _keep(self, name: str, table: "DeltaTable") -> None:
        version = table.version()
        e_tag = self._head(name, version)
        if e_tag is None:
            self.tables.pop(name, None)
        else:
            self.tables[name] = (table, version, e_tag)

    def _updated(self, name: str) -> "Optional[DeltaTable]":
        kept = self.tables.pop(name, None)
        if kept is None:
            return None
        table, version, e_tag = kept
        if self._head(name, version) != e_tag:
            return None  # replaced, or its entry cleaned up: load it from scratch
        deltalake = require("deltalake")
        try:
            table.update_incremental()
        except (OSError, deltalake.exceptions.DeltaError):
            return None
        if table.version() - version >= RELOAD_AFTER:
            return None  # brought forward long enough: from the newest checkpoint again
        self.tables[name] = kept
        return table
