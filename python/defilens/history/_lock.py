"""One compaction at a time per history.

delta-rs lets two optimize commits that removed the same files both land (their removes carry
``dataChange = false``, which its conflict checker no longer treats as a conflict), so two
compactions running at once would each add a rewritten copy of the same rows: a trial with two
compactions beside a collector doubled rounds. Appends never conflict with a compaction, so
collectors need no lock; compactions take this one.

Locally the lock is an advisory lock on a file (released by the system if the process dies).
In object storage it is a lease object created only if absent (conditional PUT) and renewed
while the compaction runs; a lease left by a crashed compaction expires and is taken over by a
conditional update, so exactly one taker wins.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import threading
import uuid
from typing import Any, Iterator, Optional

from .._exceptions import HistoryError
from ._root import Root, require

LOCK = "_defilens/compaction.lock"
#: How long a lease in object storage lasts without renewal; renewed every third of it.
LEASE = dt.timedelta(minutes=10)


class Busy(HistoryError):
    """Another compaction of the same history is running."""


def _busy(root: Root, holder: str = "") -> Busy:
    who = f" ({holder})" if holder else ""
    return Busy(f"another compaction of {root.url!r} is running{who}; run it again when that one has finished")


@contextlib.contextmanager
def compaction_lock(root: Root) -> Iterator[None]:
    """Held for the whole compaction; raises `Busy` at once if another compaction holds it."""
    if root.is_local:
        with _file_lock(root):
            yield
    else:
        with _lease(root):
            yield


@contextlib.contextmanager
def _file_lock(root: Root) -> Iterator[None]:
    import fcntl

    path = os.path.join(root.url, LOCK)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(root) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lease_body(holder: str) -> bytes:
    expires = dt.datetime.now(dt.timezone.utc) + LEASE
    return json.dumps({"holder": holder, "expires": expires.isoformat()}).encode()


@contextlib.contextmanager
def _lease(root: Root) -> Iterator[None]:
    obstore = require("obstore")
    errors = require("obstore.exceptions")
    store = root.store()
    holder = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    try:
        result = obstore.put(store, LOCK, _lease_body(holder), mode="create")
    except errors.AlreadyExistsError:
        result = _take_over_expired(root, store, holder)
    except Exception as error:  # obstore's errors, OSError
        raise HistoryError(f"cannot take the compaction lease at {root.url}/{LOCK}: {error}") from None
    e_tag: "list[Optional[str]]" = [result.get("e_tag") if isinstance(result, dict) else getattr(result, "e_tag", None)]
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(LEASE.total_seconds() / 3):
            try:
                renewed: Any = obstore.put(store, LOCK, _lease_body(holder), mode={"e_tag": e_tag[0]})
                e_tag[0] = renewed.get("e_tag") if isinstance(renewed, dict) else getattr(renewed, "e_tag", None)
            except Exception:
                return  # lost: the compaction's own commits are still checked by delta-rs

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        try:
            obstore.delete(store, LOCK)
        except Exception:
            pass  # it expires


def _take_over_expired(root: Root, store: Any, holder: str) -> Any:
    obstore = require("obstore")
    try:
        current = obstore.get(store, LOCK)
        lease = json.loads(bytes(current.bytes()))
        expires = dt.datetime.fromisoformat(lease["expires"])
    except Exception:
        raise _busy(root) from None
    if expires > dt.datetime.now(dt.timezone.utc):
        raise _busy(root, str(lease.get("holder", "")))
    try:
        return obstore.put(store, LOCK, _lease_body(holder), mode={"e_tag": current.meta["e_tag"]})
    except Exception:
        raise _busy(root) from None
