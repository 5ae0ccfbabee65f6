"""Which collectors are running: each holds its id while it runs, so that a starting collector
finishes only the spooled rounds of collectors that are gone, and two live collectors never
share an id (their round numbers would collide, and the second's rounds would be skipped as
already committed).

The hold is a lease (`_lease`): locally a lock on ``_defilens/collectors/<id>.lock`` (the file is
removed when the collector stops), in object storage a lease object
``_defilens/collectors/<id>.lease`` that lasts `LEASE` after it was last written, by the store's
clock (deleted when the collector stops). A lease that lapsed, or that a process of this machine
that no longer runs left, belongs to a collector that is gone. A collector that finds its lease
taken over (it stalled longer than the lease) stops before its next commit.

No lease stops a collector that stalls between its check and its commit (a paused process, a
store whose clock jumped): a collector with an id of its own therefore fences every table first
(`fence_tables`, `_fence`), and commits only from snapshots that show its token, so the rounds
of a collector that held the id before it land nowhere once it started.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from typing import Dict, Iterator, Optional

from .._exceptions import HistoryError
from .._storage import Root
from ._fence import Fence, TakenOver, collector_key, fence_tables
from ._layout import COLLECTORS
from ._lease import Found, LocalLock, StoreClock, StoreLease, find, new_holder

#: How long a collector's lease in object storage lasts without renewal.
LEASE = dt.timedelta(seconds=60)

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_collector_id(value: object) -> str:
    """A collector id as the operator gave it, or a `ValueError` naming what it may hold (it is
    the app id in every table's log and a file name in the spool)."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ValueError(
            "collector_id must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit; "
            f"got {value!r}"
        )
    return value


def _in_use(root: Root, app_id: str, detail: str = "") -> HistoryError:
    return HistoryError(
        f"the collector id {app_id!r} is in use by a running collector of {root.url!r}{detail}: stop it first, or "
        "give this one another id"
    )


def taken_over(app_id: str, why: str) -> TakenOver:
    return TakenOver(f"the collector id {app_id!r} was taken over by another collector while this one stalled ({why})")


class Running:
    """The hold of one collector on its id, for as long as the collector runs."""

    def __init__(self, root: Root, app_id: str) -> None:
        self.root = root
        self.app_id = app_id
        self.holder = new_holder()
        #: The fence every commit of this collector is made behind (`fence_tables`), if any.
        self.fence: Optional[Fence] = None
        self._live: Dict[str, bool] = {}

    def fence_tables(self) -> None:
        """Fences every table for this id (`_fence`): from now on no commit lands of a collector
        that held the id before (stalled past its lease, its process paused), and this one's
        commits carry the fence. For ids that outlive a run (``collector_id=``): a new random id
        has no earlier holder."""
        self.fence = fence_tables(
            self.root,
            collector_key(self.app_id),
            self.holder,
            self.check,
            lambda path: taken_over(self.app_id, f"it fenced {path}"),
        )

    def is_live(self, app_id: str) -> bool:
        """Whether another collector ``app_id`` still runs (this one counts as not: its own
        spooled rounds are its to finish)."""
        if app_id == self.app_id:
            return False
        if app_id not in self._live:
            self._live[app_id] = _ID.fullmatch(app_id) is not None and self._probe(app_id)
        return self._live[app_id]

    def check(self) -> None:
        """Raises `HistoryError` when this collector no longer holds its id."""

    def _probe(self, app_id: str) -> bool:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError


class _LocalRunning(Running):
    def __init__(self, root: Root, app_id: str) -> None:
        super().__init__(root, app_id)
        self.folder = os.path.join(root.url, COLLECTORS)
        self._make_folder()
        lock = LocalLock.take(self._path(app_id))
        if lock is None:
            raise _in_use(root, app_id)
        self._lock = lock

    def _make_folder(self) -> None:
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as error:
            raise HistoryError(f"cannot create {self.folder!r}: {error.strerror or error}") from None

    def check(self) -> None:
        """A lock file removed while this collector held it (a cleanup of ``_defilens``) let
        another collector take the id: this one holds it again under a new file when it can,
        and otherwise stops (`TakenOver`)."""
        if self._lock.still_held():
            return
        self._make_folder()  # the whole of _defilens removed
        lock = LocalLock.take(self._path(self.app_id))
        if lock is None:
            raise taken_over(self.app_id, f"its lock file {self._path(self.app_id)} was removed and taken")
        self._lock.release(remove=False)  # the old file, no longer named: nobody else can lock it
        self._lock = lock

    def _path(self, app_id: str) -> str:
        return os.path.join(self.folder, f"{app_id}.lock")

    def _probe(self, app_id: str) -> bool:
        lock = LocalLock.take(self._path(app_id))
        if lock is None:
            return True
        lock.release(remove=True)
        return False

    def release(self) -> None:
        self._lock.release(remove=True)


class _LeaseRunning(Running):
    def __init__(self, root: Root, app_id: str) -> None:
        super().__init__(root, app_id)
        self.clock = StoreClock(root, root.store())
        self.lease = StoreLease.take(
            root,
            self._path(app_id),
            LEASE,
            lambda last: {"collector": app_id},
            lambda found: _in_use(root, app_id, _lapses() if found is not None else ""),
            self.clock,
            holder=self.holder,
        )

    @staticmethod
    def _path(app_id: str) -> str:
        return f"{COLLECTORS}/{app_id}.lease"

    def check(self) -> None:
        why = self.lease.check()
        if why is not None:
            raise taken_over(self.app_id, why)

    def _probe(self, app_id: str) -> bool:
        found: Optional[Found] = find(self.root, self.lease.store, self._path(app_id), LEASE, self.clock)
        return found is not None and found.left > 0

    def release(self) -> None:
        self.lease.release(keep=False)


def _lapses() -> str:
    seconds = LEASE.total_seconds()
    return (
        f" (its lease is renewed every {int(seconds / 4)} s; one that a collector of another machine left when it "
        f"was killed lapses {int(seconds)} s after its last renewal)"
    )


@contextlib.contextmanager
def collector_running(root: Root, app_id: str) -> Iterator[Running]:
    """Holds ``app_id`` for a collector while it runs; `HistoryError` naming the id when a
    running collector already holds it."""
    running: Running = _LocalRunning(root, app_id) if root.is_local else _LeaseRunning(root, app_id)
    try:
        yield running
    finally:
        running.release()
