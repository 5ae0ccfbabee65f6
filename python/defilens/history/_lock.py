"""One compaction at a time per history, and a fence so that a compaction that lost its turn
commits nothing.

delta-rs (1.6) lets two optimize commits that removed the same files both land (their removes
carry ``dataChange = false``, which its conflict checker does not treat as a conflict), and it
drops the app transactions of an optimize commit, so two compactions that planned on the same
files would each add a rewritten copy of the same rows. Appends never conflict with a
compaction, so collectors need no lock; compactions take this one.

Locally the lock is an advisory lock on a file (released by the system if the process dies).
In object storage it is a lease object created only if absent (conditional PUT) and renewed
while the compaction runs. A lease expires `LEASE` after its object was last written, judged by
the store's clock (the object's last-modified time against an object written just now), never by
a successor's own clock or by what the object says: an unreadable lease expires like any other.
A successor takes an expired or released lease over by a conditional update, so exactly one
taker wins, and its epoch is one more than the last.

No lock can stop a holder that stalled between its last check and its commit (a paused process,
a long z-order). The fence does: a compaction's first commit to each table sets the table
property `_fence.COMPACTION` to its token (epoch and holder), a metadata change, and delta-rs refuses any
commit whose snapshot predates a metadata change that landed since. Every later commit of the
compaction is made from a snapshot that shows its own token, so a commit planned before a
successor's fence fails in the engine, and one planned after it is never attempted: the rows
are never doubled. Before each commit the lease is checked too (a failed renewal, a lease not
renewed for half its length, a lease object someone else wrote), and the compaction stops.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterator, Optional

from .._exceptions import HistoryError
from .._storage import Root, require
from ._layout import COMPACTION_CLOCK, COMPACTION_LOCK

#: How long a lease in object storage lasts after its object was last written (store's clock).
LEASE = dt.timedelta(minutes=10)


class Busy(HistoryError):
    """Another compaction of the same history is running."""


class LeaseLost(Busy):
    """This compaction lost its right to commit (another took over, or its lease could not be
    renewed); it stopped before its next commit."""


def _busy(root: Root, holder: str = "", left: Optional[float] = None) -> Busy:
    who = f" ({holder})" if holder else ""
    until = f"; its lease expires in {left:.0f} s unless renewed" if left is not None else ""
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

    def __init__(self, root: Root, holder: str, epoch: int) -> None:
        self.root, self.holder, self.epoch = root, holder, epoch
        self.token = f"{epoch}:{holder}"

    def check(self) -> None:
        """Raises `LeaseLost` unless the lease is still this compaction's."""


def _holder() -> str:
    return f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _parse(body: bytes) -> Dict[str, Any]:
    """A lease object's fields, or none: whatever it holds never raises."""
    try:
        lease = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return lease if isinstance(lease, dict) else {}


def _length(lease: Dict[str, Any]) -> float:
    """How long a lease lasts: what its holder declared when shorter than `LEASE`, else `LEASE`."""
    seconds = lease.get("seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 < seconds < LEASE.total_seconds():
        return float(seconds)
    return LEASE.total_seconds()


def _epoch(lease: Dict[str, Any]) -> Optional[int]:
    epoch = lease.get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0 else None


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


class _FileLease(Lease):
    def __init__(self, root: Root, holder: str, epoch: int, path: str, handle: Any) -> None:
        super().__init__(root, holder, epoch)
        self.path, self.handle = path, handle

    def check(self) -> None:
        try:
            same = os.stat(self.path).st_ino == os.fstat(self.handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            raise lost(self.root, f"its lock file {self.path} was removed")


@contextlib.contextmanager
def _file_lock(root: Root, floor: Callable[[], int]) -> Iterator[Lease]:
    import fcntl

    path = os.path.join(root.url, COMPACTION_LOCK)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(root) from None
        try:
            handle.seek(0)
            last = _epoch(_parse(handle.read().encode()))
            epoch = max(last if last is not None else floor(), 0) + 1
            holder = _holder()
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps({"holder": holder, "epoch": epoch}))
            handle.flush()
            yield _FileLease(root, holder, epoch, path, handle)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _e_tag(result: Any) -> Optional[str]:
    return result.get("e_tag") if isinstance(result, dict) else getattr(result, "e_tag", None)


def _put(store: Any, body: bytes, mode: Any) -> Any:
    """Writes the lease object (``mode``: "create", or the e-tag it must still have)."""
    return require("obstore").put(store, COMPACTION_LOCK, body, mode=mode)


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)


