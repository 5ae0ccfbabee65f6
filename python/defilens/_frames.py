"""`Frames`: the polars DataFrames of one fetch, and saving and loading them."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import polars as pl

from . import _core
from ._storage import DELTA_LOG, FORMATS, PathLike, check_format, check_writable, locate, write_file

__all__ = ["Frames", "FRAME_NAMES", "INTERVAL", "concat", "read"]

#: Candle intervals ordered by duration; the dtype of every ``interval`` column.
INTERVAL = pl.Enum(list(_core.INTERVALS))


def interval_restored(schema: Mapping[str, pl.DataType]) -> List[pl.Expr]:
    """The cast that makes ``interval`` the Enum again where storage gave it back as text (Delta
    tables, Parquet of another writer), or none: for every reader of stored frames."""
    dtype = schema.get("interval")
    return [] if dtype is None or dtype == INTERVAL else [pl.col("interval").cast(pl.String).cast(INTERVAL)]


#: The frames a `Frames` holds, in order (``errors`` is derived from ``log``).
FRAME_NAMES: Tuple[str, ...] = tuple(_core.FRAME_NAMES)

RawItem = Tuple[str, str, bytes]

#: Said for an empty folder given to `Frames.write` or `read`.
EMPTY_FOLDER = "the folder is empty: give a folder such as out/ or a URL such as s3://bucket/out"

#: `Frames.bodies`: one row a response body received.
BODIES_SCHEMA = {
    "token": pl.String(),
    "endpoint": pl.String(),
    "fetched_at": pl.Datetime("ms", "UTC"),
    "status": pl.Int64(),
    "error": pl.String(),
    "body": pl.Binary(),
}


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

    Examples:
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

    @property
    def exceptions(self) -> "list[Exception]":
        """The exceptions behind the failed rows of `log`, in order (``raise frames.exceptions[-1]``
        re-raises the last failure as `Client.token` would have)."""
        return list(self._exceptions)

    def bodies(self) -> pl.DataFrame:
        """Every response body received, one row each, as bytes: ``token``, ``endpoint``,
        ``fetched_at``, ``status``, ``error`` (the log's message for a body that could not be
        decoded, else null) and ``body``. What ``collect(raw=True)`` keeps and
        `defilens.parse_tokens` reads again."""
        source = self._raw_source
        pairs: Iterable[RawItem] = [] if source is None else (source if isinstance(source, list) else source.items())
        received = list(pairs)
        bodies = pl.DataFrame(
            {
                "token": [token for token, _, _ in received],
                "endpoint": [endpoint for _, endpoint, _ in received],
                "body": [bytes(body) for _, _, body in received],
            },
            schema={"token": pl.String, "endpoint": pl.String, "body": pl.Binary},
        )
        exchanges = (
            self.log.select(
                "token",
                pl.col("endpoint").cast(pl.String),
                pl.col("fetched_at").cast(pl.Datetime("ms", "UTC")),
                pl.col("status").cast(pl.Int64),
                pl.when(pl.col("ok")).then(None).otherwise(pl.col("message")).cast(pl.String).alias("error"),
            )
            # A body comes with a 2xx answer; the last such exchange of a (token, endpoint) is its own.
            .filter(pl.col("status").is_between(200, 299))
            .unique(["token", "endpoint"], keep="last", maintain_order=True)
        )
        return bodies.join(exchanges, on=["token", "endpoint"], how="left").select(list(BODIES_SCHEMA))

    def write(
        self,
        path: PathLike,
        *,
        format: str = "parquet",
        raw: bool = False,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> Union[Path, str]:
        """Writes every frame to ``path/<frame>.<format>`` (a folder) and returns the folder (a
        `Path`, or the URL for object storage).

        ``format`` is ``"parquet"`` (round-trips every dtype; read back with `defilens.read`),
        ``"csv"`` (lists become JSON text, datetimes ISO text) or ``"ndjson"`` (lists are JSON
        arrays, datetimes ISO text); neither is read back by `defilens.read`. ``raw=True`` also writes
        the response bodies (`Frames.bodies`) to ``path/raw.parquet``, which `Sandbox.replay`
        serves. ``path`` may be an object storage URL (``s3://bucket/prefix``) with polars-style
        ``storage_options``; no file or object ever appears half-written under its final name.
        """
        check_format(format)
        root = locate(path, storage_options, empty=EMPTY_FOLDER)
        if root.is_local:
            check_writable(root, repr(os.fspath(path)))
            Path(root.url).mkdir(parents=True, exist_ok=True)
        tables = list(self.items())
        if raw:
            first = self.log["fetched_at"].min() if self.log.height else None
            started = first if isinstance(first, dt.datetime) else dt.datetime.now(dt.timezone.utc)
            bodies = self.bodies().with_columns(pl.lit(started).cast(pl.Datetime("ms", "UTC")).alias("round_start"))
            tables.append(("raw", bodies.select("round_start", *BODIES_SCHEMA)))
        for name, frame in tables:
            file_format = "parquet" if name == "raw" else format
            ready = frame if file_format == "parquet" else _for_text_formats(frame, file_format)
            write_file(ready, root, f"{name}.{file_format}", file_format)
        return Path(root.url) if root.is_local else root.url

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


def _for_text_formats(frame: pl.DataFrame, format: str) -> pl.DataFrame:
    """For CSV, lists become JSON text (CSV has no lists); NDJSON keeps them as JSON arrays."""
    converted = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if isinstance(dtype, pl.List) and format == "csv":
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


def _restore_dtypes(frame: pl.DataFrame) -> pl.DataFrame:
    casts = interval_restored(frame.schema)
    return frame.with_columns(casts) if casts else frame


def read(path: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> Frames:
    """Reads a folder written by `Frames.write` (Parquet) back into `Frames`; ``path`` may be an
    object storage URL with ``storage_options``."""
    root = locate(path, storage_options, empty=EMPTY_FOLDER)
    text = os.fspath(path)
    if root.is_local and not Path(root.url).is_dir():
        raise FileNotFoundError(f"no Frames folder at {text!r}")
    frames = {}
    for name in FRAME_NAMES:
        target = root.path(f"{name}.parquet")
        if root.is_local and not Path(target).exists():
            continue
        try:
            frames[name] = _restore_dtypes(pl.read_parquet(target, storage_options=root.options()))
        except FileNotFoundError:
            continue
    if not frames:
        if root.is_local:
            folder = Path(root.url)
            if any((folder / name / DELTA_LOG).is_dir() for name in FRAME_NAMES):
                raise ValueError(
                    f"{text!r} is a history (Delta tables, written by collect): read it with "
                    f"defilens.scan({text!r}, 'indicators'); defilens.read reads a folder written by Frames.write"
                )
            suffixes = {f".{name}" for name in FORMATS} - {".parquet"}
            written = sorted({p.suffix for p in folder.iterdir() if p.stem in FRAME_NAMES} & suffixes)
            if written:
                raise ValueError(
                    f"{text!r} holds frames written as {', '.join(s.lstrip('.') for s in written)}, which defilens.read "
                    "cannot read back (text loses the dtypes): write them with format='parquet' (the default), or "
                    "read the files with pl.read_csv / pl.read_ndjson"
                )
        raise FileNotFoundError(f"{text!r} holds no <frame>.parquet files written by Frames.write")
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


def _from_core(result: "dict[str, Any]") -> Frames:
    return Frames(result, result.get("_raw"), result.get("_errors") or ())
