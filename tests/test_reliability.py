"""Faults, hostile input, interruption, secrets and concurrency."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import polars as pl
import pytest

import defilens
from bodies import listing
from defilens.testing import Sandbox

SECRET = "sk-live-7f3c9a-never-print"


# --------------------------------------------------------------------------------------------
# Fault soak


@pytest.mark.slow
def test_soak_2000_ids_with_faults_loses_nothing() -> None:
    """The network issue's acceptance batch: 10% 503, 5% 429, 2% drops, 1% truncated."""
    ids = [f"coin-{i}" for i in range(2000)]
    with Sandbox(
        seed=11, error_rate=0.10, rate_limit_rate=0.05, drop_rate=0.02, truncate_rate=0.01, retry_after=1
    ) as sb:
        frames = defilens.Client(base_url=sb.url, max_retries=3, concurrency=64, backoff=(0.05, 0.5)).fetch(
            ids, markets=False
        )
        served = sb.requests
    log = frames.log
    assert log.height == 2000 and log["token"].n_unique() == 2000
    ok = set(frames.snapshot["token"])
    failed = set(frames.errors["token"])
    assert ok | failed == set(ids) and not ok & failed
    assert frames.snapshot["token"].is_duplicated().sum() == 0
    assert len(ok) >= 0.99 * 2000, len(ok)
    assert served == log["attempts"].sum()
    assert set(frames.errors["kind"]) <= {"server", "rate_limited", "connection"}


def test_permanent_faults_report_the_right_kind() -> None:
    with Sandbox(invalid_json_rate=1.0) as sb, pytest.warns(defilens.DefiLensWarning, match="6 of them with decode"):
        frames = defilens.Client(base_url=sb.url).fetch(["a", "b", "unknown-c"], markets=True)
    kinds = dict(zip(frames.log["token"] + "/" + frames.log["endpoint"], frames.log["kind"], strict=True))
    assert kinds == {f"{t}/{e}": "decode" for t in ("a", "b", "unknown-c") for e in ("listing", "markets")}
    assert frames.log["attempts"].to_list() == [1] * 6


# --------------------------------------------------------------------------------------------
# Hostile bodies


def hostile_bodies() -> "list[bytes]":
    base = json.dumps(listing()).encode()
    bodies = [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"data": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001,
        b'{"data": {"id": "x", "current_price": 1e999}}',
        b'{"data": {"id": "x", "market_cap_rank": 123456789012345678901234567890}}',
        b'{"data": {"id": "x", "rsi14_1h": -1e308, "sma5_1h": 1e-400}}',
        b'{"data": {"id": "\\ud800"}}',
        b'{"data": {"id": "x\\u0000y", "name": "\\udfff\\ud800"}}',
        b'{"data": {"id": "x", "description": "' + b"a" * (64 * 1024 * 1024) + b'"}}',
        b"\xff\xfe\x00garbage",
        b'{"data": {"id": "x"}}' + b" trailing",
        b'{"data": {"id": "x", "id": 5, "id": null}}',
    ]
    for key in (
        "current_price",
        "categories",
        "is_active",
        "last_updated",
        "rsi14_1h",
        "macd_1h",
        "single_pattern_1h",
        "ta_1h_updated_at",
    ):
        for wrong in ("[]", "{}", "true", '"text"', "[1, 2]", "-0", '["a", 1]'):
            bodies.append(base.replace(f'"{key}": '.encode(), f'"{key}": {wrong}, "_was": '.encode(), 1))
    rng = random.Random(5)
    for _ in range(300):
        mutated = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        bodies.append(bytes(mutated))
        bodies.append(base[: rng.randrange(len(base))])
    return bodies


def test_hostile_bodies_give_frames_or_decode_error() -> None:
    outcomes = {"frames": 0, "decode": 0}
    for body in hostile_bodies():
        try:
            frames = defilens.parse_token(body, token_id="hostile")
        except defilens.DecodeError as error:
            assert error.token == "hostile"
            outcomes["decode"] += 1
        else:
            assert frames.snapshot.height == 1
            outcomes["frames"] += 1
    assert outcomes["frames"] > 10 and outcomes["decode"] > 10


def test_huge_and_odd_numbers_are_not_silently_wrong() -> None:
    frames = defilens.parse_token(b'{"data": {"id": "x", "market_cap_rank": 123456789012345678901234567890}}')
    assert frames.snapshot["market_cap_rank"].to_list() == [None]
    assert frames.drift.select("field", "expected").row(0) == ("data.market_cap_rank", "an integer")
    frames = defilens.parse_token(b'{"data": {"id": "x", "current_price": "1e308", "rsi14_1h": 1e-400}}')
    assert frames.snapshot["current_price"][0] == 1e308
    assert frames.indicators["value"][0] == 0.0


def test_bodies_that_parse_after_a_failure_are_unaffected() -> None:
    good = json.dumps(listing()).encode()
    reference = defilens.parse_token(good)
    for body in hostile_bodies()[:50]:
        try:
            defilens.parse_token(body, token_id="h")
        except defilens.DecodeError:
            pass
    assert defilens.parse_token(good).indicators.equals(reference.indicators)