def _store_now(store: Any) -> dt.datetime:
    """The store's clock: the last-modified time of an object written just now."""
    obstore = require("obstore")
    obstore.put(store, COMPACTION_CLOCK, b"")
    return _utc(obstore.head(store, COMPACTION_CLOCK)["last_modified"])


class _StoreLease(Lease):
    """A lease object in object storage, renewed by a thread every fifth of `LEASE`."""

    def __init__(self, root: Root, holder: str, epoch: int, store: Any, e_tag: Optional[str]) -> None:
        super().__init__(root, holder, epoch)
        self.store, self.e_tag = store, e_tag
        self.renewed = time.monotonic()  # when the last write that succeeded was started
        self.failure: Optional[str] = None
        self.mutex = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._renew, daemon=True, name="defilens-lease")

    def body(self, released: bool = False) -> bytes:
        lease: Dict[str, Any] = {"holder": self.holder, "epoch": self.epoch, "seconds": LEASE.total_seconds()}
        if released:
            lease["released"] = True
        return json.dumps(lease).encode()

    def _renew(self) -> None:
        from ._tables import one_line

        while not self.stopped.wait(LEASE.total_seconds() / 5):
            with self.mutex:
                started = time.monotonic()
                try:
                    self.e_tag = _e_tag(_put(self.store, self.body(), {"e_tag": self.e_tag}))
                    self.renewed = started
                except Exception as error:  # obstore's errors, OSError: the lease is lost either way
                    precondition = type(error).__name__ == "PreconditionError"
                    self.failure = (
                        "another compaction took it over" if precondition else f"a renewal failed: {one_line(error)}"
                    )
                    return

    def check(self) -> None:
        from ._tables import one_line

        with self.mutex:
            if self.failure is not None:
                raise lost(self.root, self.failure)
            idle = time.monotonic() - self.renewed
            if idle > LEASE.total_seconds() / 2:
                raise lost(self.root, f"not renewed for {idle:.0f} s")
            try:
                current = require("obstore").head(self.store, COMPACTION_LOCK)["e_tag"]
            except Exception as error:  # obstore's errors, OSError
                raise lost(self.root, f"it could not be read: {one_line(error)}") from None
            if current != self.e_tag:
                raise lost(self.root, "its lease object was written by another compaction")

    def release(self) -> None:
        self.stopped.set()
        self.thread.join()
        with self.mutex:
            if self.failure is None:
                with contextlib.suppress(Exception):  # lost meanwhile: the new holder's lease stays
                    _put(self.store, self.body(released=True), {"e_tag": self.e_tag})


@contextlib.contextmanager
def _store_lease(root: Root, floor: Callable[[], int]) -> Iterator[Lease]:
    from ._tables import one_line

    errors = require("obstore.exceptions")
    store = root.store()
    holder = _holder()
    try:
        lease = _take_over(root, store, holder, floor)
        if lease is None:  # no lease object yet (or it was removed): create it
            lease = _StoreLease(root, holder, max(floor(), 0) + 1, store, None)
            try:
                lease.e_tag = _e_tag(_put(store, lease.body(), "create"))
            except errors.AlreadyExistsError:
                raise _busy(root) from None
    except HistoryError:
        raise
    except Exception as error:  # obstore's errors, OSError
        raise HistoryError(
            f"cannot take the compaction lease at {root.url}/{COMPACTION_LOCK}: {one_line(error)}"
        ) from None
    lease.thread.start()
    try:
        yield lease
    finally:
        lease.release()


def _take_over(root: Root, store: Any, holder: str, floor: Callable[[], int]) -> Optional[_StoreLease]:
    """Takes a released lease, or one whose object was last written over `LEASE` ago by the store's
    clock, by a conditional update: of two successors exactly one wins. None if there is none."""
    obstore = require("obstore")
    errors = require("obstore.exceptions")
    try:
        current = obstore.get(store, COMPACTION_LOCK)
    except FileNotFoundError:
        return None
    meta = current.meta
    lease = _parse(bytes(current.bytes()))
    if lease.get("released") is not True:
        length = _length(lease)
        age = (_store_now(store) - _utc(meta["last_modified"])).total_seconds()
        if age < length:
            raise _busy(root, str(lease.get("holder", ""))[:80], length - age)
    last = _epoch(lease)
    taken = _StoreLease(root, holder, max(last if last is not None else floor(), 0) + 1, store, None)
    try:
        expected = {key: meta[key] for key in ("e_tag", "version") if meta.get(key) is not None}
        taken.e_tag = _e_tag(_put(store, taken.body(), expected))
    except (errors.PreconditionError, errors.AlreadyExistsError):
        raise _busy(root) from None  # another successor won, or the holder renewed just now
    return taken
