"""What a collector does between rounds so that a history nobody compacts stays healthy: its
tables' logs cleaned every `TIDY_EVERY` rounds (`LogKeeper`), and the small files of each day
packed once the day has closed (`_compact.pack_closed_days`). Without either, every commit grew
with the log and the files the tables had gathered."""

from __future__ import annotations

import datetime as dt
from typing import Dict, Optional

from .._exceptions import HistoryError
from .._storage import Root, one_line, require
from ._compact import CLOSED_AFTER, clean_log_behind, last_checkpoint, pack_closed_days
from ._defaults import CHECKPOINT_INTERVAL
from ._lock import Busy
from ._tables import TABLES

#: Every how many rounds a collector cleans its tables' logs (`LogKeeper`): once a checkpoint
#: interval, so each cleanup has a newer checkpoint to clean behind.
TIDY_EVERY = CHECKPOINT_INTERVAL
#: Rounds a collector waits before it tries packing again after a compaction held the lock.
PACK_RETRY_ROUNDS = 10


class LogKeeper:
    """A collector's own log cleanup, for a history nobody compacts: its commits leave delta-rs's
    cleanup off (delta-rs lists the whole log after every commit to look for expired entries:
    a round's commit took 3 times as long at 1,200 log entries, growing with the log), so every
    `TIDY_EVERY` rounds each table's log is cleaned as compaction cleans it, behind the
    checkpoint that was the newest at the keeper's previous turn (at least a checkpoint interval
    of margin for the collectors and readers loading it)."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.seen: Dict[str, Optional[int]] = {}

    def __call__(self) -> None:
        deltalake = require("deltalake")
        for name in TABLES:
            newest = last_checkpoint(self.root, name)
            try:
                clean_log_behind(self.root, name, self.seen.get(name))
            except (OSError, deltalake.exceptions.DeltaError):
                pass  # log cleanup is housekeeping: tried again at the next turn
            self.seen[name] = newest


class DayPacker:
    """Packs the closed days of the collector's history once each day closes (and, at the first
    round, whatever days earlier runs left unpacked). A compaction holding the lock is left to do
    it, and tried again `PACK_RETRY_ROUNDS` rounds later; any other failure (an engine's, the
    system's, a `HistoryError`) is warned about once and collecting goes on (`defilens compact`
    packs what is left)."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.packed_through: Optional[dt.date] = None
        self.wait_rounds = 0
        self.warned = False

    def __call__(self, now: dt.datetime) -> Optional[str]:
        """Packs what closed since the last call; returns a warning to give the first time packing fails."""
        newest_closed = (now - CLOSED_AFTER).date() - dt.timedelta(days=1)
        if self.packed_through is not None and self.packed_through >= newest_closed:
            return None
        if self.wait_rounds:
            self.wait_rounds -= 1
            return None
        warning = None
        try:
            pack_closed_days(self.root, now)
        except Busy:
            self.wait_rounds = PACK_RETRY_ROUNDS
            return None
        except Exception as error:  # whatever it is (an engine's, the system's), packing is housekeeping
            if not self.warned:
                said = (
                    one_line(error) if isinstance(error, HistoryError) else f"{type(error).__name__}: {one_line(error)}"
                )
                warning = (
                    f"could not pack the closed days of {self.root.url!r} ({said}); collecting goes on, and "
                    "`defilens compact` packs them"
                )
                self.warned = True
        self.packed_through = newest_closed
        return warning


class Upkeep:
    """A collector's upkeep after each committed round: `LogKeeper` and `DayPacker` (the latter
    not when ``pack_days`` is false: `collect(compact=True)` compacts everything itself)."""

    def __init__(self, root: Root, pack_days: bool = True) -> None:
        self.logs = LogKeeper(root)
        self.packer = DayPacker(root) if pack_days else None

    def after_round(self, rounds: int, now: dt.datetime) -> Optional[str]:
        """Called after each committed round (``rounds`` so far, the round's start ``now`` on the
        collector's clock); returns a warning for the collector to give, if any."""
        if rounds % TIDY_EVERY == 0:
            self.logs()
        return None if self.packer is None else self.packer(now)
