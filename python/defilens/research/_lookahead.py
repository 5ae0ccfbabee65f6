"""The look-ahead check: a study re-run on its history cut at moments it makes claims about, and
every value it claimed known before a cut that the cut history does not give flagged.

A value known at ``t`` depends on nothing fetched after ``t``, so cutting the history after ``t``
cannot change it. The cuts are taken where the study makes claims: at a sample of the moments it
stamps on its rows, and just before the round after each (the last moment a value stamped there
could have been computed at), so that a value that needs one round more than it claims is caught
whatever the history's cadence and phase. A cut history behaves as the history would have at its
cut (its "now" is the cut: `decision_times` runs up to it). Every column the study returns is
compared but its keys and the columns that describe later fetches by design (``last_value``,
``revisions``, ...). The cut applies where defilens reads a history's tables; a study that reads
the files another way (polars', DuckDB's or deltalake's readers, pyarrow, pandas on the root) is
refused while it is checked, never passed."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

import polars as pl

from .._exceptions import HistoryError
from .._read_guard import guarded
from .._storage import PathLike, Root
from .._time import UTC_MS, aware
from ..history import history_cut_at, open_for_reading, scan_table

Study = Callable[[Any], Union[pl.DataFrame, pl.LazyFrame]]
#: The columns a row's claimed moment is read from, in order of preference.
KNOWABLE_COLUMNS = ("at", "first_seen_at", "fetched_at")
#: Columns that name a series: with the token and the moment, they key a study's rows.
SERIES_COLUMNS = ("interval", "indicator", "family", "pattern")
#: Columns that describe later fetches by design (the panel's and the universe's): not compared
#: unless named in ``values``.
LATER_COLUMNS = ("last_value", "revisions", "last_seen_at", "shown", "fetches", "withdrawn", "valid_to")
#: How far apart two floats may be and still count as the same value (summation order).
RELATIVE_TOLERANCE = 1e-9
#: A cut "just before the round after" a moment: this long before that round's first fetch.
BEFORE_THE_ROUND = dt.timedelta(milliseconds=1)

NEEDS_LATER = "needs later rows"  # claimed known before the cut, but the cut history cannot give it
CHANGED = "changed"  # given by both, with different values
ONLY_IN_CUT = "only in the cut history"  # the cut history gives a row the whole history does not


@dataclass
class LookaheadReport:
    """What `lookahead_check` found. ``ok`` is true when no cut changed anything claimed known
    before it. ``cuts``: per cut, the claimed moment it was taken for (``claimed``), the ``cut``
    itself, and the rows checked and flagged; ``flagged``: each value that moved (``cut``, the
    keys, the claimed moment, ``<column>_whole`` and ``<column>_cut`` per compared column,
    ``problem``). ``values`` are the columns compared, ``not_compared`` those left out because
    they describe later fetches by design."""

    knowable: str
    keys: List[str]
    values: List[str]
    cuts: pl.DataFrame
    flagged: pl.DataFrame
    not_compared: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.flagged.height == 0

    def __str__(self) -> str:
        cut_count = self.cuts.height
        checked = int(self.cuts["checked"].sum())
        moments = self.cuts["claimed"].n_unique()
        compared = f"compared: {', '.join(self.values)}" + (
            f"; not compared (later fetches by design): {', '.join(self.not_compared)}" if self.not_compared else ""
        )
        if self.ok:
            return (
                f"look-ahead check passed: {checked:,} rows claimed known before {cut_count} cuts (at {moments} of the "
                f"study's {self.knowable!r} moments and just before the round after each), each unchanged when the rows "
                f"after its cut were removed ({compared})"
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
                f"{compared}; a candle's close read as its open is the usual cause): see .flagged",
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


def cut_moments(root: Root, claimed: pl.Series, count: int) -> List[Tuple[dt.datetime, dt.datetime]]:
    """(claimed moment, cut) pairs: ``count`` of the study's distinct claimed moments, spread over
    them, each cut at itself and just before the round after it (the first fetch after it, less
    `BEFORE_THE_ROUND`), where a value that needs one more round than it claims is caught."""
    distinct = claimed.unique().sort().drop_nulls()
    if distinct.len() == 0:
        return []
    positions = sorted({round(index * (distinct.len() - 1) / max(1, count - 1)) for index in range(count)})
    chosen = [distinct[position] for position in positions]
    fetched = scan_table(root, "snapshot").select(pl.col("fetched_at").unique().sort()).collect()["fetched_at"]
    pairs: List[Tuple[dt.datetime, dt.datetime]] = []
    for moment in chosen:
        pairs.append((moment, moment))
        after = fetched.search_sorted(moment, side="right")
        if after < fetched.len():
            before_next = fetched[after] - BEFORE_THE_ROUND
            if before_next > moment:
                pairs.append((moment, before_next))
    return pairs


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
    """Runs ``study(source)`` on the whole history, then on the history cut at moments it makes
    claims about, and flags every value the study claimed known at or before a cut that the cut
    history does not give identically.

    ``cuts``: how many of the study's claimed moments to cut at (spread over them; each is cut at
    itself and just before the round after it, so 6 re-runs the study up to 12 times), or the
    moments to cut at. A cut history behaves as the history would have at the cut: its reads
    through defilens see only the rows fetched by then, and `decision_times` runs up to the cut.

    ``study`` takes the history's path and returns a frame of signals; it must read the history
    through defilens (`scan`, `panel`, `asof`, `decision_times`, `forward_returns`, `universe`),
    which the check cuts: a read of the history's files by another reader while it is checked
    (polars' ``scan_delta`` or ``scan_parquet``, deltalake, pyarrow, pandas, DuckDB, ``open``) is
    refused with a `HistoryError`. ``knowable`` is the column holding the moment each row claims
    to be known at (default: ``at``, else ``first_seen_at``, else ``fetched_at``); ``keys``
    identify a row (default: ``token``, the moment, and whichever of interval, indicator, family,
    pattern are there); ``values`` are compared (default: every other column but those that
    describe later fetches by design, `LATER_COLUMNS`; the report names both). Labels (forward
    returns) look ahead by design: check the signal, not the labelled frame.
    """
    if not callable(study):
        raise TypeError(f"study must be a function of the history's path, got {type(study).__name__}")
    if isinstance(cuts, bool) or (isinstance(cuts, int) and cuts < 1):
        raise ValueError(f"cuts must be 1 or more, or the moments to cut at, got {cuts!r}")
    root = open_for_reading(source, storage_options)
    with guarded(root.url, root.is_local) as guard:
        try:
            return _checked(study, source, root, cuts, knowable, keys, values)
        finally:
            if guard.refused:
                raise HistoryError(guard.refused[0]) from None


def _checked(
    study: Study,
    source: PathLike,
    root: Root,
    cuts: Union[int, Sequence[dt.datetime]],
    knowable: Optional[str],
    keys: Optional[Sequence[str]],
    values: Optional[Sequence[str]],
) -> LookaheadReport:
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
    others = [c for c in whole.columns if c not in key_columns]
    value_columns = list(values) if values is not None else [c for c in others if c not in LATER_COLUMNS]
    not_compared = [] if values is not None else [c for c in others if c in LATER_COLUMNS]
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

    claimed = pl.col(knowable).cast(UTC_MS)
    if isinstance(cuts, int):
        pairs = cut_moments(root, whole.select(claimed)[knowable], cuts)
    else:
        given = [aware(m) for m in cuts]
        if not given:
            raise ValueError("cuts is empty: give a number of cuts or the moments to cut at")
        pairs = [(moment, moment) for moment in given]
    rows: List[dict] = []
    flagged: List[pl.DataFrame] = []
    for moment, cut_at in pairs:
        with history_cut_at(cut_at) as cut:
            shorter = _frame(study(source), f"cut at {cut_at}")
        if cut.reads == 0:
            raise HistoryError(
                "the study read no table through defilens, so the check cannot cut its history: read it with "
                "defilens.scan, panel, asof, decision_times or forward_returns"
            )
        for column in [*key_columns, *value_columns]:
            if column not in shorter.columns:
                raise ValueError(f"on the history cut at {cut_at} the study's frame has no {column!r} column")
        before = whole.filter(claimed <= cut_at).select(*key_columns, *value_columns)
        before_cut = shorter.filter(pl.col(knowable).cast(UTC_MS) <= cut_at).select(*key_columns, *value_columns)
        found = _compare(before, before_cut, key_columns, value_columns)
        if found.height:
            flagged.append(found.with_columns(pl.lit(cut_at).cast(UTC_MS).alias("cut")))
        rows.append({"claimed": moment, "cut": cut_at, "checked": before.height, "flagged": found.height})
    cuts_frame = pl.DataFrame(rows, schema={"claimed": UTC_MS, "cut": UTC_MS, "checked": pl.Int64, "flagged": pl.Int64})
    flagged_frame = (
        pl.concat(flagged, how="diagonal_relaxed").select("cut", pl.all().exclude("cut"))
        if flagged
        else pl.DataFrame(schema={"cut": UTC_MS, "problem": pl.String})
    )
    return LookaheadReport(knowable, key_columns, value_columns, cuts_frame, flagged_frame, not_compared)


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
