"""Frames and histories in object storage, against a real S3-compatible server on loopback (moto,
run in its own process: an in-process server hung delta-rs's scans in a trial)."""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys
import threading
import time
from typing import Dict

import polars as pl
import pytest
from history_checks import assert_whole_rounds
from polars.testing import assert_frame_equal
from s3_server import client as _client
from s3_server import free_port as _free_port
from s3_server import keys as _keys

import defilens
from defilens.history import _compact
from defilens.history._layout import AUDIT_CACHE as CACHE
from defilens.testing import Sandbox

UTC = dt.timezone.utc
CLI = [sys.executable, "-m", "defilens"]


def test_frames_write_and_read_round_trip(bucket: str, s3: Dict[str, str]) -> None:
    with Sandbox(now="2026-04-01T00:00:00Z") as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin", "ethereum"], progress=False)
    url = frames.write(f"{bucket}/one-fetch", storage_options=s3, raw=True)
    assert url == f"{bucket}/one-fetch"
    back = defilens.read(url, storage_options=s3)
    for name, frame in frames.items():
        assert_frame_equal(getattr(back, name), frame)
    assert "one-fetch/raw.parquet" in _keys(bucket, s3)
    frames.write(f"{bucket}/text", storage_options=s3, format="ndjson")
    assert "text/indicators.ndjson" in _keys(bucket, s3)


@pytest.mark.slow
def test_collect_scan_compact_reparse_in_s3(bucket: str, s3: Dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compact, "SORT_FROM_ROWS", 0)  # every closed day sorted, however small
    root = f"{bucket}/history"
    with Sandbox(now="2026-01-01T22:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        client.collect(
            ["bitcoin", "ethereum", "unknown-x"],
            "0.01s",
            count=4,
            out=root,
            raw=True,
            storage_options=s3,
            on_round=lambda n, f: sandbox.advance("1h"),
        )
    assert assert_whole_rounds(root, s3) == 8
    keys = _keys(bucket, s3)
    assert any(key.startswith("history/indicators/_delta_log/") for key in keys)
    assert not [key for key in keys if key.startswith("history/_spool/")]
    before = defilens.scan(root, "indicators", storage_options=s3).collect()
    report = defilens.compact(root, retention="1h", storage_options=s3, now=dt.datetime(2030, 1, 1, tzinfo=UTC))
    assert report["files_removed"] > 0 and report["days_sorted"] > 0
    after = defilens.scan(root, "indicators", storage_options=s3).collect()
    assert_frame_equal(before.sort(pl.all()), after.sort(pl.all()))
    rebuilt = defilens.reparse(root, storage_options=s3)
    assert rebuilt.indicators.height == after.height
    assert pl.scan_delta(f"{root}/snapshot", storage_options=s3).collect().height == 8
    # The audit keeps its day summaries in the bucket, and the next audit reads them.
    report = defilens.audit(root, storage_options=s3)
    assert any(key.startswith(f"history/{CACHE}/days/_delta_log/") for key in _keys(bucket, s3))
    again = defilens.audit(root, storage_options=s3)
    assert again.coverage.equals(report.coverage) and again.coverage.height
    assert again.coverage.equals(defilens.audit(root, storage_options=s3, cache=False).coverage)


