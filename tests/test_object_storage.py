"""Frames and histories in object storage, against a real S3-compatible server on loopback (moto)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Dict, Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer
from polars.testing import assert_frame_equal

import defilens
from defilens._collect import write_round
from defilens._frames import FRAME_NAMES
from defilens._storage import Remote
from defilens.testing import Sandbox

UTC = dt.timezone.utc


@pytest.fixture(scope="module")
def s3() -> Iterator[Dict[str, str]]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {
        "aws_endpoint_url": f"http://{host}:{port}",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
    }
    yield options
    server.stop()


@pytest.fixture
def bucket(s3: Dict[str, str]) -> str:
    name = f"history-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=s3["aws_endpoint_url"],
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    ).create_bucket(Bucket=name)
    return f"s3://{name}"


def _keys(bucket: str, s3: Dict[str, str]) -> "list[str]":
    remote = Remote(bucket, s3)
    return sorted(path.split("/", 1)[1] for path in remote.fs.find(bucket.split("://")[1]))


def test_frames_write_and_read_round_trip(bucket: str, s3: Dict[str, str]) -> None:
    with Sandbox(now="2026-04-01T00:00:00Z") as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin", "ethereum"], progress=False)
    url = frames.write(f"{bucket}/one-fetch", storage_options=s3)
    assert url == f"{bucket}/one-fetch"
    back = defilens.read(f"{bucket}/one-fetch", storage_options=s3)
    for name in FRAME_NAMES:
        assert_frame_equal(getattr(back, name), getattr(frames, name)), name
    frames.write(f"{bucket}/as-csv", format="csv", storage_options=s3)
    assert "as-csv/snapshot.csv" in _keys(bucket, s3)
    with pytest.raises(FileNotFoundError):
        defilens.read(f"{bucket}/nothing", storage_options=s3)


def test_collect_scan_compact_and_reparse_in_s3(bucket: str, s3: Dict[str, str]) -> None:
    history = f"{bucket}/history"
    with Sandbox(now="2026-02-01T18:00:00Z", seed=2) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        for number in range(6):
            frames = client.fetch(["bitcoin", "solana"], progress=False)
            write_round(frames, Remote(history, s3), sandbox.now, number, raw=True)
            sandbox.advance("3h")
        # collect itself writes there too (today's partition, left alone by compaction).
        client.collect(["bitcoin"], "0.05s", count=2, out=history, raw=True, storage_options=s3)
    before = {n: defilens.scan(history, n, storage_options=s3).collect() for n in ("indicators", "snapshot", "raw")}
    keys_before = _keys(bucket, s3)
    report = defilens.compact(history, now=dt.datetime(2026, 2, 3, 12, tzinfo=UTC), storage_options=s3)
    assert report["partitions"] == 2 * (len(FRAME_NAMES) + 1)
    keys_after = _keys(bucket, s3)
    assert len(keys_after) < len(keys_before)
    assert "history/indicators/date=2026-02-01/compacted.parquet" in keys_after
    for name, frame in before.items():
        keys = [k for k in ("date", "token", "fetched_at") if k in frame.columns]
        after = defilens.scan(history, name, storage_options=s3).collect()
        assert_frame_equal(frame.sort(keys, maintain_order=True), after.sort(keys, maintain_order=True)), name
    assert defilens.compact(history, now=dt.datetime(2026, 2, 3, 12, tzinfo=UTC), storage_options=s3)["partitions"] == 0
    rebuilt = defilens.reparse(history, storage_options=s3)
    assert rebuilt.snapshot.height == before["snapshot"].height


def test_an_interrupted_object_compaction_is_finished_by_the_next(bucket: str, s3: Dict[str, str], monkeypatch) -> None:
    history = f"{bucket}/h"
    with Sandbox(now="2026-03-01T06:00:00Z") as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        for number in range(3):
            write_round(client.fetch(["bitcoin"], progress=False), Remote(history, s3), sandbox.now, number)
            sandbox.advance("1h")
    before = defilens.scan(history, "snapshot", storage_options=s3).collect()
    remove = Remote.remove

    def crash(self: Remote, urls: "list[str]") -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Remote, "remove", crash)
    with pytest.raises(KeyboardInterrupt):
        defilens.compact(history, now=dt.datetime(2026, 3, 5, tzinfo=UTC), storage_options=s3)
    # The compacted object is there and the old ones too: rows twice until the next run.
    assert defilens.scan(history, "snapshot", storage_options=s3).collect().height == 2 * before.height
    monkeypatch.setattr(Remote, "remove", remove)
    defilens.compact(history, now=dt.datetime(2026, 3, 5, tzinfo=UTC), storage_options=s3)
    after = defilens.scan(history, "snapshot", storage_options=s3).collect()
    assert_frame_equal(before.sort("fetched_at"), after.sort("fetched_at"))


def test_storage_options_are_for_urls_only(tmp_path) -> None:
    with pytest.raises(ValueError, match="storage_options apply to object storage"):
        defilens.scan(tmp_path, "snapshot", storage_options={"aws_region": "x"})
