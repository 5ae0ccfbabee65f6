"""One clock: a history collected from a Sandbox on a simulated clock is stamped in simulated time
everywhere (fetched_at, the date partitions, the spool's rounds, first_seen_at, lag, the audit's
staleness, the Sandbox's Date header), and a client on the wall clock is unchanged."""

from __future__ import annotations

import datetime as dt
import email.utils
import itertools
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest

import defilens
from conftest import Reply
from defilens._cli import main
from defilens.testing import Sandbox

UTC = dt.timezone.utc
START = dt.datetime(2026, 1, 5, 23, 20, tzinfo=UTC)


def test_a_client_bound_to_a_simulated_sandbox_stamps_its_time() -> None:
    with Sandbox(now=START) as sandbox:
        bound = defilens.Client(base_url=sandbox.url, clock=sandbox)
        implied = defilens.Client(base_url=sandbox)  # the Sandbox itself: its clock comes with it
        wall = defilens.Client(base_url=sandbox.url)  # only its URL: the wall clock, as before
        for client in (bound, implied):
            frames = client.fetch(["bitcoin"])
            assert client.now() == START
            assert frames.snapshot["fetched_at"].to_list() == [START]
            assert set(frames.log["fetched_at"].to_list()) == {START}
            assert "clock='sandbox'" in repr(client)
        sandbox.advance("15m")
        assert bound.fetch(["bitcoin"]).snapshot["fetched_at"][0] == START + dt.timedelta(minutes=15)
        wall_time = wall.fetch(["bitcoin"]).snapshot["fetched_at"][0]
        assert abs(wall_time - dt.datetime.now(UTC)) < dt.timedelta(minutes=5)
        assert "clock" not in repr(wall)


def test_the_sandbox_sends_its_own_time_in_the_date_header() -> None:
    with Sandbox(now=START) as sandbox:
        with urllib.request.urlopen(f"{sandbox.url}/listings/bitcoin") as response:
            assert email.utils.parsedate_to_datetime(response.headers["Date"]) == START
        sandbox.advance("1d")
        with urllib.request.urlopen(f"{sandbox.url}/listings/bitcoin") as response:
            assert email.utils.parsedate_to_datetime(response.headers["Date"]) == START + dt.timedelta(days=1)
    with Sandbox() as wall, urllib.request.urlopen(f"{wall.url}/listings/bitcoin") as response:
        sent = email.utils.parsedate_to_datetime(response.headers["Date"])
        assert abs(sent - dt.datetime.now(UTC)) < dt.timedelta(minutes=5)


def test_a_clock_that_is_not_a_sandbox_is_refused() -> None:
    with pytest.raises(TypeError, match=r"clock must be a defilens\.testing\.Sandbox"):
        defilens.Client(base_url="http://127.0.0.1:9", clock=object())  # type: ignore[arg-type]
    with Sandbox() as sandbox:
        assert sandbox.speed is None
    with Sandbox(now=START) as sandbox:
        assert sandbox.speed == 0
    with Sandbox(now=START, speed=60) as sandbox:
        assert sandbox.speed == 60


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tokens every 15 minutes for six simulated hours across midnight, collected in a
    second of real time: the collector moves the Sandbox's still clock from round to round."""
    root = tmp_path_factory.mktemp("clock") / "h"
    with Sandbox(now=START) as sandbox:
        client = defilens.Client(base_url=sandbox)
        began = time.monotonic()
        assert client.collect(["bitcoin", "ethereum"], "15m", count=24, out=root) == 24
        assert time.monotonic() - began < 120  # six simulated hours, not six real ones
        assert sandbox.now == START + dt.timedelta(minutes=15 * 23)
    return root


@pytest.mark.slow
def test_a_simulated_history_is_stamped_in_simulated_time(simulated: Path) -> None:
    snapshot = defilens.scan(simulated, "snapshot").collect()
    rounds = sorted(set(snapshot["fetched_at"].to_list()))
    assert rounds == [START + dt.timedelta(minutes=15 * k) for k in range(24)]
    days = snapshot.group_by("date").len().sort("date")
    assert days["date"].to_list() == [dt.date(2026, 1, 5), dt.date(2026, 1, 6)]
    assert days["len"].to_list() == [2 * 3, 2 * 21]  # 23:20, 23:35, 23:50, then 00:05 onwards
    assert sorted(p.name for p in (simulated / "snapshot").iterdir() if p.name.startswith("date=")) == [
        "date=2026-01-05",
        "date=2026-01-06",
    ]


