"""A history at scale: compaction, the raw archive and re-parsing it, and other engines reading it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Dict

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import defilens
from defilens import _history
from defilens._collect import write_round
from defilens._frames import FRAME_NAMES
from defilens.testing import Sandbox

UTC = dt.timezone.utc
START = dt.datetime(2026, 1, 1, 20, 0, tzinfo=UTC)
TOKENS = ["bitcoin", "ethereum", "dogecoin", "unknown-coin"]
# Late on the 3rd: days 1 and 2 are closed, day 3 is the one a collect would be writing.
NOW = dt.datetime(2026, 1, 3, 22, 0, tzinfo=UTC)


def _write_history(folder: Path, rounds: int = 12, step: str = "4h", raw: bool = True) -> None:
    """``rounds`` rounds over simulated time, written as `collect` writes them."""
    with Sandbox(now=START, seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url, api_key="k")
        for number in range(rounds):
            frames = client.fetch(TOKENS, progress=False)
            write_round(frames, folder, sandbox.now, number, raw=raw)
            sandbox.advance(step)


def _everything(folder: Path) -> Dict[str, pl.DataFrame]:
    """Every frame of the history in a fixed order: day, then token and fetch time, ties in the
    order the rounds were written (what compaction keeps)."""
    result = {}
    for name in (*FRAME_NAMES, "raw"):
        frame = defilens.scan(folder, name).collect()
        keys = [k for k in ("date", "token", "fetched_at") if k in frame.columns]
        result[name] = frame.sort(keys, maintain_order=True)
    return result


def _files(folder: Path) -> Dict[str, list]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*.parquet"))}


@pytest.fixture
def history(tmp_path: Path) -> Path:
    folder = tmp_path / "history"
    _write_history(folder)
    return folder


def test_compaction_keeps_every_row_and_leaves_open_days_alone(history: Path) -> None:
    before, files_before = _everything(history), _files(history)
    open_day = {k: v for k, v in files_before.items() if "date=2026-01-03" in k}
    report = defilens.compact(history, now=NOW)
    assert report["partitions"] == 2 * (len(FRAME_NAMES) + 1)
    assert report["skipped_open"] == len(FRAME_NAMES) + 1
    files_after = _files(history)
    assert {k: v for k, v in files_after.items() if "date=2026-01-03" in k} == open_day
    for name in (*FRAME_NAMES, "raw"):
        for day in ("2026-01-01", "2026-01-02"):
            assert [p.name for p in (history / name / f"date={day}").iterdir()] == ["compacted.parquet"]
    after = _everything(history)
    for name in before:
        assert_frame_equal(before[name], after[name], check_dtypes=True), name
    assert not (history / ".compacting").exists()
    # Idempotent: nothing left to do, nothing touched.
    assert defilens.compact(history, now=NOW)["partitions"] == 0
    assert _files(history) == files_after


def test_a_day_that_received_more_files_is_compacted_again(history: Path) -> None:
    defilens.compact(history, now=NOW)
    with Sandbox(now="2026-01-02T23:30:00Z", seed=5) as sandbox:
        late = defilens.Client(base_url=sandbox.url).fetch(["solana"], progress=False)
    write_round(late, history, dt.datetime(2026, 1, 2, 23, 30, tzinfo=UTC), 99, raw=True)
    before = _everything(history)
    assert defilens.compact(history, now=NOW)["partitions"] == len(FRAME_NAMES) + 1
    after = _everything(history)
    for name in before:
        assert_frame_equal(before[name], after[name]), name


@pytest.mark.parametrize("when", ["before the swap", "after the swap"])
def test_an_interrupted_compaction_loses_and_doubles_nothing(
    history: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    before = _everything(history)
    swap = _history._swap

    def crash(staged: Path, partition: Path) -> None:
        if when == "after the swap":
            swap(staged, partition)
        raise KeyboardInterrupt

    monkeypatch.setattr(_history, "_swap", crash)
    with pytest.raises(KeyboardInterrupt):
        defilens.compact(history, now=NOW)
    # What a reader sees right after the crash: the same rows.
    middle = _everything(history)
    for name in before:
        assert_frame_equal(before[name], middle[name]), name
    monkeypatch.setattr(_history, "_swap", swap)
    defilens.compact(history, now=NOW)
    after = _everything(history)
    for name in before:
        assert_frame_equal(before[name], after[name]), name
    assert not (history / ".compacting").exists()


def test_reparse_rebuilds_the_frames_that_were_written(history: Path) -> None:
    written = _everything(history)
    for compacted in (False, True):
        if compacted:
            defilens.compact(history, now=NOW)
        rebuilt = defilens.reparse(history)
        for name in FRAME_NAMES:
            if name == "log":
                assert rebuilt.log.height == 0
                continue
            ours = getattr(rebuilt, name)
            keys = [k for k in ("token", "fetched_at") if k in ours.columns]
            expected = written[name].drop("date").sort(keys, maintain_order=True)
            assert_frame_equal(ours.sort(keys, maintain_order=True), expected, check_column_order=False), name
    assert written["raw"].height > 0
    assert written["snapshot"].height == 12 * 3


def test_reparse_needs_a_raw_archive(tmp_path: Path) -> None:
    _write_history(tmp_path / "plain", rounds=2, raw=False)
    with pytest.raises(FileNotFoundError, match="raw=True"):
        defilens.reparse(tmp_path / "plain")


def test_duckdb_reads_the_same_rows_as_scan(history: Path) -> None:
    for compacted in (False, True):
        if compacted:
            defilens.compact(history, now=NOW)
        ours = defilens.scan(history, "indicators").filter(pl.col("indicator") == "rsi14").collect()
        query = (
            "select token, count(*) as n, sum(value) as total from read_parquet("
            f"'{history}/indicators/**/*.parquet', hive_partitioning = true) "
            "where indicator = 'rsi14' group by token order by token"
        )
        theirs = duckdb.sql(query).fetchall()
        expected = ours.group_by("token").agg(pl.len().alias("n"), pl.col("value").sum().alias("total")).sort("token")
        assert [row[:2] for row in theirs] == list(zip(expected["token"], expected["n"], strict=True))
        assert [row[2] for row in theirs] == pytest.approx(expected["total"].to_list(), rel=1e-12)
        assert sum(row[1] for row in theirs) == ours.height > 0


def test_collect_keeps_raw_bodies_and_compacts(tmp_path: Path) -> None:
    with Sandbox() as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        client.collect(["bitcoin", "ethereum"], "0.05s", count=3, out=tmp_path, raw=True, compact=True)
    raw = defilens.scan(tmp_path, "raw").collect()
    assert raw.height == 3 * 4
    assert set(raw["endpoint"]) == {"listing", "markets"}
    assert raw["status"].to_list() == [200] * 12
    assert defilens.reparse(tmp_path).snapshot.height == 6


def test_cli_compact(history: Path, capsys: pytest.CaptureFixture) -> None:
    from defilens._cli import main

    assert main(["compact", str(history)]) == 0
    out = capsys.readouterr().out
    assert "compacted 30 day partitions" in out and "files became 30" in out
    assert main(["compact", str(history / "nowhere")]) == 1


def test_replay_serves_the_recorded_bodies_by_time(history: Path) -> None:
    written = _everything(history)
    rounds = written["snapshot"].group_by("date", "fetched_at").agg().sort("fetched_at")
    first_round = written["raw"].filter(pl.col("round_start") == written["raw"]["round_start"].min())
    round_starts = sorted(written["raw"]["round_start"].unique())
    start = first_round["fetched_at"].max()
    second = written["raw"].filter(pl.col("round_start") == round_starts[1])["fetched_at"].max()
    assert rounds.height > 2
    with Sandbox.replay(history) as replay:
        client = defilens.Client(base_url=replay.url)
        # The clock starts when the first round had been fetched whole, and stands still.
        assert replay.now == start
        frames = client.fetch(["bitcoin", "ethereum", "solana"], progress=False)
        # The ids recorded are served as recorded; an id that was never recorded is not found.
        assert sorted(frames.snapshot["token"]) == ["bitcoin", "ethereum"]
        assert frames.errors.filter(pl.col("token") == "solana")["kind"].unique().to_list() == ["not_found"]
        recorded = (
            written["snapshot"].filter(pl.col("fetched_at") <= start, pl.col("token") != "dogecoin").sort("token")
        )
        assert frames.snapshot.sort("token")["current_price"].to_list() == recorded["current_price"].to_list()
        replay.advance(second - start)
        later = client.fetch(["bitcoin"], markets=False, progress=False).snapshot["current_price"].item()
        in_round_two = written["snapshot"].filter(pl.col("token") == "bitcoin", pl.col("fetched_at") > start)
        assert later == in_round_two.sort("fetched_at")["current_price"][0]
    early = Sandbox.replay(history / "raw", now="2025-12-31T00:00:00Z")
    with early, pytest.warns(defilens.DefiLensWarning, match="not in the recording"):
        assert defilens.Client(base_url=early.url).fetch(["bitcoin"], progress=False).snapshot.height == 0
    with Sandbox.replay(history, error_rate=1.0) as failing, pytest.warns(defilens.DefiLensWarning):
        failed = defilens.Client(base_url=failing.url, max_retries=0).fetch(["bitcoin"], progress=False)
        assert failed.errors["kind"].unique().to_list() == ["server"]


def test_replay_of_written_frames_and_the_fixture(tmp_path: Path, defilens_replay) -> None:
    with Sandbox(now="2026-05-01T00:00:00Z") as sandbox:
        recorded = defilens.Client(base_url=sandbox.url).fetch(["bitcoin", "solana"], progress=False)
    recorded.write(tmp_path / "frames", raw=True)
    replay = defilens_replay(tmp_path / "frames")
    again = defilens.Client(base_url=replay.url).fetch(["bitcoin", "solana"], progress=False)
    for name in ("indicators", "patterns", "markets", "info"):
        (
            assert_frame_equal(
                getattr(again, name).drop("fetched_at", strict=True),
                getattr(recorded, name).drop("fetched_at", strict=True),
            ),
            name,
        )
    with pytest.raises(FileNotFoundError, match="no recorded responses"):
        Sandbox.replay(tmp_path / "nothing-here")


def test_cli_sandbox_replay(history: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "defilens", "sandbox", "--replay", str(history)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        # The clock starts at the first recorded fetch and stands still.
        assert "replaying" in line and "standing still" in line, line
        url = line.split(" at ")[1].split()[0]
        assert defilens.Client(base_url=url).fetch(["bitcoin"], progress=False).snapshot.height == 1
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
