"""The history's defaults, each written once: the table properties, the functions' signatures and
docstrings and the command line's flags and help all read them from here (tests hold the help and
the docstrings to them)."""

from __future__ import annotations

import datetime as dt
from typing import Dict

#: How long time travel reaches back unless the caller says otherwise (compaction's vacuum and
#: log cleanup, and the retention a table is created with).
DEFAULT_RETENTION = dt.timedelta(days=7)
#: The shortest retention accepted: vacuum must never delete a file a collector is still
#: committing (a commit takes seconds; an hour leaves room for a slow object store).
MIN_RETENTION = dt.timedelta(hours=1)
#: The memory z-order may use before it spills to disk, unless the caller says otherwise.
DEFAULT_MEMORY_BUDGET = 1 << 30
#: Small files are packed into files of about this size.
DEFAULT_TARGET_SIZE = 128 << 20
#: Rounds in a row in which every request failed before `collect` gives up (with the last error).
DEFAULT_MAX_FAILED_ROUNDS = 3
#: How often `collect(compact=True)` compacts the history as it goes.
COMPACT_EVERY = dt.timedelta(hours=1)
#: Commits between two checkpoints of a table: a snapshot loads from the newest checkpoint and
#: the entries after it, so this bounds a load, and a table kept loaded is brought forward at
#: most this many versions before it is loaded again.
CHECKPOINT_INTERVAL = 100


def delta_interval(span: dt.timedelta) -> str:
    """``span`` as Delta's table properties write a duration (``interval 7 days``), in its largest
    whole unit."""
    seconds = int(span.total_seconds())
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds and seconds % size == 0:
            return f"interval {seconds // size} {unit}"
    return f"interval {seconds} seconds"


#: Set when a table is created. Time travel reaches back as far as both retentions
#: (`compact(retention=...)` changes them); the log's own retention keeps commit latency flat
#: (delta-rs lists the whole log otherwise: latency doubled past 3,000 entries in a trial).
TABLE_PROPERTIES: Dict[str, str] = {
    "delta.logRetentionDuration": delta_interval(DEFAULT_RETENTION),
    "delta.deletedFileRetentionDuration": delta_interval(DEFAULT_RETENTION),
    "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
}
