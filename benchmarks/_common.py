"""Helpers shared by the benchmarks: a Sandbox in its own process, and timing."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from typing import Iterator, List

import orjson
import polars as pl


@contextlib.contextmanager
def sandbox_process(latency: float = 0.0) -> Iterator[str]:
    """A Sandbox in a separate process, so its CPU is not counted against the client."""
    command = [sys.executable, "-m", "defilens", "sandbox", "--port", "0", "--latency", str(latency)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        yield line.split(" at ")[1].split()[0]
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()  # type: ignore[union-attr]


def cpu_seconds() -> float:
    """CPU time of this process, all threads (Rust's included)."""
    return time.process_time()


TA_FAMILIES = {"rsi7", "rsi14", "rsi25", "sma5", "sma20", "sma100", "upper_bband", "middle_bband", "lower_bband"}
INTERVALS = {"5m", "15m", "1h", "4h", "24h", "1w"}


def indicators_frame(bodies: List[bytes]) -> pl.DataFrame:
    """What a Python peer does with the bodies: orjson + flatten the numeric TA fields + polars."""
    tokens, intervals, names, values = [], [], [], []
    for body in bodies:
        data = orjson.loads(body)["data"]
        token = data["id"]
        for key, value in data.items():
            name, _, interval = key.rpartition("_")
            if name in TA_FAMILIES and interval in INTERVALS and isinstance(value, (int, float)):
                tokens.append(token)
                intervals.append(interval)
                names.append(name)
                values.append(float(value))
    return pl.DataFrame({"token": tokens, "interval": intervals, "indicator": names, "value": values})


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB RAM"
    return (
        f"{cpu}, {os.cpu_count()} cores{memory}; Python {platform.python_version()}, polars {pl.__version__}, "
        f"{time.strftime('%Y-%m-%d')}"
    )
