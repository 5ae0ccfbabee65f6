"""Which collectors are running: each holds its id while it runs, so that a starting collector
finishes only the spooled rounds of collectors that are gone, and two live collectors never
share an id (their round numbers would collide, and the second's rounds would be skipped as
already committed).

Locally the hold is an advisory lock on ``_defilens/collectors/<id>.lock`` (released by the
system when the process dies, however it dies; the file is removed when the collector stops).
In object storage it is a lease object ``_defilens/collectors/<id>.lease``, created only if
absent and renewed every `LEASE` / 3 (by a thread, and before a round's commit when the last
renewal is older than half the lease); a lease not renewed for `LEASE`, judged by the store's
own clock (object timestamps; the store's "now" is the time it gives ``_defilens/collectors/_clock``
when written), or left by a process of this machine that no longer runs, belongs to a collector
that is gone. A collector that finds its lease taken over (it stalled longer than
the lease) stops before its next commit.

No lease stops a collector that stalls between its check and its commit (a paused process, a
store whose clock jumped): a collector with an id of its own therefore fences every table first
(`fence_tables`, `_fence`), and commits only from snapshots that show its token, so the rounds
of a collector that held the id before it land nowhere once it started.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import re
import threading
import time
import uuid
from typing import Any, Dict, Iterator, Optional, Tuple

from .._exceptions import HistoryError
from .._storage import Root, one_line, require
from ._fence import Fence, TakenOver, collector_key, fence_tables
from ._layout import COLLECTORS

#: How long a collector's lease in object storage lasts without renewal.
LEASE = dt.timedelta(seconds=60)

#: How long a stopping collector waits for its lease to be deleted.
RELEASE_WAIT = 5.0

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
        self.holder = _holder()
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
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as error:
            raise HistoryError(f"cannot create {self.folder!r}: {error.strerror or error}") from None
        fd = self._lock(app_id)
        if fd is None:
            raise _in_use(root, app_id)
        self._fd = fd

    def check(self) -> None:
        """A lock file removed while this collector held it (a cleanup of ``_defilens``) let
        another collector take the id: this one holds it again under a new file when it can,
        and otherwise stops (`TakenOver`)."""
        if os.name == "nt":
            return  # an open file cannot be removed there
        try:
            same = os.fstat(self._fd).st_ino == os.stat(self._path(self.app_id)).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return
        try:
            os.makedirs(self.folder, exist_ok=True)  # the whole of _defilens removed
        except OSError as error:
            raise HistoryError(f"cannot create {self.folder!r}: {error.strerror or error}") from None
        fd = self._lock(self.app_id)
        if fd is None:
            raise taken_over(self.app_id, f"its lock file {self._path(self.app_id)} was removed and taken")
        os.close(self._fd)
        self._fd = fd

    def _path(self, app_id: str) -> str:
        return os.path.join(self.folder, f"{app_id}.lock")

    def _lock(self, app_id: str) -> Optional[int]:
        """The lock on ``app_id``'s file, or None when a running collector holds it. A file
        removed by its holder between open and lock is opened again."""
        path = self._path(app_id)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as error:
                raise HistoryError(f"cannot open {path!r}: {error.strerror or error}") from None
            if not _try_lock(fd):
                os.close(fd)
                return None
            if os.name == "nt":
                return fd  # an open file cannot be removed there: no stale name to check
            try:
                held, named = os.fstat(fd), os.stat(path)
                if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def _unlock(self, app_id: str, fd: int) -> None:
        if os.name == "nt":
            os.close(fd)
            with contextlib.suppress(OSError):  # another collector opened it meanwhile
                os.unlink(self._path(app_id))
            return
        # Removed while still locked: whoever opens the name afterwards gets a new file.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(app_id))
        os.close(fd)

    def _probe(self, app_id: str) -> bool:
        fd = self._lock(app_id)
        if fd is None:
            return True
        self._unlock(app_id, fd)
        return False

    def release(self) -> None:
        self._unlock(self.app_id, self._fd)


def _try_lock(fd: int) -> bool:
    """Takes the lock on an open file without waiting; False when another process holds it."""
    if os.name == "nt":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder() -> str:
    return f"{platform.node()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _gone_here(body: bytes) -> bool:
    """Whether a lease was left by a process of this machine that no longer runs (a collector
    killed and restarted at once need not wait for its lease to lapse)."""
    if os.name == "nt":
        return False  # os.kill there ends a process rather than asking after it
    try:
        host, pid, _ = str(json.loads(body)["holder"]).rsplit(":", 2)
        if host != platform.node() or int(pid) == os.getpid():
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except Exception:  # unreadable, or a process we may not signal: it runs
        return False
    return False


def _e_tag(result: Any) -> Optional[str]:
    return result.get("e_tag") if isinstance(result, dict) else getattr(result, "e_tag", None)


class _LeaseRunning(Running):
    def __init__(self, root: Root, app_id: str) -> None:
        super().__init__(root, app_id)
        self.obstore = require("obstore")
        self.errors = require("obstore.exceptions")
        self.store = root.store()
        self.path = f"{COLLECTORS}/{app_id}.lease"
        self.body = json.dumps({"collector": app_id, "holder": self.holder}).encode()
        self._now: Optional[tuple[dt.datetime, float]] = None
        self._lock = threading.Lock()
        self._lost = False
        try:
            result = self.obstore.put(self.store, self.path, self.body, mode="create")
        except self.errors.AlreadyExistsError:
            result = self._take_over()
        except Exception as error:  # obstore's errors, OSError
            raise HistoryError(
                f"cannot write the collector's lease {root.url}/{self.path}: {one_line(error)}"
            ) from None
        self._e_tag = _e_tag(result)
        self._renewed = time.monotonic()
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_every, name="defilens-collector-lease", daemon=True)
        self._renewer.start()

    def _store_now(self) -> dt.datetime:
        """The store's clock: the time it gives an object written now (read once, then advanced
        by this process's monotonic clock)."""
        if self._now is None:
            probe = f"{COLLECTORS}/_clock"
            try:
                self.obstore.put(self.store, probe, b"")
                stamp = self.obstore.head(self.store, probe)["last_modified"]
            except Exception as error:  # obstore's errors, OSError
                raise HistoryError(f"cannot write {self.root.url}/{probe}: {one_line(error)}") from None
            self._now = (stamp, time.monotonic())
        stamp, at = self._now
        return stamp + dt.timedelta(seconds=time.monotonic() - at)

    def _seen(self, path: str) -> Optional[Tuple[bool, Optional[str]]]:
        """Whether the lease at ``path`` is held (renewed within `LEASE` by the store's clock, and
        not left by a process of this machine that is gone), and its e_tag; None when there is none."""
        try:
            found = self.obstore.get(self.store, path)
            body = bytes(found.bytes())
        except FileNotFoundError:
            return None
        except Exception as error:  # obstore's errors, OSError
            raise HistoryError(f"cannot read {self.root.url}/{path}: {one_line(error)}") from None
        meta = found.meta
        held = self._store_now() - meta["last_modified"] < LEASE and not _gone_here(body)
        return held, meta.get("e_tag")

    def _take_over(self) -> Any:
        seen = self._seen(self.path)
        if seen is not None and seen[0]:
            raise _in_use(
                self.root,
                self.app_id,
                f" (its lease is renewed every {int(LEASE.total_seconds() / 3)} s; one that a collector of another "
                f"machine left when it was killed lapses {int(LEASE.total_seconds())} s after its last renewal)",
            )
        try:
            if seen is None:
                return self.obstore.put(self.store, self.path, self.body, mode="create")
            return self.obstore.put(self.store, self.path, self.body, mode={"e_tag": seen[1]})
        except Exception:  # another collector took it over first
            raise _in_use(self.root, self.app_id) from None

    def _renew(self) -> None:
        with self._lock:
            if self._lost:
                return
            try:
                result = self.obstore.put(self.store, self.path, self.body, mode={"e_tag": self._e_tag})
            except (self.errors.PreconditionError, FileNotFoundError):
                self._lost = True  # taken over (or removed) while this collector stalled
                return
            except Exception:  # obstore's errors, OSError: the store is unreachable; tried again later
                return
            self._e_tag = _e_tag(result)
            self._renewed = time.monotonic()

    def _renew_every(self) -> None:
        while not self._stop.wait(LEASE.total_seconds() / 3):
            self._renew()

    def check(self) -> None:
        if time.monotonic() - self._renewed > LEASE.total_seconds() / 2:
            self._renew()
        if self._lost:
            raise taken_over(self.app_id, f"its lease was not renewed for {int(LEASE.total_seconds())} s")

    def _probe(self, app_id: str) -> bool:
        seen = self._seen(f"{COLLECTORS}/{app_id}.lease")
        return seen is not None and seen[0]

    def release(self) -> None:
        # Neither waits long on a store that does not answer (a stop should not take its retries):
        # a renewal still under way cannot bring the lease back (it is conditional on the e_tag),
        # and a lease not deleted lapses.
        self._stop.set()
        if self._lost:
            return

        def delete() -> None:
            with contextlib.suppress(Exception):
                self.obstore.delete(self.store, self.path)

        deleting = threading.Thread(target=delete, name="defilens-collector-lease-delete", daemon=True)
        deleting.start()
        deleting.join(RELEASE_WAIT)


@contextlib.contextmanager
def collector_running(root: Root, app_id: str) -> Iterator[Running]:
    """Holds ``app_id`` for a collector while it runs; `HistoryError` naming the id when a
    running collector already holds it."""
    running: Running = _LocalRunning(root, app_id) if root.is_local else _LeaseRunning(root, app_id)
    try:
        yield running
    finally:
        running.release()
