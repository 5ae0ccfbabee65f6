"""A year of history, by hand: 5-minute rounds for 50 tokens written as `collect` writes them
(simulated time, no waiting), then compacted; files, bytes and the time of a typical query
before and after.

    python benchmarks/bench_history.py                  # a year, 50 tokens, 2 worker processes
    python benchmarks/bench_history.py --days 7         # a quick look

Each round's bodies come from the Sandbox's market at that round's time (the same bytes a
Sandbox would serve) and are parsed and written exactly as a collect round is; only the HTTP
exchange is left out, since this measures the history, not the network. The query is the one a
user runs first: RSI(14) on the 1h interval of one token over the whole history.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import polars as pl

import defilens
from defilens import _core
from defilens._collect import write_round

START = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
STEP = dt.timedelta(minutes=5)
KNOWN = ["bitcoin", "ethereum", "tether", "ripple", "binancecoin", "solana", "usd-coin", "tron", "dogecoin", "cardano"]


def tokens(count: int) -> List[str]:
    return (KNOWN + [f"coin-{i:03d}" for i in range(count)])[:count]


def write_rounds(out: str, ids: List[str], first: int, last: int) -> int:
    """Rounds ``first..last`` (exclusive) into ``out``; returns how many were written."""
    folder = Path(out)
    for number in range(first, last):
        started = START + number * STEP
        now = started.isoformat()
        fetched_ms = int(started.timestamp() * 1000)
        listing = [defilens.testing.listing_body(token, now=now) for token in ids]
        frames: Dict[str, pl.DataFrame] = dict(_core.parse_tokens(listing, ids, fetched_ms))
        markets = [
            _core.parse_markets(defilens.testing.markets_body(token, now=now), token, fetched_ms)[0] for token in ids
        ]
        frames["markets"] = pl.concat(markets)
        write_round(defilens.Frames(frames), folder, started, number)
    return last - first


def files_and_bytes(folder: Path) -> "tuple[int, int]":
    files = [p for p in folder.rglob("*.parquet")]
    return len(files), sum(p.stat().st_size for p in files)


def query_seconds(folder: Path, token: str, repeats: int = 3) -> "tuple[float, int]":
    """Best of ``repeats``: RSI(14) on 1h of one token over the whole history."""
    best, rows = float("inf"), 0
    for _ in range(repeats):
        started = time.perf_counter()
        result = (
            defilens.scan(folder, "indicators")
            .filter(pl.col("token") == token, pl.col("indicator") == "rsi14", pl.col("interval") == "1h")
            .select("fetched_at", "value")
            .sort("fetched_at")
            .collect()
        )
        best, rows = min(best, time.perf_counter() - started), result.height
    return best, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=float, default=365)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", help="history folder (default: a temporary one, removed after)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    ids = tokens(args.tokens)
    rounds = int(args.days * 24 * 60 / 5)
    folder = Path(args.out or tempfile.mkdtemp(prefix="defilens-history-"))
    load = os.getloadavg()
    started = time.perf_counter()
    bounds = [rounds * i // args.workers for i in range(args.workers + 1)]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        pool.starmap(write_rounds, [(str(folder), ids, bounds[i], bounds[i + 1]) for i in range(args.workers)])
    written_in = time.perf_counter() - started
    files_before, bytes_before = files_and_bytes(folder)
    query_before, rows = query_seconds(folder, "bitcoin")
    started = time.perf_counter()
    report = defilens.compact(folder, now=START + rounds * STEP + dt.timedelta(days=2))
    compacted_in = time.perf_counter() - started
    files_after, bytes_after = files_and_bytes(folder)
    query_after, rows_after = query_seconds(folder, "bitcoin")
    assert rows_after == rows == rounds, (rows, rows_after, rounds)
    figures = {
        "rounds": rounds,
        "tokens": len(ids),
        "days": args.days,
        "write_s": written_in,
        "files_before": files_before,
        "bytes_before": bytes_before,
        "query_before_s": query_before,
        "compact_s": compacted_in,
        "partitions_compacted": report["partitions"],
        "files_after": files_after,
        "bytes_after": bytes_after,
        "query_after_s": query_after,
        "query_rows": rows,
        "load_before": load,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(figures, indent=1))
    print(
        f"\n{rounds:,} rounds x {len(ids)} tokens ({args.days:g} days): written in {written_in:,.0f} s\n"
        f"| | files | MiB on disk | RSI(14) 1h of bitcoin over the history |\n|---|---:|---:|---:|\n"
        f"| before compaction | {files_before:,} | {bytes_before / 2**20:,.0f} | {query_before:.2f} s |\n"
        f"| after ({compacted_in:,.0f} s to compact) | {files_after:,} | {bytes_after / 2**20:,.0f} | {query_after:.3f} s |"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    if not args.out:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
