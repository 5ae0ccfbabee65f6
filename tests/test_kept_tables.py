"""A collector keeps its tables loaded from one round to the next (issue 39, commits that stay
flat; issue 36, collectors beside compaction in S3): each table is loaded from scratch once, then
brought up to date, and loaded again with every check whenever it is no longer the table it
loaded (replaced, its log entry cleaned up)."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, Optional

import polars as pl
import pytest
from deltalake import write_deltalake
from history_checks import assert_whole_rounds

import defilens
from defilens.history import _compact, _kept
from defilens.history._tables import PARTITION

TOKENS = ["bitcoin", "ethereum", "unknown-coin"]


def _collect(
    root: str,
    rounds: int,
    on_round: Optional[Callable[[int], None]] = None,
    options: Optional[Dict[str, str]] = None,
) -> int:
    with defilens.testing.Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:

        def advance(number: int, frames) -> None:
            sandbox.advance("1h")
            if on_round is not None:
                on_round(number)

        client = defilens.Client(base_url=sandbox.url)
        return client.collect(
            TOKENS, "0.01s", count=rounds, out=root, raw=True, on_round=advance, storage_options=options
        )


def _replace_with_a_foreign_table(table: Path, kept: Path, versions: int) -> None:
    """Moves ``table`` to ``kept`` and writes a foreign Delta table of ``versions`` versions there."""
    table.rename(kept)
    for day in range(versions):
        write_deltalake(
            str(table),
            pl.DataFrame({"token": ["x"], PARTITION: [dt.date(2026, 1, 1 + day)], "price": [1.0]}),
            partition_by=[PARTITION],
            mode="append",
        )


@pytest.fixture
def full_loads(monkeypatch) -> Counter:
    """How often each table was loaded from scratch for a round's commit."""
    counted: Counter = Counter()
    original = _kept.ready

    def counting(root, name):
        counted[name] += 1
        return original(root, name)

    monkeypatch.setattr(_kept, "ready", counting)
    return counted


def test_a_collector_loads_each_table_once_not_every_round(tmp_path: Path, full_loads: Counter) -> None:
    root = str(tmp_path / "h")
    _collect(root, 1)  # the tables exist
    full_loads.clear()
    assert _collect(root, 6) == 6
    assert full_loads and set(full_loads.values()) == {1}, full_loads
    assert assert_whole_rounds(root) == 7 * 2


def test_a_collector_in_s3_loads_each_table_once(bucket: str, s3: Dict[str, str], full_loads: Counter) -> None:
    root = f"{bucket}/h"
    _collect(root, 1, options=s3)
    full_loads.clear()
    assert _collect(root, 4, options=s3) == 4
    assert full_loads and set(full_loads.values()) == {1}, full_loads
    assert assert_whole_rounds(root, s3) == 5 * 2


def test_a_table_replaced_by_a_longer_foreign_table_between_rounds_is_caught(tmp_path: Path) -> None:
    """The foreign table has more versions than ours: bringing the kept table up to date would read
    the foreign log as ours; the kept version's entry is another object, so it is loaded anew and
    refused before the round's first commit."""
    root = tmp_path / "h"

    def replace(number: int) -> None:
        if number == 2:
            _replace_with_a_foreign_table(root / "snapshot", tmp_path / "snapshot-kept", 8)

    with pytest.raises(defilens.HistoryError, match=r"not a defilens 'snapshot' table"):
        _collect(str(root), 4, replace)
    assert pl.read_delta(str(root / "snapshot")).height == 8  # the foreign table untouched


def test_a_kept_entry_removed_by_log_cleanup_loads_the_table_again(
    tmp_path: Path, full_loads: Counter, monkeypatch
) -> None:
    """Two compactions between rounds with log cleanup due remove the log entry a kept table was
    loaded at: the next round loads the table from scratch, and every round stays whole."""
    monkeypatch.setattr(_compact, "MIN_RETENTION", dt.timedelta(0))
    root = str(tmp_path / "h")
    _collect(root, 1)
    full_loads.clear()

    def compact_twice(number: int) -> None:
        if number == 2:
            for _ in range(2):
                defilens.compact(root, retention="1s", sort=False)
                time.sleep(1.5)

    assert _collect(root, 4, compact_twice) == 4
    assert max(full_loads.values()) == 2, full_loads
    assert assert_whole_rounds(root) == 5 * 2


