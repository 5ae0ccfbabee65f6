"""The ``info`` table keeps a token's general info only when it changes, and reads back as every
round's rows did: on a history collected from a Sandbox whose info is revised every 30 days."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import defilens
from defilens.history._collect import commit, recover
from defilens.history._info import changes_only, info_columns
from defilens.history._root import root_of
from defilens.history._rounds import round_of_fetch, tables_of
from defilens.history._spool import Spool
from defilens.history._tables import commit_round
from defilens.testing import Sandbox

pytest.importorskip("deltalake")

TOKENS = ["bitcoin", "ethereum", "solana"]
START = "2026-01-05T00:00:00Z"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("info") / "h"
    with Sandbox(now=START, seed=5) as sandbox:
        defilens.Client(base_url=sandbox).collect(TOKENS, "3d", count=24, out=root, markets=False, raw=True)
    return root


def _every_round(root: Path) -> pl.DataFrame:
    """The info rows every round wrote before: one a fetch, rebuilt from the raw bodies."""
    raw = defilens.scan(root, "raw").collect()
    return defilens.history.reparse_batch(raw, "info").drop("date")


def _values_at(info: pl.DataFrame, moments: pl.Series) -> pl.DataFrame:
    """Per moment and token, the info of the latest row at or before it (its values only)."""
    grid = pl.DataFrame({"at": moments}).join(pl.DataFrame({"token": TOKENS}), how="cross").sort("at")
    found = grid.join_asof(
        info.sort("fetched_at"), left_on="at", right_on="fetched_at", by="token", strategy="backward"
    )
    return found.select("at", "token", *info_columns()).sort("at", "token")


def test_info_keeps_one_row_per_change_and_reads_back_as_every_round(history: Path) -> None:
    stored = defilens.scan(history, "info").drop("date").collect()
    every = _every_round(history)
    assert every.height == 24 * len(TOKENS)
    per_token = stored.group_by("token").len()
    assert per_token.height == len(TOKENS) and (per_token["len"] >= 2).all(), "the Sandbox's info changed"
    assert stored.height < every.height
    keys = ["token", "fetched_at"]
    assert_frame_equal(stored.sort(keys), changes_only(every).sort(keys))
    # Each stored row is the first fetch that showed its info.
    for row in stored.iter_rows(named=True):
        same = every.filter(pl.col("token") == row["token"], pl.col("fetched_at") <= row["fetched_at"])
        assert same.sort("fetched_at")["description"][-1] == row["description"]
    moments = defilens.scan(history, "snapshot").select("fetched_at").collect()["fetched_at"].unique().sort()
    between = moments + dt.timedelta(minutes=1)
    for at in (moments, between):
        assert_frame_equal(_values_at(stored, at), _values_at(every, at))
    # reparse gives what collect keeps.
    rebuilt = defilens.reparse(history).info
    assert_frame_equal(rebuilt.sort(keys), stored.sort(keys))


def test_info_takes_a_fraction_of_the_bytes(history: Path, tmp_path: Path) -> None:
    every = _every_round(history).with_columns(pl.col("fetched_at").dt.date().alias("date"))
    sizes = {}
    for name, frame in (("every", every), ("changes", changes_only(every))):
        root = root_of(tmp_path / name, None)
        commit_round(root, {"info": frame}, "bytes", 0, {})
        sizes[name] = sum(p.stat().st_size for p in (tmp_path / name / "info").rglob("*.parquet"))
    print(f"info table bytes: every round {sizes['every']}, changes only {sizes['changes']}")
    assert sizes["changes"] < sizes["every"]


def _round(sandbox: Sandbox, client: defilens.Client, number: int):  # type: ignore[no-untyped-def]
    frames = client.fetch(TOKENS, markets=False)
    return round_of_fetch(frames, "crashy", number, sandbox.now, keep_raw=False)


def test_a_round_recovered_after_a_crash_writes_its_info_change_once(tmp_path: Path) -> None:
    root = root_of(tmp_path / "h", None)
    spool = Spool(root)
    with Sandbox(now=START, seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox)
        first = _round(sandbox, client, 0)
        commit(root, spool, first, spool.put(first))
        sandbox.advance("31d")  # every token's info was revised meanwhile
        second = _round(sandbox, client, 1)
    path = spool.put(second)
    # Killed after every table but info had the round.
    tables, _ = tables_of(second)
    commit_round(root, {k: v for k, v in tables.items() if k != "info"}, "crashy", 1, second.metadata)
    assert recover(root, spool) == 1
    assert recover(root, spool) == 0
    stored = defilens.scan(tmp_path / "h", "info").collect()
    assert stored.group_by("token").len()["len"].to_list() == [2, 2, 2]
    # A round committed twice (the spool entry left behind) adds nothing.
    commit(root, spool, second, spool.put(second))
    assert defilens.scan(tmp_path / "h", "info").collect().height == 6
    _ = path


def test_two_collectors_lose_no_change(tmp_path: Path) -> None:
    """A change is dropped only for an identical stored row before it: a round committed late
    (another collector's, fetched earlier) never hides a later change."""
    root = root_of(tmp_path / "h", None)
    spool = Spool(root)
    with Sandbox(now=START, seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox)
        early = round_of_fetch(client.fetch(TOKENS, markets=False), "a", 0, sandbox.now, keep_raw=False)
        sandbox.advance("31d")
        late = round_of_fetch(client.fetch(TOKENS, markets=False), "b", 0, sandbox.now, keep_raw=False)
    commit(root, spool, late, spool.put(late))  # the later fetch lands first
    commit(root, spool, early, spool.put(early))
    stored = defilens.scan(tmp_path / "h", "info").collect()
    assert stored.height == 6 and stored["description"].n_unique() == 6


def test_convert_keeps_the_changes_of_an_info_table_written_every_round(history: Path, tmp_path: Path) -> None:
    every = _every_round(history).with_columns(pl.col("fetched_at").dt.date().alias("date"))
    root = root_of(tmp_path / "old", None)
    commit_round(root, {"info": every}, "earlier", 0, {})  # as an earlier defilens left it: a row a round
    report = defilens.convert(tmp_path / "old")
    assert report["rewritten"] == ["info"] and report["info_rows_dropped"] == every.height - changes_only(every).height
    stored = defilens.scan(tmp_path / "old", "info").drop("date").collect()
    keys = ["token", "fetched_at"]
    assert_frame_equal(stored.sort(keys), changes_only(every.drop("date")).sort(keys))
    assert defilens.convert(tmp_path / "old")["tables"] == 0  # run again: nothing left to do
    # The app transactions stay: the round the earlier collector committed is still known.
    from defilens.history._tables import load

    table = load(root, "info")
    assert table is not None and table.transaction_version("earlier") == 0


def test_a_change_committed_late_is_read_once(tmp_path: Path) -> None:
    """Rounds committed out of order: the later fetch of a revised info lands first (a change
    against the row before it), then the earlier fetch of the same revision (recovered after a
    crash, or another collector's). The stored rows then hold the revision twice; `scan` reads
    it once, as `reparse` rebuilds it from the raw bodies."""
    root = root_of(tmp_path / "h", None)
    spool = Spool(root)
    with Sandbox(now=START, seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox)

        def fetch(app_id: str) -> Any:
            return round_of_fetch(client.fetch(TOKENS, markets=False), app_id, 0, sandbox.now, keep_raw=True)

        first = fetch("a")
        sandbox.advance("31d")  # every token's info was revised meanwhile
        revised = fetch("b")
        sandbox.advance("1h")
        again = fetch("c")  # the same revision, an hour later
    for round_ in (first, again, revised):  # the revision's first fetch lands last
        commit(root, spool, round_, spool.put(round_))
    keys = ["token", "fetched_at"]
    stored = defilens.scan(tmp_path / "h", "info").drop("date").collect().sort(keys)
    rebuilt = defilens.reparse(tmp_path / "h").info.sort(keys)
    assert stored.height == 2 * len(TOKENS)
    assert_frame_equal(stored, rebuilt)
