"""Keeping Rust's panic text of a failed write out of what defilens prints (`engine_writes`, around
every Delta write).

When a write fails half way (a full disk), delta-rs's object store can panic on its way out
(``object_store .../buffered.rs ... Already shut down``, in a tokio task: the write then fails
with an error, which defilens reports on one line). Rust's default panic hook prints the panic to
file descriptor 2 first, and Python cannot replace that hook. So while a round is committed, fd
2 goes to a buffer in memory, and what was written there goes on to the real stderr afterwards
without the panic messages (and their backtraces, with ``RUST_BACKTRACE`` set). Nothing else is
held back longer than the write. A panic in the calling thread reaches Python as pyo3's
``PanicException`` (a ``BaseException``, which ``except Exception`` lets through):
`engine_writes` raises it as `HistoryError`, on one line.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from typing import Iterator, List, Optional

from .._exceptions import HistoryError
from .._storage import one_line

#: The first line of a panic in Rust's default hook: ``thread 'x' panicked at file:line:col:``,
#: or ``thread 'x' (1234) panicked at ...`` since Rust 1.89.
_PANIC = re.compile(rb"^thread '[^']*'(?: \(\d+\))? panicked at ")
#: What follows the message: notes about backtraces, and a backtrace (with RUST_BACKTRACE set).
_AFTER = re.compile(rb"^(note: |stack backtrace:|\s+\S)")

_lock = threading.Lock()
_depth = 0
_saved: Optional[int] = None
_buffer: Optional[int] = None


def without_panics(data: bytes) -> bytes:
    """``data`` without the panic messages of Rust's default hook (the ``panicked at`` line, the
    message's line, the notes and backtrace after it, and blank lines around them)."""
    kept: List[bytes] = []
    lines = data.splitlines(keepends=True)
    index = 0
    while index < len(lines):
        line = lines[index]
        if _PANIC.match(line):
            index += 1
            if index < len(lines) and not _PANIC.match(lines[index]):
                index += 1  # the panic's message
            while index < len(lines) and _AFTER.match(lines[index]):
                index += 1
            while kept and not kept[-1].strip():
                kept.pop()
            while index < len(lines) and not lines[index].strip():
                index += 1
            continue
        kept.append(line)
        index += 1
    return b"".join(kept)


def _memory_file() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("defilens-stderr")
    with tempfile.TemporaryFile() as handle:
        return os.dup(handle.fileno())


@contextlib.contextmanager
def quiet_panics() -> Iterator[None]:
    """While inside (in any thread; nested and concurrent uses share one redirection), Rust's
    panic messages do not reach stderr; everything else written there does, at the end."""
    global _depth, _saved, _buffer
    with _lock:
        if _depth == 0:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            try:
                buffer = _memory_file()
            except OSError:
                buffer = None
            if buffer is not None:
                try:
                    _saved = os.dup(2)
                    os.dup2(buffer, 2)
                    _buffer = buffer
                except OSError:  # no stderr to redirect
                    os.close(buffer)
                    _saved = _buffer = None
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None and _buffer is not None:
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                os.dup2(_saved, 2)
                os.close(_saved)
                os.lseek(_buffer, 0, os.SEEK_SET)
                chunks = []
                while True:
                    chunk = os.read(_buffer, 1 << 16)
                    if not chunk:
                        break
                    chunks.append(chunk)
                os.close(_buffer)
                _saved = _buffer = None
                kept = without_panics(b"".join(chunks))
                while kept:
                    try:
                        kept = kept[os.write(2, kept) :]
                    except OSError:
                        break


def is_panic(error: BaseException) -> bool:
    """Whether ``error`` is pyo3's ``PanicException``: a panic inside the engine."""
    return type(error).__name__ == "PanicException"


@contextlib.contextmanager
def engine_writes(what: str) -> Iterator[None]:
    """Around a Delta write: Rust's panic text kept off stderr (`quiet_panics`), and a panic
    raised as `HistoryError` saying ``what`` failed."""
    with quiet_panics():
        try:
            yield
        except BaseException as error:
            if is_panic(error):
                raise HistoryError(f"{what} failed inside delta-rs ({one_line(error)})") from None
            raise
