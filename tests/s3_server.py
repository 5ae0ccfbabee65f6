"""An S3-compatible server on loopback for the tests (moto, run in its own process: an in-process
server hung delta-rs's scans in a trial). conftest.py makes it the ``s3`` and ``bucket`` fixtures."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_server() -> Iterator[Dict[str, str]]:
    """Starts moto on a free port; yields the ``storage_options`` that reach it."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    try:
        yield {
            "aws_endpoint_url": f"http://127.0.0.1:{port}",
            "aws_access_key_id": "test",
            "aws_secret_access_key": "test",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
        }
    finally:
        server.terminate()
        server.wait()


def client(s3: Dict[str, str]) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s3["aws_endpoint_url"],
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )


def keys(bucket: str, s3: Dict[str, str]) -> List[str]:
    """Every object key in ``bucket`` (an ``s3://`` URL)."""
    listed = client(s3).list_objects_v2(Bucket=bucket.split("://")[1])
    return sorted(item["Key"] for item in listed.get("Contents", []))
