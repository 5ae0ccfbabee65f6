"""Where a history lives: one root, local or in object storage, reached the same way.

A root is a folder or an object-store prefix (``s3://bucket/prefix``) with polars-style
``storage_options``. Its tables are reached through delta-rs and everything else under it (the
spool of rounds not yet committed) through obstore: both are the Rust ``object_store`` crate, so
a local folder and a bucket take one code path, and the options mean the same to both.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union
from urllib.parse import unquote

from .._exceptions import HistoryError

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from obstore.store import ObjectStore

PathLike = Union[str, "os.PathLike[str]"]
StorageOptions = Optional[Mapping[str, Any]]

#: What installs the history's engines into any install of defilens (the `history` extra).
INSTALL_HINT = 'pip install "deltalake>=1.6,<2" "obstore>=0.12,<1" (the history extra of defilens)'

#: Characters a reader such as polars, DuckDB or Spark would take as a glob in a path.
_GLOB = re.compile(r"[*?\[\]{}]")
#: A folder named like a Hive partition (``date=2026-01-01``): readers would take its name for a column.
_HIVE_FOLDER = re.compile(r"^[^=/]+=[^/]*$")
#: Control characters by name; object_store refuses every one of them in a path.
_CONTROL_NAMES = {"\t": "a tab", "\n": "a newline", "\r": "a carriage return"}

#: How long one request to object storage may take, and how long its retries may go on, unless
#: the caller's ``storage_options`` say otherwise: an endpoint that accepts connections and
#: never answers fails with an error in about two minutes instead of hanging.
DEFAULT_OBJECT_STORE_OPTIONS = {"timeout": "30s", "connect_timeout": "5s", "retry_timeout": "120s"}

#: object_store's client options (obstore wants them apart from the store's own settings).
_CLIENT_OPTIONS = {
    "allow_http",
    "allow_invalid_certificates",
    "connect_timeout",
    "default_content_type",
    "http1_only",
    "http2_only",
    "pool_idle_timeout",
    "pool_max_idle_per_host",
    "proxy_url",
    "timeout",
    "user_agent",
}
#: object_store's retry settings, which obstore takes as a third argument.
_RETRY_OPTIONS = {"max_retries", "retry_timeout"}


def require(module: str) -> Any:
    """Imports one of the history's engines, or says which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"a defilens history needs {module.split('.')[0]}: {INSTALL_HINT}") from None


def require_history() -> None:
    """Fails at once, naming the extra, when the history's engines are not installed: before a
    collect sends a request, before anything is read or changed."""
    require("deltalake")
    require("obstore")


def _seconds(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", str(text))
    if not match:
        raise ValueError(f"storage option durations look like 30s or 2m, got {text!r}")
    return float(match.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2) or "s"]


