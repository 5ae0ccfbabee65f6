"""A collect history at scale: compaction of closed days, the raw archive, and re-parsing it.

Layout (what `collect` writes): ``DIR/<frame>/date=YYYY-MM-DD/<stamp>-r<round>.parquet`` for each
frame of `FRAME_NAMES`, and with ``raw=True`` also ``DIR/raw/date=.../...parquet`` holding the
response bodies (``round_start``, ``token``, ``endpoint``, ``fetched_at``, ``status``, ``body``), zstd-compressed.

Compaction rewrites each closed day of each frame into one ``compacted.parquet`` sorted by token
and ``fetched_at``, in a staging folder (``DIR/.compacting``), then swaps the two folders in one
step (``renameat2(RENAME_EXCHANGE)`` on Linux), then deletes the old files. A reader listing the
partition sees either all the old files or the one new file, never both and never neither; a
scan that listed the old files before the swap and opens them after it fails with a missing
file and can be retried. A crash or Ctrl-C at any point leaves at worst the old files and a
staging folder, which the next run removes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

import polars as pl

from . import _core
from ._frames import FRAME_NAMES, Frames, PathLike, _ctrl_c_deferred, _restore_dtypes, _write_atomically
from ._storage import Remote, location

__all__ = ["compact", "reparse", "raw_frame", "RAW"]

#: The folder of the raw archive, beside the frames' folders.
RAW = "raw"
#: The one file of a compacted day.
COMPACTED = "compacted.parquet"
STAGING = ".compacting"
#: A day's partition is closed (no round of a running collect writes it any more) this long
#: after the day ends: a round that started at 23:59:59 has finished writing by then.
CLOSED_AFTER = dt.timedelta(hours=1)
_PARTITION = re.compile(r"date=(\d{4}-\d{2}-\d{2})")

RAW_SCHEMA: "dict[str, pl.DataType]" = {
    "round_start": pl.Datetime("ms", "UTC"),
    "token": pl.String(),
    "endpoint": pl.String(),
    "fetched_at": pl.Datetime("ms", "UTC"),
    "status": pl.Int64(),
    "body": pl.Binary(),
}


def raw_frame(frames: Frames, started: dt.datetime) -> pl.DataFrame:
    """The response bodies of one round, one row each: round_start, token, endpoint, fetched_at,
    status, body (a compacted day keeps the rounds apart by ``round_start``)."""
    source = frames._raw_source
    items = [] if source is None else (source if isinstance(source, list) else source.items())
    bodies = pl.DataFrame(
        {
            "token": [token for token, _, _ in items],
            "endpoint": [endpoint for _, endpoint, _ in items],
            "body": [bytes(body) for _, _, body in items],
        },
        schema={"token": pl.String, "endpoint": pl.String, "body": pl.Binary},
    )
    answered = (
        frames.log.filter(pl.col("ok"))
        .select("token", pl.col("endpoint").cast(pl.String), "fetched_at", pl.col("status").cast(pl.Int64))
        .unique(["token", "endpoint"], keep="last", maintain_order=True)
    )
    round_start = pl.lit(started).cast(RAW_SCHEMA["round_start"]).alias("round_start")
    return bodies.join(answered, on=["token", "endpoint"], how="left").select(round_start, *list(RAW_SCHEMA)[1:])


def read_recording(path: PathLike) -> "tuple[list[str], list[str], list[int], list[bytes], int]":
    """The bodies `Sandbox.replay` serves: from a collect history kept with ``raw=True`` (its
    folder or its ``raw/`` folder), a folder written by ``frames.write(path, raw=True)``, or one
    such Parquet file. Returns (endpoints, tokens, fetched_at in ms, bodies, start in ms), the
    start being the moment the first round had been fetched whole."""
    source = Path(path)
    if source.is_file():
        files = [source]
    elif (source / "raw.parquet").is_file():
        files = [source / "raw.parquet"]
    else:
        folder = source / RAW if (source / RAW).is_dir() else source
        files = sorted(folder.glob("date=*/*.parquet"))
    if not files:
        raise FileNotFoundError(
            f"no recorded responses at {str(path)!r}: give a history collected with raw=True, its raw/ folder, "
            "or a folder written by frames.write(path, raw=True)"
        )
    columns = ["round_start", "endpoint", "token", "fetched_at", "body"]
    archive = pl.concat([pl.read_parquet(file, columns=columns) for file in files]).drop_nulls(["fetched_at", "body"])
    if archive.height == 0:
        raise ValueError(f"the recording at {str(path)!r} holds no bodies")
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


def _partitions(folder: Path) -> Iterator[tuple[dt.date, Path]]:
    if not folder.is_dir():
        return
    for child in sorted(folder.iterdir()):
        match = _PARTITION.fullmatch(child.name)
        if match and child.is_dir():
            yield dt.date.fromisoformat(match.group(1)), child


def _closed(day: dt.date, now: dt.datetime) -> bool:
    day_end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.timezone.utc)
    return now - day_end >= CLOSED_AFTER


def _read_partition(
    files: "List[Path] | List[str]", read: Callable[[Any], pl.DataFrame] = pl.read_parquet
) -> pl.DataFrame:
    frame = pl.concat([read(file) for file in files], how="diagonal_relaxed")
    keys = [column for column in ("token", "fetched_at") if column in frame.columns]
    return frame.sort(keys, maintain_order=True) if keys else frame


def _swap(staged: Path, partition: Path) -> None:
    """Puts ``staged`` in the place of ``partition`` and ``partition`` in the place of
    ``staged``, atomically where the system can."""
    try:
        _core.exchange_paths(str(staged), str(partition))
    except NotImplementedError:
        # Not Linux: two renames, with a moment in which the partition is missing.
        aside = staged.with_name(staged.name + ".old")
        os.replace(partition, aside)
        os.replace(staged, partition)
        os.replace(aside, staged)


@contextlib.contextmanager
def _one_compaction_at_a_time(folder: Path) -> Iterator[None]:
    lock_path = folder / ".compact.lock"
    with open(lock_path, "w") as lock:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks here; the staging folder is per run
            yield
            return
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another compaction of {str(folder)!r} is running") from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def compact(
    path: PathLike, *, now: Optional[dt.datetime] = None, storage_options: Optional[Mapping[str, Any]] = None
) -> Dict[str, int]:
    """Rewrites each closed day of each frame of the history at ``path`` into one file sorted by
    token and ``fetched_at``; returns ``{"partitions": compacted, "files_before": ...,
    "files_after": ..., "skipped_open": ...}``.

    A day is closed an hour after it ends (UTC), so the day a running `collect` writes is never
    touched. The rows are exactly the same before and after. Safe to run again (a compacted day
    is left alone; a day that received more files is compacted again with them) and safe to
    interrupt at any point: at worst the old files remain. ``now`` (default: the wall clock)
    decides which days are closed.

    ``path`` may be an object storage URL (``s3://bucket/prefix``) with polars-style
    ``storage_options``. Object stores cannot swap folders: there the compacted object is written
    (atomically, under its final name) and then the old objects are deleted, so a reader in
    between sees some rows twice, and a crash in between leaves them twice until the next run,
    which finds the old objects named in the compacted one and deletes them.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    report = {"partitions": 0, "files_before": 0, "files_after": 0, "skipped_open": 0}
    where = location(path, storage_options)
    if isinstance(where, Remote):
        _compact_remote(where, now, report)
        return report
    folder = where
    if not folder.is_dir():
        raise FileNotFoundError(f"no history at {str(folder)!r}")
    with _one_compaction_at_a_time(folder):
        staging = folder / STAGING
        shutil.rmtree(staging, ignore_errors=True)  # what an interrupted run left
        for name in (*FRAME_NAMES, RAW):
            for day, partition in _partitions(folder / name):
                files = sorted(partition.glob("*.parquet"))
                if not _closed(day, now) or any(partition.glob(".*.tmp")):
                    report["skipped_open"] += 1
                    continue
                if [file.name for file in files] == [COMPACTED] or not files:
                    continue
                staged = staging / name / partition.name
                staged.mkdir(parents=True)
                _write_atomically(_read_partition(files), staged / COMPACTED, "parquet")
                with _ctrl_c_deferred():
                    _swap(staged, partition)
                    shutil.rmtree(staged)
                report["partitions"] += 1
                report["files_before"] += len(files)
                report["files_after"] += 1
        shutil.rmtree(staging, ignore_errors=True)
    return report


#: Parquet metadata key of a compacted object: the names of the objects it was made from.
SOURCES_KEY = "defilens.compacted_from"


def _compact_remote(where: Remote, now: dt.datetime, report: Dict[str, int]) -> None:
    if not where.is_dir(where.url):
        raise FileNotFoundError(f"no history at {where.url!r}")
    for name in (*FRAME_NAMES, RAW):
        for folder_name in where.folders(where.join(name)):
            match = _PARTITION.fullmatch(folder_name)
            if not match:
                continue
            if not _closed(dt.date.fromisoformat(match.group(1)), now):
                report["skipped_open"] += 1
                continue
            partition = where.join(name, folder_name)
            target = where.join(name, folder_name, COMPACTED)
            files = where.files(partition)
            if target in files:
                # Finish what a crash interrupted: objects the compacted one was made from.
                made_from = set(json.loads(where.metadata(target).get(SOURCES_KEY, "[]")))
                leftovers = [f for f in files if f.rsplit("/", 1)[1] in made_from]
                where.remove(leftovers)
                files = [f for f in files if f not in leftovers]
            if files == [target] or not files:
                continue
            sources = [f for f in files if f != target]
            frame = _read_partition(files, where.read)
            made_of = json.dumps([f.rsplit("/", 1)[1] for f in sources])
            where.write(frame, target, "parquet", metadata={SOURCES_KEY: made_of})
            where.remove(sources)
            report["partitions"] += 1
            report["files_before"] += len(files)
            report["files_after"] += 1


def _reparse_round(archive: pl.DataFrame, started: dt.datetime) -> Dict[str, pl.DataFrame]:
    from ._collect import _with_fetched_at  # _collect imports this module

    listing = archive.filter(pl.col("endpoint") == "listing")
    frames: Dict[str, Any] = dict(
        _core.parse_tokens(
            listing["body"].to_list(), listing["token"].to_list(), listing["fetched_at"].dt.epoch("ms").to_list()
        )
    )
    markets, drift = [_core.empty_frames()["markets"]], [frames["drift"]]
    rows = archive.filter(pl.col("endpoint") == "markets").select("token", pl.col("fetched_at").dt.epoch("ms"), "body")
    for token, fetched_at, body in rows.iter_rows():
        frame, _total, body_drift = _core.parse_markets(body, token, fetched_at)
        markets.append(frame)
        drift.append(body_drift)
    frames["markets"] = pl.concat(markets, how="vertical_relaxed")
    frames["drift"] = pl.concat(drift, how="vertical_relaxed")
    fetched_at = frames["snapshot"].select("token", "fetched_at").unique("token")
    return {
        name: _with_fetched_at(_restore_dtypes(frames[name]), fetched_at, started)
        for name in FRAME_NAMES
        if name != "log"
    }


def reparse(path: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> Frames:
    """Rebuilds every frame of the history at ``path`` from its raw archive (``collect(...,
    raw=True)`` or ``--raw``) with the parser installed now, round by round: the frames `collect`
    wrote, with the same ``fetched_at``, in the shape `scan` reads them (without the ``date``
    column). ``log`` comes back empty: it records HTTP exchanges, which the bodies do not hold.
    """
    where = location(path, storage_options)
    if isinstance(where, Remote):
        files: "list[Any]" = [f for day in where.folders(where.join(RAW)) for f in where.files(where.join(RAW, day))]
        read: Callable[[Any], pl.DataFrame] = where.read
    else:
        folder = where / RAW
        files = sorted(folder.glob("date=*/*.parquet")) if folder.is_dir() else []
        read = pl.read_parquet
    if not files:
        raise FileNotFoundError(
            f"no raw archive under {os.fspath(path)!r}: collect with raw=True (or --raw) keeps the bodies to re-parse"
        )
    archive = pl.concat([read(file) for file in files], how="vertical_relaxed")
    rounds = [
        _reparse_round(one_round, started)
        for (started,), one_round in archive.sort("round_start", maintain_order=True).group_by(
            "round_start", maintain_order=True
        )
    ]
    empty = _core.empty_frames()
    return Frames(
        {
            name: empty[name]
            if name == "log"
            else pl.concat([_restore_dtypes(empty[name])] + [r[name] for r in rounds], how="diagonal_relaxed")
            for name in FRAME_NAMES
        }
    )
