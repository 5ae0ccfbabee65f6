"""What the history tests check again and again: that every round is whole and once in every
table, and a writer of the Hive-Parquet layout of earlier versions (for `convert`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Dict, Optional

import polars as pl

import defilens
from defilens._frames import FRAME_NAMES

Options = Optional[Dict[str, str]]


def _pairs(frame: pl.DataFrame) -> "set[tuple[Any, Any]]":
    return set(frame.select("token", "fetched_at").unique().iter_rows())


def assert_whole_rounds(root: Any, storage_options: Options = None, raw: bool = True) -> int:
    """Every listing fetch is in snapshot, indicators, ta_updated, log (and raw) exactly once,
    and every table holds only fetches the others hold. Returns the number of listing fetches."""

    def scan(name: str) -> pl.DataFrame:
        return defilens.scan(root, name, storage_options=storage_options).collect()

    snapshot, indicators, ta_updated, log = scan("snapshot"), scan("indicators"), scan("ta_updated"), scan("log")
    fetches = _pairs(snapshot)
    assert snapshot.height == len(fetches), "a listing fetch is in snapshot twice"
    assert (
        not indicators.is_duplicated().any()
        and indicators.select("token", "fetched_at", "interval", "indicator").is_unique().all()
    ), "an indicator row is in the history twice"
    assert not ta_updated.select("token", "fetched_at", "interval").is_duplicated().any()
    assert _pairs(indicators) == fetches, "indicators and snapshot hold different fetches"
    assert _pairs(ta_updated) == fetches, "ta_updated and snapshot hold different fetches"
    listing_log = log.filter((pl.col("endpoint") == "listing") & pl.col("ok"))
    assert listing_log.select("token", "fetched_at").is_unique().all(), "an exchange is in log twice"
    assert _pairs(listing_log) == fetches, "log and snapshot hold different fetches"
    markets_log = log.filter((pl.col("endpoint") == "markets") & pl.col("ok"))
    markets = scan("markets")
    assert _pairs(markets) <= _pairs(markets_log)
    if raw:
        bodies = scan("raw")
        assert not bodies.select("token", "endpoint", "fetched_at").is_duplicated().any(), "a body is in raw twice"
        listing_bodies = bodies.filter((pl.col("endpoint") == "listing") & pl.col("error").is_null())
        assert _pairs(listing_bodies) == fetches, "raw and snapshot hold different fetches"
    return len(fetches)


def write_old_round(frames: defilens.Frames, folder: Path, started: dt.datetime, number: int, raw: bool = True) -> None:
    """One round as defilens wrote it before the history moved to Delta Lake (a file a frame a
    round under ``<frame>/date=YYYY-MM-DD/``, the interval as polars' Enum)."""
    listing_at = frames.snapshot.select("token", "fetched_at").unique("token")
    stamp = started.strftime("%Y%m%dT%H%M%S%fZ")
    date = started.strftime("%Y-%m-%d")
    tables = {}
    for name in FRAME_NAMES:
        frame = getattr(frames, name)
        if "fetched_at" not in frame.columns:
            frame = frame.join(listing_at, on="token", how="left").with_columns(
                pl.col("fetched_at").fill_null(pl.lit(started).cast(pl.Datetime("ms", "UTC")))
            )
        tables[name] = frame
    if raw:
        bodies = frames.bodies().filter(pl.col("error").is_null()).drop("error")
        tables["raw"] = bodies.with_columns(pl.lit(started).cast(pl.Datetime("ms", "UTC")).alias("round_start")).select(
            "round_start", "token", "endpoint", "fetched_at", "status", "body"
        )
    for name, frame in tables.items():
        target = folder / name / f"date={date}"
        target.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(target / f"{stamp}-r{number:06d}.parquet")


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP), as /proc says."""
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] == "T"
