"""Polling on a schedule into a Hive-partitioned Parquet history."""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Union

import polars as pl

from ._frames import FRAME_NAMES, Frames, PathLike, _write_atomically
from ._storage import Remote, location

if TYPE_CHECKING:
    from ._client import Client

__all__ = ["parse_every", "collect"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_every(every: Union[str, float, int, dt.timedelta], name: str = "every") -> float:
    """``"5m"``, ``"30s"``, ``"1h"``, ``"250ms"``, a number of seconds or a timedelta -> seconds.
    ``name`` is the argument's name in error messages."""
    if isinstance(every, dt.timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, (int, float)) and not isinstance(every, bool):
        seconds = float(every)
    elif isinstance(every, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", every)
        if not match:
            raise ValueError(f"{name} must look like 30s, 5m, 1h or 1d, got {every!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise TypeError(f"{name} must be a str such as '5m', seconds or a timedelta, got {type(every).__name__}")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{name} must be a positive, finite duration, got {every!r}")
    return seconds


def _with_fetched_at(frame: pl.DataFrame, fetched_at: pl.DataFrame, started: dt.datetime) -> pl.DataFrame:
    """Gives a frame without ``fetched_at`` (indicators, signals, ...) its token's listing time,
    so rounds in the history can be told apart; the round's start where there is none."""
    if "fetched_at" in frame.columns:
        return frame
    round_start = pl.lit(started).cast(pl.Datetime("ms", "UTC"))
    return frame.join(fetched_at, on="token", how="left").with_columns(pl.col("fetched_at").fill_null(round_start))


#: How often `collect(compact=True)` looks for days that have closed (compaction of a history
#: with nothing to do only lists its folders).
COMPACT_EVERY = dt.timedelta(hours=1)

#: Failures that no later round can mend: the key is wrong or lacks permission.
STOP_AT_ONCE = ("auth", "forbidden")


def write_round(
    frames: Frames, out: "Union[Path, Remote]", started: dt.datetime, round_number: int, raw: bool = False
) -> "list[Union[Path, str]]":
    """Appends one round: ``out/<frame>/date=YYYY-MM-DD/<stamp>-r<round>.parquet`` per frame,
    and with ``raw`` the round's response bodies under ``out/raw/`` the same way.

    Frames that carry no ``fetched_at`` get one (the token's listing fetch time)."""
    from ._history import RAW, raw_frame

    fetched_at = frames.snapshot.select("token", "fetched_at").unique("token")
    stamp = started.strftime("%Y%m%dT%H%M%S%fZ")
    date = started.strftime("%Y-%m-%d")
    tables = [(name, _with_fetched_at(getattr(frames, name), fetched_at, started)) for name in FRAME_NAMES]
    if raw:
        tables.append((RAW, raw_frame(frames, started)))
    written: "list[Union[Path, str]]" = []
    for name, table in tables:
        file_name = f"{stamp}-r{round_number:06d}.parquet"
        if isinstance(out, Path):
            folder = out / name / f"date={date}"
            folder.mkdir(parents=True, exist_ok=True)
            _write_atomically(table, folder / file_name, "parquet")
            written.append(folder / file_name)
        else:
            url = out.join(name, f"date={date}", file_name)
            out.write(table, url, "parquet")
            written.append(url)
    return written


def collect(
    client: "Client",
    token_ids: Iterable[str],
    every: Union[str, float, dt.timedelta],
    *,
    count: Optional[int] = None,
    out: PathLike,
    markets: bool = True,
    on_round: Optional[Callable[[int, Frames], None]] = None,
    progress: Optional[bool] = False,
    max_failed_rounds: int = 3,
    raw: bool = False,
    compact: bool = False,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> int:
    """Fetches ``token_ids`` every ``every`` and appends each round to the history at ``out``.

    Rounds start on a fixed grid (start + k * every), so slow rounds do not make the schedule
    drift; a round that overruns skips the ticks it missed. Each file is written atomically.
    Stops after ``count`` rounds (``None``: until Ctrl-C). Returns the number of rounds written.
    ``raw`` also keeps each round's response bodies (``defilens.reparse`` rebuilds the frames
    from them); ``compact`` rewrites each day into one file per frame once the day has closed
    (see `defilens.compact`). ``out`` may be an object storage URL (``s3://bucket/prefix``)
    with polars-style ``storage_options``.
    """
    interval = parse_every(every)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"count must be a positive int or None, got {count!r}")
    if isinstance(max_failed_rounds, bool) or not isinstance(max_failed_rounds, int) or max_failed_rounds < 1:
        raise ValueError(f"max_failed_rounds must be a positive int, got {max_failed_rounds!r}")
    ids = list(token_ids)
    folder = location(out, storage_options)
    if isinstance(folder, Path):
        folder.mkdir(parents=True, exist_ok=True)
    origin = time.monotonic()
    rounds = 0
    failed_in_a_row = 0
    last_compacted: Optional[dt.datetime] = None
    tick = 0
    while count is None or rounds < count:
        due = origin + tick * interval
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        started = dt.datetime.now(dt.timezone.utc)
        frames = client._fetch(ids, markets=markets, progress=progress)
        write_round(frames, folder, started, rounds, raw=raw)
        rounds += 1
        if compact and (last_compacted is None or started - last_compacted >= COMPACT_EVERY):
            from ._history import compact as compact_history

            compact_history(out, now=started, storage_options=storage_options)
            last_compacted = started
        if on_round is not None:
            on_round(rounds, frames)
        if frames._every_request_failed() and frames._exceptions:
            failed_in_a_row += 1
            last_error = frames._exceptions[-1]
            if getattr(last_error, "kind", None) in STOP_AT_ONCE or failed_in_a_row >= max_failed_rounds:
                raise last_error
        else:
            failed_in_a_row = 0
        # The next tick on the grid that is still in the future.
        elapsed_ticks = (time.monotonic() - origin) / interval
        tick = max(tick + 1, int(elapsed_ticks) + (0 if elapsed_ticks == int(elapsed_ticks) else 1))
    return rounds
