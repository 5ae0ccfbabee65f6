"""What a collector says and when it stops: one line for every error and warning (no panic text,
no colour escapes, no Python source line), Ctrl-C inside a commit stops it after that commit,
and collector ids: recovery leaves a live collector's rounds alone, an id can be set, one id is
one live collector, and a restarted collector with the same id continues its round numbers."""

from __future__ import annotations

import contextlib
import datetime as dt
import glob
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest
from full_disk import fill, tmpfs
from history_checks import assert_whole_rounds

import defilens
from defilens.history import TABLES, _liveness, _tables
from defilens.history._collect import new_collector_id
from defilens.history._liveness import collector_running
from defilens.history._root import root_of
from defilens.history._rounds import round_of_fetch, tables_of
from defilens.history._spool import Spool
from defilens.history._tables import commit_round, load, one_line
from defilens.testing import Sandbox

UTC = dt.timezone.utc
TOKENS = ["bitcoin", "ethereum"]
CLI = [sys.executable, "-m", "defilens"]
ESC = "\x1b"


def _collect(root: Any, rounds: int = 1, **settings: Any) -> int:
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        return client.collect(
            TOKENS, "0.01s", count=rounds, out=root, raw=True, on_round=lambda n, f: sandbox.advance("1h"), **settings
        )


def _spool_round(root: Any, app_id: str, number: int = 0, storage_options: Any = None) -> str:
    """A round fetched by collector ``app_id`` and left in the spool, in no table yet."""
    with Sandbox(now="2026-01-03T00:00:00Z", seed=2) as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(TOKENS, progress=False)
    round_ = round_of_fetch(frames, app_id, number, dt.datetime.now(UTC), keep_raw=True)
    return Spool(root_of(root, storage_options)).put(round_)


def _stderr_lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- F11: one line, always --------------------------------------------------------------------


def test_one_line_drops_colour_escapes_and_debug_dumps() -> None:
    # As object_store's errors come through obstore and delta-rs: a coloured arrow between causes.
    arrow = f" {ESC}[31m↳{ESC}[0m "
    error = OSError(
        f"Generic LocalFileSystem error{arrow}Unable to copy data to file{arrow}No space left\nDebug source: Io"
    )
    assert one_line(error) == "Generic LocalFileSystem error: Unable to copy data to file: No space left"
    assert (
        one_line(OSError(f"{ESC}[1mbold{ESC}[0m and {ESC}]8;;http://x{ESC}\\link{ESC}]8;;{ESC}\\")) == "bold and link"
    )


