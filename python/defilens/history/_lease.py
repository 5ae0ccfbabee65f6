"""A holder's right to something in a history for as long as it runs: the compaction lock
(`_lock`) and a collector's id (`_liveness`) are each one, taken here.

Locally it is a lock on a file (`LocalLock`: ``flock`` on POSIX, ``msvcrt.locking`` on Windows),
released by the system when the process dies, however it dies. In object storage it is a lease
object (`StoreLease`), created only if absent and replaced only if unchanged (conditional PUT), so
that of two takers exactly one wins; a thread renews it while it is held. A lease lapses a length
after its object was last written, judged by the store's clock (`StoreClock`: the last-modified
time of an object written just now), never by a taker's own clock or by what the object says: an
unreadable lease lapses like any other. A lease its holder released, or left by a process of this
machine that no longer runs, is free at once.

No lease stops a holder that stalled between its last check and its commit (a paused process, a
store whose clock jumped): the fence does (`_fence`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import json
import os
import platform
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from .._exceptions import HistoryError
from .._storage import Root, one_line, require
from .._time import aware
from ._layout import STORE_CLOCK

#: Whether locks take their Windows branch (a test sets it, with a fake ``msvcrt``, on Linux).
WINDOWS = sys.platform == "win32"

#: How long a stopping holder waits for its lease object to be released or deleted.
RELEASE_WAIT = 5.0


def new_holder() -> str:
    """Who holds a lease: this machine, this process, and a part of its own (two holders in one
    process differ)."""
    return f"{platform.node()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# --- locally: a lock on a file --------------------------------------------------------------------


class LocalLock:
    """An exclusive lock on the file at ``path``, held until `release` or the process ends. The
    file may carry a few bytes for the next holder (`read`, `write`)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd

    @classmethod
    def take(cls, path: str) -> Optional["LocalLock"]:
        """The lock on the file at ``path`` (created if absent), or None when another holder has
        it. A file removed by its holder between this open and this lock is opened again."""
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
            except OSError as error:
                raise HistoryError(f"cannot open {path!r}: {error.strerror or error}") from None
            if not _try_lock(fd):
                os.close(fd)
                return None
            lock = cls(path, fd)
            if lock.still_held():
                return lock
            os.close(fd)

    def still_held(self) -> bool:
        """Whether the name still leads to the file this lock holds: a cleanup that removed it let
        another holder lock a new file of that name."""
        if WINDOWS:
            return True  # an open file cannot be removed there
        try:
            held, named = os.fstat(self.fd), os.stat(self.path)
        except FileNotFoundError:
            return False
        return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)

    def read(self) -> bytes:
        os.lseek(self.fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self.fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)

    def write(self, body: bytes) -> None:
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.ftruncate(self.fd, 0)
        os.write(self.fd, body)

    def release(self, remove: bool) -> None:
        """Unlocks, and with ``remove`` deletes the file (kept otherwise: what it says outlives the
        holder)."""
        if WINDOWS:
            _unlock(self.fd)
            os.close(self.fd)
            if remove:
                with contextlib.suppress(OSError):  # another holder opened it meanwhile
                    os.unlink(self.path)
            return
        if remove:
            # Removed while still locked: whoever opens the name afterwards gets a new file.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        _unlock(self.fd)
        os.close(self.fd)


def _msvcrt() -> Any:
    return importlib.import_module("msvcrt")


def _try_lock(fd: int) -> bool:
    """Takes the lock on an open file without waiting; False when another holder has it."""
    if WINDOWS:
        msvcrt = _msvcrt()
        os.lseek(fd, 0, os.SEEK_SET)  # the lock is on the first byte, taken and given back there
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(fd: int) -> None:
    if WINDOWS:
        msvcrt = _msvcrt()
        os.lseek(fd, 0, os.SEEK_SET)
        with contextlib.suppress(OSError):  # closing the file releases it too
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


# --- in object storage: a lease object ----------------------------------------------------------


