"""A round is never counted unless it is in the tables (issue 50, item 1): a collector that
stalls after its id check while another collector takes its id over commits nothing more (the
successor fenced every table), a round skipped as already committed must be this very round,
and a round that could not be committed stays in the spool until a later collect commits it
under a free number. Each scenario ends with every fetch in the tables exactly once."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from history_checks import assert_whole_rounds, stopped

import defilens
from defilens.history import _collect, _lease, _liveness
from defilens.history._root import root_of
from defilens.history._rounds import round_of_fetch
from defilens.history._spool import Spool
from defilens.history._tables import load
from defilens.testing import Sandbox

UTC = dt.timezone.utc
TOKENS = ["bitcoin", "ethereum"]
Options = Optional[Dict[str, str]]


def _collect_rounds(root: Any, rounds: int, now: str, options: Options = None, **settings: Any) -> int:
    with Sandbox(now=now, seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        return client.collect(
            TOKENS,
            "0.01s",
            count=rounds,
            out=root,
            raw=True,
            storage_options=options,
            on_round=lambda n, f: sandbox.advance("1h"),
            **settings,
        )


def _spooled(root: Any, options: Options = None) -> List[str]:
    return Spool(root_of(root, options)).paths()


def _rounds_of(root: Any, app_id: str, options: Options = None) -> List[int]:
    """The round numbers of ``app_id`` the snapshot table's log records, in commit order."""
    table = load(root_of(root, options), "snapshot")
    assert table is not None
    entries = sorted(table.history(), key=lambda entry: int(entry["version"]))
    return [int(entry["defilens.round"]) for entry in entries if entry.get("defilens.collector") == app_id]


#: A collector (the CLI's code path, in a process of its own) that stops itself (SIGSTOP) after its
#: id check of round 1, right before spooling it: a process paused where no lease can help.
STOPPING_COLLECTOR = """
import datetime as dt, json, os, signal, sys
import defilens
from defilens.history import _collect, _liveness
from defilens.testing import Sandbox

_liveness.LEASE = dt.timedelta(seconds=float(sys.argv[3]))

def stop_here(round_):
    if round_.number == 1:
        print("stopping", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

_collect._before_spooling = stop_here
options = json.loads(sys.argv[2])
with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
    client = defilens.Client(base_url=sandbox.url)
    try:
        client.collect(["bitcoin", "ethereum"], "0.01s", count=3, out=sys.argv[1], raw=True, storage_options=options,
                       on_round=lambda n, f: sandbox.advance("1h"), collector_id="shard")
    except defilens.HistoryError as error:
        print("error:", error, flush=True)
        sys.exit(1)
print("collected", flush=True)
"""


def _start_stopping_collector(root: str, options: Options, lease: float) -> "subprocess.Popen[str]":
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPING_COLLECTOR, root, json.dumps(options), str(lease)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    assert line == "stopping", (line, child.communicate(timeout=60))
    deadline = time.monotonic() + 30
    while not stopped(child.pid):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return child


def _finish_with_a_later_collect(root: str, options: Options, rounds_before: int) -> None:
    """A later collect with the id commits the kept round under a free number (saying so), and
    then every fetch is in the tables exactly once."""
    with pytest.warns(defilens.DefiLensWarning, match="finished 1 round"):
        assert _collect_rounds(root, 1, "2026-01-09T00:00:00Z", options, collector_id="shard") == 1
    assert _spooled(root, options) == []
    assert assert_whole_rounds(root, options) == (rounds_before + 1) * len(TOKENS)


