"""The audit's day summaries: an audit stitched from them equals one computed from every row, on
random histories with what makes stitching hard (candles that span midnight, rounds that began
before midnight, stale fetches of old closes, repaints across days, holes, nulls), cold, warm,
after new rounds, after a compaction, and never from a summary cut off half-written."""

from __future__ import annotations

import datetime as dt
import itertools
import random
import shutil
import zlib
from pathlib import Path
from typing import Dict, List

import numpy as np
import polars as pl
import pytest
from deltalake import DeltaTable, write_deltalake

import defilens
from defilens._core import INTERVAL_MS
from defilens.history._layout import AUDIT_CACHE as CACHE
from defilens.history._tables import to_disk

UTC = dt.timezone.utc
START = dt.datetime(2026, 3, 2, tzinfo=UTC)  # a Monday
INTERVALS = {"5m": "5m", "1h": "1h", "4h": "4h", "1w": "1w"}
INDICATORS = ["rsi14", "sma20"]
TOKENS = ["alpha", "beta", "gamma", "delta"]
UTC_MS = pl.Datetime("ms", "UTC")


def _rounds(rng: random.Random, first: dt.datetime, hours: int, tidy: bool) -> List[dt.datetime]:
    """Fetch moments about every 40 minutes, with holes of a few hours unless ``tidy``."""
    moments = []
    now = first
    while now < first + dt.timedelta(hours=hours):
        moments.append(now)
        now += dt.timedelta(minutes=40, seconds=rng.randrange(0, 300))
        if not tidy and rng.random() < 0.05:
            now += dt.timedelta(hours=rng.randrange(2, 7))
    return moments


def _write(root: Path, moments: List[dt.datetime], rng: random.Random, tidy: bool) -> None:
    """One commit per round to ``indicators`` and ``ta_updated``, as collect makes them."""
    for fetched in moments:
        # A round that began before midnight carries the day before.
        began = fetched - dt.timedelta(minutes=3) if not tidy and rng.random() < 0.3 else fetched
        closes = []
        values = []
        for token in TOKENS:
            for interval, every in INTERVALS.items():
                close = pl.Series([fetched]).dt.truncate(every).item()
                if not tidy and token == "alpha" and rng.random() < 0.08:
                    # Stale: an old close, which tangles this token's days (recomputed from its rows).
                    close -= dt.timedelta(milliseconds=INTERVAL_MS[interval] * rng.randrange(1, 30))
                if not tidy and rng.random() < 0.02:
                    close = None
                closes.append((token, interval, close))
                for indicator in INDICATORS:
                    base = (
                        None
                        if close is None
                        else zlib.crc32(f"{token}{interval}{indicator}{close}".encode()) % 1000 / 10
                    )
                    if base is not None and not tidy and rng.random() < 0.1:
                        base += rng.choice([0.5, 1.5])  # repainted
                    if not tidy and rng.random() < 0.02:
                        base = None
                    values.append((token, interval, indicator, base))
        stamp = {"fetched_at": fetched, "date": began.date()}
        ta = pl.DataFrame(
            [{"token": t, "interval": i, "updated_at": c, **stamp} for t, i, c in closes],
            schema={
                "token": pl.String,
                "interval": pl.String,
                "updated_at": UTC_MS,
                "fetched_at": UTC_MS,
                "date": pl.Date,
            },
        )
        ind = pl.DataFrame(
            [{"token": t, "interval": i, "indicator": n, "value": v, **stamp} for t, i, n, v in values],
            schema={
                "token": pl.String,
                "interval": pl.String,
                "indicator": pl.String,
                "value": pl.Float64,
                "fetched_at": UTC_MS,
                "date": pl.Date,
            },
        )
        write_deltalake(str(root / "ta_updated"), to_disk(ta), mode="append", partition_by=["date"])
        write_deltalake(str(root / "indicators"), to_disk(ind), mode="append", partition_by=["date"])


