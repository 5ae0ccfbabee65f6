"""What `Sandbox.replay` serves: response bodies recorded by ``collect(raw=True)`` (the raw
table of a history) or by ``frames.write(path, raw=True)`` (a ``raw.parquet`` file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Tuple

import polars as pl

from .._frames import BODIES_SCHEMA
from .._storage import PathLike, locate
from ._layout import State, state
from ._root import root_of
from ._scan import open_for_reading, scan_table
from ._tables import RAW

#: (endpoints, tokens, fetched_at in ms, bodies, start in ms): what the Rust Sandbox takes.
Recording = Tuple["list[str]", "list[str]", "list[int]", "list[bytes]", int]


def _bodies(path: PathLike, storage_options: Optional[Mapping[str, Any]]) -> pl.DataFrame:
    located = locate(path, storage_options, empty="the recording is empty: give raw.parquet, its folder or a history")
    source = Path(located.url) if located.is_local else None
    if source is not None and source.is_file():
        return pl.read_parquet(source)
    if source is not None and (source / "raw.parquet").is_file():
        return pl.read_parquet(source / "raw.parquet")
    root = root_of(path, storage_options)
    if source is not None and source.name == RAW and state(root_of(source.parent), RAW) is State.DELTA:
        root = root_of(source.parent)
    open_for_reading(root.url, root.options() if not root.is_local else None)
    return scan_table(root, RAW).collect()


def read_recording(path: PathLike, storage_options: Optional[Mapping[str, Any]] = None) -> Recording:
    """The bodies `Sandbox.replay` serves, with the moment the first round had been fetched
    whole (where the replay's clock starts)."""
    try:
        archive = _bodies(path, storage_options)
    except FileNotFoundError:
        archive = pl.DataFrame(schema={"round_start": pl.Datetime("ms", "UTC"), **BODIES_SCHEMA})
    archive = archive.drop_nulls(["fetched_at", "body"])
    if "error" in archive.columns:
        archive = archive.filter(pl.col("error").is_null())
    if archive.height == 0:
        raise FileNotFoundError(
            f"no recorded responses at {str(path)!r}: give a history collected with raw=True, or a folder written "
            "by frames.write(path, raw=True)"
        )
    first_round = archive.filter(pl.col("round_start") == pl.col("round_start").min())
    start = first_round if first_round.height else archive
    start_ms = start["fetched_at"].dt.epoch("ms").max()
    assert isinstance(start_ms, int)
    return (
        archive["endpoint"].to_list(),
        archive["token"].to_list(),
        archive["fetched_at"].dt.epoch("ms").to_list(),
        archive["body"].to_list(),
        start_ms,
    )
