"""Rebuilding the frames from the raw table with the parser installed now: on this machine for a
whole history, or batch by batch on an engine that maps a function over the raw table's files
(Spark's ``mapInArrow``, Ray Data, Daft) when the bodies are terabytes."""

from __future__ import annotations

import datetime as dt
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

import polars as pl

from .._exceptions import DefiLensWarning
from .._frames import BODIES_SCHEMA, Frames
from .._stack import stacklevel_outside
from .._storage import PathLike
from ._info import INFO, changes_only
from ._rounds import Round, empty_table, tables_of
from ._scan import AsOf, open_for_reading, scan_table
from ._tables import PARTITION, RAW, TABLES, frame_schema, to_disk

#: Frames `reparse` gives back (``log`` records HTTP exchanges, which the bodies do not hold).
REPARSED = tuple(name for name in TABLES if name not in (RAW, "log"))


def _rounds(raw: pl.DataFrame) -> List[Tuple[dt.datetime, pl.DataFrame]]:
    return [
        (started, rows.select(list(BODIES_SCHEMA)))
        for (started,), rows in raw.sort("round_start", maintain_order=True).group_by(
            "round_start", maintain_order=True
        )
    ]


def _parse_rounds(raw: pl.DataFrame, workers: int = 1) -> Tuple[Dict[str, List[pl.DataFrame]], int]:
    """Each round of raw rows parsed on its own (a frame without a time of its own takes its
    token's listing time from the same round), rounds side by side on ``workers`` threads (the
    parser releases the GIL)."""

    def one(item: Tuple[dt.datetime, pl.DataFrame]) -> Tuple[Dict[str, pl.DataFrame], int]:
        started, bodies = item
        return tables_of(Round("reparse", 0, started, bodies, pl.DataFrame(), False), with_log=False)

    parts: Dict[str, List[pl.DataFrame]] = {name: [] for name in REPARSED}
    failed = 0
    rounds = _rounds(raw)
    if workers > 1 and len(rounds) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(one, rounds))
    else:
        results = [one(item) for item in rounds]
    for tables, round_failed in results:
        failed += round_failed
        for name in REPARSED:
            parts[name].append(tables[name])
    return parts, failed


def reparse(path: PathLike, *, as_of: AsOf = None, storage_options: Optional[Mapping[str, Any]] = None) -> Frames:
    """Rebuilds every frame of the history at ``path`` from its raw table (``collect(...,
    raw=True)`` or ``--raw``) with the parser installed now: the frames `collect` committed, with
    the same ``fetched_at``, in the shape `scan` gives them (without ``date``). ``log`` comes back
    empty: it records HTTP exchanges, which the bodies do not hold. A body that cannot be decoded
    is kept in the raw table with its failure and skipped here, with one warning that counts them.
    Rounds are parsed side by side on every core.
    """
    root = open_for_reading(path, storage_options)
    raw = scan_table(root, RAW, as_of).collect()
    if raw.height == 0:
        raise FileNotFoundError(
            f"no raw table under {os.fspath(path)!r}: collect with raw=True (or --raw) keeps the bodies to re-parse"
        )
    parts, failed = _parse_rounds(raw.drop(PARTITION), workers=os.cpu_count() or 1)
    if failed:
        warnings.warn(
            f"{failed} response bodies of the raw table could not be decoded and were skipped (the raw table keeps "
            "them, with the failure in its error column)",
            DefiLensWarning,
            stacklevel=stacklevel_outside(),
        )
    empty = {name: empty_table(name).drop(PARTITION) for name in REPARSED}
    frames = {
        name: pl.concat([empty[name], *(part.drop(PARTITION) for part in parts[name])], how="vertical")
        for name in REPARSED
    }
    frames[INFO] = changes_only(frames[INFO])  # as collect keeps it: a row when a token's info changes
    return Frames(frames)


def reparse_batch(batch: Any, frame: str = "indicators") -> pl.DataFrame:
    """The rows of ``frame`` that a batch of raw-table rows gives: the per-batch function an
    engine maps over the raw table's files when reparsing is too big for one machine.

    ``batch`` is anything Arrow-shaped with the raw table's columns (a pyarrow ``RecordBatch`` or
    ``Table``, a polars DataFrame); rows of one round may be split across batches. The result has
    the table's columns as `scan` gives them (``date`` included). Undecodable bodies are skipped.
    """
    if frame not in REPARSED:
        raise ValueError(f"frame must be one of {', '.join(REPARSED)}, got {frame!r}")
    raw = batch if isinstance(batch, pl.DataFrame) else pl.DataFrame(batch)
    if raw.height == 0:
        return empty_table(frame)
    parts, _ = _parse_rounds(raw.drop(PARTITION, strict=False))
    return pl.concat([empty_table(frame), *parts[frame]], how="vertical")


def spark_schema(frame: str = "indicators") -> str:
    """The Spark DDL schema of what `reparse_arrow` yields for ``frame`` (for ``mapInArrow``)."""
    names = {
        pl.String: "string",
        pl.Float64: "double",
        pl.Int64: "bigint",
        pl.Boolean: "boolean",
        pl.Date: "date",
        pl.Binary: "binary",
    }
    columns = []
    for name, dtype in frame_schema(frame).items():
        if isinstance(dtype, pl.Datetime):
            kind = "timestamp"
        elif isinstance(dtype, pl.List):
            kind = "array<string>"
        elif isinstance(dtype, (pl.Enum, pl.Categorical)):
            kind = "string"
        else:
            kind = names[type(dtype)]
        columns.append(f"`{name}` {kind}")
    return ", ".join(columns)


def reparse_arrow(batches: Iterable[Any], frame: str = "indicators") -> Iterator[Any]:
    """`reparse_batch` over an iterator of Arrow record batches, yielding pyarrow record batches
    typed as `spark_schema` says: the function Spark's ``mapInArrow`` (and Ray Data's
    ``map_batches``) takes. Needs pyarrow, which those engines bring. With Spark:
    ``raw.mapInArrow(lambda batches: reparse_arrow(batches, "indicators"), spark_schema("indicators"))``.
    """
    import pyarrow as pa  # type: ignore[import-untyped]

    for batch in batches:
        out = to_disk(reparse_batch(batch, frame))
        table = out.to_arrow(compat_level=pl.CompatLevel.oldest())
        target = pa.schema(
            [
                pa.field(
                    field.name,
                    pa.timestamp("us", tz="UTC")
                    if pa.types.is_timestamp(field.type)
                    else pa.list_(pa.string())
                    if pa.types.is_large_list(field.type) or pa.types.is_list(field.type)
                    else pa.string()
                    if pa.types.is_large_string(field.type) or pa.types.is_string(field.type)
                    else pa.binary()
                    if pa.types.is_large_binary(field.type)
                    else field.type,
                )
                for field in table.schema
            ]
        )
        yield from table.cast(target).to_batches()
