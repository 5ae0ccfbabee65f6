"""Reads of a history's files that defilens did not make, refused while a look-ahead check re-runs
a study on the history cut at a moment.

The cut applies where defilens reads the tables; a study that reads the files another way (polars'
``scan_delta`` or ``scan_parquet`` on the root, deltalake's ``DeltaTable``, pyarrow, pandas,
DuckDB's ``delta_scan``, Python's ``open``) would see rows after the cut and pass the check it
should fail. While a guard is up, those readers are wrapped: a read of a path under a guarded root
that defilens itself did not make (`trusted`) raises `HistoryError` and is remembered, so that a
study that swallows the error is refused all the same. The wrappers are put in place when the first
guard goes up and taken away when the last comes down; Python's ``open`` is watched through an
audit hook (which cannot be removed: it does nothing while no guard is up)."""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import os
import re
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ._exceptions import HistoryError

_TRUSTED: "contextvars.ContextVar[bool]" = contextvars.ContextVar("defilens_trusted_read", default=False)
_LOCK = threading.RLock()
#: The roots guarded now (local folders as real paths, object storage as URLs), innermost last.
_GUARDED: List["Guard"] = []
#: The wrapped readers: (owner, attribute, original), put back when the last guard comes down.
_WRAPPED: List[Tuple[Any, str, Any]] = []
_HOOKED = False

#: Readers that take a path first (or as ``source``, ``table_uri``, ``path``): (module, owner, names).
PATH_READERS: Tuple[Tuple[str, Optional[str], Tuple[str, ...]], ...] = (
    (
        "polars",
        None,
        (
            "scan_delta",
            "read_delta",
            "scan_parquet",
            "read_parquet",
            "scan_ipc",
            "read_ipc",
            "scan_csv",
            "read_csv",
            "scan_ndjson",
            "read_ndjson",
        ),
    ),
    ("deltalake", "DeltaTable", ("__init__",)),
    ("pyarrow.dataset", None, ("dataset",)),
    ("pyarrow.parquet", None, ("read_table", "read_pandas")),
    ("pyarrow.parquet", "ParquetFile", ("__init__",)),
    ("pyarrow.parquet", "ParquetDataset", ("__init__",)),
    ("pandas", None, ("read_parquet",)),
)
#: DuckDB takes SQL that names paths (``delta_scan('...')``, ``read_parquet('...')``) or a path.
DUCKDB_READERS = ("sql", "query", "execute", "read_parquet", "from_parquet", "read_csv", "from_csv_auto")


class Guard:
    """One guarded root; ``refused`` holds what was refused under it."""

    def __init__(self, root: str, local: bool) -> None:
        self.root = root
        self.local = local
        self.refused: List[str] = []

    def covers(self, candidate: str) -> bool:
        if self.local:
            if candidate.startswith("file://"):
                candidate = candidate[len("file://") :]
            if "://" in candidate:
                return False
            path = os.path.realpath(os.path.abspath(os.path.expanduser(candidate)))
            return path == self.root or path.startswith(self.root.rstrip(os.sep) + os.sep)
        return candidate.rstrip("/") == self.root or candidate.startswith(self.root + "/")


