"""A writer's right to commit, written into the tables themselves: a token (epoch and holder) in
a table property, so that a writer that stalled past its lease while another took its place
commits nothing.

No lease can stop a holder that stalled between its last check and its commit (a paused
process, a store whose clock jumped). A fence does: the new holder sets its token in every
table's property first, a metadata change, and delta-rs refuses any commit whose snapshot
predates a metadata change that landed since; every commit of a holder is made from a snapshot
that shows its own token, so a commit planned before the new holder's fence fails in the engine
and one planned after it is never attempted. Compaction fences each table under `COMPACTION`
(`_compact`), a collector with an id of its own under `collector_key` (`_liveness`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Dict, Optional

from .._exceptions import HistoryError
from .._storage import Root, one_line, require
from ._panics import engine_writes
from ._tables import TABLES, load

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: The table property each compaction sets first on each table: its epoch and holder.
COMPACTION = "defilens.compaction"
#: How often a fence is tried on a table while other writers' commits keep landing first.
ATTEMPTS = 5


def collector_key(app_id: str) -> str:
    """The table property that holds the fence of the collector ``app_id``."""
    return f"defilens.collector.{app_id}"


def epoch_of(value: Optional[str]) -> Optional[int]:
    """The epoch in a fence (``"<epoch>:<holder>"``), or None."""
    try:
        return int(str(value).split(":", 1)[0]) if value else None
    except ValueError:
        return None


class TakenOver(HistoryError):
    """Another holder fenced a table: this writer lost its right to commit and committed nothing
    more."""


class Fence:
    """The right of one holder of ``key`` to commit: its ``token`` in each table's property.
    ``still_held`` raises when the holder knows it lost its lease (called before fencing a table
    that has no token of this key yet); ``lost`` says what a newer token on a table (its path)
    means to the holder's user."""

    def __init__(
        self,
        root: Root,
        key: str,
        epoch: int,
        holder: str,
        still_held: Callable[[], None],
        lost: Callable[[str], TakenOver],
    ) -> None:
        self.root, self.key, self.epoch = root, key, epoch
        self.token = f"{epoch}:{holder}"
        self.still_held, self.lost = still_held, lost

    def taken_over(self, name: str) -> TakenOver:
        return self.lost(self.root.path(name))

    def admit(self, name: str, table: "DeltaTable") -> "DeltaTable":
        """``table`` when its property shows this fence's token; a table that shows an older
        token (or none: a table created since this holder fenced) is fenced first and returned as
        of that commit; one that shows a newer token raises `TakenOver`. The caller commits from
        the snapshot returned, so a fence landing after it makes the engine refuse that commit."""
        found = table.metadata().configuration.get(self.key)
        if found == self.token:
            return table
        if (epoch_of(found) or 0) >= self.epoch:
            raise self.taken_over(name)
        self.still_held()
        return self.set(name, table)

    def set(self, name: str, table: "Optional[DeltaTable]") -> "DeltaTable":
        """Sets this fence's token on the table (loaded again while other writers' commits land
        first); `TakenOver` when a newer token is there."""
        deltalake = require("deltalake")
        for attempt in range(ATTEMPTS):
            if table is None:
                table = load(self.root, name)
                if table is None:
                    raise HistoryError(f"the table {self.root.path(name)!r} disappeared while it was fenced")
            found = table.metadata().configuration.get(self.key)
            if found == self.token:
                return table
            if (epoch_of(found) or 0) >= self.epoch:
                raise self.taken_over(name)
            try:
                table.alter.set_table_properties({self.key: self.token}, raise_if_not_exists=False)
                return table
            except deltalake.exceptions.CommitFailedError as error:
                if attempt == ATTEMPTS - 1:
                    raise HistoryError(
                        f"could not fence {self.root.path(name)!r} for {self.key!r}: {one_line(error)}"
                    ) from None
                table = None
        raise AssertionError("unreachable")


def fence_tables(
    root: Root, key: str, holder: str, still_held: Callable[[], None], lost: Callable[[str], TakenOver]
) -> Fence:
    """A new fence of ``key`` above every one the tables record, set on every table there is (side
    by side: each waits mostly on storage). From then on no commit of an earlier holder lands."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        tables: Dict[str, "Optional[DeltaTable]"] = dict(
            zip(TABLES, pool.map(lambda name: load(root, name), TABLES), strict=True)
        )
        highest = max(
            (epoch_of(table.metadata().configuration.get(key)) or 0 for table in tables.values() if table is not None),
            default=0,
        )
        fence = Fence(root, key, highest + 1, holder, still_held, lost)
        with engine_writes(f"fencing the tables of {root.url!r}"):
            list(
                pool.map(lambda name: fence.set(name, tables[name]), [name for name, table in tables.items() if table])
            )
    return fence