@pytest.mark.slow
def test_a_collector_stopped_past_its_lease_on_s3_commits_nothing_after_a_successor(
    bucket: str, s3: Dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real stop (SIGSTOP, its lease renewals stop too) after the id check of round 1; a
    collector started with the same id takes the lapsed lease over and commits rounds 1 and 2
    of its own; the stopped one resumes. Before the fix its round 1 was skipped as committed,
    counted, and lost."""
    root = f"{bucket}/stalled"
    lease = 3.0
    monkeypatch.setattr(_liveness, "LEASE", dt.timedelta(seconds=lease))
    child = _start_stopping_collector(root, s3, lease)
    try:
        time.sleep(lease + 1.5)  # past the lease by the store's clock
        assert _collect_rounds(root, 2, "2026-01-05T00:00:00Z", s3, collector_id="shard") == 2
    finally:
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    assert child.returncode == 1, (out, err)
    assert "'shard' was taken over" in out and "round 1" in out and "waits in the spool" in out, out
    assert len(_spooled(root, s3)) == 1
    assert _rounds_of(root, "shard", s3) == [0, 1, 2]  # the stopped one's round 1 is in no table
    _finish_with_a_later_collect(root, s3, rounds_before=4)
    assert _rounds_of(root, "shard", s3) == [0, 1, 2, 3, 4]  # its round 1, now round 3; then the last collect's


@pytest.mark.slow
def test_a_store_clock_that_jumps_cannot_make_a_collector_skip_rounds_on_s3(
    bucket: str, s3: Dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's clock jumps two minutes, so a successor takes the lease of a collector that
    paused for only 10 s after its id check of round 1 (well within its lease: it never learns of
    the takeover by its clock). Before the fix it skipped the successor's rounds as its own,
    committed the next one and exited as if nothing had happened."""
    root = f"{bucket}/jumped"
    paused, resume = threading.Event(), threading.Event()

    def pause(round_: Any) -> None:
        if round_.app_id == "shard" and round_.number == 1 and not paused.is_set():
            paused.set()
            assert resume.wait(120)

    monkeypatch.setattr(_collect, "_before_spooling", pause)
    outcome: List[object] = []

    def first() -> None:
        try:
            outcome.append(_collect_rounds(root, 4, "2026-01-01T20:00:00Z", s3, collector_id="shard"))
        except BaseException as error:  # handed to the test
            outcome.append(error)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert paused.wait(120)
        started = time.monotonic()
        real = _lease.StoreClock.now
        monkeypatch.setattr(_lease.StoreClock, "now", lambda clock: real(clock) + dt.timedelta(seconds=120))
        assert _collect_rounds(root, 2, "2026-01-05T00:00:00Z", s3, collector_id="shard") == 2
        monkeypatch.setattr(_lease.StoreClock, "now", real)
        time.sleep(max(0.0, 10 - (time.monotonic() - started)))  # a real pause of 10 s in all
    finally:
        resume.set()
        thread.join(180)
    assert isinstance(outcome[0], defilens.HistoryError), outcome
    assert "'shard' was taken over" in str(outcome[0]) and "round 1" in str(outcome[0]), outcome
    assert len(_spooled(root, s3)) == 1
    _finish_with_a_later_collect(root, s3, rounds_before=4)


@pytest.mark.slow
def test_a_paused_flock_holder_keeps_its_id_and_commits_when_it_resumes(tmp_path: Path) -> None:
    """Locally a paused collector still holds its lock: a second collector with its id is
    refused, and the paused one commits every round once it resumes."""
    root = str(tmp_path / "h")
    child = _start_stopping_collector(root, None, 60.0)
    try:
        with pytest.raises(defilens.HistoryError, match="'shard' is in use by a running collector"):
            _collect_rounds(root, 1, "2026-01-05T00:00:00Z", collector_id="shard")
    finally:
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0 and "collected" in out, (out, err)
    assert _spooled(root) == []
    assert assert_whole_rounds(root) == 3 * len(TOKENS)
    assert _rounds_of(root, "shard") == [0, 1, 2]


@pytest.mark.slow
def test_a_paused_holder_whose_lock_file_was_removed_commits_nothing_after_a_successor(tmp_path: Path) -> None:
    """Its lock file removed while it was paused (a cleanup of ``_defilens``), a collector with
    the same id starts and commits rounds 1 and 2 of its own; the paused one resumes. Before the
    fix its round 1 was skipped as committed and lost."""
    root = str(tmp_path / "h")
    child = _start_stopping_collector(root, None, 60.0)
    try:
        os.unlink(os.path.join(root, "_defilens", "collectors", "shard.lock"))
        assert _collect_rounds(root, 2, "2026-01-05T00:00:00Z", collector_id="shard") == 2
    finally:
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    assert child.returncode == 1, (out, err)
    assert "'shard' was taken over" in out and "waits in the spool" in out, out
    assert len(_spooled(root)) == 1
    _finish_with_a_later_collect(root, None, rounds_before=4)


def test_a_round_skipped_as_committed_must_be_this_round(tmp_path: Path) -> None:
    """Two rounds given one number (two collectors that used one id): the second is not counted
    as committed; it stays in the spool and the next collect commits it under a free number."""
    root = tmp_path / "h"
    assert _collect_rounds(root, 1, "2026-01-01T20:00:00Z", collector_id="shard") == 1
    with Sandbox(now="2026-01-03T00:00:00Z", seed=2) as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(TOKENS, progress=False)
    other = round_of_fetch(frames, "shard", 0, dt.datetime(2026, 1, 3, tzinfo=UTC), keep_raw=True)
    spool = Spool(root_of(root))
    path = spool.put(other)
    with pytest.raises(defilens.HistoryError, match="records round 0 of the collector 'shard' for another round"):
        _collect.commit(root_of(root), spool, other, path)
    assert spool.paths() == [path]
    assert assert_whole_rounds(root) == 1 * len(TOKENS)
    with pytest.warns(defilens.DefiLensWarning, match="finished 1 round"):
        assert _collect_rounds(root, 1, "2026-01-05T00:00:00Z", collector_id="shard") == 1
    assert spool.paths() == []
    assert assert_whole_rounds(root) == 3 * len(TOKENS)
    assert _rounds_of(root, "shard") == [0, 1, 2]
    # Committing it again changes nothing: each table records it, under its new number.
    with warnings.catch_warnings():
        warnings.simplefilter("error", defilens.DefiLensWarning)
        _collect.commit(root_of(root), spool, other.renumbered(1), spool.put(other.renumbered(1)))
    assert assert_whole_rounds(root) == 3 * len(TOKENS)
