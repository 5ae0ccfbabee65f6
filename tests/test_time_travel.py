"""Time travel never answers wrong: a moment or version that the kept log does not reach, or that
is before a table's first round, raises `HistoryError` saying how far time travel reaches, and
what it answers is the table as it was. Log cleanup is driven with real file ages: the log's
files are made hours old and `defilens.compact` with a one-hour retention removes them."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import polars as pl
import pytest

# The moto server on loopback and a fresh bucket in it, as the object storage tests have them.
import defilens
from defilens.history import versions
from defilens.history._root import root_of
from defilens.history._tables import create, frame_schema, to_disk
from defilens.testing import Sandbox

UTC = dt.timezone.utc
TOKENS = ["bitcoin", "ethereum"]
SECONDS_PER_HOUR = 3600
CLI = [sys.executable, "-m", "defilens"]
Options = Optional[Dict[str, str]]


def _collect(root: Path, rounds: int) -> int:
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        return client.collect(
            TOKENS, "0.01s", count=rounds, out=root, raw=False, on_round=lambda n, f: sandbox.advance("1h")
        )


def _show(moment: dt.datetime) -> str:
    """How the errors write a moment."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _log_versions(table: Path) -> List[int]:
    return sorted(int(name[:20]) for name in os.listdir(table / "_delta_log") if re.fullmatch(r"\d{20}\.json", name))


def _created(table: Path) -> dt.datetime:
    """When the table was created, as its metadata records it (kept by every checkpoint)."""
    from deltalake import DeltaTable

    return dt.datetime.fromtimestamp(DeltaTable(str(table)).metadata().created_time / 1000, UTC)


def _checkpoints(table: Path) -> List[int]:
    names = os.listdir(table / "_delta_log")
    return sorted(int(name[:20]) for name in names if re.fullmatch(r"\d{20}\.checkpoint\.parquet", name))


def _age_log(table: Path, hours: float) -> None:
    """Makes every file of the table's log ``hours`` old, as if written then."""
    then = time.time() - hours * SECONDS_PER_HOUR
    for name in os.listdir(table / "_delta_log"):
        os.utime(table / "_delta_log" / name, (then, then))


def test_a_moment_before_the_first_round_or_the_table_raises(tmp_path: Path) -> None:
    root = tmp_path / "h"
    long_ago = dt.datetime(2020, 1, 1)  # naive: UTC
    # The table is created empty (as collect's first commit to it does), then its first round lands.
    create(root_of(root), "snapshot", to_disk(pl.DataFrame(schema=frame_schema("snapshot"))))
    time.sleep(0.05)
    _collect(root, 2)
    listed = versions(root, "snapshot")
    assert listed.get_column("version").to_list() == [0, 1, 2]
    created, first_round = listed.row(0, named=True), listed.row(1, named=True)
    assert created["rows_added"] == 0 and created["round"] is None
    assert first_round["round"] == 0 and first_round["rows_added"] == 2
    between = created["committed_at"] + (first_round["committed_at"] - created["committed_at"]) / 2
    assert created["committed_at"] < between < first_round["committed_at"]

    for moment, why in ((long_ago, "the table was created"), (between, "no round had been committed")):
        with pytest.raises(defilens.HistoryError) as raised:
            defilens.scan(root, "snapshot", as_of=moment)
        message = str(raised.value)
        assert f"reaches back to {_show(first_round['committed_at'])} (version 1)" in message, message
        assert why in message and f"created {_show(_created(root / 'snapshot'))}" in message, message

    # from the first round's commit on, the rows committed by then
    assert defilens.scan(root, "snapshot", as_of=first_round["committed_at"]).collect().height == 2
    assert defilens.scan(root, "snapshot", as_of=dt.datetime.now(UTC)).collect().height == 4
    # version 0 is the table's creation: empty, as every Delta reader has it
    assert defilens.scan(root, "snapshot", as_of=0).collect().height == 0
    assert defilens.scan(root, "snapshot", as_of=1).collect().height == 2