def _cadence_reference(closes: pl.DataFrame) -> Dict[str, pl.DataFrame]:
    """Observable and missed closes, the plain way: these histories record no settings, so the
    cadence is the median time between a token's fetches; a token's fetches further apart than
    1.5 cadences lack the rounds between, on the cadence's grid; a close is observable when one of
    those rounds, or a fetch that did not show it (stale, or no close), fell in its window."""
    by_token: Dict[str, List[dt.datetime]] = {}
    for token, fetched in (
        closes.filter(pl.col("updated_at").is_not_null()).select("token", "fetched_at").unique().rows()
    ):
        by_token.setdefault(token, []).append(fetched)
    steps = []
    for moments in by_token.values():
        moments.sort()
        steps += [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(moments) if b > a]
    every = dt.timedelta(milliseconds=round(float(np.median(steps))))
    not_made: Dict[str, List[dt.datetime]] = {}
    for token, moments in by_token.items():
        for a, b in itertools.pairwise(moments):
            if b - a > 1.5 * every:
                for k in range(1, max(1, round((b - a) / every) - 1) + 1):
                    not_made.setdefault(token, []).append(a + k * every)
    rows = []
    gap_rows = []
    for (token, interval), group in closes.group_by("token", "interval"):
        length = dt.timedelta(milliseconds=INTERVAL_MS[str(interval)])
        seen = set(group["updated_at"].drop_nulls().to_list())
        if not seen:
            continue
        first, last = min(seen), max(seen)
        behind = [f for f, u in group.select("fetched_at", "updated_at").rows() if u is None or f - u > length]
        observable = set(seen)
        for moment in not_made.get(str(token), []) + behind:
            close = first + (moment - first) // length * length
            if first <= close <= last:
                observable.add(close)
        grid = [first + k * length for k in range((last - first) // length + 1)]
        run: List[dt.datetime] = []
        for close in grid + [None]:
            if close is not None and close not in seen:
                run.append(close)
                continue
            missed = [c for c in run if c in observable]
            if missed:
                gap_rows.append((token, interval, missed[0], missed[-1], len(missed)))
            run = []
        expected = len(grid)
        rows.append(
            (
                token,
                interval,
                expected,
                len(seen),
                expected - len(seen),
                len(observable),
                len(observable) - len(seen),
                expected - len(observable),
            )
        )
    coverage = pl.DataFrame(
        rows,
        schema={
            "token": pl.String,
            "interval": closes.schema["interval"],
            **dict.fromkeys(["expected", "seen", "missing", "observable", "missed", "unobservable"], pl.Int64),
        },
        orient="row",
    ).sort("token", "interval")
    gaps = pl.DataFrame(
        gap_rows,
        schema={
            "token": pl.String,
            "interval": closes.schema["interval"],
            "gap_start": UTC_MS,
            "gap_end": UTC_MS,
            "missing": pl.Int64,
        },
        orient="row",
    ).sort("token", "interval", "gap_start")
    return {"coverage": coverage, "gaps": gaps}


def _reference(root: Path) -> Dict[str, pl.DataFrame]:
    """The audit's frames computed from every row, the plain way."""
    step = pl.col("interval").cast(pl.String).replace_strict(INTERVAL_MS, return_dtype=pl.Int64)
    closes = defilens.scan(root, "ta_updated").filter(pl.col("updated_at").is_not_null()).collect()
    distinct = closes.select("token", "interval", "updated_at").unique().sort("token", "interval", "updated_at")
    coverage = (
        distinct.group_by("token", "interval")
        .agg(
            pl.col("updated_at").min().alias("first"),
            pl.col("updated_at").max().alias("last"),
            pl.len().cast(pl.Int64).alias("seen"),
        )
        .with_columns(((pl.col("last") - pl.col("first")).dt.total_milliseconds() // step + 1).alias("expected"))
        .select("token", "interval", "expected", "seen", (pl.col("expected") - pl.col("seen")).alias("missing"))
        .sort("token", "interval")
    )
    between = (pl.col("updated_at") - pl.col("updated_at").shift(1).over("token", "interval")).dt.total_milliseconds()
    gaps = (
        distinct.with_columns((between // step - 1).alias("missing"), step.alias("_step"))
        .filter(pl.col("missing") > 0)
        .select(
            "token",
            "interval",
            (pl.col("updated_at") - pl.duration(milliseconds=pl.col("_step") * (pl.col("missing")))).alias("gap_start"),
            (pl.col("updated_at") - pl.duration(milliseconds=pl.col("_step"))).alias("gap_end"),
            "missing",
        )
        .sort("token", "interval", "gap_start")
    )
    stale = (
        closes.with_columns((pl.col("fetched_at") - pl.col("updated_at")).alias("behind"))
        .filter(pl.col("behind").dt.total_milliseconds() > step)
        .select("token", "interval", "fetched_at", "updated_at", "behind")
        .sort("token", "interval", "fetched_at")
    )
    revisions = (
        defilens.panel(root)
        .filter(pl.col("revisions") > 1)
        .collect()
        .sort("token", "interval", "indicator", "candle_close")
    )
    every_close = {"coverage": coverage, "gaps": gaps}
    return {
        **_cadence_reference(defilens.scan(root, "ta_updated").collect()),
        "stale": stale,
        "revisions": revisions,
        "every_close": every_close,
    }


def _assert_every_close(report: defilens.Audit, reference: Dict[str, pl.DataFrame]) -> None:
    """With every close expected, the audit is the one of earlier versions."""
    expected = reference["every_close"]
    assert report.coverage.select(expected["coverage"].columns).equals(expected["coverage"])
    assert report.coverage["missed"].equals(report.coverage["missing"])
    assert report.gaps.equals(expected["gaps"])


def _assert_equal(report: defilens.Audit, reference: Dict[str, pl.DataFrame]) -> None:
    for name, expected in reference.items():
        if name == "every_close":
            continue
        found = getattr(report, name)
        assert found.schema == expected.schema, name
        assert found.equals(expected), (name, found, expected)


def _days_summarized(root: Path) -> int:
    return DeltaTable(str(root / CACHE / "days")).to_pyarrow_table().num_rows


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_stitched_audit_equals_one_from_every_row(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = tmp_path / "h"
    tidy = seed == 1
    _write(root, _rounds(rng, START + dt.timedelta(hours=20), 24 * 5, tidy), rng, tidy)
    reference = _reference(root)
    assert reference["revisions"].height or tidy
    cold = defilens.audit(root)
    _assert_equal(cold, reference)
    days = _days_summarized(root)
    assert days >= 5
    warm = defilens.audit(root)  # from the kept summaries alone
    _assert_equal(warm, reference)
    _assert_every_close(defilens.audit(root, expect="every"), reference)
    assert warm.cadence["source"].to_list() == ["inferred"]
    assert _days_summarized(root) == days
    assert defilens.audit(root, cache=False).coverage.equals(reference["coverage"])

    # A new day, and a late round in a day already summarized: those two days again, no other.
    last = defilens.scan(root, "ta_updated").select(pl.col("fetched_at").max()).collect().item()
    _write(root, _rounds(rng, last + dt.timedelta(hours=30), 6, tidy), rng, tidy)
    _write(root, [START + dt.timedelta(days=2, hours=5, minutes=7)], rng, tidy)
    reference = _reference(root)
    _assert_equal(defilens.audit(root), reference)
    assert _days_summarized(root) in (days + 2, days + 3)  # the new rounds may span midnight

    # A compaction rewrites every day's files: each is summarized again, to the same audit.
    defilens.compact(root)
    _assert_equal(defilens.audit(root), reference)


@pytest.mark.slow
def test_a_summary_cut_off_half_written_is_never_read(tmp_path: Path) -> None:
    rng = random.Random(7)
    root = tmp_path / "h"
    _write(root, _rounds(rng, START, 48, False), rng, False)
    reference = _reference(root)
    _assert_equal(defilens.audit(root), reference)
    # What an audit killed between its summaries and its `days` would leave: rows no day names.
    spans = pl.scan_delta(str(root / CACHE / "spans")).collect()
    forged = spans.with_columns(pl.lit("killed-audit").alias("audit"), pl.col("seen") * 0 + 1)
    write_deltalake(str(root / CACHE / "spans"), forged, mode="append")
    _assert_equal(defilens.audit(root), reference)


@pytest.mark.slow
def test_without_cache_nothing_is_written_and_a_read_only_root_still_audits(tmp_path: Path) -> None:
    rng = random.Random(8)
    root = tmp_path / "h"
    _write(root, _rounds(rng, START, 30, False), rng, False)
    reference = _reference(root)
    _assert_equal(defilens.audit(root, cache=False), reference)
    assert not (root / "_audit").exists()
    (root / "_audit").write_text("not a folder")  # summaries cannot be kept here
    with pytest.warns(UserWarning, match="could not be kept"):
        report = defilens.audit(root)
    _assert_equal(report, reference)


@pytest.mark.slow
def test_an_audit_on_a_full_disk_says_one_line_without_a_panic(tmp_path: Path) -> None:
    """The audit keeps its day summaries beside the history; on a disk that fills up while it
    writes them, delta-rs's object store panics on its way out. The audit is still complete: it
    prints its report and one warning, never Rust's panic text or a traceback."""
    import subprocess
    import sys

    from full_disk import fill, tmpfs

    with tmpfs(tmp_path / "disk", "4m") as disk:
        root = disk / "h"
        _write(root, _rounds(random.Random(3), START, 30, tidy=True), random.Random(3), tidy=True)
        for leave in (4, 8, 12, 16, 24, 32, 48, 64):
            fill(disk, leave * 1024)
            run = subprocess.run(
                [sys.executable, "-m", "defilens", "audit", str(root)], capture_output=True, text=True, timeout=300
            )
            assert "panicked" not in run.stderr and "Traceback" not in run.stderr, run.stderr
            assert run.returncode == 0, run.stderr
            lines = [line for line in run.stderr.splitlines() if line.strip()]
            assert len(lines) <= 1, run.stderr
            assert all(
                line.startswith("defilens: warning: the audit's day summaries could not be kept") for line in lines
            )
            assert "coverage:" in run.stdout
            # Another audit, with room again, keeps them.
            shutil.rmtree(root / CACHE.split("/")[0], ignore_errors=True)


@pytest.mark.slow
def test_days_summarized_one_at_a_time_and_kept_in_groups_give_the_same_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pass reads a day at most (memory follows a day, not the history) and summaries are
    kept a few days at a time: the audit, cold and warm, is the one computed from every row."""
    from defilens.research import _day_summaries

    rng = random.Random(2)
    root = tmp_path / "h"
    _write(root, _rounds(rng, START + dt.timedelta(hours=20), 24 * 5, False), rng, False)
    reference = _reference(root)
    passes: List[List[dt.date]] = []
    summarize = _day_summaries.summarize
    monkeypatch.setattr(_day_summaries, "BATCH_ROWS", 1)
    monkeypatch.setattr(_day_summaries, "KEEP_ROWS", 3000)
    monkeypatch.setattr(
        _day_summaries, "summarize", lambda sources, dates: passes.append(dates) or summarize(sources, dates)
    )
    _assert_equal(defilens.audit(root), reference)
    days = _days_summarized(root)
    assert days >= 5 and all(len(dates) == 1 for dates in passes) and len(passes) == days
    audits = pl.scan_delta(str(root / CACHE / "days")).select(pl.col("audit").n_unique()).collect().item()
    assert audits == 1
    commits = len(DeltaTable(str(root / CACHE / "days")).history())
    assert 2 <= commits < days  # kept in groups of days: more than one append, fewer than one a day
    passes.clear()
    _assert_equal(defilens.audit(root), reference)
    assert passes == []