def test_every_candle_lag_is_the_poll_offset(simulated: Path) -> None:
    lags = {
        interval: set(defilens.panel(simulated).filter(pl.col("interval") == interval).collect()["lag"].to_list())
        for interval in ("5m", "15m")
    }
    # Rounds at :05, :20, :35 and :50: on a 5-minute close, and five minutes after a 15-minute one.
    assert lags == {"5m": {dt.timedelta(0)}, "15m": {dt.timedelta(minutes=5)}}
    hourly = defilens.panel(simulated).filter(pl.col("interval") == "1h").collect()
    # The first round after each hour's close is five minutes after it (00:05, 01:05, ...), except
    # the 23:00 close, first seen by the first round at 23:20.
    assert set(hourly["lag"].to_list()) == {dt.timedelta(minutes=5), dt.timedelta(minutes=20)}


def test_the_audit_finds_no_stale_fetch_in_a_simulated_history(simulated: Path) -> None:
    report = defilens.audit(simulated, cache=False)
    assert report.stale.height == 0
    assert report.failures.height == 0


def test_a_running_simulated_clock_is_waited_for_on_its_own_time(tmp_path: Path) -> None:
    # 60 simulated seconds a real second: 1-minute rounds every real second.
    with Sandbox(now=START, speed=60) as sandbox:
        client = defilens.Client(base_url=sandbox)
        began = time.monotonic()
        client.collect(["bitcoin"], "1m", count=3, out=tmp_path / "h", markets=False, raw=True)
        took = time.monotonic() - began
    starts = sorted(set(defilens.scan(tmp_path / "h", "raw").collect()["round_start"].to_list()))
    assert len(starts) == 3
    for k, started in enumerate(starts):
        due = starts[0] + dt.timedelta(minutes=k)
        # Never before its tick on the Sandbox's clock; late only by how long the machine took to wake up.
        assert due <= started < due + dt.timedelta(minutes=5), (k, started, due)
    assert took < 60


def test_rounds_moved_by_on_round_keep_their_times(tmp_path: Path) -> None:
    """The idiom of earlier versions: a still clock moved by ``on_round``; the collector adds nothing."""
    with Sandbox(now=START) as sandbox:
        client = defilens.Client(base_url=sandbox)
        client.collect(["bitcoin"], "0.01s", count=3, out=tmp_path / "h", on_round=lambda n, f: sandbox.advance("1h"))
    fetched = sorted(defilens.scan(tmp_path / "h", "snapshot").collect()["fetched_at"].to_list())
    assert fetched == [START + dt.timedelta(hours=k) for k in range(3)]


def _lag_and_stale(root: Path) -> "tuple[dt.timedelta, int]":
    """The longest a 5-minute close waited to be seen (every round sees the last one), and the
    fetches the audit finds stale."""
    lag = defilens.panel(root, intervals="5m").select(pl.col("lag").max()).collect().item()
    return lag, defilens.audit(root, cache=False).stale.height


@pytest.mark.slow
def test_collect_on_the_command_line_runs_on_the_built_in_sandbox_s_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``collect --sandbox --now T``: three 5-minute rounds in the time their requests take (601 s
    on the wall clock before), stamped in the Sandbox's time: a lag of at most one round."""
    root = tmp_path / "h"
    began = time.monotonic()
    argv = ["collect", "bitcoin", "ethereum", "--every", "5m", "--count", "3", "--out", str(root)]
    assert main([*argv, "--sandbox", "--now", "2026-01-05T23:50:00Z"]) == 0, capsys.readouterr().err
    assert time.monotonic() - began < 60
    fetched = sorted(set(defilens.scan(root, "snapshot").collect()["fetched_at"].to_list()))
    assert fetched == [dt.datetime(2026, 1, 5, 23, 50, tzinfo=UTC) + dt.timedelta(minutes=5 * k) for k in range(3)]
    assert _lag_and_stale(root) == (dt.timedelta(0), 0)  # rounds on the 5-minute closes
    # A running clock too: --speed 600 makes the 5-minute rounds half a second apart.
    began = time.monotonic()
    assert (
        main([*argv[:-1], str(tmp_path / "fast"), "--sandbox", "--now", "2026-01-05T23:50:00Z", "--speed", "600"]) == 0
    )
    assert time.monotonic() - began < 60
    lag, stale = _lag_and_stale(tmp_path / "fast")
    assert lag <= dt.timedelta(minutes=5) and stale == 0, lag