class StoreClock:
    """The store's clock: the last-modified time it gives an object written now (written once,
    then advanced by this process's monotonic clock)."""

    def __init__(self, root: Root, store: Any) -> None:
        self.root, self.store = root, store
        self._read: Optional["tuple[dt.datetime, float]"] = None

    def now(self) -> dt.datetime:
        if self._read is None:
            obstore = require("obstore")
            try:
                obstore.put(self.store, STORE_CLOCK, b"")
                stamp = aware(obstore.head(self.store, STORE_CLOCK)["last_modified"])
            except Exception as error:  # obstore's errors, OSError
                raise HistoryError(f"cannot write {self.root.url}/{STORE_CLOCK}: {one_line(error)}") from None
            self._read = (stamp, time.monotonic())
        stamp, at = self._read
        return stamp + dt.timedelta(seconds=time.monotonic() - at)


@dataclass(frozen=True)
class Found:
    """A lease object as a taker finds it: what it says, who holds it, and how long it has left
    (0 when it is free to take)."""

    fields: Dict[str, Any]
    holder: str
    left: float
    mode: Dict[str, Any]  # the condition to replace it (its e-tag and version)


def find(root: Root, store: Any, path: str, length: dt.timedelta, clock: StoreClock) -> Optional[Found]:
    """The lease object at ``path``, or None when there is none. It is held for the length it
    declares (at most ``length``) after it was last written, by ``clock``, unless it says it was
    released or a process of this machine that no longer runs left it."""
    obstore = require("obstore")
    try:
        found = obstore.get(store, path)
        body = bytes(found.bytes())
    except FileNotFoundError:
        return None
    except Exception as error:  # obstore's errors, OSError
        raise HistoryError(f"cannot read {root.url}/{path}: {one_line(error)}") from None
    meta = found.meta
    fields = fields_of(body)
    left = 0.0
    if fields.get("released") is not True and not _gone_here(fields):
        age = (clock.now() - aware(meta["last_modified"])).total_seconds()
        left = max(_length(fields, length) - age, 0.0)
    mode = {key: meta[key] for key in ("e_tag", "version") if meta.get(key) is not None}
    return Found(fields, str(fields.get("holder", ""))[:80], left, mode)


