"""What produced a history: the collector's settings, recorded in the commit of every round (Delta
commit info, under `SETTINGS_KEY`, which every engine's ``DESCRIBE HISTORY`` shows), and read back
as one row a run by `settings`.

A run is a collector's rounds under one set of settings: a restarted collector with a stable id
and other settings starts a new row, so a change is recorded, not lost. Rounds committed by
earlier versions carry no settings: their run's cadence is inferred from the rounds' starts and
said to be (``source`` ``"inferred"``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence

import polars as pl

from .._clock import Clock
from .._core import __version__
from .._storage import PathLike, Root
from ._round_info import RoundInfo
from ._scan import commits, open_for_reading
from ._tables import load

#: Up to this many ids are recorded by name; more are recorded by their count and hash alone
#: (every table's commit of every round carries the settings).
IDS_LISTED = 100
#: The table whose commits `settings` reads: every round has log rows.
SOURCE_TABLE = "log"
#: The longest universe rule recorded.
UNIVERSE_CHARS = 10_000


def check_universe(universe: object) -> Optional[str]:
    """The universe rule as given (None: none stated), or TypeError/ValueError."""
    if universe is None:
        return None
    if not isinstance(universe, str):
        raise TypeError(
            "universe must be a str (the rule that chose the ids, recorded verbatim), got "
            f"{type(universe).__name__}: {universe!r}"
        )
    if len(universe) > UNIVERSE_CHARS:
        raise ValueError(f"universe is {len(universe):,} characters long; state the rule in at most {UNIVERSE_CHARS:,}")
    return universe


def ids_hash(ids: Sequence[str]) -> str:
    """A hash of a set of ids (order and repeats aside): equal for the same tokens."""
    return hashlib.sha256("\n".join(sorted(set(ids))).encode()).hexdigest()


def collector_settings(
    clock: Clock,
    ids: Sequence[str],
    every: float,
    *,
    markets: bool,
    raw: bool,
    collector: str,
    universe: Optional[str],
) -> Dict[str, Any]:
    """What a round's commits record of the collector that made it (`SETTINGS_KEY`)."""
    distinct = list(dict.fromkeys(ids))
    return {
        "every_seconds": every,
        "ids": distinct if len(distinct) <= IDS_LISTED else None,
        "ids_count": len(distinct),
        "ids_hash": ids_hash(distinct),
        "markets": bool(markets),
        "raw": bool(raw),
        "clock": "wall" if clock.speed is None else "simulated",
        "version": __version__,
        "collector": collector,
        "universe": universe,
    }


#: The columns of `settings`.
SETTINGS_SCHEMA: Dict[str, pl.DataType] = {
    "collector": pl.String(),
    "first_round": pl.Int64(),
    "last_round": pl.Int64(),
    "rounds": pl.Int64(),
    "first_start": pl.Datetime("ms", "UTC"),
    "last_start": pl.Datetime("ms", "UTC"),
    "every": pl.Duration("ms"),
    "source": pl.String(),
    "ids": pl.List(pl.String()),
    "ids_count": pl.Int64(),
    "ids_hash": pl.String(),
    "markets": pl.Boolean(),
    "raw": pl.Boolean(),
    "clock": pl.String(),
    "version": pl.String(),
    "universe": pl.String(),
}


