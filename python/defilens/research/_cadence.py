"""Which candle closes a history's rounds could see: the cadence each run kept (recorded in its
commits, or inferred from the rounds), the rounds it should have made and did not, and what a
user says to expect instead (``audit(expect=...)``).

A close is *observable* when some round falls inside the window in which it is the current candle
(from its close to the next one): rounds every 15 minutes see one 5m close in three and every 1h
close. A round that should have been made and was not (a pause between runs, a killed round, a
token whose request failed) is found where a token's consecutive fetches are further apart than
its cadence allows (more than one and a half times): the rounds missing between them are put back
on the cadence's grid, and the closes they would have seen are observable, and *missed*.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import polars as pl

from .._core import INTERVAL_MS
from .._duration import format_duration, parse_every
from .._names import unknown_name
from .._storage import Root
from ._rounds import LATE, RUNS_SCHEMA, runs_made
from ._scope import CANDLE_INTERVALS

#: The shortest candle with a close time, in milliseconds.
SHORTEST_CANDLE_MS = min(INTERVAL_MS[interval] for interval in CANDLE_INTERVALS)
#: The words of ``expect``: every close between the first and the last seen, or none of them.
EVERY = "every"
NONE = "none"

Expect = Union[None, str, float, dt.timedelta, Mapping[str, Any]]
#: What one interval expects: the runs' own cadence (None), every close (`EVERY`), none (`NONE`),
#: or a cadence in milliseconds that replaces the runs'.
Rule = Union[None, str, int]

#: The runs an audit assumed (`Audit.cadence`).
CADENCE_SCHEMA = RUNS_SCHEMA


def _rule(value: Any, where: str) -> Rule:
    if value is None:
        return None
    if value is False:
        return NONE
    if isinstance(value, str) and value.strip().lower() in (EVERY, "all"):
        return EVERY
    if isinstance(value, str) and value.strip().lower() == NONE:
        return NONE
    if isinstance(value, bool) or not isinstance(value, (str, int, float, dt.timedelta)):
        raise TypeError(
            f"{where} must be 'every', 'none', a cadence ('15m', seconds, a timedelta) or a mapping of intervals to "
            f"them, got {type(value).__name__}: {value!r}"
        )
    try:
        seconds = parse_every(value, where)
    except ValueError as error:
        raise ValueError(f"{error}; or 'every' (every close expected) or 'none'") from None
    return max(1, round(seconds * 1000))


def expectations(expect: Expect) -> Dict[str, Rule]:
    """``expect`` checked, as a rule per interval (the service gives candle times for
    `CANDLE_INTERVALS` only; a history written by other means may hold others, which follow the
    runs' cadence or the one rule given)."""
    if isinstance(expect, Mapping):
        rules: Dict[str, Rule] = dict.fromkeys(INTERVAL_MS)
        for interval, value in expect.items():
            if not isinstance(interval, str):
                raise TypeError(f"expect's keys are intervals (str), got {type(interval).__name__}: {interval!r}")
            if interval not in CANDLE_INTERVALS:
                if interval in INTERVAL_MS:
                    raise ValueError(
                        f"{interval} has no candle time (the service's ta_updated has none for {interval}), so the "
                        f"audit counts no {interval} closes: expect one of {', '.join(CANDLE_INTERVALS)}"
                    )
                raise unknown_name("interval", interval, CANDLE_INTERVALS)
            rules[interval] = _rule(value, f"expect[{interval!r}]")
        return rules
    return dict.fromkeys(INTERVAL_MS, _rule(expect, "expect"))


def show_every(every: Optional[dt.timedelta]) -> str:
    """A cadence as users write it (``15m``, ``1h``, ``250ms``), or ``unknown``."""
    return "unknown" if every is None else format_duration(every)


@dataclass(frozen=True)
class Cadence:
    """The runs of a history with the cadence each kept (`CADENCE_SCHEMA`), each token's fetches
    (``token``, ``fetched_at``) and the fetches that showed no close of an interval (``token``,
    ``interval``, ``fetched_at``: the service's ``ta_<interval>_updated_at`` was empty)."""

    runs: pl.DataFrame
    fetches: pl.DataFrame
    blind: pl.DataFrame

    def missed_rounds(self, every_ms: Optional[int] = None) -> pl.DataFrame:
        """``token``, ``moment``: the rounds each token should have had and did not, on the
        cadence of the run in force (or ``every_ms`` for all)."""
        if self.fetches.is_empty():
            return pl.DataFrame(schema={"token": pl.String, "moment": pl.Datetime("ms", "UTC")})
        fetches = self.fetches.sort("fetched_at")
        if every_ms is not None:
            fetches = fetches.with_columns(pl.lit(every_ms, pl.Int64).alias("_every"))
        else:
            cadence = self.runs.select("first_start", pl.col("every").dt.total_milliseconds().alias("_every")).sort(
                "first_start"
            )
            fetches = fetches.join_asof(cadence, left_on="fetched_at", right_on="first_start", strategy="backward")
            first = cadence["_every"].drop_nulls()
            fetches = fetches.with_columns(pl.col("_every").fill_null(first[0] if first.len() else None))
        holes = (
            fetches.sort("token", "fetched_at")
            .with_columns(
                (pl.col("fetched_at").shift(-1).over("token") - pl.col("fetched_at"))
                .dt.total_milliseconds()
                .alias("_apart")
            )
            .filter(pl.col("_every") > 0, pl.col("_apart") > LATE * pl.col("_every"))
            .with_columns(((pl.col("_apart") / pl.col("_every")).round() - 1).cast(pl.Int64).clip(1).alias("_n"))
        )
        return (
            holes.with_columns(pl.int_ranges(1, pl.col("_n") + 1).alias("_k"))
            .explode("_k")
            .select(
                "token",
                (pl.col("fetched_at") + pl.duration(milliseconds=pl.col("_k") * pl.col("_every"))).alias("moment"),
            )
        )


def cadence_of(root: Root, fetches: pl.DataFrame, blind: pl.DataFrame) -> Cadence:
    """The runs of the history at ``root`` and the cadence of each (`runs_made`: the rounds'
    one owner, which labels and hand-offs read too). ``fetches`` and ``blind`` as `Cadence`
    holds them (the day summaries keep them)."""
    fetches = fetches.select("token", "fetched_at").unique()
    return Cadence(runs_made(root, fetches), fetches, blind.select("token", "interval", "fetched_at"))


def missed_closes(
    cadence: Cadence,
    rules: Dict[str, Rule],
    pairs: pl.DataFrame,
    gaps: pl.DataFrame,
    stale: pl.DataFrame,
) -> pl.DataFrame:
    """The unseen closes the rounds could have seen, per gap: ``token``, ``interval``,
    ``gap_start``, ``gap_end`` (of the run of unseen closes), ``first_missed``, ``last_missed``,
    ``missed``. ``pairs`` holds each (token, interval)'s first close seen (``first``) and
    ``_step``; ``gaps`` the runs of unseen closes; ``stale`` the fetches that showed an older
    close than the current one (``token``, ``interval``, ``fetched_at``): a round that was made
    and showed an older close, or none, missed the current one."""
    key = ["token", "interval"]
    parts: List[pl.DataFrame] = []
    by_rule: Dict[Rule, List[str]] = {}
    for interval, rule in rules.items():
        by_rule.setdefault(rule, []).append(interval)
    for rule, intervals in by_rule.items():
        if rule == NONE:
            continue
        chosen = gaps.filter(pl.col("interval").cast(pl.String).is_in(intervals))
        if chosen.is_empty():
            continue
        if rule == EVERY:
            parts.append(
                chosen.with_columns(
                    pl.col("gap_start").alias("first_missed"),
                    pl.col("gap_end").alias("last_missed"),
                    pl.col("missing").alias("missed"),
                ).drop("missing")
            )
            continue
        moments = cadence.missed_rounds(rule if isinstance(rule, int) else None)
        where = pairs.filter(pl.col("interval").cast(pl.String).is_in(intervals))
        # Rounds that were made and did not show the current close: the service was behind
        # (stale), or named no close.
        seen_by = pl.concat(
            [
                frame.filter(pl.col("interval").cast(pl.String).is_in(intervals)).select(
                    "token", pl.col("interval").cast(pl.String), pl.col("fetched_at").alias("moment")
                )
                for frame in (stale, cadence.blind)
            ]
        ).with_columns(pl.col("interval").cast(where.schema["interval"]))
        candidates = pl.concat(
            [moments.join(where.select("token", "interval"), on="token").select(*key, "moment"), seen_by]
        ).join(where, on=key)
        since = (pl.col("moment") - pl.col("first")).dt.total_milliseconds()
        closes = (
            candidates.with_columns(
                (pl.col("first") + pl.duration(milliseconds=since // pl.col("_step") * pl.col("_step"))).alias("close")
            )
            .select(*key, "close")
            .unique()
            .sort("close")
        )
        inside = (
            closes.join_asof(
                chosen.sort("gap_start"),
                left_on="close",
                right_on="gap_start",
                by=key,
                strategy="backward",
                check_sortedness=False,  # both sorted by the key above, so within every group too
            )
            .filter(pl.col("gap_end").is_not_null(), pl.col("close") <= pl.col("gap_end"))
            .group_by(*key, "gap_start", "gap_end")
            .agg(
                pl.col("close").min().alias("first_missed"),
                pl.col("close").max().alias("last_missed"),
                pl.len().cast(pl.Int64).alias("missed"),
            )
        )
        parts.append(inside)
    schema = {
        "token": pl.String(),
        "interval": gaps.schema["interval"],
        "gap_start": gaps.schema["gap_start"],
        "gap_end": gaps.schema["gap_end"],
        "first_missed": gaps.schema["gap_start"],
        "last_missed": gaps.schema["gap_end"],
        "missed": pl.Int64(),
    }
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat([part.select(list(schema)).cast(schema) for part in parts])  # type: ignore[arg-type]


def describe(cadence: pl.DataFrame, rules: Dict[str, Rule]) -> str:
    """The summary's line on what the audit expected."""
    given = {rule for rule in rules.values()}
    if given == {EVERY}:
        return "cadence: every close expected (expect='every'), whatever the rounds could see"
    if len(given) == 1 and isinstance(next(iter(given)), int):
        every = dt.timedelta(milliseconds=next(iter(given)))  # type: ignore[arg-type]
        return f"cadence: every {show_every(every)} (given by expect=)"
    parts: List[str] = []
    if cadence.is_empty():
        parts.append("cadence: unknown (no rounds)")
    else:
        shown: List[Tuple[str, str, dt.datetime]] = [
            (show_every(row["every"]), row["source"], row["first_start"]) for row in cadence.iter_rows(named=True)
        ]
        sources = {source for _, source, _ in shown}
        if len({shown_every for shown_every, _, _ in shown}) == 1:
            why = (
                "recorded"
                if sources == {"recorded"}
                else "inferred from the rounds: no settings recorded"
                if sources == {"inferred"}
                else "recorded, or inferred from the rounds where no settings were recorded"
            )
            runs_note = f", over {len(shown)} runs" if len(shown) > 1 else ""
            parts.append(f"cadence: every {shown[0][0]} ({why}){runs_note}")
        else:
            parts.append(
                f"cadence: {len(shown)} runs with different cadences, each audited by its own: "
                + ", ".join(
                    f"every {shown_every} ({'inferred' if source == 'inferred' else 'recorded'}, from "
                    f"{start:%Y-%m-%d %H:%M})"
                    for shown_every, source, start in shown
                )
            )
    overrides = [  # the intervals the user named
        f"{interval} {'every close' if rule == EVERY else 'not expected' if rule == NONE else 'every ' + show_every(dt.timedelta(milliseconds=rule))}"  # type: ignore[arg-type]
        for interval, rule in rules.items()
        if rule is not None and interval in CANDLE_INTERVALS
    ]
    if overrides:
        parts.append("expect= " + ", ".join(overrides))
    return "; ".join(parts)
