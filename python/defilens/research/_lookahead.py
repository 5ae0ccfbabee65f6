"""The look-ahead check: a study re-run on its history cut at several moments, and every value it
claimed known before a cut that the cut history does not give flagged.

A value known at ``t`` depends on nothing fetched after ``t``, so cutting the history after ``t``
cannot change it. Repaints change ``last_value``, never ``value`` (the value as first seen), so
the check compares ``value`` by default. The cut is applied where defilens reads a history's
tables (`scan`, `panel`, `asof`, `decision_times`, `forward_returns`): a study that reads the
Delta files another way is not cut, and the check refuses it rather than pass it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, Optional, Sequence, Union

import polars as pl

from .._exceptions import HistoryError
from .._storage import PathLike
from ..history import history_cut_at, open_for_reading
from ._labels import fetch_span

UTC_MS = pl.Datetime("ms", "UTC")
Study = Callable[[Any], Union[pl.DataFrame, pl.LazyFrame]]
#: The columns a row's claimed moment is read from, in order of preference.
KNOWABLE_COLUMNS = ("at", "first_seen_at", "fetched_at")
#: Columns that name a series: with the token and the moment, they key a study's rows.
SERIES_COLUMNS = ("interval", "indicator", "family", "pattern")
#: How far apart two floats may be and still count as the same value (summation order).
RELATIVE_TOLERANCE = 1e-9

NEEDS_LATER = "needs later rows"  # claimed known before the cut, but the cut history cannot give it
CHANGED = "changed"  # given by both, with different values
ONLY_IN_CUT = "only in the cut history"  # the cut history gives a row the whole history does not


@dataclass
class LookaheadReport:
    """What `lookahead_check` found. ``ok`` is true when no cut changed anything claimed known
    before it. ``cuts``: per cut moment, the rows checked and flagged; ``flagged``: each value
    that moved (``cut``, the keys, the claimed moment, ``value_whole``, ``value_cut`` per checked
    column, ``problem``)."""

    knowable: str
    keys: List[str]
    values: List[str]
    cuts: pl.DataFrame
    flagged: pl.DataFrame

    @property
    def ok(self) -> bool:
        return self.flagged.height == 0

    def __str__(self) -> str:
        cut_count = self.cuts.height
        checked = int(self.cuts["checked"].sum())
        if self.ok:
            return (
                f"look-ahead check passed: {checked:,} rows claimed known before {cut_count} cuts of the history, "
                f"each unchanged when the rows after its cut were removed (compared: {', '.join(self.values)}; "
                f"moment: {self.knowable})"
            )
        bad = self.cuts.filter(pl.col("flagged") > 0)
        first = self.flagged.row(0, named=True)
        what = ", ".join(f"{k}={first[k]}" for k in self.keys if k != self.knowable)
        problems = self.flagged.group_by("problem").len().sort("len", descending=True)
        counts = "; ".join(f"{n:,} {p}" for p, n in problems.iter_rows())
        return "\n".join(
            [
                f"LOOK-AHEAD: {self.flagged.height:,} values claimed known before a cut change when the rows after it "
                f"are removed ({bad.height} of {cut_count} cuts; {counts})",
                f"first: {what} claimed known at {first[self.knowable]} (cut at {first['cut']}): {first['problem']}",
                f"the study reads rows fetched after the moment it stamps on its values (moment: {self.knowable!r}; "
                "a candle's close read as its open is the usual cause): see .flagged",
            ]
        )

    def __repr__(self) -> str:
        return self.__str__()

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"


def _frame(result: Any, where: str) -> pl.DataFrame:
    if isinstance(result, pl.LazyFrame):
        result = result.collect()
    if not isinstance(result, pl.DataFrame):
        raise TypeError(
            f"the study must return a polars DataFrame or LazyFrame, {where} it returned {type(result).__name__}"
        )
    return result


def _span(source: PathLike, storage_options: Optional[Mapping[str, Any]]) -> "tuple[dt.datetime, dt.datetime]":
    root = open_for_reading(source, storage_options)
    first, last = fetch_span(root)
    if first is None or last is None or first == last:
        raise HistoryError(f"the history at {root.url!r} has fewer than two rounds: there is nothing to cut")
    return first, last


def cut_moments(first: dt.datetime, last: dt.datetime, cuts: int) -> List[dt.datetime]:
    """``cuts`` moments spread over the history, none on a round's time: each falls a little past
    an even fraction of the span, so a value stamped at a candle's open is caught whatever the
    cadence (the candle in which a cut falls was opened before it and closes after it)."""
    span = last - first
    return [first + span * (index + 1) / (cuts + 1) + dt.timedelta(seconds=97 + 13 * index) for index in range(cuts)]


def lookahead_check(
    study: Study,
    source: PathLike,
    *,
    cuts: Union[int, Sequence[dt.datetime]] = 6,
    knowable: Optional[str] = None,
    keys: Optional[Sequence[str]] = None,
    values: Optional[Sequence[str]] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> LookaheadReport:
    """Runs ``study(source)`` on the whole history, then on the history cut at each of ``cuts``
    moments (an int spreads that many over it; or give the moments), and flags every value the
    study claimed known at or before a cut that the cut history does not give identically.

    ``study`` takes the history's path and returns a frame of signals; it must read the history
    through defilens (`scan`, `panel`, `asof`, `decision_times`, `forward_returns`), which the
    check cuts. ``knowable`` is the column holding the moment each row claims to be known at
    (default: ``at``, else ``first_seen_at``, else ``fetched_at``); ``keys`` identify a row
    (default: ``token``, the moment, and whichever of interval, indicator, family, pattern are
    there); ``values`` are compared (default ``value``, else every other column). Labels (forward
    returns) look ahead by design: check the signal, not the labelled frame.
    """
    if not callable(study):
        raise TypeError(f"study must be a function of the history's path, got {type(study).__name__}")
    whole = _frame(study(source), "on the whole history")
    knowable = knowable or next((c for c in KNOWABLE_COLUMNS if c in whole.columns), None)
    if knowable is None or knowable not in whole.columns:
        raise ValueError(
            f"the study's frame has no {knowable or ' or '.join(KNOWABLE_COLUMNS)} column: name the column holding "
            f"the moment each row is known at with knowable=; its columns are {', '.join(whole.columns)}"
        )
    if not isinstance(whole.schema[knowable], pl.Datetime):
        raise TypeError(f"the study's {knowable!r} must hold datetimes, got {whole.schema[knowable]}")
    key_columns = (
        list(keys) if keys is not None else ["token", knowable, *[c for c in SERIES_COLUMNS if c in whole.columns]]
    )
    value_columns = (
        list(values)
        if values is not None
        else (["value"] if "value" in whole.columns else [c for c in whole.columns if c not in key_columns])
    )
    for column in [*key_columns, *value_columns]:
        if column not in whole.columns:
            raise ValueError(f"the study's frame has no {column!r} column; its columns are {', '.join(whole.columns)}")
    if not value_columns:
        raise ValueError("nothing to compare: the study's frame has only key columns (give values=)")
    if whole.height == 0:
        raise ValueError("the study gave no rows on the whole history: there is nothing to check")
    duplicated = whole.select(key_columns).is_duplicated().sum()
    if duplicated:
        raise ValueError(
            f"{duplicated:,} rows of the study share their keys {key_columns}: give keys= that identify a row"
        )

    if isinstance(cuts, int) and not isinstance(cuts, bool):
        if cuts < 1:
            raise ValueError(f"cuts must be 1 or more, got {cuts}")
        first, last = _span(source, storage_options)
        moments = cut_moments(first, last, cuts)
    else:
        moments = [m if m.tzinfo is not None else m.replace(tzinfo=dt.timezone.utc) for m in cuts]  # type: ignore[union-attr]
        if not moments:
            raise ValueError("cuts is empty: give a number of cuts or the moments to cut at")

    claimed = pl.col(knowable).cast(UTC_MS)
    rows: List[dict] = []
    flagged: List[pl.DataFrame] = []
    for moment in moments:
        with history_cut_at(moment) as cut:
            shorter = _frame(study(source), f"cut at {moment}")
        if cut.reads == 0:
            raise HistoryError(
                "the study read no table through defilens, so the check cannot cut its history: read it with "
                "defilens.scan, panel, asof, decision_times or forward_returns"
            )
        for column in [*key_columns, *value_columns]:
            if column not in shorter.columns:
                raise ValueError(f"on the history cut at {moment} the study's frame has no {column!r} column")
        before = whole.filter(claimed <= moment).select(*key_columns, *value_columns)
        before_cut = shorter.filter(pl.col(knowable).cast(UTC_MS) <= moment).select(*key_columns, *value_columns)
        found = _compare(before, before_cut, key_columns, value_columns)
        if found.height:
            flagged.append(found.with_columns(pl.lit(moment).cast(UTC_MS).alias("cut")))
        rows.append({"cut": moment, "checked": before.height, "flagged": found.height})
    cuts_frame = pl.DataFrame(rows, schema={"cut": UTC_MS, "checked": pl.Int64, "flagged": pl.Int64})
    flagged_frame = (
        pl.concat(flagged, how="diagonal_relaxed").select("cut", pl.all().exclude("cut"))
        if flagged
        else pl.DataFrame(schema={"cut": UTC_MS, "problem": pl.String})
    )
    return LookaheadReport(knowable, key_columns, value_columns, cuts_frame, flagged_frame)


def _compare(whole: pl.DataFrame, cut: pl.DataFrame, keys: List[str], values: List[str]) -> pl.DataFrame:
    joined = whole.with_columns(pl.lit(True).alias("_whole")).join(
        cut.with_columns(pl.lit(True).alias("_cut")),
        on=keys,
        how="full",
        coalesce=True,
        suffix="_cut",
        nulls_equal=True,
    )
    differs = pl.lit(False)
    for column in values:
        a, b = pl.col(column), pl.col(f"{column}_cut")
        same = (a.is_null() & b.is_null()) | (a == b).fill_null(False)
        if whole.schema[column].is_float():
            close = (a - b).abs() <= RELATIVE_TOLERANCE * pl.max_horizontal(a.abs(), b.abs())
            same = same | (a.is_nan() & b.is_nan()).fill_null(False) | close.fill_null(False)
        differs = differs | ~same
    problem = (
        pl.when(pl.col("_cut").is_null())
        .then(pl.lit(NEEDS_LATER))
        .when(pl.col("_whole").is_null())
        .then(pl.lit(ONLY_IN_CUT))
        .when(differs)
        .then(pl.lit(CHANGED))
    )
    out = joined.with_columns(problem.alias("problem")).filter(pl.col("problem").is_not_null())
    renames = {column: f"{column}_whole" for column in values}
    return out.drop("_whole", "_cut").rename(renames).sort(keys)
