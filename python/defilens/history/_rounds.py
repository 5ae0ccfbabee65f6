"""A round: what one poll fetched (its response bodies and its log), and the rows it gives each
table. The same function builds the tables when a round is committed as it is collected, when a
round is recovered from the spool after a crash, and when `reparse` rebuilds a history from its
raw table, so the three can never disagree.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import uuid
import zipfile
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

import polars as pl

from .. import _core
from .._frames import Frames
from .._time import UTC_MS
from ._round_info import RoundInfo
from ._tables import FETCHED_AT, PARTITION, RAW, frame_schema


@dataclass
class Round:
    """One poll: ``bodies`` (token, endpoint, fetched_at, status, error, body: every response
    body received, decodable or not), ``log`` (the frames' log), when it started, and whether its
    bodies are kept in the raw table. ``app_id`` and ``number`` name it in every table's commit,
    which also records ``settings``, the collector's (`defilens.history.settings`; None for rounds
    of earlier versions), and ``uid``, unique to the fetch: two rounds given one number (two
    collectors that used one id) are told apart by it (None for rounds of earlier versions: their
    start tells them apart, `same_round`)."""

    app_id: str
    number: int
    started: dt.datetime
    bodies: pl.DataFrame
    log: pl.DataFrame
    keep_raw: bool
    settings: Optional[Dict[str, Any]] = None
    uid: Optional[str] = None
    #: The number the round had before its own was found taken by another round (`renumbered`).
    renumbered_from: Optional[int] = None

    @property
    def numbers(self) -> Tuple[int, ...]:
        """The numbers a table may record this round under: its own, and the one it had before."""
        return (self.number,) if self.renumbered_from is None else (self.number, self.renumbered_from)

    def renumbered(self, number: int) -> "Round":
        """This round under ``number``, its number having been found taken by another round."""
        return dataclasses.replace(self, number=number, renumbered_from=self.number)

    @property
    def metadata(self) -> Dict[str, str]:
        """What each table's commit of this round records beside its app transaction."""
        settings = None if self.settings is None else json.dumps(self.settings, sort_keys=True)
        return RoundInfo(self.app_id, self.number, self.started, settings, self.uid).commit_info()

    def is_recorded_by(self, info: Mapping[str, Any]) -> bool:
        """Whether a commit's info (``DeltaTable.history``) is this round's commit: the same
        collector, number and uid (or start, where either has no uid)."""
        recorded = RoundInfo.of(info)
        if recorded is None or recorded.collector != self.app_id or recorded.number not in self.numbers:
            return False
        if recorded.uid is not None and self.uid is not None:
            return recorded.uid == self.uid
        return recorded.start == self.started

    # -- the spool's format: one zip of two Parquet files and the round's metadata --------------

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
            for name, frame in (("bodies.parquet", self.bodies), ("log.parquet", self.log)):
                part = io.BytesIO()
                frame.write_parquet(part, compression="zstd")
                archive.writestr(name, part.getvalue())
            meta = {
                "app_id": self.app_id,
                "number": self.number,
                "started": self.started.isoformat(),
                "keep_raw": self.keep_raw,
                "settings": self.settings,
                "uid": self.uid,
                "renumbered_from": self.renumbered_from,
            }
            archive.writestr("round.json", json.dumps(meta))
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Round":
        """Reads a spooled round; ValueError for anything that is not one (a foreign or damaged file)."""
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                meta = json.loads(archive.read("round.json"))
                bodies = pl.read_parquet(io.BytesIO(archive.read("bodies.parquet")))
                log = pl.read_parquet(io.BytesIO(archive.read("log.parquet")))
            started = dt.datetime.fromisoformat(meta["started"])
            settings = meta.get("settings")  # rounds spooled by earlier versions have none
            if settings is not None and not isinstance(settings, dict):
                raise ValueError(f"settings are {type(settings).__name__}, not an object")
            uid, before = meta.get("uid"), meta.get("renumbered_from")
            return cls(
                str(meta["app_id"]),
                int(meta["number"]),
                started,
                bodies,
                log,
                bool(meta["keep_raw"]),
                settings,
                None if uid is None else str(uid),
                None if before is None else int(before),
            )
        except (zipfile.BadZipFile, KeyError, ValueError, TypeError, OSError, pl.exceptions.PolarsError) as error:
            raise ValueError(f"not a spooled round ({type(error).__name__}: {error})") from None


def round_of_fetch(
    frames: Frames,
    app_id: str,
    number: int,
    started: dt.datetime,
    keep_raw: bool,
    settings: Optional[Dict[str, Any]] = None,
) -> Round:
    """The round a `Client.fetch` gave: every body received (`Frames.bodies`) and the log."""
    return Round(app_id, number, started, frames.bodies(), frames.log, keep_raw, settings, uuid.uuid4().hex)


def _parse(bodies: pl.DataFrame, endpoint: str) -> Tuple[Dict[str, pl.DataFrame], int]:
    """One endpoint's bodies parsed in one call into Rust (every core); a body that cannot be
    read is skipped and counted, without losing the others."""
    rows = bodies.filter(pl.col("endpoint") == endpoint)
    if rows.height == 0:
        return {}, 0
    frames, errors = _core.parse_many(
        endpoint, rows["body"].to_list(), rows["token"].to_list(), rows["fetched_at"].dt.epoch("ms").to_list()
    )
    return dict(frames), sum(error is not None for error in errors)


def tables_of(round_: Round, *, with_log: bool = True) -> Tuple[Dict[str, pl.DataFrame], int]:
    """The rows the round gives each table (``raw`` only when the round keeps its bodies), and
    how many bodies could not be decoded (when fetched, or now): they are in ``raw`` with their
    failure, and in no other table.
    Every row carries ``fetched_at`` (the token's listing time where a frame has none, else the
    round's start) and ``date``, the UTC day the round started."""
    bodies = round_.bodies
    decodable = bodies.filter(pl.col("error").is_null() & pl.col("body").is_not_null())
    failed_before = bodies.height - decodable.height
    listing, listing_failed = _parse(decodable, "listing")
    markets, markets_failed = _parse(decodable, "markets")
    failed = listing_failed + markets_failed
    empty = _core.empty_frames()
    frames = {name: listing.get(name, empty[name]) for name in empty}
    frames["markets"] = markets.get("markets", empty["markets"])
    frames["drift"] = pl.concat([frames["drift"], markets.get("drift", empty["drift"])], how="vertical")
    frames["log"] = round_.log if with_log else frames["log"]
    started = pl.lit(round_.started).cast(UTC_MS)
    listing_times = frames["snapshot"].select("token", pl.col(FETCHED_AT).alias("_listing_at")).unique("token")
    day = pl.lit(round_.started.astimezone(dt.timezone.utc).date()).alias(PARTITION)
    tables: Dict[str, pl.DataFrame] = {}
    for name, frame in frames.items():
        if FETCHED_AT not in frame.columns:
            frame = (
                frame.join(listing_times, on="token", how="left")
                .with_columns(pl.coalesce("_listing_at", started).alias(FETCHED_AT))
                .drop("_listing_at")
            )
        tables[name] = frame.with_columns(day).select(list(frame_schema(name)))
    if round_.keep_raw:
        tables[RAW] = bodies.with_columns(started.alias("round_start"), day).select(list(frame_schema(RAW)))
    return tables, failed_before + failed


def empty_table(name: str) -> pl.DataFrame:
    return pl.DataFrame(schema=frame_schema(name))


def as_frames(tables: Dict[str, Any]) -> Frames:
    return Frames({name: frame.drop(PARTITION, strict=False) for name, frame in tables.items() if name != RAW})
