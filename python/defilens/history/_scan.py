"""Reading a history: one table as a `pl.LazyFrame`, now or as it was."""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping, Optional, Sequence, Union

import polars as pl

from .._exceptions import HistoryError
from ._layout import State, check_not_converting, convert_hint, state, states
from ._root import PathLike, Root, require_history, root_of
from ._rounds import empty_table
from ._tables import RAW, TABLES, frame_schema, load, one_line, restore

#: A moment (naive means UTC) or a table version number.
AsOf = Union[dt.datetime, int, None]


def _as_of(as_of: AsOf) -> "Union[dt.datetime, int, None]":
    if as_of is None or isinstance(as_of, dt.datetime):
        if isinstance(as_of, dt.datetime) and as_of.tzinfo is None:
            return as_of.replace(tzinfo=dt.timezone.utc)
        return as_of
    if isinstance(as_of, int) and not isinstance(as_of, bool):
        if as_of < 0:
            raise ValueError(f"as_of must be a table version >= 0 or a datetime, got {as_of}")
        return as_of
    raise TypeError(f"as_of must be a datetime (naive means UTC) or a table version number, got {type(as_of).__name__}")


def open_for_reading(path: PathLike, storage_options: Optional[Mapping[str, Any]]) -> Root:
    require_history()
    root = root_of(path, storage_options)
    found = states(root)
    if all(value is State.MISSING for value in found.values()):
        raise FileNotFoundError(f"no history at {root.url!r} (is it the folder `defilens collect --out` wrote?)")
    if any(value is State.OLD_LAYOUT for value in found.values()):
        raise HistoryError(convert_hint(root))
    check_not_converting(root)
    return root


def scan_table(root: Root, name: str, as_of: AsOf = None, where: "Sequence[pl.Expr]" = ()) -> pl.LazyFrame:
    """One table as a LazyFrame; ``where`` filters the columns as they are on disk, below the
    casts that give the frames' dtypes, so that they reach the Delta scan (files skipped by
    their statistics, row groups by theirs)."""
    as_of = _as_of(as_of)
    found = state(root, name)
    if found is State.MISSING:
        # A table nothing was ever committed to (no drift yet, raw not kept): empty, typed.
        return empty_table(name).lazy().filter(*where) if where else empty_table(name).lazy()
    if found is State.OLD_LAYOUT:
        raise HistoryError(convert_hint(root))
    if found is State.FOREIGN:
        raise HistoryError(f"{root.table(name)!r} is not a Delta table of a defilens history")
    table = load(root, name, as_of)  # a version that is gone fails here, with what to do
    if table is None:
        return empty_table(name).lazy()
    try:
        scanned = pl.scan_delta(table)
        lazy = restore(scanned.filter(*where) if where else scanned)
    except (OSError, ValueError, pl.exceptions.PolarsError) as error:
        raise HistoryError(f"cannot read {root.table(name)!r}{_when(as_of)}: {one_line(error)}") from None
    except Exception as error:  # deltalake's own errors
        if type(error).__module__.startswith("deltalake") or "Delta" in type(error).__name__:
            raise HistoryError(f"cannot read {root.table(name)!r}{_when(as_of)}: {one_line(error)}") from None
        raise
    return lazy


def _when(as_of: AsOf) -> str:
    return "" if as_of is None else f" as of {as_of}"


def scan(
    path: PathLike,
    frame: str = "indicators",
    *,
    as_of: AsOf = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.LazyFrame:
    """A `pl.LazyFrame` over one table of the history `collect` writes.

    ``frame`` is a frame's name, ``"errors"`` (the ``log`` table's failed exchanges, as
    `Frames.errors`) or ``"raw"`` (the response bodies kept by ``collect(raw=True)``). The
    columns are the frame's, ``fetched_at`` and ``date`` (the UTC day of the round), with the
    frames' dtypes (``interval`` as the ordered Enum, timestamps in ms). Filters and column
    selections are pushed down into the Delta scan, so a query for one token or one day reads
    only what it needs.

    ``as_of`` reads the table as it was: at a moment (a datetime; naive means UTC) or at a table
    version number (each table has its own). Time travel reaches back as far as the table's log
    and data files are kept (a week by default; see `defilens.compact`).

    ``path`` may be an object storage URL (``s3://bucket/prefix``) with polars-style
    ``storage_options``. polars' ``pl.scan_delta(path + "/indicators")``, DuckDB's
    ``delta_scan``, Spark and pandas read the same tables directly.

    For example ``defilens.scan("history/", "indicators").filter(pl.col("token") == "bitcoin")``.
    """
    if not isinstance(frame, str) or (frame not in TABLES and frame != "errors"):
        raise ValueError(f"frame must be one of {', '.join(TABLES)} or errors, got {frame!r}")
    root = open_for_reading(path, storage_options)
    if frame == "errors":
        return scan_table(root, "log", as_of).filter(~pl.col("ok"))
    return scan_table(root, frame, as_of)


__all__ = ["scan", "frame_schema", "RAW"]