def test_a_version_past_the_newest_says_which_is_the_newest(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 2)
    with pytest.raises(defilens.HistoryError, match=r"has no version 3: the newest version is 2$"):
        defilens.scan(root, "snapshot", as_of=3)
    with pytest.raises(defilens.HistoryError, match="the newest version is 2"):
        defilens.scan(root, "snapshot", as_of=10_000)
    with pytest.raises(ValueError, match=">= 0"):
        defilens.scan(root, "snapshot", as_of=-1)


@pytest.mark.slow
def test_after_log_cleanup_a_moment_older_than_what_is_kept_raises(tmp_path: Path) -> None:
    root = tmp_path / "h"
    table = root / "snapshot"
    _collect(root, 3)  # versions 0 (creation) to 3
    defilens.compact(root, retention="1h")  # sets a one-hour log retention, a checkpoint at the newest version
    aged_checkpoint = _checkpoints(table)[-1]
    assert aged_checkpoint >= 4
    everything = versions(root, "snapshot")
    assert everything.get_column("version").to_list() == list(range(aged_checkpoint + 1))
    # Everything so far was written three hours ago, by the files' ages; then two more rounds. (Their
    # commits already remove the log older than the retention, delta-rs's post-commit cleanup.)
    _age_log(table, 3)
    _collect(root, 2)
    defilens.compact(root, retention="1h")  # a new checkpoint, and the log older than an hour goes

    kept = _log_versions(table)
    kept_from = kept[0]
    # cleanup happened, to a checkpoint written three "hours" ago: creation and first round are gone
    assert 1 < kept_from <= aged_checkpoint and kept_from in _checkpoints(table), kept
    listed = versions(root, "snapshot")
    assert listed.get_column("version").to_list() == kept
    created = everything.row(0, named=True)["committed_at"]  # version 0's commit, since removed
    first_round = everything.filter(pl.col("round") == 0).row(0, named=True)["committed_at"]
    oldest = listed.row(0, named=True)["committed_at"]

    # every moment the kept log does not reach: refused, saying how far it reaches and when the table began
    for moment in (dt.datetime(2020, 1, 1, tzinfo=UTC), created, first_round, oldest - dt.timedelta(milliseconds=1)):
        with pytest.raises(defilens.HistoryError) as raised:
            defilens.scan(root, "snapshot", as_of=moment)
        message = str(raised.value)
        assert f"reaches back to {_show(oldest)} (version {kept_from})" in message, message
        assert "compaction removed the versions before it" in message or "the table was created" in message, message
        assert f"created {_show(_created(table))}" in message, message
    with pytest.raises(defilens.HistoryError, match=rf"version 1 .* no longer kept: .* back to version {kept_from}"):
        defilens.scan(root, "snapshot", as_of=1)

    # what the kept log reaches is answered, with the rows as they were: every round committed by then
    def rows_at(version: int) -> int:
        return int(everything.filter(pl.col("version") <= version).get_column("rows_added").sum())

    assert rows_at(kept_from) == 3 * len(TOKENS)
    assert defilens.scan(root, "snapshot", as_of=oldest).collect().height == rows_at(kept_from)
    assert defilens.scan(root, "snapshot", as_of=kept_from).collect().height == rows_at(kept_from)
    assert defilens.scan(root, "snapshot", as_of=dt.datetime.now(UTC)).collect().height == 5 * len(TOKENS)
    for row in listed.iter_rows(named=True):  # every listed moment reads its own version
        by_moment = defilens.scan(root, "snapshot", as_of=row["committed_at"]).collect()
        by_version = defilens.scan(root, "snapshot", as_of=row["version"]).collect()
        assert by_moment.sort(pl.all()).equals(by_version.sort(pl.all()))
        if row["version"] in everything.get_column("version"):
            assert by_version.height == rows_at(row["version"])