class StoreLease:
    """A lease object at ``path`` that this process holds: renewed by a thread every quarter of
    its length (conditional on the e-tag it last wrote, so a renewal never takes back a lease
    another holder took over), checked before each commit (`check`)."""

    def __init__(
        self, root: Root, store: Any, path: str, length: dt.timedelta, fields: Dict[str, Any], holder: str
    ) -> None:
        self.root, self.store, self.path, self.length = root, store, path, length.total_seconds()
        self.fields = {"holder": holder, **fields, "seconds": self.length}
        self.e_tag: Optional[str] = None
        self.renewed = time.monotonic()  # when the last write that succeeded was started
        self.failure: Optional[str] = None  # set once the lease is known lost
        self.mutex = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._renew_every, daemon=True, name="defilens-lease")

    @classmethod
    def take(
        cls,
        root: Root,
        path: str,
        length: dt.timedelta,
        fields: Callable[[Dict[str, Any]], Dict[str, Any]],
        refused: Callable[[Optional[Found]], HistoryError],
        clock: Optional[StoreClock] = None,
        holder: Optional[str] = None,
    ) -> "StoreLease":
        """Takes the lease at ``path`` for ``holder`` (a new one by default): creates it, or
        replaces one that is free (`find`). Its fields are ``fields(what the last lease said)``;
        ``refused(found)`` is raised when it is held (``found``) or another taker won (None)."""
        errors = require("obstore.exceptions")
        store = root.store()
        try:
            found = find(root, store, path, length, clock or StoreClock(root, store))
            if found is not None and found.left > 0:
                raise refused(found)
            last = {} if found is None else found.fields
            lease = cls(root, store, path, length, fields(last), holder or new_holder())
            try:
                lease.e_tag = _e_tag(_put(store, path, lease.body(), "create" if found is None else found.mode))
            except (errors.PreconditionError, errors.AlreadyExistsError):
                raise refused(None) from None
        except HistoryError:
            raise
        except Exception as error:  # obstore's errors, OSError
            raise HistoryError(f"cannot take the lease {root.url}/{path}: {one_line(error)}") from None
        lease.thread.start()
        return lease

    def body(self, released: bool = False) -> bytes:
        return json.dumps({**self.fields, "released": True} if released else self.fields).encode()

    def _renew(self) -> None:
        """One conditional renewal (the mutex held). A lease another holder wrote is lost at once;
        a store that does not answer loses it only once it went unrenewed for half its length."""
        errors = require("obstore.exceptions")
        started = time.monotonic()
        try:
            self.e_tag = _e_tag(_put(self.store, self.path, self.body(), {"e_tag": self.e_tag}))
            self.renewed = started
        except (errors.PreconditionError, FileNotFoundError):
            self.failure = "another holder took it over"
        except Exception as error:  # obstore's errors, OSError: tried again, up to half the lease
            idle = time.monotonic() - self.renewed
            if idle > self.length / 2:
                self.failure = f"not renewed for {idle:.0f} s: a renewal failed: {one_line(error)}"

    def _renew_every(self) -> None:
        while not self.stopped.wait(self.length / 4):
            with self.mutex:
                if self.failure is not None:
                    return
                self._renew()

    def check(self) -> Optional[str]:
        """None while the lease is this holder's, else why it is not: renewed now when the last
        renewal is older than half its length, else its object read to see that no one else
        wrote it."""
        obstore = require("obstore")
        with self.mutex:
            if self.failure is None:
                if time.monotonic() - self.renewed > self.length / 2:
                    self._renew()
                else:
                    try:
                        if obstore.head(self.store, self.path)["e_tag"] != self.e_tag:
                            self.failure = "its lease object was written by another holder"
                    except FileNotFoundError:
                        self.failure = "its lease object was removed"
                    except Exception:  # obstore's errors, OSError: the renewals say whether it lasts
                        pass
            return self.failure

    def release(self, keep: bool) -> None:
        """Stops renewing, and (unless lost) marks the object released with ``keep``, else deletes
        it. Waits at most `RELEASE_WAIT` on a store that does not answer: a renewal under way
        cannot bring the lease back (it is conditional), and a lease not released lapses."""
        self.stopped.set()

        def give_back() -> None:
            with self.mutex, contextlib.suppress(Exception):
                if self.failure is not None:
                    return  # lost meanwhile: the new holder's lease stays
                if keep:
                    _put(self.store, self.path, self.body(released=True), {"e_tag": self.e_tag})
                else:
                    require("obstore").delete(self.store, self.path)
                self.failure = "it was released"

        releasing = threading.Thread(target=give_back, name="defilens-lease-release", daemon=True)
        releasing.start()
        releasing.join(RELEASE_WAIT)


def _put(store: Any, path: str, body: bytes, mode: Any) -> Any:
    """Writes a lease object (``mode``: "create", or the e-tag and version it must still have)."""
    return require("obstore").put(store, path, body, mode=mode)


def _e_tag(result: Any) -> Optional[str]:
    return result.get("e_tag") if isinstance(result, dict) else getattr(result, "e_tag", None)


def fields_of(body: bytes) -> Dict[str, Any]:
    """A lease object's fields, or none: whatever it holds never raises."""
    try:
        fields = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return fields if isinstance(fields, dict) else {}


def _length(fields: Dict[str, Any], length: dt.timedelta) -> float:
    """How long a lease lasts: what its holder declared when shorter than ``length``, else ``length``."""
    seconds = fields.get("seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 < seconds < length.total_seconds():
        return float(seconds)
    return length.total_seconds()


def _gone_here(fields: Dict[str, Any]) -> bool:
    """Whether a lease was left by a process of this machine that no longer runs (a holder killed
    and started again at once need not wait for its lease to lapse)."""
    if WINDOWS:
        return False  # os.kill there ends a process rather than asking after it
    try:
        host, pid, _ = str(fields["holder"]).rsplit(":", 2)
        if host != platform.node() or int(pid) == os.getpid():
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except Exception:  # unreadable, or a process we may not signal: it runs
        return False
    return False
