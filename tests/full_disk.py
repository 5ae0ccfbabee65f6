"""A small disk that really fills up, for the tests of what a user sees when a write fails half
way (delta-rs's object store panics on its way out in most runs)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A small disk that really fills up. Mounting it needs root, which this project's machines and
    CI have: elsewhere the test fails and says so, rather than passing having checked nothing."""
    assert os.geteuid() == 0, "mounting a small tmpfs (a disk that really fills up) needs root"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    assert mounted.returncode == 0, f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}"
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def fill(disk: Path, leave: int) -> None:
    """Fills the disk but for about ``leave`` bytes."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(0, free - leave))
