"""Saving and reading frames, collecting history, and the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, List

import polars as pl
import pytest

import defilens
from defilens._cli import main
from defilens.testing import Sandbox

CLI = [sys.executable, "-m", "defilens"]


def _interruptible(command: List[str], **options: Any) -> "subprocess.Popen[str]":
    """A CLI process that a SIGINT reaches: a test run started in the background by a shell
    without job control inherits SIGINT ignored, and a Python started so never raises
    KeyboardInterrupt."""
    return subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **options)


@pytest.fixture(scope="module")
def fetched() -> defilens.Frames:
    with Sandbox(seed=1) as sb:
        return defilens.Client(base_url=sb.url).fetch(["bitcoin", "ethereum", "unknown-x"], markets=True)


def test_write_read_round_trips_every_dtype(fetched: defilens.Frames, tmp_path: Path) -> None:
    folder = fetched.write(tmp_path / "frames")
    back = defilens.read(folder)
    for name, frame in fetched.items():
        assert getattr(back, name).schema == frame.schema, name
        assert getattr(back, name).equals(frame), name
    assert back.indicators.schema["interval"] == defilens.INTERVAL
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.parquet" for n, _ in fetched.items())


def test_write_and_read_a_file_url(fetched: defilens.Frames, tmp_path: Path) -> None:
    """A ``file://`` URL is the local folder it names (percent-escapes decoded), written and read."""
    folder = tmp_path / "a b #1 é"
    url = folder.as_uri()
    written = fetched.write(url, raw=True)
    assert written == folder
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{n}.parquet" for n, _ in fetched.items()] + ["raw.parquet"]
    )
    for back in (defilens.read(url), defilens.read(folder)):
        for name, frame in fetched.items():
            assert getattr(back, name).equals(frame), name
    with pytest.raises(ValueError, match="storage_options apply to object storage URLs"):
        fetched.write(url, storage_options={"aws_region": "x"})


@pytest.mark.parametrize("fmt", ["csv", "ndjson"])
def test_text_formats_write_lists_as_json(fetched: defilens.Frames, tmp_path: Path, fmt: str) -> None:
    folder = fetched.write(tmp_path / fmt, format=fmt)
    text = (folder / f"info.{fmt}").read_text()
    assert '"https://' in text or "https://" in text
    if fmt == "ndjson":
        rows = [json.loads(line) for line in text.splitlines()]
        assert isinstance(rows[0]["websites"], list)  # a JSON array, not a string holding one
        back = pl.read_ndjson(folder / "info.ndjson")
        assert isinstance(back.schema["websites"], pl.List)
    else:
        assert pl.read_csv(folder / "indicators.csv").height == fetched.indicators.height