@pytest.mark.slow
def test_two_collectors_on_s3_at_once_lose_nothing(bucket: str, s3: Dict[str, str]) -> None:
    root = f"{bucket}/shared"
    options = [arg for key, value in s3.items() for arg in ("--storage-option", f"{key}={value}")]
    shards = [["bitcoin", "ethereum"], ["solana", "dogecoin"], ["cardano"]]
    children = [
        subprocess.Popen(
            CLI
            + ["collect", *shard, "--sandbox", "--every", "0.05s", "--count", "5", "--raw", "--out", root, *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for shard in shards
    ]
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    assert assert_whole_rounds(root, s3) == 5 * 5


def test_an_object_store_that_never_answers_fails_with_an_error_not_a_hang() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted = []
    stop = threading.Event()

    def accept_and_say_nothing() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    port = listener.getsockname()[1]
    options = {
        "aws_endpoint_url": f"http://127.0.0.1:{port}",
        "aws_access_key_id": "a",
        "aws_secret_access_key": "b",
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
        "timeout": "1s",
        "retry_timeout": "2s",
    }
    started = time.monotonic()
    try:
        with Sandbox() as sandbox:
            client = defilens.Client(base_url=sandbox.url)
            with pytest.raises(defilens.HistoryError, match="silent-bucket"):
                client.collect(["bitcoin"], "1s", count=1, out="s3://silent-bucket/h", storage_options=options)
        assert time.monotonic() - started < 60
        assert accepted, "the collector never reached the endpoint"
    finally:
        stop.set()
        listener.close()
        for connection in accepted:
            connection.close()


@pytest.mark.slow
def test_the_cli_says_one_line_when_the_object_store_is_down(tmp_path) -> None:
    port = _free_port()  # nothing listens there
    run = subprocess.run(
        CLI
        + ["collect", "bitcoin", "--sandbox", "--every", "1s", "--count", "1", "--out", "s3://gone/h"]
        + [f"--storage-option=aws_endpoint_url=http://127.0.0.1:{port}", "--storage-option=aws_allow_http=true"]
        + ["--storage-option=aws_access_key_id=a", "--storage-option=aws_secret_access_key=b"]
        + ["--storage-option=aws_region=us-east-1", "--storage-option=retry_timeout=2s"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 1, run.stderr
    assert run.stderr.startswith("defilens: error:") and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert list(tmp_path.iterdir()) == []  # no stray local s3:/ folder


def test_storage_options_are_for_urls_only(tmp_path) -> None:
    with pytest.raises(ValueError, match="storage_options"):
        defilens.scan(tmp_path, "indicators", storage_options={"aws_region": "x"})
    with Sandbox() as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin"], progress=False)
    with pytest.raises(ValueError, match="storage_options"):
        frames.write(tmp_path / "f", storage_options={"aws_region": "x"})


@pytest.mark.slow
def test_one_compaction_at_a_time_in_s3_and_a_stale_lease_is_taken_over(bucket: str, s3: Dict[str, str]) -> None:
    import json

    root = f"{bucket}/leased"
    with Sandbox(now="2026-01-01T00:00:00Z") as sandbox:
        defilens.Client(base_url=sandbox.url).collect(["bitcoin"], "0.01s", count=2, out=root, storage_options=s3)
    key = "leased/_defilens/compaction.lock"
    client = _client(s3)
    # A lease lasts LEASE after its object was last written, by the store's clock, whatever it says.
    # Long enough that a loaded machine still reaches the lock while the lease holds (2 s once
    # ran out before the compaction got there, at load 12), and waited out from the write.
    seconds = 6
    written = time.monotonic()
    client.put_object(Bucket=bucket[5:], Key=key, Body=json.dumps({"holder": "crashed:1", "seconds": seconds}))
    with pytest.raises(defilens.HistoryError, match="another compaction"):
        defilens.compact(root, storage_options=s3)
    time.sleep(max(0.0, written + seconds + 1 - time.monotonic()))
    assert defilens.compact(root, storage_options=s3)["files_removed"] > 0
    lease = json.loads(client.get_object(Bucket=bucket[5:], Key=key)["Body"].read())
    assert lease["released"] is True and lease["epoch"] == 1


def test_the_cli_takes_credentials_from_the_environment(bucket: str, s3: Dict[str, str]) -> None:
    import os

    env = dict(os.environ)
    env.update({key.upper(): value for key, value in s3.items()})
    run = subprocess.run(
        CLI + ["collect", "bitcoin", "--sandbox", "--every", "0.1s", "--count", "2", "--out", f"{bucket}/env"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert defilens.scan(f"{bucket}/env", "snapshot", storage_options=s3).collect().height == 2


def test_storage_option_durations_follow_the_one_duration_grammar() -> None:
    """``retry_timeout`` is read by the core's duration grammar, as every duration a user gives."""
    from defilens._storage import Root

    for given in ("1d", "1500ms", "2m"):
        Root("s3://bucket/prefix", {"aws_region": "us-east-1", "retry_timeout": given}).store()
    with pytest.raises(ValueError, match='retry_timeout must look like 30s, 5m, 1h or 1d, got "2 weeks"'):
        Root("s3://bucket/prefix", {"aws_region": "us-east-1", "retry_timeout": "2 weeks"}).store()
