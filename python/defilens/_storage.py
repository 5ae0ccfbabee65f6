"""Where frames and histories are kept: a local folder, a ``file://`` URL or object storage
(``s3://bucket/prefix`` and the other schemes of object_store), reached one way.

`locate` is the one place that decides what a path given by a user is: a ``file://`` URL is the
local folder it names (percent-escapes decoded), any other ``scheme://`` is object storage with
polars-style ``storage_options``, anything else a local folder. A `Root` is the answer, and
every engine is given its paths and options by it: polars (`Frames.write` and `read`), delta-rs
(the history's tables) and obstore (what lives beside them), all three the Rust ``object_store``
crate, so the options mean the same to each. `write_file` writes a frame whole or not at all,
`check_writable` refuses a local folder that cannot be written before any request, and
`one_line` words an engine's error for a user.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import re
import signal
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Type, Union
from urllib.parse import unquote

import polars as pl

from ._duration import parse_every
from ._read_guard import trusted

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from obstore.store import ObjectStore

PathLike = Union[str, "os.PathLike[str]"]
StorageOptions = Optional[Mapping[str, Any]]

#: What installs the history's engines into any install of defilens (the `history` extra).
INSTALL_HINT = 'pip install "deltalake>=1.6,<2" "obstore>=0.12,<1" (the history extra of defilens)'

#: Said when ``storage_options`` come with a local path (they configure an object store).
OPTIONS_FOR_URLS_ONLY = "storage_options apply to object storage URLs such as s3://bucket/prefix, not to local paths"

#: A Delta table's log, in its folder: what tells a history's table from a frame written by
#: `Frames.write`.
DELTA_LOG = "_delta_log"

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

#: The file formats `write_file` writes (the first is the default of `Frames.write` and the CLI).
FORMATS = ("parquet", "csv", "ndjson")


def require(module: str) -> Any:
    """Imports one of the history's engines, or says which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"a defilens history needs {module.split('.')[0]}: {INSTALL_HINT}") from None


@dataclass(frozen=True)
class Root:
    """A folder or an object-store prefix: ``url`` (a local path, or ``scheme://bucket/prefix``)
    and the storage options every engine is given for it."""

    url: str
    storage_options: "dict[str, str]" = field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        return "://" not in self.url

    def path(self, name: str) -> str:
        """The path or URL of ``name`` under the root (polars, delta-rs and obstore take it as it is)."""
        return str(Path(self.url) / name) if self.is_local else f"{self.url}/{name}"

    def options(self) -> "Optional[dict[str, str]]":
        """``storage_options`` for delta-rs and polars (None for a local root)."""
        return None if self.is_local else dict(self.storage_options)

    def open_table(self, name: str) -> "DeltaTable":
        """The Delta table ``name`` under the root at its newest version, opened so that polars
        can read it whatever the folder's name (see `readable_table_class`). Raises deltalake's
        errors (``TableNotFoundError`` when there is none)."""
        with trusted():  # defilens' own read: a look-ahead check's guard lets it through
            table: "DeltaTable" = readable_table_class()(self.path(name), storage_options=self.options())
        return table

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
                    retry["retry_timeout"] = dt.timedelta(seconds=parse_every(str(value), bare))
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


