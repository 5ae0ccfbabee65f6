"""A collector's tables kept loaded from one round to the next.

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from .._storage import Root, require
from ._layout import ready
from ._tables import check_ours

if TYPE_CHECKING:
    from deltalake import DeltaTable


#: How many versions a kept table is brought forward before it is loaded from scratch again
#: (from the newest checkpoint): the tables' checkpoint interval.
RELOAD_AFTER = 100


def _entry(name: str, version: int) -> str:
    return f"{name}/_delta_log/{version:020d}.json"


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
        obstore = require("obstore")
        if self.store is None:
            self.store = self.root.store()
        try:
            e_tag = obstore.head(self.store, _entry(name, version)).get("e_tag")
        except Exception:  # gone (log cleanup), or unreadable: load from scratch
            return None
        return str(e_tag) if e_tag else None

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