@pytest.mark.slow
def test_collect_follows_a_running_sandbox_s_clock_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``defilens sandbox --now T --speed 60`` in one terminal, ``collect --base-url URL --clock
    sandbox`` in another: the history is in the Sandbox's time (before, fetched_at was the wall
    clock, the panel's lag 330 days and every fetch stale)."""
    command = [sys.executable, "-m", "defilens", "sandbox", "--now", "2026-01-05T23:20:00Z", "--speed", "60"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" at ")[1].split()[0]
        assert f"--base-url {url} --clock sandbox" in server.stdout.readline()  # it says how
        argv = ["collect", "bitcoin", "--every", "1m", "--count", "3", "--no-markets", "--base-url", url]
        assert main([*argv, "--out", str(tmp_path / "h"), "--clock", "sandbox"]) == 0, capsys.readouterr().err
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=10)
    fetched = sorted(defilens.scan(tmp_path / "h", "snapshot").collect()["fetched_at"].to_list())
    assert START <= fetched[0] < START + dt.timedelta(hours=1), fetched  # START: 23:20 on the same day
    assert all(b - a > dt.timedelta(seconds=50) for a, b in itertools.pairwise(fetched)), fetched  # 1m rounds
    lag, stale = _lag_and_stale(tmp_path / "h")
    assert lag < dt.timedelta(minutes=1, seconds=30) and stale == 0, lag  # a round: a minute
    # A still clock cannot be moved from another process: said before anything is written.
    out = tmp_path / "still"
    with Sandbox(now=START) as still:
        assert main([*argv[:-1], still.url, "--out", str(out), "--clock", "sandbox"]) == 1
    assert "stands still" in capsys.readouterr().err and not out.exists()
    # A server that is not a defilens sandbox does not tell its clock.
    assert main([*argv[:-1], "http://127.0.0.1:9", "--out", str(out), "--clock", "sandbox"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--clock sandbox" in err and not out.exists(), err


def test_a_client_follows_only_a_server_that_reports_its_clock(scripted) -> None:
    server = scripted(lambda seen, n: Reply(404, '{"error": "not found"}'))
    with pytest.raises(ValueError, match=r"does not report a clock, so clock=\"sandbox\" \(--clock sandbox\) cannot"):
        defilens.Client(base_url=server.url, clock="sandbox")
    with Sandbox(now=START) as sandbox:
        client = defilens.Client(base_url=sandbox.url, clock="sandbox")
        assert client.now() == START and "clock='sandbox'" in repr(client)
        assert client.fetch(["bitcoin"], markets=False).snapshot["fetched_at"].item() == START
    with pytest.raises(TypeError, match=r"clock must be .*'sandbox'.* got 'wall'"):
        defilens.Client(base_url="http://127.0.0.1:9", clock="wall")  # type: ignore[arg-type]


def test_the_sandbox_s_clock_options_need_the_sandbox(capsys: pytest.CaptureFixture) -> None:
    for extra in (["--now", "2026-01-05T00:00:00Z"], ["--speed", "60"]):
        assert main(["fetch", "bitcoin", *extra]) == 1
        assert "--sandbox" in capsys.readouterr().err
    assert main(["fetch", "bitcoin", "--sandbox", "--clock", "sandbox"]) == 1
    assert "--clock sandbox" in capsys.readouterr().err
    assert main(["fetch", "bitcoin", "--sandbox", "--now", "2026-01-05T00:00:00Z", "--no-markets"]) == 0
    assert "fetched 1 of 1 token" in capsys.readouterr().out


def test_asof_on_a_wall_clock_history_of_a_simulated_sandbox_says_how_to_collect_on_its_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The newcomer's history: `defilens collect --base-url URL` of a simulated Sandbox, on the
    wall clock. asof at a market time is refused, with advice for the command line too."""
    with Sandbox(now=START) as sandbox:
        argv = ["collect", "bitcoin", "--every", "1s", "--count", "1", "--no-markets", "--base-url", sandbox.url]
        assert main([*argv, "--out", str(tmp_path / "h")]) == 0, capsys.readouterr().err
    with pytest.raises(ValueError, match=r"before the history's first fetch.*collect --sandbox --now.*--clock sandbox"):
        defilens.asof(tmp_path / "h", START + dt.timedelta(hours=1))
