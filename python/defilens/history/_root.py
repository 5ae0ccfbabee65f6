"""A history's root: what `_storage.locate` gives, with the rules of a history on top.

A root is a folder or an object-store prefix (``s3://bucket/prefix``) with polars-style
``storage_options`` (`defilens._storage.Root`): its tables are reached through delta-rs and
everything else under it through obstore, one code path for a folder and a bucket. This module
adds what a history needs of a root's name (other engines must read it as a path, delta-rs must
keep it in a table's path), the default timeouts for object storage, and the check that a local
root can be written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from .._exceptions import HistoryError
from .._storage import DEFAULT_OBJECT_STORE_OPTIONS, PathLike, Root, StorageOptions, check_writable, locate, require

#: Characters a reader such as polars, DuckDB or Spark would take as a glob in a path.
_GLOB = re.compile(r"[*?\[\]{}]")
#: A folder named like a Hive partition (``date=2026-01-01``): readers would take its name for a column.
_HIVE_FOLDER = re.compile(r"^[^=/]+=[^/]*$")
#: Control characters by name; object_store refuses every one of them in a path.
_CONTROL_NAMES = {"\t": "a tab", "\n": "a newline", "\r": "a carriage return"}


def require_history() -> None:
    """Fails at once, naming the extra, when the history's engines are not installed: before a
    collect sends a request, before anything is read or changed."""
    require("deltalake")
    require("obstore")


def _unusable(path: str) -> Optional[str]:
    """What in a local path delta-rs cannot keep in a table's path, named for a user, or None."""
    for char in path:
        if ord(char) < 32 or ord(char) == 127:
            return _CONTROL_NAMES.get(char, f"the control character U+{ord(char):04X}")
    if os.sep == "/" and "\\" in path:
        return "a backslash (delta-rs reads it as a folder separator)"
    if "%" in path:
        # delta-rs reads % and two hex digits as an escaped character (a folder named %20 becomes a
        # table at " "), and DuckDB's delta_scan cannot open a table under any folder with a %.
        return "a '%' (delta-rs reads % and two hex digits as an escaped character; DuckDB cannot open such a path)"
    return None


def root_of(path: PathLike, storage_options: StorageOptions = None) -> Root:
    """Checks a history root given by a user and returns it normalized.

    Refused with a `ValueError` that says why: an empty path (which would mean the current
    folder), a path with glob characters or a ``key=value`` folder (other engines would read
    them as a pattern or a partition column), options for a local path, and a local path that
    delta-rs cannot keep in a table's path (a control character such as a tab or a newline, a
    backslash, a ``%``), naming the character, before anything is created. Spaces, ``#`` and
    non-ASCII names work. A ``file://`` URL is decoded."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"a history root is a folder path or a URL such as s3://bucket/prefix, got {type(path).__name__}"
        )
    located = locate(
        path,
        storage_options,
        empty="the history root is empty: give a folder such as history/ or a URL such as s3://bucket/prefix",
    )
    text = located.url
    if _GLOB.search(text):
        raise ValueError(
            f"the history root {text!r} has glob characters (* ? [ ] {{ }}), which other engines would read as a "
            "pattern: choose a folder name without them"
        )
    parts = [part for part in re.split(r"[/\\]", text.split("://", 1)[-1]) if part]
    for part in parts:
        if _HIVE_FOLDER.match(part):
            raise ValueError(
                f"the history root {text!r} has a folder named like a partition ({part!r}): engines would read it as a "
                "column; choose a folder name without '='"
            )
    if not located.is_local:
        if "#" in text:
            raise ValueError(
                f"the history root {text!r} has a '#', which starts a fragment in a URL (the tables would be written "
                "elsewhere): choose a prefix without it"
            )
        if not text.split("://", 1)[1].strip("/"):
            raise ValueError(f"the history root {text!r} names no bucket: give s3://bucket/prefix")
        return Root(located.url, {**DEFAULT_OBJECT_STORE_OPTIONS, **located.storage_options})
    folder = Path(text).absolute()
    unusable = _unusable(str(folder))
    if unusable:
        raise ValueError(
            f"the history root {str(folder)!r} has {unusable} in its path, which a Delta table's path cannot hold: "
            "choose a folder name without it"
        )
    if folder.exists() and not folder.is_dir():
        raise HistoryError(f"the history root {text!r} is a file; give a folder")
    return Root(str(folder))


def check_writable_root(root: Root) -> None:
    """Fails before any request when a local root cannot be written."""
    check_writable(root, f"the history root {root.url!r}", HistoryError)
