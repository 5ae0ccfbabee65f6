"""The leases of a local history on Windows (issue 48, item 2), run here on Linux: the platform
patched to Windows, ``msvcrt`` faked with Windows' rules for ``locking`` (a region of bytes from
the file's current position, held per open file, refused to any other, given back only as it was
taken) and ``fcntl`` made unimportable, so that a POSIX call on the Windows branch fails here as
it would there. Before the lease module the compaction lock imported ``fcntl`` only: `compact`,
`convert` and a collector's packing of its closed days failed on a Windows local root."""

from __future__ import annotations

import errno
import json
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Dict, Tuple

import polars as pl
import pytest
from history_checks import write_old_round

import defilens
from defilens.history import _lease, _lock
from defilens.history._liveness import collector_running
from defilens.history._root import root_of
from defilens.history._tables import PARTITION
from defilens.testing import Sandbox

pytest.importorskip("deltalake")

IDS = ["bitcoin", "ethereum"]


class FakeMsvcrt(types.ModuleType):
    """``msvcrt.locking`` as Windows documents it, for the locks of one process."""

    LK_UNLCK, LK_LOCK, LK_NBLCK, LK_RLCK, LK_NBRLCK = 0, 1, 2, 3, 4

    def __init__(self) -> None:
        super().__init__("msvcrt")
        #: (device, inode, first byte, bytes) -> the descriptor holding that region.
        self.held: Dict[Tuple[int, int, int, int], int] = {}

    def locking(self, fd: int, mode: int, nbytes: int) -> None:
        found = os.fstat(fd)
        region = (found.st_dev, found.st_ino, os.lseek(fd, 0, os.SEEK_CUR), nbytes)
        owner = self.held.get(region)
        if owner is not None and not self._still_open(owner, found):
            del self.held[region]  # closing a file gives its locks back
            owner = None
        if mode == self.LK_UNLCK:
            if owner != fd:
                raise PermissionError(errno.EACCES, "Permission denied: not a region this file locked")
            del self.held[region]
        elif mode == self.LK_NBLCK:
            if owner is not None:
                raise PermissionError(errno.EACCES, "Permission denied")
            self.held[region] = fd
        else:
            raise AssertionError(f"a lock that waits (mode {mode}) would hang a collector")

    @staticmethod
    def _still_open(fd: int, file: os.stat_result) -> bool:
        try:
            found = os.fstat(fd)
        except OSError:
            return False
        return (found.st_dev, found.st_ino) == (file.st_dev, file.st_ino)


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> FakeMsvcrt:
    msvcrt = FakeMsvcrt()
    monkeypatch.setattr(_lease, "WINDOWS", True)
    monkeypatch.setitem(sys.modules, "msvcrt", msvcrt)
    monkeypatch.setitem(sys.modules, "fcntl", None)  # `import fcntl` raises, as on Windows
    return msvcrt


def test_a_local_lock_on_windows_is_exclusive_keeps_its_bytes_and_is_given_back(
    tmp_path: Path, windows: FakeMsvcrt
) -> None:
    path = str(tmp_path / "a.lock")
    first = _lease.LocalLock.take(path)
    assert first is not None
    assert _lease.LocalLock.take(path) is None  # another open file of the same name is refused
    first.write(b'{"epoch": 3}')
    assert first.still_held()  # an open file cannot be removed there: nothing to check
    first.release(remove=False)
    assert windows.held == {}  # given back at the byte it was taken at
    second = _lease.LocalLock.take(path)
    assert second is not None and second.read() == b'{"epoch": 3}'
    second.write(b"{}")
    assert second.read() == b"{}"  # truncated, not overwritten in place
    second.release(remove=True)
    assert not os.path.exists(path) and windows.held == {}


def test_the_compaction_lock_on_windows(tmp_path: Path, windows: FakeMsvcrt) -> None:
    root = root_of(str(tmp_path / "h"))
    with _lock.compaction_lock(root) as lease:
        assert lease.epoch == 1
        with pytest.raises(_lock.Busy, match="another compaction"), _lock.compaction_lock(root):
            pass
        lease.check()
    with _lock.compaction_lock(root) as lease:
        assert lease.epoch == 2  # the lock file kept the last epoch
    assert windows.held == {}
    with open(tmp_path / "h" / "_defilens" / "compaction.lock", "rb") as kept:
        assert json.loads(kept.read())["epoch"] == 2


def test_a_collector_id_on_windows(tmp_path: Path, windows: FakeMsvcrt) -> None:
    root = root_of(str(tmp_path / "h"))
    with collector_running(root, "shard") as running:
        with pytest.raises(defilens.HistoryError, match="'shard' is in use"), collector_running(root, "shard"):
            pass
        running.check()
        with collector_running(root, "other") as other:
            assert other.is_live("shard") and running.is_live("other")
        assert not running.is_live("gone")
    assert windows.held == {}
    with collector_running(root, "shard"):
        pass


def _files_per_day(root: str, name: str) -> Dict[str, int]:
    from deltalake import DeltaTable

    days = pl.DataFrame(DeltaTable(f"{root}/{name}").get_add_actions(flatten=True)).get_column(f"partition.{PARTITION}")
    return dict(sorted((str(day), count) for day, count in days.value_counts().iter_rows()))


def test_collect_packs_its_closed_days_and_compact_and_convert_run_on_windows(
    tmp_path: Path, windows: FakeMsvcrt
) -> None:
    """A local history's life on the Windows branch: a collector that packs each closed day
    (under the compaction lock) without a warning, a compaction, and a conversion of an old
    layout (under the lock too), every row once."""
    root = str(tmp_path / "h")
    with warnings.catch_warnings():
        warnings.simplefilter("error", defilens.DefiLensWarning)  # a failed packing would warn
        with Sandbox(now="2026-01-01T00:00:00Z", seed=7) as sandbox:
            client = defilens.Client(base_url=sandbox.url, clock=sandbox)
            assert client.collect(IDS, "3h", count=12, out=root, collector_id="win") == 12
    assert _files_per_day(root, "snapshot") == {"2026-01-01": 1, "2026-01-02": 4}  # the closed day, packed
    assert defilens.compact(root)["files_removed"] > 0
    assert defilens.scan(root, "snapshot").collect().height == 12 * len(IDS)

    old = tmp_path / "old"
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        for number in range(3):
            write_old_round(client.fetch(IDS, progress=False), old, sandbox.now, number)
            sandbox.advance("3h")
    assert defilens.convert(old)["rewritten"]
    assert defilens.scan(old, "snapshot").collect().height == 3 * len(IDS)
    assert windows.held == {}