def _rounds(info: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    rows = []
    for entry in info:
        recorded = RoundInfo.of(entry)
        if recorded is None:
            continue
        rows.append(
            {
                "collector": recorded.collector,
                "round": recorded.number,
                "start": recorded.start,
                "settings": recorded.settings,
            }
        )
    return rows


def inferred_every(starts: pl.Series) -> Optional[dt.timedelta]:
    """The cadence a run of rounds kept: the median time between consecutive starts (a pause or
    a slow round moves it little), to the millisecond; None for fewer than two."""
    steps = starts.sort().diff().drop_nulls()
    steps = steps.filter(steps > dt.timedelta(0))
    if steps.is_empty():
        return None
    median = steps.dt.total_milliseconds().median()
    return None if median is None else dt.timedelta(milliseconds=round(float(median)))  # type: ignore[arg-type]


def runs_of(info: Sequence[Mapping[str, Any]], spacing: bool = False) -> pl.DataFrame:
    """One row a run from the commit info of a table's rounds (`SETTINGS_SCHEMA`), by first start;
    with ``spacing``, also ``spacing``: the median time between the starts of its rounds (None
    for a run of one round)."""
    schema = {**SETTINGS_SCHEMA, "spacing": pl.Duration("ms")} if spacing else SETTINGS_SCHEMA
    rows = _rounds(info)
    if not rows:
        return pl.DataFrame(schema=schema)
    rounds = (
        pl.DataFrame(
            rows,
            schema={
                "collector": pl.String,
                "round": pl.Int64,
                "start": pl.Datetime("ms", "UTC"),
                "settings": pl.String,
            },
            orient="row",
        )
        .unique(["collector", "round"], keep="first")
        .sort("collector", "round")
        .with_columns(
            # A new run wherever a collector's settings differ from its round before.
            (pl.col("settings").ne_missing(pl.col("settings").shift(1)).over("collector"))
            .cum_sum()
            .over("collector")
            .alias("_run")
        )
    )
    out: List[Dict[str, Any]] = []
    for (collector, _), run in rounds.group_by("collector", "_run", maintain_order=True):
        text = run["settings"][0]
        recorded: Dict[str, Any] = json.loads(text) if text else {}
        every = recorded.get("every_seconds")
        kept = inferred_every(run["start"])
        out.append(
            {
                "collector": collector,
                "first_round": run["round"].min(),
                "last_round": run["round"].max(),
                "rounds": run.height,
                "first_start": run["start"].min(),
                "last_start": run["start"].max(),
                "every": dt.timedelta(seconds=float(every)) if every is not None else kept,
                "source": "recorded" if every is not None else "inferred",
                **{key: recorded.get(key) for key in ("ids", "ids_count", "ids_hash", "markets", "raw", "clock")},
                "version": recorded.get("version"),
                "universe": recorded.get("universe"),
                **({"spacing": kept} if spacing else {}),
            }
        )
    return pl.DataFrame(out, schema=schema, orient="row").sort("first_start", "collector")


#: The columns of `rounds_of`: one row a round the kept log records.
ROUNDS_SCHEMA: Dict[str, pl.DataType] = {
    "collector": pl.String(),
    "round": pl.Int64(),
    "start": pl.Datetime("ms", "UTC"),
    "every": pl.Duration("ms"),
    "spacing": pl.Duration("ms"),
    "source": pl.String(),
}


def rounds_of(info: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Every round the commit info records (`ROUNDS_SCHEMA`), by start: its collector, number and
    start, and its run's ``every`` (recorded, else inferred: ``source``) and ``spacing`` (the
    median time between the run's starts; None for a run of one round)."""
    rows = _rounds(info)
    if not rows:
        return pl.DataFrame(schema=ROUNDS_SCHEMA)
    starts = (
        pl.DataFrame(rows, schema={"collector": pl.String, "round": pl.Int64, "start": pl.Datetime("ms", "UTC")})
        .unique(["collector", "round"], keep="first")
        .sort("start")
    )
    run_table = runs_of(info, spacing=True).select("collector", "first_start", "every", "spacing", "source")
    return (
        starts.join_asof(
            run_table.sort("first_start"),
            left_on="start",
            right_on="first_start",
            by="collector",
            strategy="backward",
            check_sortedness=False,  # both sorted by start, so within every collector too
        )
        .select(list(ROUNDS_SCHEMA))
        .cast(ROUNDS_SCHEMA)  # type: ignore[arg-type]
    )


def settings(path: PathLike, *, storage_options: Optional[Mapping[str, Any]] = None) -> pl.DataFrame:
    """The settings the history at ``path`` was collected with, one row a run (a collector's
    rounds under one set of settings), oldest first: ``collector``, ``first_round``,
    ``last_round``, ``rounds``, ``first_start``, ``last_start`` (the starts of its first and last
    round), ``every`` (the cadence), ``source`` (``"recorded"``, or ``"inferred"`` from the rounds'
    starts for rounds of earlier versions, which recorded no settings), ``ids`` (up to 100; more
    are recorded by ``ids_count`` and ``ids_hash``, a SHA-256 of the sorted ids), ``markets``,
    ``raw``, ``clock`` (``"wall"`` or ``"simulated"``), ``version`` (of defilens) and
    ``universe`` (the rule stated with ``collect(universe=...)``, verbatim).

    Read from the commits of the history's rounds (Delta commit info, key ``defilens.settings``):
    it reaches as far back as the tables' log is kept (`defilens.compact` removes entries older
    than its retention). A history with no round in its kept log gives no rows.
    """
    return runs(open_for_reading(path, storage_options))


def runs(root: Root, spacing: bool = False) -> pl.DataFrame:
    """`settings` of an opened root (`runs_of`)."""
    table = load(root, SOURCE_TABLE)
    if table is None:
        return runs_of([], spacing)
    return runs_of([commit.info for commit in commits(root, SOURCE_TABLE, table)], spacing)


def rounds(root: Root) -> pl.DataFrame:
    """`rounds_of` an opened root: every round its kept log records."""
    table = load(root, SOURCE_TABLE)
    if table is None:
        return rounds_of([])
    return rounds_of([commit.info for commit in commits(root, SOURCE_TABLE, table)])