def test_versions_lists_rounds_and_compactions(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 2)
    defilens.compact(root, retention="1h")
    listed = versions(root, "indicators")
    assert listed.schema["committed_at"] == pl.Datetime("ms", "UTC")
    assert listed.get_column("version").to_list() == list(range(listed.height))
    assert listed.get_column("committed_at").is_sorted()
    rounds = listed.filter(pl.col("round").is_not_null())
    assert rounds.get_column("round").to_list() == [0, 1]
    assert rounds.get_column("collector").n_unique() == 1
    assert (rounds.get_column("rows_added") > 0).all()
    assert rounds.get_column("rows_added").sum() == defilens.scan(root, "indicators").collect().height
    assert "OPTIMIZE" in listed.get_column("operation").to_list()
    assert versions(root, "errors").height == versions(root, "log").height
    assert versions(root, "drift").height == 0  # never written
    (root / "drift").mkdir()
    (root / "drift" / "mine.csv").write_text("x\n1\n")
    with pytest.raises(defilens.HistoryError, match="not a Delta table of a defilens history"):
        versions(root, "drift")
    assert defilens.history.versions is versions
    with pytest.raises(ValueError, match="frame must be one of"):
        versions(root, "candles")


@pytest.mark.slow
def test_the_command_line_lists_versions(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 2)
    done = subprocess.run(CLI + ["versions", str(root), "snapshot"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if re.match(r"│ \d", line)]
    assert [line.split("┆")[2].strip() for line in lines] == ["WRITE"] * 3
    assert [line.split("┆")[7].strip() for line in lines] == ["null", "0", "1"]
    never = subprocess.run(CLI + ["versions", str(root), "drift"], capture_output=True, text=True, timeout=120)
    assert never.returncode == 0 and "never written" in never.stdout
    wrong = subprocess.run(CLI + ["versions", str(root), "candles"], capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 1 and wrong.stderr.startswith("defilens: error: frame must be one of")


@pytest.mark.slow
def test_time_travel_in_object_storage(bucket: str, s3: Dict[str, str]) -> None:
    root = f"{bucket}/history"
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        client.collect(
            TOKENS, "0.01s", count=2, out=root, storage_options=s3, on_round=lambda n, f: sandbox.advance("1h")
        )
    listed = versions(root, "snapshot", storage_options=s3)
    assert listed.get_column("round").to_list() == [None, 0, 1]
    first_round = listed.row(1, named=True)
    with pytest.raises(
        defilens.HistoryError, match=rf"reaches back to {re.escape(_show(first_round['committed_at']))}"
    ):
        defilens.scan(root, "snapshot", as_of=dt.datetime(2020, 1, 1), storage_options=s3)
    then = defilens.scan(root, "snapshot", as_of=first_round["committed_at"], storage_options=s3).collect()
    assert then.height == len(TOKENS)
    with pytest.raises(defilens.HistoryError, match="the newest version is 2"):
        defilens.scan(root, "snapshot", as_of=3, storage_options=s3)


def test_version_0_is_the_empty_creation_everywhere_it_is_described(tmp_path: Path) -> None:
    """``as_of=0`` reads the table's creation, without rows, as every Delta reader does; version 1
    is the first round. The guide, the API reference (the docstrings) and the CLI say so alike."""
    root = tmp_path / "h"
    _collect(root, 2)
    listed = versions(root, "indicators")
    creation = listed.row(0, named=True)
    assert (creation["version"], creation["operation"], creation["rows_added"], creation["round"]) == (
        0,
        "WRITE",
        0,
        None,
    )
    at_0 = defilens.scan(root, "indicators", as_of=0).collect()
    assert at_0.height == 0 and at_0.schema == defilens.scan(root, "indicators").collect_schema()
    first = listed.filter(pl.col("round") == 0).row(0, named=True)
    assert first["version"] == 1
    assert defilens.scan(root, "indicators", as_of=1).collect().height == first["rows_added"] > 0
    assert pl.scan_delta(str(root / "indicators"), version=0).collect().height == 0  # as polars has it

    said = "version 0 is the table's creation, without rows"
    guide = re.sub(r"\s+", " ", (Path(__file__).resolve().parent.parent / "docs" / "history.md").read_text())
    assert said in guide.lower().replace("*", "")
    for docstring in (defilens.scan.__doc__, defilens.versions.__doc__):
        assert said in re.sub(r"\s+", " ", docstring or "").lower()
    shown = subprocess.run(CLI + ["versions", "--help"], capture_output=True, text=True, timeout=120)
    assert said in re.sub(r"\s+", " ", shown.stdout).lower()


def test_what_time_travel_cannot_reach_is_one_line_saying_how_far_it_reaches(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 2)
    listed = versions(root, "snapshot")
    first_round = listed.filter(pl.col("round") == 0).row(0, named=True)
    # a moment long before the history: the documented HistoryError, not an empty frame
    with pytest.raises(defilens.HistoryError) as raised:
        defilens.scan(root, "snapshot", as_of=dt.datetime(2020, 1, 1))
    message = str(raised.value)
    assert "\n" not in message and f"reaches back to {_show(first_round['committed_at'])} (version 1)" in message
    assert "the table was created" in message, message
    # a version in the future: which is the newest, and no advice about retention or compaction
    with pytest.raises(defilens.HistoryError) as raised:
        defilens.scan(root, "snapshot", as_of=99)
    message = str(raised.value)
    assert message.endswith("has no version 99: the newest version is 2"), message
    assert "retention" not in message and "compact" not in message
    # a moment in the future reads the newest version
    tomorrow = dt.datetime.now(UTC) + dt.timedelta(days=1)
    assert defilens.scan(root, "snapshot", as_of=tomorrow).collect().height == 2 * len(TOKENS)
    # what is neither a moment nor a version number
    for wrong in (dt.date(2026, 1, 1), "2026-01-01", 1.0, True):
        with pytest.raises(TypeError, match="as_of must be a datetime"):
            defilens.scan(root, "snapshot", as_of=wrong)  # type: ignore[arg-type]


def test_the_command_line_lists_each_versions_moment_and_operation(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 2)
    defilens.compact(root, retention="1h")
    done = subprocess.run(CLI + ["versions", str(root), "indicators"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    listed = versions(root, "indicators")
    rows = [
        [cell.strip() for cell in line.strip("│ ").split("┆")]
        for line in done.stdout.splitlines()
        if re.match(r"│ \d", line)
    ]
    assert [int(row[0]) for row in rows] == listed.get_column("version").to_list()
    shown = [row[1] for row in rows]
    expected = [moment.strftime("%Y-%m-%d %H:%M:%S") for moment in listed.get_column("committed_at")]
    assert [moment[:19] for moment in shown] == expected and all(moment.endswith("UTC") for moment in shown)
    assert [row[2] for row in rows] == listed.get_column("operation").to_list()
    assert "OPTIMIZE" in [row[2] for row in rows]


# -- what the collector's own packing vacuums (issue 50, item 2) ---------------------------------


def _collect_days(root: Any, rounds: int, start: str, options: Options = None) -> int:
    """Rounds every 3 hours on a Sandbox's still clock: a day closes every eight rounds, and the
    collector packs it (and vacuums) at the first round an hour after."""
    with Sandbox(now=start, seed=7) as sandbox:
        client = defilens.Client(base_url=sandbox.url, clock=sandbox)
        return client.collect(TOKENS, "3h", count=rounds, out=root, storage_options=options)


def _pack_and_vacuum_two_days(root: Any, options: Options = None) -> None:
    """Day 1 packed; then, as if its retention had passed (the tables' file retention set to a
    second, a second waited), day 2 packed: that packing's vacuum may delete day 1's small files."""
    from deltalake import DeltaTable

    assert _collect_days(root, 10, "2026-01-01T00:00:00Z", options) == 10  # day 1 packed at 2026-01-02 03:00
    for name in ("snapshot", "indicators", "ta_updated", "log"):
        DeltaTable(f"{root}/{name}", storage_options=options).alter.set_table_properties(
            {"delta.deletedFileRetentionDuration": "interval 1 seconds"}
        )
    time.sleep(1.5)
    assert _collect_days(root, 8, "2026-01-02T06:00:00Z", options) == 8  # day 2 packed at 2026-01-03 03:00


def test_the_collectors_packing_keeps_what_the_kept_log_reads(tmp_path: Path) -> None:
    """Every version `versions` lists reads, by version and by its moment, the rows committed by
    then. Before the fix the packing vacuumed the small files of the versions before its first
    pack while the log still listed them: `.collect()` failed with a bare FileNotFoundError."""
    root = tmp_path / "h"
    _pack_and_vacuum_two_days(root)
    listed = versions(root, "snapshot")
    assert listed.get_column("version").to_list()[:2] == [0, 1]
    assert "OPTIMIZE" in listed.get_column("operation").to_list()
    for row in listed.iter_rows(named=True):
        by_version = defilens.scan(root, "snapshot", as_of=row["version"]).collect()
        rounds = listed.filter(pl.col("version") <= row["version"], pl.col("round").is_not_null()).height
        assert by_version.height == rounds * len(TOKENS), row
    first_round = listed.filter(pl.col("round") == 0).row(0, named=True)["committed_at"]
    assert defilens.scan(root, "snapshot", as_of=first_round).collect().height == len(TOKENS)


def test_versions_whose_files_are_gone_are_not_listed_and_refused_before_collect(tmp_path: Path) -> None:
    """A history an earlier version (or a vacuum by hand) left with log entries whose files are
    gone: `versions` starts at the oldest version that reads, and a version or moment before it
    raises `HistoryError` saying how far time travel reaches, at `scan`, not at `.collect()`."""
    from deltalake import DeltaTable

    root = tmp_path / "h"
    _pack_and_vacuum_two_days(root)
    everything = versions(root, "snapshot")
    DeltaTable(str(root / "snapshot")).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    listed = versions(root, "snapshot")
    oldest = listed.row(0, named=True)
    assert everything.row(0, named=True)["version"] == 0 and oldest["version"] > 1
    numbers = listed.get_column("version").to_list()
    assert numbers == list(range(oldest["version"], numbers[-1] + 1))
    assert defilens.scan(root, "snapshot", as_of=oldest["version"]).collect().height > 0
    reaches = rf"reaches back to {re.escape(_show(oldest['committed_at']))} \(version {oldest['version']}\)"
    with pytest.raises(defilens.HistoryError, match=rf"version 1 of .* can no longer be read: time travel {reaches}"):
        defilens.scan(root, "snapshot", as_of=1)
    first_round = everything.filter(pl.col("round") == 0).row(0, named=True)["committed_at"]
    with pytest.raises(defilens.HistoryError, match=reaches):
        defilens.scan(root, "snapshot", as_of=first_round)
    run = subprocess.run(CLI + ["versions", str(root), "snapshot"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    shown = [int(line.strip("│ ").split("┆")[0]) for line in run.stdout.splitlines() if re.match(r"│ \d", line)]
    assert shown[0] == oldest["version"]


@pytest.mark.slow
def test_time_travel_knows_what_it_can_read_in_object_storage(bucket: str, s3: Dict[str, str]) -> None:
    from deltalake import DeltaTable

    root = f"{bucket}/history"
    _pack_and_vacuum_two_days(root, s3)
    assert versions(root, "snapshot", storage_options=s3).row(0, named=True)["version"] == 0
    assert defilens.scan(root, "snapshot", as_of=1, storage_options=s3).collect().height == len(TOKENS)
    DeltaTable(f"{root}/snapshot", storage_options=s3).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    oldest = versions(root, "snapshot", storage_options=s3).row(0, named=True)["version"]
    assert oldest > 1
    with pytest.raises(defilens.HistoryError, match=rf"can no longer be read: .*\(version {oldest}\)"):
        defilens.scan(root, "snapshot", as_of=1, storage_options=s3)
