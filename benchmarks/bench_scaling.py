"""Scaling: how parse and fetch cost grow with the work, and the 1 GB/s parse target.

    python benchmarks/bench_scaling.py [--quick] [--json PATH]

Parse: ``defilens.parse_tokens`` on 2,000, 20,000 and 200,000 Sandbox listing bodies (~6 KB
each, as bytes; 200,000 is the 20,000 distinct bodies ten times over, which parses at the same
cost and spares a minute of making bodies), every frame built, best of several runs.
Fetch: ``Client.fetch`` of 1,000, 10,000 and 100,000 ids (listing and markets, two requests an
id) from the Sandbox in a separate process: no latency at concurrency 50, and 20 ms a response
at concurrency 50 and 200. Wall time, requests a second, and the client's own CPU time (the
Sandbox's is not counted). The Sandbox caches the bodies of 8,192 ids; beyond that it makes
each body again (about 0.3 ms of its CPU), which the no-latency rows at 10,000 and 100,000 ids
include, since the Sandbox shares the machine's two cores with the client.
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Dict, List, Tuple

import defilens
from _common import SANDBOX_NOW, best_of, cpu_seconds, emit, sandbox_process, table, target

PARSE_TARGET_MB_S = 1000.0  # the goal at 20,000 bodies


def parse_scaling(sizes: List[int]) -> List[Tuple[int, float, float]]:
    """(bodies, MB, best seconds) for each size."""
    distinct = min(max(sizes), 20_000)
    made = [defilens.testing.listing_body(f"token-{i}", seed=1, now=SANDBOX_NOW).encode() for i in range(distinct)]
    results = []
    for n in sizes:
        bodies = (made * (n // distinct + 1))[:n]
        megabytes = sum(map(len, bodies)) / 1e6
        runs = 10 if n <= 20_000 else 3
        defilens.parse_tokens(bodies)  # warm: first-touch allocation, the thread pool
        gc.collect()
        results.append((n, megabytes, best_of(lambda batch=bodies: defilens.parse_tokens(batch), runs)))
    return results


def fetch_once(url: str, ids: int, concurrency: int) -> Tuple[float, float, int]:
    """(wall s, client CPU s, rows in snapshot) of one fetch."""
    client = defilens.Client(base_url=url, api_key="bench-key", concurrency=concurrency, max_retries=3)
    names = [f"scale-{i}" for i in range(ids)]
    gc.collect()
    cpu, started = cpu_seconds(), time.perf_counter()
    frames = client.fetch(names, progress=False)
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    tokens = frames.snapshot.height
    del frames
    return wall, cpu, tokens


def fetch_scaling(sizes: List[int]) -> List[Tuple[str, int, int, float, float]]:
    """(latency label, concurrency, ids, wall s, CPU s) for each setting and size."""
    rows = []
    for latency, concurrencies in ((0.0, (50,)), (0.02, (50, 200))):
        with sandbox_process(latency) as url:
            fetch_once(url, min(sizes), 50)  # untimed: fills the Sandbox's cache for the smallest size
            for concurrency in concurrencies:
                for ids in sizes:
                    wall, cpu, tokens = fetch_once(url, ids, concurrency)
                    if tokens != ids:
                        raise RuntimeError(f"fetched {tokens} of {ids} tokens")
                    rows.append((f"{latency * 1000:.0f} ms", concurrency, ids, wall, cpu))
    return rows


def report(parse: List[Tuple[int, float, float]], fetch: List[Tuple[str, int, int, float, float]]) -> Dict[str, object]:
    parse_rows = [
        [f"{n:,}", f"{mb:,.0f}", f"{s * 1000:,.0f}", f"{mb / s:,.0f}", f"{s / n * 1e6:.1f}"] for n, mb, s in parse
    ]
    fetch_rows = []
    for latency, concurrency, ids, wall, cpu in fetch:
        requests = 2 * ids
        ideal = requests * (0.02 if latency == "20 ms" else 0.0) / concurrency
        fetch_rows.append(
            [
                latency,
                str(concurrency),
                f"{ids:,}",
                f"{wall:,.2f}",
                f"{ideal:,.1f}" if ideal else "-",
                f"{requests / wall:,.0f}",
                f"{cpu / requests * 1000 * 1000:,.0f}",
            ]
        )
    targets = []
    at_20k = [(mb, s) for n, mb, s in parse if n == 20_000]
    if at_20k:
        mb, s = at_20k[0]
        targets.append(
            target(
                "parse_tokens throughput, 20,000 bodies, every frame",
                f"{mb / s:,.0f} MB/s ({s * 1000:,.0f} ms)",
                f">= {PARSE_TARGET_MB_S:,.0f} MB/s",
                mb / s >= PARSE_TARGET_MB_S,
            )
        )
    body = (
        "Parse (`defilens.parse_tokens`, every frame built, bodies as bytes):\n\n"
        + table(["bodies", "MB", "best (ms)", "MB/s", "µs per body"], parse_rows, "rrrrr")
        + "\n\nFetch (`Client.fetch`, listing and markets: two requests an id; the Sandbox in its own process; "
        "ideal = requests x latency / concurrency; CPU is the client's only):\n\n"
        + table(
            ["latency", "concurrency", "ids", "wall (s)", "ideal (s)", "requests/s", "client CPU µs per request"],
            fetch_rows,
            "rrrrrrr",
        )
    )
    return {"title": "Scaling", "body": body, "targets": targets, "results": {"parse": parse, "fetch": fetch}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes only (2,000 bodies; 1,000 ids)")
    parser.add_argument("--json", help="also write the figures to this file (for run_all.py)")
    args = parser.parse_args()
    parse_sizes = [2_000] if args.quick else [2_000, 20_000, 200_000]
    fetch_sizes = [1_000] if args.quick else [1_000, 10_000, 100_000]
    emit(report(parse_scaling(parse_sizes), fetch_scaling(fetch_sizes)), args.json)


if __name__ == "__main__":
    main()