def test_write_rejects_unknown_format(fetched: defilens.Frames, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        fetched.write(tmp_path, format="xlsx")
    assert not any(tmp_path.glob("*.tmp")) and not any(tmp_path.glob(".*.tmp"))


def test_an_interrupted_write_leaves_no_temporary_file(
    fetched: defilens.Frames, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One Ctrl-C during polars' Parquet sink raises KeyboardInterrupt twice: once from the write
    # and once more in whatever runs next, here the cleanup of the temporary file.
    def interrupted_write(frame: pl.LazyFrame, file: Path, **_: object) -> None:
        Path(file).write_bytes(b"half a parquet file")
        raise KeyboardInterrupt

    real_unlink = Path.unlink
    pending_interrupts = [KeyboardInterrupt()]

    def unlink_after_second_interrupt(path: Path, missing_ok: bool = False) -> None:
        if pending_interrupts:
            raise pending_interrupts.pop()
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(pl.LazyFrame, "sink_parquet", interrupted_write)
    monkeypatch.setattr(Path, "unlink", unlink_after_second_interrupt)
    with pytest.raises(KeyboardInterrupt):
        fetched.write(tmp_path / "frames")
    monkeypatch.undo()
    assert not pending_interrupts
    assert not list((tmp_path / "frames").glob(".*.tmp"))
    assert not list((tmp_path / "frames").glob("*.parquet"))


def test_concat_and_raw(fetched: defilens.Frames) -> None:
    both = defilens.concat([fetched, fetched])
    assert both.snapshot.height == 2 * fetched.snapshot.height
    assert len(both.raw) == 2 * len(fetched.raw)
    listing_raw = [body for token, endpoint, body in fetched.raw_items() if endpoint == "listing"]
    assert {b["data"]["id"] for b in listing_raw} == {"bitcoin", "ethereum"}
    assert "Frames" in repr(fetched) and "<table>" in fetched._repr_html_()


def test_collect_writes_partitioned_rounds(tmp_path: Path) -> None:
    with Sandbox() as sb:
        client = defilens.Client(base_url=sb.url)
        started = time.monotonic()
        rounds = client.collect(["bitcoin", "ethereum"], "0.3s", count=3, out=tmp_path)
        elapsed = time.monotonic() - started
    assert rounds == 3
    assert 0.55 <= elapsed < 5  # rounds at t=0, 0.3, 0.6
    history = defilens.scan(tmp_path, "indicators").collect()
    per_token = history.group_by("token").agg(pl.col("fetched_at").n_unique().alias("rounds"))
    assert per_token["rounds"].to_list() == [3, 3]
    assert history.schema["interval"] == defilens.INTERVAL
    assert "date" in history.columns
    assert set(history["token"]) == {"bitcoin", "ethereum"}
    files = list((tmp_path / "snapshot").glob("date=*/*.parquet"))
    assert len(files) == 3
    assert not list(tmp_path.rglob("*.tmp"))
    with pytest.raises(ValueError):
        client.collect(["bitcoin"], "soon", count=1, out=tmp_path)


def test_cli_fetch_sandbox_writes_parquet(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["fetch", "bitcoin", "ethereum", "--markets", "--sandbox", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0
    assert "fetched 2 of 2 tokens" in out and "bitcoin" in out and "ethereum" in out
    back = defilens.read(tmp_path / "out")
    assert back.snapshot.height == 2 and back.markets.height > 0


@pytest.mark.parametrize("fmt", ["csv", "ndjson"])
def test_cli_formats(tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["fetch", "bitcoin", "--sandbox", "--out", str(tmp_path), "--format", fmt]) == 0
    assert (tmp_path / f"snapshot.{fmt}").exists()


def test_cli_failures_are_one_line(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEFILENS_API_KEY", raising=False)
    monkeypatch.delenv("DEFILENS_BASE_URL", raising=False)
    assert main(["fetch", "bitcoin"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("defilens: error:") and "DEFILENS_API_KEY" in err and err.count("\n") == 1
    assert main(["fetch", "unknown-coin", "--sandbox"]) == 1
    captured = capsys.readouterr()
    # Failures go to stderr; markets are fetched by default, as in Python.
    assert "not_found 2" in captured.err and "not_found" not in captured.out
    assert "fetched 0 of 1 token (2 requests, 2 failed)" in captured.out


def test_cli_never_echoes_the_key(tmp_path: Path) -> None:
    secret = "sk-live-do-not-print-4242"
    with Sandbox(api_key=secret) as sb:
        env = {**os.environ, "DEFILENS_API_KEY": secret}
        ok = subprocess.run(
            CLI + ["fetch", "bitcoin", "--base-url", sb.url, "--out", str(tmp_path / "ok")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        bad = subprocess.run(
            CLI + ["fetch", "bitcoin", "--base-url", sb.url, "--api-key", secret + "x"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert ok.returncode == 0, ok.stderr
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    assert "authentication" in bad.stderr.lower() or "401" in bad.stdout
    for stream in (ok.stdout, ok.stderr, bad.stdout, bad.stderr):
        assert secret not in stream
    for file in (tmp_path / "ok").iterdir():
        assert secret.encode() not in file.read_bytes()


def test_cli_help_everywhere() -> None:
    for args in ([], ["fetch"], ["collect"], ["sandbox"]):
        result = subprocess.run(CLI + args + ["--help"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "usage:" in result.stdout


@pytest.mark.slow
def test_cli_collect_and_interrupt(tmp_path: Path) -> None:
    out = tmp_path / "hist"
    done = subprocess.run(
        CLI + ["collect", "bitcoin", "ethereum", "--sandbox", "--every", "1s", "--count", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert defilens.scan(out, "snapshot").collect().height == 6
    proc = _interruptible(
        CLI + ["collect", "bitcoin", "--sandbox", "--every", "0.2s", "--out", str(tmp_path / "live")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Interrupted once two rounds are in (it says so on stdout), not after a guessed sleep.
    lines = []
    while not any(line.startswith("round 2:") for line in lines):
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, f"collect ended before its second round: {proc.stderr.read()}"  # type: ignore[union-attr]
        lines.append(line)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert not list((tmp_path / "live").rglob("*.tmp"))
    rounds = defilens.scan(tmp_path / "live", "snapshot").collect()
    assert rounds.height >= 2


def test_cli_sandbox_serves(tmp_path: Path) -> None:
    proc = _interruptible(CLI + ["sandbox", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        url = line.split(" at ")[1].split()[0]
        frames = defilens.Client(base_url=url).token("bitcoin")
        assert frames.snapshot.height == 1
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert "stopped after" in stderr


def test_cli_sandbox_simulated_clock() -> None:
    command = CLI + ["sandbox", "--port", "0", "--seed", "3", "--now", "2026-02-03T04:05:06Z"]
    proc = _interruptible(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert "market time 2026-02-03 04:05:06 UTC standing still" in line
        url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(url + "/listings/bitcoin", timeout=10) as response:
            body = response.read().decode()
        assert body == defilens.testing.listing_body("bitcoin", seed=3, now="2026-02-03T04:05:06Z")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
    assert proc.returncode == 0


def test_cli_sandbox_without_options_serves_what_a_default_sandbox_serves() -> None:
    # The command passes only the options given, so its defaults are the Sandbox's own.
    command = CLI + ["sandbox", "--port", "0", "--now", "2026-02-03T04:05:06Z", "--api-key", "k"]
    proc = _interruptible(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().split(" at ")[1].split()[0]  # type: ignore[union-attr]
        request = urllib.request.Request(url + "/listings/bitcoin", headers={"x-partner-key": "k"})
        with urllib.request.urlopen(request, timeout=10) as response:
            served = response.read()
        with defilens.testing.Sandbox(now="2026-02-03T04:05:06Z") as sandbox:
            default = urllib.request.urlopen(sandbox.url + "/listings/bitcoin", timeout=10).read()
        assert served == default
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--now", "1999-12-31"], "now must be from 2000-01-01"), (["--speed", "-2"], "speed must be a number from 0")],
)
def test_cli_sandbox_refuses_a_bad_clock(args: "list[str]", message: str) -> None:
    result = subprocess.run(CLI + ["sandbox", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert message in result.stderr


def test_cli_exit_codes_for_partial_failure_and_a_sandbox_with_a_url(capsys: pytest.CaptureFixture) -> None:
    assert main(["fetch", "bitcoin", "unknown-x", "--sandbox", "--no-markets"]) == 0
    assert main(["fetch", "bitcoin", "unknown-x", "--sandbox", "--no-markets", "--strict"]) == 3
    assert main(["fetch", "bitcoin", "--sandbox", "--no-markets", "--strict"]) == 0
    capsys.readouterr()
    assert main(["fetch", "bitcoin", "--sandbox", "--base-url", "https://example.invalid"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("defilens: error: --sandbox runs against the built-in Sandbox; drop --base-url")


def test_a_ctrl_c_taken_by_another_thread_ends_a_wait_at_once() -> None:
    """The kernel may hand a Ctrl-C to any of the process's threads; Python's handler then only
    sets a flag, which a main thread inside one long sleep would not see for minutes."""
    from defilens import _waiting

    def interrupt_from_this_thread() -> None:
        time.sleep(0.2)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    # As in an interactive session: a test run started in the background may have SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        helper = threading.Thread(target=interrupt_from_this_thread)
        started = time.monotonic()
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            _waiting.sleep(30)
        helper.join()
        assert time.monotonic() - started < 5
    finally:
        signal.signal(signal.SIGINT, previous)