@dataclass(frozen=True)
class Root:
    """A history's root: ``url`` (an absolute local path, or ``scheme://bucket/prefix``) and
    the storage options every engine is given for it."""

    url: str
    storage_options: "dict[str, str]" = field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        return "://" not in self.url

    def table(self, name: str) -> str:
        """The URI of one table (delta-rs and polars take it as it is)."""
        return f"{self.url}/{name}" if not self.is_local else str(Path(self.url) / name)

    def open_table(self, name: str) -> "DeltaTable":
        """The Delta table ``name`` under the root at its newest version, opened so that polars
        can read it whatever the folder's name (see `readable_table_class`). Raises deltalake's
        errors (``TableNotFoundError`` when there is none)."""
        table: "DeltaTable" = readable_table_class()(self.table(name), storage_options=self.options())
        return table

    def options(self) -> "Optional[dict[str, str]]":
        """``storage_options`` for delta-rs and polars (None for a local root)."""
        return None if self.is_local else dict(self.storage_options)

    def store(self) -> "ObjectStore":
        """An obstore store at the root, for what lives beside the tables."""
        obstore_store = require("obstore.store")
        if self.is_local:
            Path(self.url).mkdir(parents=True, exist_ok=True)
            return obstore_store.LocalStore(self.url)
        config: "dict[str, Any]" = {}
        client: "dict[str, Any]" = {}
        retry: "dict[str, Any]" = {}
        for key, value in self.storage_options.items():
            bare = key.lower().removeprefix("aws_") if key.lower().startswith("aws_") else key.lower()
            if bare in _CLIENT_OPTIONS:
                client[bare] = str(value).lower() == "true" if bare.startswith(("allow_", "http")) else value
            elif bare in _RETRY_OPTIONS:
                if bare == "max_retries":
                    retry["max_retries"] = int(value)
                else:
                    import datetime as dt

                    retry["retry_timeout"] = dt.timedelta(seconds=_seconds(value))
            else:
                config[key.lower()] = value
        # object_store reads the store's AWS_* variables itself, but not its client options.
        for variable in ("AWS_ALLOW_HTTP", "ALLOW_HTTP"):
            if "allow_http" not in client and os.environ.get(variable, "").lower() == "true":
                client["allow_http"] = True
        try:
            return obstore_store.from_url(self.url, config=config, client_options=client, retry_config=retry or None)
        except BaseException as error:  # obstore panics on an option it does not know
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            raise ValueError(f"storage_options for {self.url!r} were not understood: {error}") from None

    def __str__(self) -> str:
        return self.url


@functools.lru_cache(maxsize=None)
def readable_table_class() -> type:
    """A `deltalake.DeltaTable` whose ``file_uris()`` are not percent-encoded. delta-rs gives them
    encoded (``with%20space``, ``%C3%A9``) and polars' ``scan_delta`` opens what it is given as
    the path itself, locally and in object storage, so a table under a folder or prefix with a
    space, ``#`` or a non-ASCII name could be written but not read (pola-rs/polars#20944)."""
    deltalake = require("deltalake")

    class ReadableDeltaTable(deltalake.DeltaTable):  # type: ignore[misc,name-defined]
        def file_uris(self, *args: Any, **kwargs: Any) -> "list[str]":
            return [unquote(uri) for uri in super().file_uris(*args, **kwargs)]

    return ReadableDeltaTable


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
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError("a history root must be text, not bytes")
    if not text.strip():
        raise ValueError(
            "the history root is empty: give a folder such as history/ or a URL such as s3://bucket/prefix"
        )
    if text.startswith("file://"):
        text = unquote(text[len("file://") :])
    remote = "://" in text
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
    if remote:
        if "#" in text:
            raise ValueError(
                f"the history root {text!r} has a '#', which starts a fragment in a URL (the tables would be written "
                "elsewhere): choose a prefix without it"
            )
        scheme, rest = text.split("://", 1)
        if not rest.strip("/"):
            raise ValueError(f"the history root {text!r} names no bucket: give s3://bucket/prefix")
        options = {k: str(v) for k, v in DEFAULT_OBJECT_STORE_OPTIONS.items()}
        options.update({str(k): _option_text(v) for k, v in (storage_options or {}).items()})
        return Root(f"{scheme.lower()}://{rest.rstrip('/')}", options)
    if storage_options:
        raise ValueError("storage_options apply to object storage URLs such as s3://bucket/prefix, not to local paths")
    folder = Path(text).expanduser().absolute()
    unusable = _unusable(str(folder))
    if unusable:
        raise ValueError(
            f"the history root {str(folder)!r} has {unusable} in its path, which a Delta table's path cannot hold: "
            "choose a folder name without it"
        )
    if folder.exists() and not folder.is_dir():
        raise HistoryError(f"the history root {text!r} is a file; give a folder")
    return Root(str(folder))


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_writable(root: Root) -> None:
    """Fails before any request when a local root cannot be written."""
    if not root.is_local:
        return
    folder = Path(root.url)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise HistoryError(f"cannot create the history root {root.url!r}: {error.strerror or error}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise HistoryError(f"the history root {root.url!r} is not writable")
