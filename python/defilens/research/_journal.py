"""The evaluations run on a history, kept under its root (`history.JOURNAL`, a Delta table), so
that a verdict can say how many signals were tried on the same data and what that does to its
p-value. A signal is known by what it holds (its values per token and decision), not its name:
evaluating the same signal again is not another try, renaming it does not hide one."""

from __future__ import annotations

import datetime as dt
import hashlib
import warnings
from typing import Any, Dict, Mapping, Optional

import polars as pl

from .._exceptions import DefiLensWarning
from .._stack import stacklevel_outside
from .._storage import PathLike, Root, one_line
from .._time import UTC_MS
from ..history import JOURNAL, append_table, history_cut, open_for_reading, read_table

#: A journal's columns: when (the wall clock), which signal (its column's name, and ``fingerprint``
#: the hash of its values), how it was judged.
JOURNAL_SCHEMA: Dict[str, pl.DataType] = {
    "recorded_at": UTC_MS,
    "signal": pl.String(),
    "kind": pl.String(),
    "fingerprint": pl.String(),
    "horizons": pl.String(),
    "decisions": pl.Int64(),
    "tokens": pl.Int64(),
    "p_value": pl.Float64(),
    "universe": pl.String(),  # how the labels' tokens were chosen (`universe`'s rule); null when not said
}


def fingerprint(rows: pl.DataFrame, signal: str, by: str) -> str:
    """A hash of the signal's values per token and decision (one horizon's rows suffice: the
    others repeat them)."""
    values = (
        rows.select(
            pl.col("token").cast(pl.String),
            pl.col(by).cast(UTC_MS).dt.epoch("ms").alias("at"),
            pl.col(signal).cast(pl.Boolean if rows.schema[signal] == pl.Boolean else pl.Float64).alias("signal"),
        )
        .unique()
        .sort(pl.all())
    )
    return hashlib.sha256(values.write_csv(float_precision=12).encode()).hexdigest()[:32]


def journal(source: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> pl.DataFrame:
    """The evaluations recorded on the history at ``source`` (`evaluate(..., history=source)`),
    oldest first: ``recorded_at``, ``signal``, ``kind``, ``fingerprint``, ``horizons``,
    ``decisions``, ``tokens``, ``p_value`` (the smallest over its horizons after Holm, before
    any correction for the signals tried) and ``universe`` (how its tokens were chosen, when the
    labels said: `universe`'s rule; null for a journal kept before it was recorded)."""
    return _read(open_for_reading(source, storage_options))


def _read(root: Root) -> pl.DataFrame:
    found = read_table(root, JOURNAL)
    if found is None:
        return pl.DataFrame(schema=JOURNAL_SCHEMA)
    present = found.collect_schema().names()
    # A journal kept by an earlier version lacks the later columns: they read as null.
    return (
        found.select(
            [pl.col(c) if c in present else pl.lit(None, dtype).alias(c) for c, dtype in JOURNAL_SCHEMA.items()]
        )
        .sort("recorded_at")
        .collect()
    )


def record(source: PathLike, storage_options: Optional[Mapping[str, Any]], entry: Dict[str, Any]) -> Optional[int]:
    """Records ``entry`` (`JOURNAL_SCHEMA`, but ``recorded_at``) in the history's journal, unless
    its fingerprint is there already, and returns how many distinct signals the journal holds with
    it; on a history cut by the look-ahead check, records nothing and returns None. A root that
    cannot be written to gets a warning (the count still includes this signal)."""
    if history_cut() is not None:
        return None
    root = open_for_reading(source, storage_options)
    kept = _read(root)
    tried = set(kept["fingerprint"].to_list())
    if entry["fingerprint"] in tried:
        return len(tried)
    row = pl.DataFrame(
        [{"universe": None, **entry, "recorded_at": dt.datetime.now(dt.timezone.utc)}],
        schema=JOURNAL_SCHEMA,
        orient="row",
    )
    try:
        append_table(root, JOURNAL, row, merge_schema=True)
    except Exception as error:  # a read-only bucket, a full disk: the evaluation itself is still right
        warnings.warn(
            f"the evaluation could not be recorded in {root.path(JOURNAL)!r} ({one_line(error)}): its verdict counts "
            f"the {len(tried) + 1} signals recorded so far",
            DefiLensWarning,
            stacklevel=stacklevel_outside(),
        )
    return len(tried) + 1
