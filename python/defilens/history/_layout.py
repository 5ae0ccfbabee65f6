"""What a root holds at each table's path: a Delta table, nothing, a folder of the Hive-Parquet
layout of earlier versions, or files of somebody else's."""

from __future__ import annotations

import enum
from typing import Dict, List

from .._exceptions import HistoryError
from ._root import Root, require
from ._tables import TABLES, one_line

DELTA_LOG = "_delta_log"
#: Present while `convert` is turning an old layout into tables (and after it was interrupted).
CONVERTING = "_defilens/converting"


class State(enum.Enum):
    MISSING = "missing"
    DELTA = "delta"
    OLD_LAYOUT = "old layout"
    FOREIGN = "foreign"


def _children(root: Root, prefix: str) -> "tuple[List[str], List[str]]":
    """(folder names, file names) directly under ``prefix``."""
    obstore = require("obstore")
    try:
        listed = obstore.list_with_delimiter(root.store(), prefix=prefix)
    except FileNotFoundError:
        return [], []
    except Exception as error:  # obstore's errors, OSError
        raise HistoryError(f"cannot list {root.url}/{prefix}: {one_line(error)}") from None
    folders = [path.rstrip("/").rsplit("/", 1)[-1] for path in listed["common_prefixes"]]
    files = [meta["path"].rsplit("/", 1)[-1] for meta in listed["objects"]]
    return folders, files


def state(root: Root, name: str) -> State:
    if root.is_local:
        import os

        folder = os.path.join(root.url, name)
        if not os.path.isdir(folder):
            return State.MISSING
        if os.path.isdir(os.path.join(folder, DELTA_LOG)):
            return State.DELTA
        entries = os.listdir(folder)
        folders = [entry for entry in entries if os.path.isdir(os.path.join(folder, entry))]
        files = [entry for entry in entries if entry not in folders]
    else:
        folders, files = _children(root, f"{name}/")
        if DELTA_LOG in folders:
            return State.DELTA
    if not folders and not files:
        return State.MISSING
    if any(folder.startswith("date=") for folder in folders):
        return State.OLD_LAYOUT
    return State.FOREIGN


def states(root: Root) -> Dict[str, State]:
    return {name: state(root, name) for name in TABLES}


def converting(root: Root) -> bool:
    if root.is_local:
        import os

        return os.path.exists(os.path.join(root.url, CONVERTING))
    obstore = require("obstore")
    try:
        obstore.head(root.store(), CONVERTING)
        return True
    except FileNotFoundError:
        return False


def check_not_converting(root: Root) -> None:
    if converting(root):
        raise HistoryError(
            f"a conversion of {root.url!r} to Delta tables was started and has not finished: run `defilens convert "
            f"{root.url}` again to finish it"
        )


def convert_hint(root: Root) -> str:
    return (
        f"{root.url!r} holds a history in the layout of an earlier defilens (Hive-partitioned Parquet): run "
        f"`defilens convert {root.url}` (or defilens.convert) once to turn it into Delta tables in place"
    )


def check_writable_layout(root: Root) -> Dict[str, State]:
    """Refuses a root that collect must not write into: an old layout, or foreign files at a
    table's path (writing a table there would hide them, and vacuum would delete them)."""
    found = states(root)
    if any(value is State.OLD_LAYOUT for value in found.values()):
        raise HistoryError(convert_hint(root))
    check_not_converting(root)
    foreign = [name for name, value in found.items() if value is State.FOREIGN]
    if foreign:
        raise HistoryError(
            f"{root.url!r} has files that are not a defilens history at {', '.join(foreign)}/: give collect an empty "
            "folder or an existing history, or move those files away"
        )
    return found
