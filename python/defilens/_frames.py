"""`Frames`: the polars DataFrames of one fetch, and saving and loading them."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Tuple, Union

import polars as pl

from . import _core

__all__ = ["Frames", "FRAME_NAMES", "INTERVAL", "concat", "read", "scan"]

#: Candle intervals ordered by duration; the dtype of every ``interval`` column.
INTERVAL = pl.Enum(list(_core.INTERVALS))

#: The frames a `Frames` holds, in order (``errors`` is derived from ``log``).
FRAME_NAMES: Tuple[str, ...] = tuple(_core.FRAME_NAMES)

PathLike = Union[str, "os.PathLike[str]"]
RawItem = Tuple[str, str, bytes]


def _loads(body: bytes) -> Any:
    try:
        import orjson

        return orjson.loads(body)
    except ImportError:
        return json.loads(body)


class Frames:
    """The polars DataFrames of one fetch (or of many, after `concat`).

    Every frame exists with its full schema even when empty, and every frame starts with the
    ``token`` column. ``interval`` columns share one ``pl.Enum`` ordered by duration.

    Attributes:
        snapshot: one row per token: ``fetched_at`` and every scalar field of the listing.
        indicators: numeric indicators, long form: token, interval, indicator, value (Float64).
        signals: textual indicators such as ``macd``: token, interval, indicator, value (String).
        patterns: one row per detected pattern: token, interval, family, pattern.
        ta_updated: when the service last updated each (token, interval).
        info: one row per token: description, links, community, chains, categories.
        markets: one row per exchange market of each token.
        log: one row per HTTP exchange, failed or not (``cached`` marks reused responses).
        drift: one row per value that did not fit its column (the cell is null): token,
            endpoint, field, expected, found, fetched_at.

    >>> frames = defilens.parse_token(defilens.testing.listing_body("bitcoin"))
    >>> frames.indicators.filter(pl.col("indicator") == "rsi14").get_column("interval").to_list()
    ['5m', '15m', '1h', '24h', '1w']
    """

    __slots__ = FRAME_NAMES + ("_raw_items", "_raw_source", "_exceptions")

    snapshot: pl.DataFrame
    indicators: pl.DataFrame
    signals: pl.DataFrame
    patterns: pl.DataFrame
    ta_updated: pl.DataFrame
    info: pl.DataFrame
    markets: pl.DataFrame
    log: pl.DataFrame
    drift: pl.DataFrame
    _raw_items: "list[tuple[str, str, Any]] | None"
    _raw_source: Any
    _exceptions: "list[Exception]"

    def __init__(
        self, frames: "dict[str, pl.DataFrame]", raw: Any = None, exceptions: "Sequence[Exception]" = ()
    ) -> None:
        empty = None
        for name in FRAME_NAMES:
            frame = frames.get(name)
            if frame is None:
                if empty is None:
                    empty = _core.empty_frames()
                frame = empty[name]
            object.__setattr__(self, name, frame)
        # `raw` is either a list of (token, endpoint, body) or the Rust-side RawBodies, which
        # turns into Python bytes only when `.raw` is read.
        object.__setattr__(self, "_raw_source", raw)
        object.__setattr__(self, "_raw_items", None)
        # The exceptions behind the failed rows of `log`, in order (for `collect`'s errors).
        object.__setattr__(self, "_exceptions", list(exceptions))

    def _every_request_failed(self) -> bool:
        """At least one exchange, and none succeeded: a key, a URL or the network is wrong."""
        return self.log.height > 0 and not self.log.get_column("ok").any()

    @property
    def errors(self) -> pl.DataFrame:
        """The failed exchanges: `log` filtered to ``ok == False``."""
        return self.log.filter(~pl.col("ok"))

    def raw_items(self) -> "list[tuple[str, str, Any]]":
        """``(token, endpoint, parsed JSON)`` for every successful response, in fetch order."""
        items = self._raw_items
        if items is None:
            source = self._raw_source
            if source is None:
                pairs: Iterable[RawItem] = []
            elif isinstance(source, list):
                pairs = source
            else:
                pairs = source.items()
            items = [(token, endpoint, _loads(body)) for token, endpoint, body in pairs]
            object.__setattr__(self, "_raw_items", items)
        return items

    @property
    def raw(self) -> "list[Any]":
        """The parsed JSON of each successful response (list of dicts), in fetch order.

        For anything the frames leave out. Built on first access.
        """
        return [body for _, _, body in self.raw_items()]

    @property
    def tokens(self) -> "list[str]":
        """The tokens with a snapshot row, in order."""
        return self.snapshot.get_column("token").to_list()

    def items(self) -> Iterator[Tuple[str, pl.DataFrame]]:
        """``(name, frame)`` for every frame, ``errors`` included."""
        for name in FRAME_NAMES:
            yield name, getattr(self, name)
        yield "errors", self.errors

    def write(
        self,
        path: PathLike,
        *,
        format: str = "parquet",
        raw: bool = False,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> Union[Path, str]:
        """Writes every frame to ``path/<frame>.<format>`` (a folder) and returns the folder.

        ``format`` is ``"parquet"`` (round-trips every dtype; read back with `defilens.read`),
        ``"csv"`` or ``"ndjson"`` (lists and datetimes become text). ``raw=True`` also writes
        the response bodies to ``path/raw.parquet``, which `Sandbox.replay` serves. ``path`` may
        be an object storage URL (``s3://bucket/prefix``) with polars-style ``storage_options``;
        no file or object ever appears half-written under its final name.
        """
        from ._storage import location

        where = location(path, storage_options)
        tables = list(self.items())
        if raw:
            from ._history import raw_frame

            first = self.log["fetched_at"].min() if self.log.height else None
            started = first if isinstance(first, dt.datetime) else dt.datetime.now(dt.timezone.utc)
            tables.append(("raw", raw_frame(self, started)))
        if isinstance(where, Path):
            where.mkdir(parents=True, exist_ok=True)
        for name, frame in tables:
            file_format = "parquet" if name == "raw" else format
            if isinstance(where, Path):
                _write_atomically(frame, where / f"{name}.{file_format}", file_format)
            else:
                text_ready = frame if file_format == "parquet" else _for_text_formats(frame)
                where.write(text_ready, where.join(f"{name}.{file_format}"), file_format)
        return where if isinstance(where, Path) else where.url

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Frames is read-only; use its DataFrames' methods to derive new ones")

    def __repr__(self) -> str:
        shapes = ", ".join(f"{name}={frame.height}" for name, frame in self.items())
        return f"<Frames tokens={self.snapshot.height} rows: {shapes}>"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><code>{name}</code></td><td>{frame.height}</td><td>{frame.width}</td></tr>"
            for name, frame in self.items()
        )
        return (
            f"<b>defilens.Frames</b> ({self.snapshot.height} tokens)"
            f"<table><tr><th>frame</th><th>rows</th><th>columns</th></tr>{rows}</table>"
        )


def _for_text_formats(frame: pl.DataFrame) -> pl.DataFrame:
    """Lists become JSON text, so CSV can hold them and NDJSON stays flat."""
    converted = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if isinstance(dtype, pl.List):
            converted.append(
                pl.when(column.is_null())
                .then(pl.lit(None, pl.String))
                .otherwise(
                    pl.lit("[")
                    + column.list.eval(pl.element().map_elements(json.dumps, return_dtype=pl.String)).list.join(",")
                    + pl.lit("]")
                )
                .alias(name)
            )
        elif isinstance(dtype, pl.Enum):
            converted.append(column.cast(pl.String))
        else:
            converted.append(column)
    return frame.select(converted)


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


def _write_atomically(frame: pl.DataFrame, target: Path, format: str) -> None:
    """Writes to a temporary file beside ``target`` and renames it, so a crash or Ctrl-C
    never leaves a half-written file under the final name."""
    with _ctrl_c_deferred():
        _write_then_rename(frame, target, format)


def _write_then_rename(frame: pl.DataFrame, target: Path, format: str) -> None:
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if format == "parquet":
            frame.write_parquet(temporary)
        elif format == "csv":
            _for_text_formats(frame).write_csv(temporary)
        elif format == "ndjson":
            _for_text_formats(frame).write_ndjson(temporary)
        else:
            raise ValueError(f"format must be 'parquet', 'csv' or 'ndjson', got {format!r}")
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


def _restore_dtypes(frame: pl.DataFrame) -> pl.DataFrame:
    if "interval" in frame.columns and frame.schema["interval"] != INTERVAL:
        frame = frame.with_columns(pl.col("interval").cast(pl.String).cast(INTERVAL))
    return frame


def read(path: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> Frames:
    """Reads a folder written by `Frames.write` (Parquet) back into `Frames`; ``path`` may be an
    object storage URL with ``storage_options``."""
    from ._storage import location

    where = location(path, storage_options)
    frames = {}
    if isinstance(where, Path):
        if not where.is_dir():
            raise FileNotFoundError(f"no Frames folder at {str(where)!r}")
        for name in FRAME_NAMES:
            file = where / f"{name}.parquet"
            if file.exists():
                frames[name] = _restore_dtypes(pl.read_parquet(file))
    else:
        for name in FRAME_NAMES:
            url = where.join(f"{name}.parquet")
            if where.exists(url):
                frames[name] = _restore_dtypes(where.read(url))
    if not frames:
        raise FileNotFoundError(f"{os.fspath(path)!r} holds no <frame>.parquet files written by Frames.write")
    return Frames(frames)


def concat(frames: Sequence[Frames]) -> Frames:
    """Stacks several `Frames` into one, frame by frame (raw responses included)."""
    frames = list(frames)
    if not all(isinstance(f, Frames) for f in frames):
        raise TypeError("concat takes a sequence of defilens.Frames")
    if not frames:
        return Frames({})
    stacked = {
        name: pl.concat([getattr(f, name) for f in frames], how="vertical", rechunk=False) for name in FRAME_NAMES
    }
    raw: "list[RawItem]" = []
    for f in frames:
        source = f._raw_source
        if source is not None:
            raw.extend(source if isinstance(source, list) else source.items())
    return Frames(stacked, raw, [error for f in frames for error in f._exceptions])


def scan(
    path: PathLike, frame: str = "indicators", *, storage_options: Optional[Mapping[str, Any]] = None
) -> pl.LazyFrame:
    """A `pl.LazyFrame` over the history written by `Client.collect` / ``defilens collect``.

    ``path`` is the collect folder; ``frame`` one of the frame names, ``"errors"`` (the
    history's ``log`` filtered to the failed exchanges, as `Frames.errors` is) or ``"raw"`` (the
    response bodies kept by ``collect(..., raw=True)``). The history is
    Hive-partitioned Parquet (``path/<frame>/date=YYYY-MM-DD/*.parquet``), so polars, DuckDB or
    Spark can also read it directly.
    """
    from ._storage import location

    if frame == "errors":
        return scan(path, "log", storage_options=storage_options).filter(~pl.col("ok"))
    if frame not in FRAME_NAMES and frame != "raw":
        raise ValueError(f"frame must be one of {', '.join(FRAME_NAMES)}, errors or raw, got {frame!r}")
    where = location(path, storage_options)
    if isinstance(where, Path):
        folder = where / frame
        if not folder.is_dir():
            raise FileNotFoundError(f"no {frame!r} history under {str(path)!r} (is it a collect folder?)")
        lazy = pl.scan_parquet(str(folder / "**" / "*.parquet"), hive_partitioning=True)
    else:
        if not where.is_dir(where.join(frame)):
            raise FileNotFoundError(f"no {frame!r} history under {where.url!r} (is it a collect folder?)")
        lazy = pl.scan_parquet(
            where.join(frame, "**", "*.parquet"), hive_partitioning=True, storage_options=where.storage_options
        )
    schema = lazy.collect_schema()
    if "interval" in schema and schema["interval"] != INTERVAL:
        lazy = lazy.with_columns(pl.col("interval").cast(pl.String).cast(INTERVAL))
    return lazy


def _from_core(result: "dict[str, Any]") -> Frames:
    return Frames(result, result.get("_raw"), result.get("_errors") or ())