def locate(path: PathLike, storage_options: StorageOptions = None, *, empty: str) -> Root:
    """What ``path`` names: object storage (``scheme://...``, with ``storage_options`` as given,
    every value as text), or a local folder (a ``file://`` URL decoded; ``~`` expanded; the
    path as given, not made absolute). ``empty`` is the message for an empty path. Refuses
    ``storage_options`` for a local path."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"a folder is a path or a URL such as s3://bucket/prefix, got {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError("a folder must be text, not bytes")
    if not text.strip():
        raise ValueError(empty)
    if text.startswith("file://"):
        text = unquote(text[len("file://") :])
    elif "://" in text:
        scheme, rest = text.split("://", 1)
        options = {str(key): _option_text(value) for key, value in (storage_options or {}).items()}
        return Root(f"{scheme.lower()}://{rest.rstrip('/')}", options)
    if storage_options:
        raise ValueError(OPTIONS_FOR_URLS_ONLY)
    return Root(str(Path(text).expanduser()))


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_writable(root: Root, name: str, error: Type[Exception] = ValueError) -> None:
    """Fails before any request when the local folder ``root`` could not be written: it is a file,
    a file is where it would be made, or a folder made and removed where it would be fails
    (permissions, a read-only mount, a /proc). Creates nothing. ``name`` is how the message
    calls the folder (``--out 'out/'``); object storage is left to the first write."""
    if not root.is_local:
        return
    folder = Path(root.url).absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == folder else f"cannot be created: {str(existing)!r} is a file"
        raise error(f"{name} {what}; give a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".defilens-", dir=existing))
    except OSError as failure:
        why = (failure.strerror or type(failure).__name__).lower()
        where = "" if existing == folder else f" in {str(existing)!r}"
        raise error(f"{name} cannot be written{where} ({why}); give a folder you can write") from None


def missing_parents(root: Root) -> Optional[Path]:
    """The outermost folder of a local ``root`` that does not exist yet (what writing there
    would create), or None."""
    if not root.is_local:
        return None
    folder, created = Path(root.url).absolute(), None
    while not folder.exists() and folder != folder.parent:
        created, folder = folder, folder.parent
    return created


# --------------------------------------------------------------------------- writing a file


def check_format(file_format: str) -> None:
    """Refuses a file format `write_file` does not write."""
    if file_format not in FORMATS:
        known = ", ".join(repr(name) for name in FORMATS[:-1]) + f" or {FORMATS[-1]!r}"
        raise ValueError(f"format must be {known}, got {file_format!r}")


def write_file(frame: pl.DataFrame, root: Root, name: str, file_format: str) -> None:
    """Writes one frame to the file ``name`` under ``root``, whole or not at all: a local file is
    written beside its target and renamed (a Ctrl-C waits for the rename), an object is uploaded
    by polars and appears when its upload completes."""
    check_format(file_format)
    if not root.is_local:
        _sink(frame, root.path(name), file_format, root.options())
        return
    with _ctrl_c_deferred():
        _write_then_rename(frame, Path(root.path(name)), file_format)


def _sink(
    frame: pl.DataFrame, target: Any, file_format: str, storage_options: "Optional[dict[str, Any]]" = None
) -> None:
    lazy = frame.lazy()
    if file_format == "parquet":
        lazy.sink_parquet(target, storage_options=storage_options)
    elif file_format == "csv":
        lazy.sink_csv(target, storage_options=storage_options)
    else:
        lazy.sink_ndjson(target, storage_options=storage_options)


def _write_then_rename(frame: pl.DataFrame, target: Path, file_format: str) -> None:
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        _sink(frame, temporary, file_format)
        os.replace(temporary, target)
    finally:
        _discard(temporary)


def _discard(path: Path) -> None:
    """Removes ``path`` if it exists, even if Ctrl-C strikes again meanwhile: polars' writers
    raise KeyboardInterrupt twice for one Ctrl-C, and the second would land in this cleanup."""
    interrupted = False
    while True:
        try:
            path.unlink(missing_ok=True)
            break
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _ctrl_c_deferred() -> Iterator[None]:
    """Holds a Ctrl-C back until the block ends, then raises it: a write is short, and this
    way it is whole and renamed, or not started, never left as a temporary file. (A Ctrl-C
    that lands between the write and its cleanup could otherwise skip the cleanup, whatever
    the cleanup does.) Only the main thread receives signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: "list[int]" = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


# --------------------------------------------------------------------------- errors


#: Terminal escapes (colours, styles) that object_store's messages may carry.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def one_line(error: BaseException, limit: Optional[int] = 400) -> str:
    """An engine's error message on one line, without terminal escapes."""
    # obstore appends a Debug dump of the error after the message: the message is enough.
    text = _ESCAPES.sub("", str(error)).split("Debug source:", 1)[0]
    # Its error chain comes as "outer ↳ inner" (the arrow coloured): as a sentence, "outer: inner".
    text = " ".join(re.sub(r"\s*↳\s*", ": ", text).split())
    if not text:
        return type(error).__name__
    return text[:limit] if limit else text
