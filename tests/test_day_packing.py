"""A collector packs each closed day's small files itself (issue 39 item 5): commits stay flat over
a month without a manual compact, with no row lost or doubled, and packing gives way to a
compaction holding the lock."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, List

import polars as pl
import pytest

import defilens
from defilens.history import _compact, _upkeep
from defilens.history._root import root_of
from defilens.history._tables import PARTITION, TABLES
from defilens.testing import Sandbox

pytest.importorskip("deltalake")

IDS = ["bitcoin", "ethereum", "dogecoin"]


def _collect(root: str, rounds: int, start: str = "2026-01-01T00:00:00Z") -> int:
    """``rounds`` rounds every 3 hours on a Sandbox's still clock: eight a day."""
    with Sandbox(now=start, seed=7) as sandbox:
        client = defilens.Client(base_url=sandbox.url, clock=sandbox)
        return client.collect(IDS, "3h", count=rounds, out=root)


def _files_per_day(root: str, name: str) -> Dict[str, int]:
    from deltalake import DeltaTable

    days = pl.DataFrame(DeltaTable(f"{root}/{name}").get_add_actions(flatten=True)).get_column(f"partition.{PARTITION}")
    return dict(sorted((str(day), count) for day, count in days.value_counts().iter_rows()))


def _everything(root: str) -> Dict[str, pl.DataFrame]:
    tables = {}
    for name in TABLES:
        frame = defilens.scan(root, name).collect().drop("elapsed_ms", strict=False)  # a request's own time
        tables[name] = frame.sort(frame.columns) if frame.height else frame
    return tables


def test_a_collector_packs_each_closed_day_into_one_file_a_table_and_keeps_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed, unpacked = str(tmp_path / "packed"), str(tmp_path / "unpacked")
    assert _collect(packed, 20) == 20  # 2026-01-01 and 01-02 whole (8 rounds each), 4 rounds of 01-03
    monkeypatch.setattr(_upkeep.DayPacker, "__call__", lambda self, now: None)
    assert _collect(unpacked, 20) == 20
    for name in ("snapshot", "indicators", "log"):
        assert _files_per_day(unpacked, name) == {"2026-01-01": 8, "2026-01-02": 8, "2026-01-03": 4}
        assert _files_per_day(packed, name) == {"2026-01-01": 1, "2026-01-02": 1, "2026-01-03": 4}, name
    mine, theirs = _everything(packed), _everything(unpacked)
    for name in TABLES:
        assert mine[name].equals(theirs[name]), name  # the same rows, none lost or doubled
    assert mine["snapshot"].height == 20 * len(IDS)


def test_a_closed_day_is_packed_once_and_today_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[Dict[str, int]] = []
    original = _compact.pack_closed_days

    def counted(root, now):  # type: ignore[no-untyped-def]
        calls.append(original(root, now))
        return calls[-1]

    monkeypatch.setattr(_upkeep, "pack_closed_days", counted)
    root = str(tmp_path / "h")
    _collect(root, 12)  # 01-01 whole, 01-02 until 09:00: 01-01 closes at 01:00 on 01-02
    packed = [call for call in calls if call["days"]]
    # At the first round, once 2025-12-31 had closed (01:00 on 01-01) and once 01-01 had: not every round.
    assert len(calls) == 3
    # 01-01 in every table of the round but info (one change row: one file) and raw (not kept).
    assert len(packed) == 1 and packed[0]["days"] == 7 and packed[0]["files_removed"] == 7 * 8
    assert _files_per_day(root, "snapshot") == {"2026-01-01": 1, "2026-01-02": 4}


def test_packing_gives_way_to_a_compaction_holding_the_lock_and_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from defilens.history._lock import compaction_lock

    monkeypatch.setattr(_upkeep, "PACK_RETRY_ROUNDS", 1)
    root = str(tmp_path / "h")
    _collect(root, 1)
    with compaction_lock(root_of(root)):  # a compaction that pauses while holding the lock
        _collect(root, 12, start="2026-01-01T03:00:00Z")
        assert _files_per_day(root, "snapshot") == {"2026-01-01": 8, "2026-01-02": 5}
    _collect(root, 1, start="2026-01-02T15:00:00Z")  # the lock is free: the backlog is packed
    assert _files_per_day(root, "snapshot") == {"2026-01-01": 1, "2026-01-02": 6}
    assert defilens.scan(root, "snapshot").collect().height == 14 * len(IDS)


def test_a_failed_packing_is_warned_about_once_and_collecting_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(step: str, table: str) -> None:
        if step == "pack" and table == "indicators":
            raise OSError("No space left on device")

    monkeypatch.setattr(_compact, "_before_commit", full_disk)
    root = str(tmp_path / "h")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _collect(root, 28) == 28  # three days close one after the other
    said = [str(w.message) for w in caught if issubclass(w.category, defilens.DefiLensWarning)]
    assert len(said) == 1 and "could not pack the closed days" in said[0] and "No space left on device" in said[0]
    assert "defilens compact" in said[0] and w_points_here(caught)
    # Tables before the failing one were packed; the rest waits for the next run, which packs it.
    assert _files_per_day(root, "indicators")["2026-01-01"] == 8
    monkeypatch.undo()
    _collect(root, 1, start="2026-01-04T12:00:00Z")
    assert _files_per_day(root, "indicators") == {"2026-01-01": 1, "2026-01-02": 1, "2026-01-03": 1, "2026-01-04": 5}
    assert defilens.scan(root, "snapshot").collect().height == 29 * len(IDS)


@pytest.mark.parametrize(
    "failure",
    [
        ModuleNotFoundError("No module named 'fcntl'"),  # the lock's import on Windows before issue 48
        RuntimeError("a panic in the engine"),
        PermissionError(13, "Permission denied"),
    ],
    ids=["import", "engine", "os"],
)
def test_any_failure_of_packing_is_one_warning_and_collecting_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    """Not only a `HistoryError`: whatever packing raises, the collector warns once and goes on."""

    def failing(root, now):  # type: ignore[no-untyped-def]
        raise failure

    monkeypatch.setattr(_upkeep, "pack_closed_days", failing)
    root = str(tmp_path / "h")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _collect(root, 20) == 20  # two days close
    said = [str(w.message) for w in caught if issubclass(w.category, defilens.DefiLensWarning)]
    assert len(said) == 1 and "could not pack the closed days" in said[0] and str(failure) in said[0], said
    assert defilens.scan(root, "snapshot").collect().height == 20 * len(IDS)


def w_points_here(caught: List[warnings.WarningMessage]) -> bool:
    """The warning names the caller's file, not the collector's thread."""
    return any(Path(w.filename).name == Path(__file__).name for w in caught)


def test_a_root_named_with_a_space_and_accents_is_packed_too(tmp_path: Path) -> None:
    root = str(tmp_path / "données #1")
    _collect(root, 12)
    assert _files_per_day(root, "snapshot") == {"2026-01-01": 1, "2026-01-02": 4}
    assert defilens.scan(root, "snapshot").collect().height == 12 * len(IDS)
