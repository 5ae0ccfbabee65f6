"""One compaction at a time per history, and a fence so that a compaction that lost its turn
commits nothing.

delta-rs (1.6) lets two optimize commits that removed the same files both land (their removes
carry ``dataChange = false``, which its conflict checker does not treat as a conflict), and it
drops the app transactions of an optimize commit, so two compactions that planned on the same
files would each add a rewritten copy of the same rows. Appends never conflict with a
compaction, so collectors need no lock; compactions take this one.

The lock is a lease (`_lease`): locally a lock on a file, in object storage a lease object that
lasts `LEASE` after it was last written, by the store's clock. The lock file and the lease object
keep the last compaction's epoch when it is released; a successor's epoch is one more.

No lock can stop a holder that stalled between its last check and its commit (a paused process,
a long z-order). The fence does: a compaction's first commit to each table sets the table
property `_fence.COMPACTION` to its token (epoch and holder), a metadata change, and delta-rs refuses any
commit whose snapshot predates a metadata change that landed since. Every later commit of the
compaction is made from a snapshot that shows its own token, so a commit planned before a
successor's fence fails in the engine, and one planned after it is never attempted: the rows
are never doubled. Before each commit the lease is checked too (a lock file removed, a lease
object someone else wrote, or not renewed for half its length), and the compaction stops.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from typing import Any, Callable, Dict, Iterator, Optional

from .._exceptions import HistoryError
from .._storage import Root
from ._layout import COMPACTION_LOCK
from ._lease import Found, LocalLock, StoreLease, fields_of, new_holder

#: How long a lease in object storage lasts after its object was last written (store's clock).
LEASE = dt.timedelta(minutes=10)


class Busy(HistoryError):
    """Another compaction of the same history is running."""


class LeaseLost(Busy):
    """This compaction lost its right to commit (another took over, or its lease could not be
    renewed); it stopped before its next commit."""


def _busy(root: Root, found: Optional[Found] = None) -> Busy:
    who = f" ({found.holder})" if found is not None and found.holder else ""
    until = f"; its lease expires in {found.left:.0f} s unless renewed" if found is not None else ""
    return Busy(f"another compaction of {root.url!r} is running{who}{until}; run it again when that one has finished")


def lost(root: Root, why: str) -> LeaseLost:
    return LeaseLost(
        f"the compaction of {root.url!r} lost its lease ({why}) and stopped before its next commit; nothing was "
        "lost or doubled: run it again"
    )


def took_over(root: Root) -> LeaseLost:
    return LeaseLost(
        f"another compaction of {root.url!r} took over (this one had stalled past its lease); this one stopped "
        "before committing twice, nothing was lost or doubled: run it again"
    )


class Lease:
    """The right to commit a compaction: ``epoch`` is above every compaction's before it, ``token``
    is unique to this run (what the fence property holds)."""

    def __init__(self, root: Root, holder: str, epoch: int, still_held: Callable[[], Optional[str]]) -> None:
        self.root, self.holder, self.epoch = root, holder, epoch
        self.token = f"{epoch}:{holder}"
        self._still_held = still_held

    def check(self) -> None:
        """Raises `LeaseLost` unless the lease is still this compaction's."""
        why = self._still_held()
        if why is not None:
            raise lost(self.root, why)


def _epoch(fields: Dict[str, Any]) -> Optional[int]:
    epoch = fields.get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0 else None


def _next_epoch(fields: Dict[str, Any], floor: Callable[[], int]) -> int:
    last = _epoch(fields)
    return max(last if last is not None else floor(), 0) + 1


@contextlib.contextmanager
def compaction_lock(root: Root, floor: Callable[[], int] = lambda: 0) -> Iterator[Lease]:
    """Held for the whole compaction; raises `Busy` at once if another compaction holds it.
    ``floor`` gives the highest epoch the tables' fences record; it is read only when the lock
    does not know the last epoch (a new lock, a lock file or object removed or unreadable)."""
    if root.is_local:
        with _file_lock(root, floor) as lease:
            yield lease
    else:
        with _store_lease(root, floor) as lease:
            yield lease


@contextlib.contextmanager
def _file_lock(root: Root, floor: Callable[[], int]) -> Iterator[Lease]:
    path = os.path.join(root.url, COMPACTION_LOCK)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as error:
        raise HistoryError(f"cannot create {os.path.dirname(path)!r}: {error.strerror or error}") from None
    lock = LocalLock.take(path)
    if lock is None:
        raise _busy(root)
    try:
        epoch = _next_epoch(fields_of(lock.read()), floor)
        who = new_holder()
        lock.write(json.dumps({"holder": who, "epoch": epoch}).encode())

        def still_held() -> Optional[str]:
            return None if lock.still_held() else f"its lock file {path} was removed"

        yield Lease(root, who, epoch, still_held)
    finally:
        lock.release(remove=False)  # the file keeps the epoch for the next compaction


@contextlib.contextmanager
def _store_lease(root: Root, floor: Callable[[], int]) -> Iterator[Lease]:
    lease = StoreLease.take(
        root,
        COMPACTION_LOCK,
        LEASE,
        lambda last: {"epoch": _next_epoch(last, floor)},
        lambda found: _busy(root, found),
    )
    try:
        yield Lease(root, lease.fields["holder"], lease.fields["epoch"], lease.check)
    finally:
        lease.release(keep=True)  # the object keeps the epoch for the next compaction
