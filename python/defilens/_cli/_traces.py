"""What a command leaves on disk: ``--out`` checked before any request, and no folder left
behind by a command that failed."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, Optional

from .._storage import check_writable, locate, missing_parents


def check_out_folder(path: str) -> None:
    """Makes sure ``--out`` can be written before any request, so a bad path never throws away
    a finished fetch; creates nothing (the frames are written once fetched). An object storage
    URL is left to the upload."""
    empty = "--out is empty: give a folder such as out/ or a URL such as s3://bucket/out"
    check_writable(locate(path, empty=empty), f"--out {path!r}")


@contextlib.contextmanager
def nothing_left_on_failure(path: Optional[str]) -> Iterator[None]:
    """Removes the folder ``path`` (and empty folders in it) again when the command fails and
    the folder did not exist before it and holds no file: a failed command leaves no trace."""
    # The outermost folder the command may create: --out, or the first of its parents missing.
    created = missing_parents(locate(path, empty="")) if path and path.strip() else None
    try:
        yield
    except BaseException:
        if created is not None:
            _remove_empty(created)
        raise


def _remove_empty(folder: Path) -> None:
    if not folder.is_dir():
        return
    for _dirpath, _, filenames in os.walk(folder):
        if filenames:
            return
    for dirpath, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)
