"""Compaction beside everything else (issue 36, F1 and F5): a compaction that lost its right to
commit (paused past its lease, a successor took over, its renewal failed) commits nothing, so no
row is ever doubled; takeovers are judged by the store's clock; and log cleanup never removes
what a concurrent collector or reader is loading."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pyarrow as pa
import pytest
from history_checks import assert_whole_rounds, stopped
from s3_server import client as _client

import defilens
from defilens.history import TABLES, _compact, _lease, _lock
from defilens.history._layout import COMPACTION_LOCK
from defilens.testing import Sandbox

UTC = dt.timezone.utc
Options = Optional[Dict[str, str]]


def _collect(root: str, rounds: int = 3, options: Options = None, step: str = "1h") -> int:
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        return client.collect(
            ["bitcoin", "ethereum", "dogecoin"],
            "0.01s",
            count=rounds,
            out=root,
            raw=True,
            storage_options=options,
            on_round=lambda n, f: sandbox.advance(step),
        )


def _rows(root: str, options: Options = None) -> Dict[str, int]:
    return {name: defilens.scan(root, name, storage_options=options).collect().height for name in TABLES}


def _operations(root: str, name: str, options: Options = None) -> List[str]:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(f"{root}/{name}", storage_options=options)
    except TableNotFoundError:
        return []
    return [entry.get("operation", "") for entry in table.history()]


class Pause:
    """Stops the first compaction that reaches ``step`` of ``table`` right before it commits (after
    every check it makes), until `release`: a process stalled between its checks and its commit."""

    def __init__(self, step: str = "optimize", table: str = "indicators") -> None:
        self.step, self.table = step, table
        self.reached = threading.Event()
        self.go = threading.Event()
        self.used = False
        self.lock = threading.Lock()

    def __call__(self, step: str, table: str) -> None:
        with self.lock:
            if self.used or (step, table) != (self.step, self.table):
                return
            self.used = True
        self.reached.set()
        assert self.go.wait(120), "the test never released the paused compaction"

    def release(self) -> None:
        self.go.set()


def _in_thread(work: Callable[[], object]) -> "tuple[threading.Thread, List[object]]":
    outcome: List[object] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as error:  # handed to the test
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


# --- F1: the engine does not fence, so compaction must ------------------------------------------


def _small_table(path: str, files: int = 5) -> None:
    from deltalake import write_deltalake

    for i in range(files):
        batch = pa.table({"token": ["a", "b"], "value": [i, i], "date": ["2026-01-01"] * 2})
        write_deltalake(path, batch, mode="append", partition_by=["date"])


def test_the_engine_lets_two_optimizes_of_one_snapshot_land_and_a_metadata_commit_fences_them(tmp_path: Path) -> None:
    """Why compaction fences its commits itself: delta-rs 1.6 lets two optimizes that removed the
    same files both land (every row twice), even when both carry the same app transaction (it
    drops the optimize's app transactions); a stale optimize fails only on a metadata change."""
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.exceptions import CommitFailedError

    path = str(tmp_path / "doubled")
    _small_table(path)
    first, second = DeltaTable(path), DeltaTable(path)
    same_app = CommitProperties(app_transactions=[Transaction("defilens-compaction", 1)])
    assert first.optimize.compact(commit_properties=same_app)["numFilesRemoved"] == 5
    assert second.optimize.compact(commit_properties=same_app)["numFilesRemoved"] == 5
    assert DeltaTable(path).to_pyarrow_table().num_rows == 20  # 10 rows, each twice
    assert DeltaTable(path).transaction_version("defilens-compaction") is None

    path = str(tmp_path / "fenced")
    _small_table(path)
    stale = DeltaTable(path)
    DeltaTable(path).alter.set_table_properties({"defilens.compaction": "2:successor"}, raise_if_not_exists=False)
    assert DeltaTable(path).optimize.compact()["numFilesRemoved"] == 5
    with pytest.raises(CommitFailedError, match="Metadata changed"):
        stale.optimize.compact()
    assert DeltaTable(path).to_pyarrow_table().num_rows == 10


@pytest.mark.slow
def test_a_compaction_stalled_before_its_commit_while_another_ran_commits_nothing_locally(
    tmp_path: Path, monkeypatch
) -> None:
    """Locally the lock file keeps a second compaction out; when it is removed under a running one
    (a cleanup script, a shared folder), the successor runs, and the stalled one's commit is
    refused by the fence instead of doubling the rows."""
    root = str(tmp_path / "h")
    _collect(root, 3)
    before = _rows(root)
    pause = Pause()
    monkeypatch.setattr(_compact, "_before_commit", pause)
    thread, outcome = _in_thread(lambda: defilens.compact(root, sort=False))
    assert pause.reached.wait(60)
    os.remove(os.path.join(root, COMPACTION_LOCK))
    report = defilens.compact(root, sort=False)
    assert report["files_removed"] > 0
    pause.release()
    thread.join(60)
    assert isinstance(outcome[0], defilens.HistoryError), outcome
    assert "took over" in str(outcome[0]) and "run it again" in str(outcome[0])
    assert _rows(root) == before
    assert assert_whole_rounds(root) == 9


def test_a_lock_file_removed_under_a_compaction_stops_it_before_its_next_commit(tmp_path: Path, monkeypatch) -> None:
    root = str(tmp_path / "h")
    _collect(root, 3)
    before = _rows(root)
    pause = Pause("fence", "snapshot")
    monkeypatch.setattr(_compact, "_before_commit", pause)
    thread, outcome = _in_thread(lambda: defilens.compact(root, sort=False))
    assert pause.reached.wait(60)
    os.remove(os.path.join(root, COMPACTION_LOCK))
    pause.release()
    thread.join(60)
    assert isinstance(outcome[0], _lock.LeaseLost), outcome
    assert "lost" in str(outcome[0]) and "run it again" in str(outcome[0])
    assert all("OPTIMIZE" not in _operations(root, name) for name in ("snapshot", "indicators"))
    assert _rows(root) == before


# --- F1 on S3: the lease ---------------------------------------------------------------------------

CHILD = """
import json, os, signal, sys, datetime as dt
import defilens
from defilens.history import _compact, _lock

_lock.LEASE = dt.timedelta(seconds=float(sys.argv[3]))
stopped = []

def stop_here(step, table):
    if (step, table) == ("optimize", "indicators") and not stopped:
        stopped.append(1)
        print("stopping", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

_compact._before_commit = stop_here
try:
    defilens.compact(sys.argv[1], storage_options=json.loads(sys.argv[2]), sort=False)
except defilens.HistoryError as error:
    print("error:", error, flush=True)
    sys.exit(1)
print("compacted", flush=True)
"""


def _compact_when_free(root: str, options: Options, within: float = 90.0) -> "tuple[Dict[str, int], int]":
    """Compacts as soon as the lease lets it; returns the report and how often it was refused."""
    refused = 0
    deadline = time.monotonic() + within
    while True:
        try:
            return defilens.compact(root, storage_options=options, sort=False), refused
        except _lock.Busy:
            refused += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.slow
def test_a_compaction_stopped_past_its_lease_on_s3_commits_nothing_after_a_successor(
    bucket: str, s3: Dict[str, str], monkeypatch
) -> None:
    """F1 with a real stop: a compaction is SIGSTOPped between its checks and its commit (its
    renewals stop too), a successor takes the lease over once it expired by the store's clock and
    compacts, then the first one resumes: its commit is refused, the rows stay once."""
    root = f"{bucket}/stopped"
    _collect(root, 3, s3)
    before = _rows(root, s3)
    lease = 4.0  # the stopped one's (a lease object says how long it lasts); the successor's is the default
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, root, json.dumps(s3), str(lease)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "stopping"
        deadline = time.monotonic() + 30
        while not stopped(child.pid):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        report, refused = _compact_when_free(root, s3)
        assert refused >= 1, "the stopped compaction's lease was taken over before it expired"
        assert report["files_removed"] > 0
    finally:
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    assert child.returncode == 1, (out, err)
    assert "took over" in out and "run it again" in out, out
    assert _rows(root, s3) == before
    assert assert_whole_rounds(root, s3) == 9


@pytest.mark.slow
def test_a_takeover_while_the_holder_still_runs_cannot_double_rows_on_s3(
    bucket: str, s3: Dict[str, str], monkeypatch
) -> None:
    """F1 with a fake clock: a successor whose idea of the time is 11 minutes ahead takes a live
    lease over while the holder stalls right before its commit; the holder's commit is refused."""
    root = f"{bucket}/fake-clock"
    _collect(root, 3, s3)
    before = _rows(root, s3)
    pause = Pause()
    monkeypatch.setattr(_compact, "_before_commit", pause)
    thread, outcome = _in_thread(lambda: defilens.compact(root, storage_options=s3, sort=False))
    assert pause.reached.wait(120)
    real = _lease.StoreClock.now
    monkeypatch.setattr(_lease.StoreClock, "now", lambda clock: real(clock) + dt.timedelta(minutes=11))
    report = defilens.compact(root, storage_options=s3, sort=False)
    assert report["files_removed"] > 0
    pause.release()
    thread.join(120)
    assert isinstance(outcome[0], defilens.HistoryError), outcome
    assert "took over" in str(outcome[0]), outcome
    assert _rows(root, s3) == before
    assert assert_whole_rounds(root, s3) == 9


def _lease_key(url: str, prefix: str) -> "tuple[str, str]":
    return url[len("s3://") :], f"{prefix}/{COMPACTION_LOCK}"


@pytest.mark.slow
def test_a_lost_renewal_stops_the_compaction_before_its_next_commit(
    bucket: str, s3: Dict[str, str], monkeypatch
) -> None:
    root = f"{bucket}/lost"
    _collect(root, 3, s3)
    before = _rows(root, s3)
    monkeypatch.setattr(_lock, "LEASE", dt.timedelta(seconds=3))
    failing = threading.Event()
    real_put = _lease._put

    def put(store, path, body, mode):  # the store stops taking the renewals (a network gone, a full quota)
        if failing.is_set():
            raise OSError("connection reset by the test")
        return real_put(store, path, body, mode)

    monkeypatch.setattr(_lease, "_put", put)
    pause = Pause("fence", "snapshot")
    monkeypatch.setattr(_compact, "_before_commit", pause)
    thread, outcome = _in_thread(lambda: defilens.compact(root, storage_options=s3, sort=False))
    assert pause.reached.wait(120)
    failing.set()
    time.sleep(2.5)  # a renewal is due every second
    pause.release()
    thread.join(120)
    assert isinstance(outcome[0], _lock.LeaseLost), outcome
    assert "renew" in str(outcome[0]) and "run it again" in str(outcome[0])
    assert all("OPTIMIZE" not in _operations(root, name, s3) for name in TABLES if name != "drift")
    assert _rows(root, s3) == before


@pytest.mark.slow
def test_a_lease_taken_by_someone_else_stops_the_holder_before_its_next_commit(
    bucket: str, s3: Dict[str, str], monkeypatch
) -> None:
    root = f"{bucket}/overwritten"
    _collect(root, 3, s3)
    pause = Pause("fence", "snapshot")
    monkeypatch.setattr(_compact, "_before_commit", pause)
    thread, outcome = _in_thread(lambda: defilens.compact(root, storage_options=s3, sort=False))
    assert pause.reached.wait(120)
    name, key = _lease_key(bucket, "overwritten")
    _client(s3).put_object(Bucket=name, Key=key, Body=json.dumps({"holder": "someone-else", "epoch": 99}))
    pause.release()
    thread.join(120)
    assert isinstance(outcome[0], _lock.LeaseLost), outcome
    assert all("OPTIMIZE" not in _operations(root, name, s3) for name in ("snapshot", "indicators"))


LEASE_OBJECTS = {
    "empty": b"",
    "junk": b"\x00junk{",
    "not-an-object": b"[]",
    "no-expires": json.dumps({"holder": "old:1"}).encode(),
    "naive-expires": json.dumps({"holder": "naive:1", "expires": "2020-01-01T00:00:00"}).encode(),
    "expired-by-a-clock-ahead": json.dumps({"holder": "ahead:1", "expires": "2001-01-01T00:00:00+00:00"}).encode(),
    "lasts-a-year": json.dumps({"holder": "greedy:1", "epoch": 7, "seconds": 3e7}).encode(),
}


@pytest.mark.slow
def test_any_lease_object_is_live_until_the_store_says_it_expired(bucket: str, s3: Dict[str, str], monkeypatch):
    """Whatever a lease object holds, it expires by its own last-modified time in the store plus the
    lease length (at most `LEASE`), judged by the store's clock: never a Python error, never
    blocked forever, never taken over early because of what it says (a successor whose clock was
    ahead used to)."""
    from defilens.history._root import root_of

    monkeypatch.setattr(_lock, "LEASE", dt.timedelta(seconds=3))
    name = bucket[len("s3://") :]
    roots = {case: root_of(f"{bucket}/{case}", s3) for case in LEASE_OBJECTS}
    for case, body in LEASE_OBJECTS.items():
        _client(s3).put_object(Bucket=name, Key=f"{case}/{COMPACTION_LOCK}", Body=body)
    for root in roots.values():
        with pytest.raises(_lock.Busy, match="another compaction"), _lock.compaction_lock(root):
            pass
    taken: Dict[str, int] = {}
    deadline = time.monotonic() + 60
    while len(taken) < len(roots) and time.monotonic() < deadline:
        for case, root in roots.items():
            if case not in taken:
                try:
                    with _lock.compaction_lock(root, lambda: 0) as lease:
                        taken[case] = lease.epoch
                except _lock.Busy:
                    pass
        time.sleep(0.3)
    assert taken == {case: 8 if case == "lasts-a-year" else 1 for case in LEASE_OBJECTS}
    for case in LEASE_OBJECTS:
        lease = json.loads(_client(s3).get_object(Bucket=name, Key=f"{case}/{COMPACTION_LOCK}")["Body"].read())
        assert lease["released"] is True and lease["epoch"] == taken[case]


@pytest.mark.slow
def test_one_compaction_after_another_takes_the_released_lease_at_once(bucket: str, s3: Dict[str, str]) -> None:
    root = f"{bucket}/again"
    _collect(root, 3, s3)
    first = defilens.compact(root, storage_options=s3, sort=False)
    second = defilens.compact(root, storage_options=s3, sort=False)
    assert first["files_removed"] > 0 and second["files_removed"] == 0
    name, key = _lease_key(bucket, "again")
    lease = json.loads(_client(s3).get_object(Bucket=name, Key=key)["Body"].read())
    assert lease["released"] is True and lease["epoch"] == 2
    assert assert_whole_rounds(root, s3) == 9


# --- F5: log cleanup beside collectors and readers ---------------------------------------------------


def _age_logs(root: str, hours: float = 3) -> None:
    """Makes every log entry so far older than the retention, by its file time (what log cleanup
    judges by)."""
    old = time.time() - hours * 3600
    for path in glob.glob(os.path.join(root, "*", "_delta_log", "*")):
        try:
            os.utime(path, (old, old))
        except FileNotFoundError:
            pass


@pytest.mark.slow
def test_log_cleanup_never_removes_what_a_concurrent_reader_or_collector_loads(tmp_path: Path) -> None:
    root = str(tmp_path / "h")
    _collect(root, 3)
    stop = threading.Event()
    failures: List[str] = []
    reads = [0]

    def read_repeatedly() -> None:
        while not stop.is_set():
            for name in ("indicators", "snapshot", "log"):
                try:
                    defilens.scan(root, name).collect()
                    reads[0] += 1
                except Exception as error:
                    failures.append(f"read {name}: {error}")

    collected: List[object] = []

    def collect() -> None:
        try:
            collected.append(_collect(root, 25, step="1m"))
        except Exception as error:
            failures.append(f"collect: {error}")

    readers = [threading.Thread(target=read_repeatedly) for _ in range(2)]
    collector = threading.Thread(target=collect)
    for thread in (*readers, collector):
        thread.start()
    log_entries = []
    try:
        for _ in range(6):
            _age_logs(root)
            defilens.compact(root, retention="1h", sort=False)
            log_entries.append(len(glob.glob(os.path.join(root, "indicators", "_delta_log", "*.json"))))
    finally:
        collector.join(300)
        stop.set()
        for thread in readers:
            thread.join(60)
    assert not failures, failures[:3]
    assert collected == [25] and reads[0] > 0
    assert min(log_entries) < 10, log_entries  # cleanup still removes old entries
    assert assert_whole_rounds(root) == 3 * 3 + 25 * 3


def test_a_load_survives_log_cleanup_up_to_the_newest_checkpoint(tmp_path: Path) -> None:
    """delta-rs's own log cleanup (a collector's, every 100 commits) goes up to the newest
    checkpoint: a load that read the previous one a moment before finds it gone, and loads again."""
    from deltalake import DeltaTable, write_deltalake

    from defilens.history._root import root_of
    from defilens.history._tables import load

    root = root_of(tmp_path / "h")
    path = root.path("snapshot")
    settings = {"delta.logRetentionDuration": "interval 1 hours", "delta.checkpointInterval": "1000"}
    stop = threading.Event()
    failures: List[str] = []
    loads = [0]

    def append(value: int) -> None:
        batch = pa.table({"token": ["a"], "value": [value], "date": ["2026-01-01"]})
        write_deltalake(path, batch, mode="append", partition_by=["date"], configuration=settings)

    def load_repeatedly() -> None:
        while not stop.is_set():
            try:
                table = load(root, "snapshot")
                assert table is not None and table.file_uris()
                loads[0] += 1
            except Exception as error:
                failures.append(str(error))

    for value in range(10):
        append(value)
    readers = [threading.Thread(target=load_repeatedly) for _ in range(2)]
    for thread in readers:
        thread.start()
    try:
        for value in range(40):
            append(value)
            _age_logs(str(tmp_path / "h"))
            table = DeltaTable(path)
            table.create_checkpoint()
            table.cleanup_metadata()
    finally:
        stop.set()
        for thread in readers:
            thread.join(60)
    assert not failures, failures[:3]
    assert loads[0] > 0
    assert len(glob.glob(os.path.join(path, "_delta_log", "*.json"))) < 5


@pytest.mark.slow
def test_a_short_maintenance_soak_stops_no_collector_and_fails_no_read(tmp_path: Path, monkeypatch) -> None:
    """benchmarks/soak_history.py --maintenance, for seconds: collectors, readers and compactions
    back to back with log cleanup due (retention scaled to 10 s)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from soak_history import maintenance_soak

    monkeypatch.setattr(_compact, "MIN_RETENTION", _compact.MIN_RETENTION)  # the soak lowers it
    found = maintenance_soak(str(tmp_path / "soak"), None, seconds=8, collectors=2, readers=1, every="0.5s")
    assert found["collector exits"] == 0, found["exits"]
    assert found["failed reads"] == 0 and found["failed compactions"] == 0, found["errors"]
    assert found["reads"] > 0 and found["compactions"] > 0
    assert found["rows doubled"] == 0 and found["every round whole and once"] == "yes"


# --- issue 39: commits that stay flat -----------------------------------------------------------


def _log_entries(root: str, name: str = "snapshot") -> List[int]:
    return sorted(int(Path(p).stem) for p in glob.glob(os.path.join(root, name, "_delta_log", "*.json")))


def _short_log_retention_and_a_checkpoint(root: str, name: str = "snapshot") -> int:
    from deltalake import DeltaTable

    table = DeltaTable(f"{root}/{name}")
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 1 hours"}, raise_if_not_exists=False)
    table = DeltaTable(f"{root}/{name}")
    table.create_checkpoint()
    return table.version()


def test_a_rounds_commit_leaves_the_log_alone(tmp_path: Path) -> None:
    """delta-rs cleans the log after every commit unless told not to: a listing of the whole log
    each time (a round's commit slowed as the log grew), and no margin for loads under way. A
    round's commit keeps every entry, expired or not; the collector cleans the log itself."""
    root = str(tmp_path / "h")
    _collect(root, 3)
    checkpoint = _short_log_retention_and_a_checkpoint(root)
    _age_logs(root)
    before = _log_entries(root)
    assert before[0] == 0 and before[-1] == checkpoint
    _collect(root, 1)
    assert _log_entries(root) == [*before, checkpoint + 1]


def test_the_collectors_log_keeper_cleans_behind_the_checkpoint_of_its_previous_turn(tmp_path: Path) -> None:
    from defilens.history._root import root_of
    from defilens.history._upkeep import LogKeeper

    root = str(tmp_path / "h")
    _collect(root, 3)
    first = _short_log_retention_and_a_checkpoint(root)
    _age_logs(root)
    keeper = LogKeeper(root_of(root))
    keeper()  # its first turn only notes the newest checkpoint
    assert _log_entries(root)[0] == 0
    _collect(root, 2)
    second = _short_log_retention_and_a_checkpoint(root)
    _age_logs(root)
    keeper()  # behind the first checkpoint: entries from it on stay for loads under way
    assert _log_entries(root) == list(range(first, second + 1))
    assert defilens.scan(root, "snapshot").collect().height == 5 * 3
    keeper()
    assert _log_entries(root)[0] == second


def test_a_collector_runs_its_log_keeper_every_few_rounds(tmp_path: Path, monkeypatch) -> None:
    from defilens.history import _upkeep

    turns: List[int] = []
    monkeypatch.setattr(_upkeep, "TIDY_EVERY", 2)
    monkeypatch.setattr(_upkeep.LogKeeper, "__call__", lambda self: turns.append(1))
    _collect(str(tmp_path / "h"), 5)
    assert len(turns) == 2
