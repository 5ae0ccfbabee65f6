"""The ``info`` table keeps a token's general info only when it changes: a row is written when
it differs from the token's stored row before it (by ``fetched_at``), so each row's
``fetched_at`` is the first fetch that showed that info, and the info at any moment is the
token's latest row at or before it, as it was when every round wrote a row.

A round's info rows are decided when the round is committed, against the table as it is then:
recovering a round after a crash decides again, against a table in which the round's info is
not (a table records a round once), so a round's info row is written if and only if it differs
from what was stored before it. A row is only ever dropped for an identical stored row before it,
so no collector drops a change another collector's rows do not hold.

Rounds committed out of order can still store one change twice: a later fetch of a revision
lands first (a change against the row before it), then the revision's first fetch (recovered
after a crash, or another collector's) is a change too, and the later row no longer is. An
append cannot take it back, so the table is read through `changes_in`, which drops it: a read
gives each change once, as `reparse` rebuilds it, and what was in force at any moment is
unchanged either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import polars as pl

from .._storage import Root, require
from ._panics import engine_writes
from ._tables import FETCHED_AT, PARTITION, frame_schema, load, restore, to_disk

if TYPE_CHECKING:
    from deltalake import DeltaTable

INFO = "info"


def info_columns() -> List[str]:
    """The columns that make a token's general info (what a change is judged by)."""
    return [name for name in frame_schema(INFO) if name not in ("token", FETCHED_AT, PARTITION)]


def _changed(columns: List[str]) -> pl.Expr:
    values = pl.struct(columns)
    return values.ne_missing(values.shift(1).over("token")) | (pl.col("token").ne_missing(pl.col("token").shift(1)))


def changes_only(frame: pl.DataFrame) -> pl.DataFrame:
    """Of ``frame``'s info rows, in ``fetched_at`` order per token, the first and each one that
    differs from the row before it."""
    if frame.height == 0:
        return frame
    columns = info_columns()
    ordered = frame.with_row_index("_row").sort("token", FETCHED_AT, "_row")
    return ordered.filter(_changed(columns).fill_null(True)).sort("_row").drop("_row")


def changes_in(rows: pl.LazyFrame) -> pl.LazyFrame:
    """The info table's rows (as `restore` gives them) without those equal to the token's row
    before them: each change once, whatever order the rounds were committed in."""
    return rows.sort("token", FETCHED_AT).filter(_changed(info_columns()).fill_null(True))


def new_changes(table: "Optional[DeltaTable]", frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of a round's ``info`` frame that are changes: each one whose info differs from
    the token's row before it, among the rows stored in ``table`` (the info table as it is now;
    None: there is none yet) and the frame's own."""
    if frame.height == 0:
        return frame
    if table is None:
        return changes_only(frame)
    require("deltalake")
    columns = info_columns()
    tokens = frame.get_column("token").unique().to_list()
    latest = frame.get_column(FETCHED_AT).max()
    stored = (
        restore(pl.scan_delta(table))
        .filter(pl.col("token").is_in(tokens), pl.col(FETCHED_AT) <= latest)
        .select("token", FETCHED_AT, *columns)
        .collect()
    )
    if stored.height == 0:
        return changes_only(frame)
    # Stored rows first at a tie: a round's row equal to a stored row of the same moment is no change.
    both = pl.concat(
        [
            stored.with_columns(pl.lit(None, pl.UInt32).alias("_row")),
            frame.select("token", FETCHED_AT, *columns).with_row_index("_row"),
        ],
        how="diagonal_relaxed",
    ).sort("token", FETCHED_AT, pl.col("_row").is_not_null(), "_row")
    kept = both.filter(pl.col("_row").is_not_null() & _changed(columns).fill_null(True)).get_column("_row")
    return frame.with_row_index("_row").filter(pl.col("_row").is_in(kept.to_list())).drop("_row")


def keep_changes_only(root: Root) -> int:
    """Rewrites an ``info`` table written every round (by an earlier defilens) as its change rows,
    in one commit (a Delta overwrite: readers see the old rows or the new, never a mix; an
    interruption leaves the table as it was, and running it again finishes it). Returns how many
    rows were dropped; 0, without a commit, for a table that holds changes only. The caller holds
    the compaction lock."""
    deltalake = require("deltalake")
    table = load(root, INFO)
    if table is None:
        return 0
    rows = restore(pl.scan_delta(table)).collect()
    kept = changes_only(rows)
    if kept.height == rows.height:
        return 0
    properties = deltalake.CommitProperties(custom_metadata={"defilens.operation": "info kept only when it changes"})
    with engine_writes(f"rewriting {root.path(INFO)!r}"):
        deltalake.write_deltalake(
            table, to_disk(kept), mode="overwrite", partition_by=[PARTITION], commit_properties=properties
        )
    return rows.height - kept.height