# --------------------------------------------------------------------------------------------
# Interruption


INTERRUPT_SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys, threading, time
    import defilens
    from defilens.testing import Sandbox

    with Sandbox(latency=0.5) as sb:
        client = defilens.Client(base_url=sb.url, concurrency=2)
        timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        started = time.monotonic()
        try:
            client.fetch([f"t{i}" for i in range(400)], markets=False, progress=False)
            outcome = "finished"
        except KeyboardInterrupt:
            outcome = "interrupted"
        latency = time.monotonic() - started - 1.0
        threads_during = threading.active_count()
        again = client.fetch(["bitcoin", "ethereum"], markets=True, progress=False)
        print(json.dumps({"outcome": outcome, "latency": latency, "again": again.snapshot.height,
                          "python_threads": threads_during}))
    """
)


def test_ctrl_c_stops_fetch_quickly_and_client_stays_usable() -> None:
    result = subprocess.run([sys.executable, "-c", INTERRUPT_SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["outcome"] == "interrupted"
    assert report["latency"] < 1.0, report
    assert report["again"] == 2
    assert report["python_threads"] == 1


# --------------------------------------------------------------------------------------------
# Secrets


def test_the_key_never_appears_anywhere(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with Sandbox(api_key=SECRET, error_rate=0.3, seed=2) as sb:
        client = defilens.Client(base_url=sb.url, api_key=SECRET, max_retries=0)
        frames = client.fetch([f"t{i}" for i in range(40)] + ["unknown-1"], markets=True, progress=True)
        wrong = defilens.Client(base_url=sb.url, api_key=SECRET + "-wrong")
        with pytest.raises(defilens.AuthenticationError) as auth:
            wrong.token("bitcoin")
        texts = [
            repr(client),
            str(client.__dict__),
            repr(wrong),
            str(auth.value),
            repr(auth.value),
            repr(auth.value.__dict__),
        ]
    assert frames.errors.height > 0
    texts += [str(frames.log.to_dicts()), str(frames.errors.to_dicts()), repr(frames)]
    folder = frames.write(tmp_path / "saved")
    captured = capsys.readouterr()
    texts += [captured.out, captured.err]
    for text in texts:
        assert SECRET not in text
    for file in folder.iterdir():
        assert SECRET.encode() not in file.read_bytes()


# --------------------------------------------------------------------------------------------
# Concurrency


def test_one_client_from_eight_threads_matches_sequential(defilens_sandbox: Sandbox) -> None:
    client = defilens.Client(base_url=defilens_sandbox.url)
    batches = [[f"tok-{t}-{i}" for i in range(25)] for t in range(8)]
    sequential = [client.fetch(batch) for batch in batches]
    parallel: "list[defilens.Frames | None]" = [None] * 8
    errors: "list[BaseException]" = []

    def run(index: int) -> None:
        try:
            parallel[index] = client.fetch(batches[index])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    for seq, par in zip(sequential, parallel, strict=True):
        assert par is not None
        assert par.indicators.equals(seq.indicators)
        assert par.snapshot.drop("fetched_at").equals(seq.snapshot.drop("fetched_at"))
        assert par.markets.drop("fetched_at").equals(seq.markets.drop("fetched_at"))


def test_async_client_from_many_tasks_matches_sequential(defilens_sandbox: Sandbox) -> None:
    ids = [f"a-{i}" for i in range(30)]

    async def main() -> "list[defilens.Frames]":
        client = defilens.AsyncClient(base_url=defilens_sandbox.url)
        return await asyncio.gather(*(client.token(i) for i in ids))

    results = asyncio.run(main())
    together = defilens.concat(results)
    sequential = defilens.Client(base_url=defilens_sandbox.url).fetch(ids)
    assert together.indicators.equals(sequential.indicators)
    assert together.patterns.equals(sequential.patterns)


def test_async_client_inside_a_running_loop_thread() -> None:
    """Jupyter runs cells inside a running loop; awaiting there must work."""
    with Sandbox() as sb:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            client = defilens.AsyncClient(base_url=sb.url)
            future = asyncio.run_coroutine_threadsafe(client.fetch(["bitcoin", "solana"]), loop)
            frames = future.result(timeout=30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()
    assert frames.snapshot.height == 2


def test_progress_bar_reports_to_stderr(defilens_sandbox: Sandbox, capsys: pytest.CaptureFixture) -> None:
    defilens.Client(base_url=defilens_sandbox.url).fetch([f"p{i}" for i in range(60)], progress=True)
    err = capsys.readouterr().err
    assert "120" in err  # 60 tokens x 2 endpoints
    defilens.Client(base_url=defilens_sandbox.url).fetch(["q"], progress=False)
    assert capsys.readouterr().err == ""


def test_frames_are_polars(defilens_sandbox: Sandbox) -> None:
    frames = defilens.Client(base_url=defilens_sandbox.url).fetch(["bitcoin"])
    assert all(isinstance(frame, pl.DataFrame) for _, frame in frames.items())