def test_a_kept_table_is_loaded_from_scratch_again_after_a_checkpoint_interval(
    tmp_path: Path, full_loads: Counter, monkeypatch
) -> None:
    """An updated snapshot never moves to a newer checkpoint: it replays every entry since its
    load, so a table kept for ever made each commit slower. It is loaded again after
    `RELOAD_AFTER` versions."""
    monkeypatch.setattr(_kept, "RELOAD_AFTER", 3)
    root = str(tmp_path / "h")
    _collect(root, 1)
    full_loads.clear()
    assert _collect(root, 7) == 7
    # Loaded at the first round, then again once brought 3 versions forward: rounds 1, 4 and 7;
    # info, committed only when a token's info changes (not in these rounds), once.
    assert full_loads.pop("info") == 1, full_loads
    assert full_loads and set(full_loads.values()) == {3}, full_loads
    assert assert_whole_rounds(root) == 8 * 2


# -- a reader's tables, kept from one read to the next (issue 50, item 5) -------------------------


@pytest.fixture
def reader_loads(monkeypatch) -> Counter:
    """How often each table was loaded from scratch for a read."""
    from defilens.history import _scan

    counted: Counter = Counter()
    original = _scan.load

    def counting(root, name, version=None):
        if version is None:
            counted[name] += 1
        return original(root, name, version)

    monkeypatch.setattr(_scan, "load", counting)
    return counted


def test_a_reader_loads_a_table_once_until_something_is_committed_to_it(tmp_path: Path, reader_loads: Counter) -> None:
    root = str(tmp_path / "h")
    _collect(root, 2)
    at = defilens.scan(root, "snapshot").select(pl.col("fetched_at").max()).collect().item()
    reader_loads.clear()
    for _ in range(3):
        assert defilens.asof(root, at, intervals="1h", indicators="rsi14").height > 0
        assert defilens.scan(root, "snapshot").collect().height == 2 * 2
    assert reader_loads == Counter({"ta_updated": 1, "indicators": 1}), reader_loads  # once each; snapshot above
    lazy = defilens.scan(root, "snapshot")  # planned before the next round, collected after it
    _collect(root, 1)
    assert defilens.scan(root, "snapshot").collect().height == 3 * 2  # the new round is read
    assert reader_loads["snapshot"] == 1 and reader_loads["indicators"] == 1
    assert lazy.collect().height == 2 * 2  # a table handed out stays at its version


def test_an_eager_asof_reads_ta_updated_once(tmp_path: Path, monkeypatch) -> None:
    """The clock check and the current candles share one read of ``ta_updated`` (the day's scoped
    read spent a fifth of its time reading it twice), and the answer is the lazy plan's."""
    from defilens.research import _asof, _panel

    root = str(tmp_path / "h")
    _collect(root, 3)
    at = defilens.scan(root, "snapshot").select(pl.col("fetched_at").max()).collect().item()
    scans: Counter = Counter()
    original = _asof.scan_table

    def counting(root, name, *args, **kwargs):
        scans[name] += 1
        return original(root, name, *args, **kwargs)

    for module in (_asof, _panel):
        monkeypatch.setattr(module, "scan_table", counting)
    eager = defilens.asof(root, [at - dt.timedelta(hours=1), at], intervals="1h", indicators="rsi14")
    assert scans == Counter({"ta_updated": 1, "indicators": 1}), scans
    lazy = defilens.asof(root, [at - dt.timedelta(hours=1), at], intervals="1h", indicators="rsi14", lazy=True)
    assert eager.height > 0 and eager.equals(lazy.collect().select(eager.columns).sort("at", "token", "interval"))


def test_a_table_replaced_with_as_many_versions_is_loaded_again_by_a_reader(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(str(root), 1)
    assert defilens.scan(root, "snapshot").collect().height == 2
    versions = defilens.history.versions(root, "snapshot").height
    _replace_with_a_foreign_table(root / "snapshot", tmp_path / "snapshot-kept", versions)
    with pytest.raises(defilens.HistoryError, match=r"not a defilens 'snapshot' table"):
        defilens.scan(root, "snapshot")