def test_a_panic_inside_a_commit_becomes_a_history_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A panic in the calling thread of delta-rs reaches Python as pyo3's PanicException, a
    BaseException: the collector reports it on one line like any failed commit."""

    class PanicException(BaseException):
        pass

    def panics(*args: Any, **named: Any) -> bool:
        raise PanicException("Already shut down")

    with Sandbox(now="2026-01-03T00:00:00Z", seed=2) as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(TOKENS, progress=False)
    tables, _ = tables_of(round_of_fetch(frames, "x", 0, dt.datetime.now(UTC), keep_raw=False))
    monkeypatch.setattr(_tables, "commit", panics)
    with pytest.raises(defilens.HistoryError, match=r"snapshot'.*delta-rs failed \(Already shut down; the round waits"):
        commit_round(root_of(tmp_path / "h"), {"snapshot": tables["snapshot"]}, "x", 0, {})


@pytest.mark.slow
def test_a_full_disk_is_one_line_without_a_panic(tmp_path: Path) -> None:
    """A real disk that fills up during the round's commits (the spool entry still fits):
    delta-rs's object store panics on its way out in most runs; the user sees one line."""
    with tmpfs(tmp_path / "disk", "3m") as disk:
        root = disk / "h"
        _collect(root, 1)
        _spool_round(tmp_path / "probe", new_collector_id())
        spool_size = max(
            os.path.getsize(path) for path in glob.glob(str(tmp_path / "probe" / "_spool" / "*" / "*.round"))
        )
        commit_failures = 0
        for extra in (8, 24, 40, 56, 72, 96):
            fill(disk, spool_size + extra * 1024)
            run = subprocess.run(
                CLI
                + ["collect", *TOKENS, "--sandbox", "--every", "0.01s", "--count", "1", "--raw", "--out", str(root)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            lines = _stderr_lines(run.stderr)
            assert "panicked" not in run.stderr and ESC not in run.stderr and "Traceback" not in run.stderr, run.stderr
            # The round a failed run left is finished by the next one, which says so in one line.
            warned = [line for line in lines if line.startswith("defilens: warning: finished 1 round")]
            if run.returncode == 0:
                assert lines == warned, run.stderr
                continue
            assert run.returncode == 1 and lines[:-1] == warned and lines[-1].startswith("defilens: error: "), (
                run.stderr
            )
            commit_failures += "could not commit" in lines[-1] or "could not create" in lines[-1]
        assert commit_failures, "no run failed inside a commit: the test filled the disk wrongly"
        (disk / "filler").unlink()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", defilens.DefiLensWarning)
            _collect(root, 1)
        assert_whole_rounds(root)


@pytest.mark.slow
def test_the_cli_prints_a_warning_as_one_line(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _spool_round(root, new_collector_id())
    run = subprocess.run(
        CLI + ["collect", *TOKENS, "--sandbox", "--every", "0.01s", "--count", "1", "--raw", "--out", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    lines = _stderr_lines(run.stderr)
    assert len(lines) == 1 and lines[0].startswith("defilens: warning: finished 1 round"), run.stderr
    assert "warnings.warn" not in run.stderr and ".py:" not in run.stderr
    assert assert_whole_rounds(root) == 2 * 2


def test_a_python_warning_points_at_the_callers_line(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _spool_round(root, new_collector_id())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _collect(root, 1)
    finished = [w for w in caught if "finished 1 round" in str(w.message)]
    assert len(finished) == 1 and finished[0].filename == __file__, [(w.filename, str(w.message)) for w in caught]


# -- F12: Ctrl-C inside a commit ----------------------------------------------------------------

#: Runs the CLI with every table commit (not the creation of a table) slowed down by
#: DEFILENS_TEST_SLOW seconds in delta-rs's own call, and a file touched when the first begins.
SLOW_CLI = """
import os, sys, time, pathlib, deltalake
real = deltalake.write_deltalake
def slow(table_or_uri, data, **kwargs):
    if not isinstance(table_or_uri, str):
        pathlib.Path(os.environ["DEFILENS_TEST_MARK"]).touch()
        time.sleep(float(os.environ["DEFILENS_TEST_SLOW"]))
    return real(table_or_uri, data, **kwargs)
deltalake.write_deltalake = slow
from defilens._cli import main
sys.exit(main(sys.argv[1:]))
"""


#: Runs the CLI with the spool's put stalled inside obstore, on a store that never answers (a call
#: into Rust that does not return to Python until its timeout).
STALLED_SPOOL_CLI = """
import os, sys, socket, threading, pathlib, obstore
from obstore.store import S3Store
from defilens.history import _spool
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(16)
held = []
threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
silent = S3Store("b", endpoint=f"http://127.0.0.1:{server.getsockname()[1]}", access_key_id="x",
                 secret_access_key="y", region="us-east-1", client_options={"allow_http": True, "timeout": "600s"})
def put(self, round_):
    pathlib.Path(os.environ["DEFILENS_TEST_MARK"]).touch()
    obstore.put(silent, "round", b"x")
_spool.Spool.put = put
from defilens._cli import main
sys.exit(main(sys.argv[1:]))
"""


def _slow_collect(tmp_path: Path, root: Path, slow: float, script: str = SLOW_CLI) -> "subprocess.Popen[str]":
    mark = tmp_path / "committing"
    mark.unlink(missing_ok=True)
    env = {**os.environ, "DEFILENS_TEST_MARK": str(mark), "DEFILENS_TEST_SLOW": str(slow)}
    command = [sys.executable, "-c", script, "collect", *TOKENS, "--sandbox", "--every", "0.01s", "--raw"]
    child = subprocess.Popen(
        command + ["--out", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not mark.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the collector never began a commit"
        time.sleep(0.02)
    return child


def _ctrl_c_until_stopped(child: "subprocess.Popen[str]", within: float) -> "tuple[str, str]":
    """Ctrl-C, and again every half second until the process ends (two signals close together
    may reach Python's handler as one)."""
    deadline = time.monotonic() + within
    while child.poll() is None and time.monotonic() < deadline:
        child.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)
    assert child.poll() is not None, "Ctrl-C did not stop the collector"
    return child.communicate(timeout=10)


@pytest.mark.slow
def test_ctrl_c_inside_a_commit_stops_after_that_commit(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 1)  # the tables exist: the next round's commits are the slowed ones
    child = _slow_collect(tmp_path, root, slow=1.5)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    lines = _stderr_lines(err)
    assert lines == [f"stopped after 1 round; history in {root}"], err
    assert "round 1: 2 tokens" in out
    assert assert_whole_rounds(root) == 2 * 2
    assert not glob.glob(str(root / "_spool" / "*" / "*.round"))


@pytest.mark.slow
def test_ctrl_c_twice_stops_at_once_and_the_next_collect_finishes_the_round(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 1)
    child = _slow_collect(tmp_path, root, slow=600)
    _, err = _ctrl_c_until_stopped(child, within=60)  # far less than one slowed commit
    assert child.returncode == 130, err
    lines = _stderr_lines(err)
    assert len(lines) == 1 and lines[0].startswith("stopped during a commit"), err
    assert len(glob.glob(str(root / "_spool" / "*" / "*.round"))) == 1
    with pytest.warns(defilens.DefiLensWarning, match="finished 1 round"):
        _collect(root, 1)
    assert assert_whole_rounds(root) == 3 * 2


@pytest.mark.slow
def test_ctrl_c_twice_stops_a_spool_write_stalled_inside_obstore(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 1)
    child = _slow_collect(tmp_path, root, slow=0, script=STALLED_SPOOL_CLI)
    _, err = _ctrl_c_until_stopped(child, within=60)  # the stalled put would take ten minutes
    assert child.returncode == 130, err
    assert _stderr_lines(err) == [
        f"stopped during a commit after 0 rounds (the next collect finishes what the spool holds of it); history in "
        f"{root}"
    ], err
    with warnings.catch_warnings():
        warnings.simplefilter("error", defilens.DefiLensWarning)  # nothing was left to finish
        _collect(root, 1)
    assert assert_whole_rounds(root) == 2 * 2


# -- collector ids ------------------------------------------------------------------------------


def test_recovery_leaves_the_rounds_of_a_live_collector_alone(tmp_path: Path) -> None:
    root = tmp_path / "h"
    live = new_collector_id()
    with collector_running(root_of(root), live):
        _spool_round(root, live)
        with warnings.catch_warnings():
            warnings.simplefilter("error", defilens.DefiLensWarning)
            _collect(root, 1)
        assert len(Spool(root_of(root)).paths()) == 1
        assert assert_whole_rounds(root) == 2
    # Its collector gone, the round is finished by the next collect, which says so.
    with pytest.warns(defilens.DefiLensWarning, match="finished 1 round"):
        _collect(root, 1)
    assert Spool(root_of(root)).paths() == []
    assert assert_whole_rounds(root) == 3 * 2


@pytest.mark.parametrize("bad", ["", "has space", "a/b", "../up", "-starts-with-dash", "é", "x" * 65])
def test_a_collector_id_is_checked(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        _collect(tmp_path / "h", 1, collector_id=bad)
    assert not (tmp_path / "h" / "snapshot").exists()


def test_the_cli_takes_a_collector_id(tmp_path: Path) -> None:
    root = tmp_path / "h"
    command = CLI + ["collect", *TOKENS, "--sandbox", "--every", "0.01s", "--count", "2", "--out", str(root)]
    run = subprocess.run(command + ["--collector-id", "shard-a.1"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert load(root_of(root), "snapshot").transaction_version("shard-a.1") == 1  # type: ignore[union-attr]
    bad = subprocess.run(command + ["--collector-id", "shard a"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and _stderr_lines(bad.stderr) == [
        "defilens: error: collector_id must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
        "digit; got 'shard a'"
    ], bad.stderr


def test_two_live_collectors_with_one_id_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "h"
    refused = pytest.raises(defilens.HistoryError, match="'shard-a' is in use by a running collector")
    with collector_running(root_of(root), "shard-a"), refused:
        _collect(root, 1, collector_id="shard-a")
    assert not (root / "snapshot").exists()
    assert _collect(root, 1, collector_id="shard-a") == 1


def _versions(root: Any, app_id: str, storage_options: Any = None) -> Dict[str, Any]:
    versions = {}
    for name in TABLES:
        table = load(root_of(root, storage_options), name)
        if table is not None:
            versions[name] = table.transaction_version(app_id)
    return versions


def test_a_restarted_collector_with_its_id_continues_its_round_numbers(tmp_path: Path) -> None:
    root = tmp_path / "h"
    assert _collect(root, 3, collector_id="stable") == 3
    assert _collect(root, 3, collector_id="stable") == 3
    assert assert_whole_rounds(root) == 6 * 2
    versions = _versions(root, "stable")
    assert set(versions) >= {"snapshot", "indicators", "ta_updated", "log", "raw"}
    # drift and info get rows only in some rounds (info where it changes), so their last round varies.
    assert all(version == 5 for name, version in versions.items() if name not in ("drift", "info")), versions
    snapshot = defilens.scan(root, "snapshot").collect()
    assert sorted(snapshot.group_by("token").len().get_column("len").to_list()) == [6, 6]


@pytest.mark.slow
def test_collector_ids_on_object_storage(bucket: str, s3: Dict[str, str]) -> None:
    root = f"{bucket}/history"
    live = new_collector_id()
    with collector_running(root_of(root, s3), live):
        with pytest.raises(defilens.HistoryError, match=f"{live!r} is in use by a running collector"):
            _collect(root, 1, collector_id=live, storage_options=s3)
        _spool_round(root, live, storage_options=s3)
        with warnings.catch_warnings():
            warnings.simplefilter("error", defilens.DefiLensWarning)
            assert _collect(root, 2, collector_id="stable", storage_options=s3) == 2
        assert len(Spool(root_of(root, s3)).paths()) == 1
    with pytest.warns(defilens.DefiLensWarning, match="finished 1 round"):
        assert _collect(root, 2, collector_id="stable", storage_options=s3) == 2
    assert assert_whole_rounds(root, s3) == 5 * 2
    assert _versions(root, "stable", s3)["snapshot"] == 3
    leases = Spool(root_of(root, s3)).store.list(prefix="_defilens/collectors").collect()
    assert [meta["path"] for meta in leases if meta["path"].endswith(".lease")] == []


@pytest.mark.slow
def test_an_id_killed_here_is_free_at_once_on_object_storage(bucket: str, s3: Dict[str, str]) -> None:
    root = f"{bucket}/history"
    _spool_round(root, "restarted", storage_options=s3)
    # A collector that took its lease and died without a word (kill -9 of a collect).
    script = (
        "import os, sys\n"
        "from defilens.history._liveness import collector_running\n"
        "from defilens.history._root import root_of\n"
        f"holding = collector_running(root_of({root!r}, {s3!r}), 'restarted')\n"
        "holding.__enter__()\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    leases = Spool(root_of(root, s3)).store.list(prefix="_defilens/collectors").collect()
    assert [meta["path"] for meta in leases if meta["path"].endswith(".lease")] == [
        "_defilens/collectors/restarted.lease"
    ]
    with pytest.warns(defilens.DefiLensWarning, match="finished 1 round"):
        assert _collect(root, 1, collector_id="restarted", storage_options=s3) == 1
    assert assert_whole_rounds(root, s3) == 2 * 2
    assert _versions(root, "restarted", s3)["snapshot"] == 1


@pytest.mark.slow
def test_a_lease_is_renewed_and_a_holder_that_stalled_past_it_stops(
    bucket: str,
    s3: Dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_liveness, "LEASE", dt.timedelta(seconds=3))  # renewed every 0.75 s
    root = root_of(f"{bucket}/history", s3)
    with collector_running(root, "a") as first:
        time.sleep(4.5)  # past the lease: only its renewals keep it
        with pytest.raises(defilens.HistoryError, match="'a' is in use"), collector_running(root, "a"):
            pass
        first.check()
        first.lease.stopped.set()  # type: ignore[attr-defined]  # the holder stalls: no renewal any more
        time.sleep(4.5)
        with collector_running(root, "a"), pytest.raises(defilens.HistoryError, match="'a' was taken over"):
            first.check()