@contextlib.contextmanager
def trusted() -> Iterator[None]:
    """Within it, reads are defilens' own (they go through the cut): never refused."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


@contextlib.contextmanager
def guarded(url: str, local: bool) -> Iterator[Guard]:
    """Refuses reads of the root at ``url`` (a local folder, or an object storage URL) made by
    anything but defilens, for as long as it lasts."""
    guard = Guard(os.path.realpath(url) if local else url.rstrip("/"), local)
    with _LOCK:
        if not _GUARDED:
            _wrap()
        _GUARDED.append(guard)
    try:
        yield guard
    finally:
        with _LOCK:
            _GUARDED.remove(guard)
            if not _GUARDED:
                _unwrap()


def _refuse(reader: str, candidate: str) -> None:
    if _TRUSTED.get():
        return
    for guard in list(_GUARDED):
        if guard.covers(candidate):
            message = (
                f"the study read {candidate!r} with {reader} while it was checked: the look-ahead check cuts only what "
                "defilens reads, so it cannot check this study (read the history with defilens.scan, panel, asof, "
                "decision_times or forward_returns, which see only the rows before each cut)"
            )
            guard.refused.append(message)
            raise HistoryError(message)


def _paths(value: Any) -> List[str]:
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]  # type: ignore[list-item]
    if isinstance(value, (list, tuple)):
        return [path for item in value for path in _paths(item)]
    return []


def _first(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    for key in ("source", "table_uri", "path", "path_or_paths", "file", "path_or_buffer", "query"):
        if key in kwargs:
            return kwargs[key]
    return args[0] if args else None


def _path_reader(name: str, original: Callable[..., Any], method: bool) -> Callable[..., Any]:
    def read(*args: Any, **kwargs: Any) -> Any:
        given = args[1:] if method else args
        for candidate in _paths(_first(given, kwargs)):
            _refuse(name, candidate)
        return original(*args, **kwargs)

    read.__wrapped__ = original  # type: ignore[attr-defined]
    return read


_QUOTED = re.compile(r"'((?:[^']|'')*)'|\"((?:[^\"]|\"\")*)\"")


def _sql_reader(name: str, original: Callable[..., Any], method: bool) -> Callable[..., Any]:
    def read(*args: Any, **kwargs: Any) -> Any:
        given = args[1:] if method else args
        text = _first(given, kwargs)
        if isinstance(text, (str, os.PathLike)):
            text = os.fspath(text)
            candidates = [a or b for a, b in _QUOTED.findall(text)] or [text]  # type: ignore[arg-type]
            for candidate in candidates:
                _refuse(f"DuckDB's {name}", candidate)
        return original(*args, **kwargs)

    read.__wrapped__ = original  # type: ignore[attr-defined]
    return read


def _wrap() -> None:
    global _HOOKED
    for module_name, owner_name, names in PATH_READERS:
        module = _module(module_name)
        if module is None:
            continue
        owner = getattr(module, owner_name) if owner_name else module
        for name in names:
            original = getattr(owner, name, None)
            if original is None:
                continue
            reader = f"{module_name}.{owner_name + '.' if owner_name else ''}{name}".replace(".__init__", "")
            _set(owner, name, _path_reader(reader, original, method=owner_name is not None))
    duckdb = _module("duckdb")
    if duckdb is not None:
        for owner, method in ((duckdb, False), (duckdb.DuckDBPyConnection, True)):
            for name in DUCKDB_READERS:
                original = getattr(owner, name, None)
                if original is not None:
                    _set(owner, name, _sql_reader(name, original, method))
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True


def _set(owner: Any, name: str, value: Any) -> None:
    try:
        original = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
        setattr(owner, name, value)
    except (AttributeError, TypeError):  # a type that takes no new attributes: left as it is
        return
    _WRAPPED.append((owner, name, original))


def _unwrap() -> None:
    while _WRAPPED:
        owner, name, original = _WRAPPED.pop()
        setattr(owner, name, original)


def _module(name: str) -> Any:
    """The module if it is installed (imported now if it was not: a study may import it later)."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        if importlib.util.find_spec(name.split(".")[0]) is None:
            return None
        return importlib.import_module(name)
    except ImportError:
        return None


def _audit(event: str, args: Tuple[Any, ...]) -> None:
    if event != "open" or not _GUARDED or _TRUSTED.get():
        return
    path = args[0] if args else None
    if isinstance(path, (str, bytes, os.PathLike)):
        candidate = os.fsdecode(path)
        for guard in list(_GUARDED):
            if guard.local and guard.covers(candidate):
                _refuse("open", candidate)
