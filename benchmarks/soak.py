"""Fault soak, run by hand (the quick version runs in tests/test_reliability.py).

    python benchmarks/soak.py [--ids 20000]

Fetches listing + markets for every id through a Sandbox that fails often, and checks that
every id is accounted for exactly once. Prints one Markdown table row per run.
"""

from __future__ import annotations

import argparse
import time

import polars as pl

import defilens
from defilens.testing import Sandbox

FAULTS = dict(
    error_rate=0.10, rate_limit_rate=0.05, retry_after=1, drop_rate=0.02, truncate_rate=0.01, invalid_json_rate=0.005
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ids", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=99)
    args = parser.parse_args()
    ids = [f"soak-{i}" for i in range(args.ids)] + [f"unknown-{i}" for i in range(args.ids // 100)]
    with Sandbox(seed=args.seed, latency=0.002, **FAULTS) as sandbox:
        client = defilens.Client(base_url=sandbox.url, max_retries=3, concurrency=64)
        started = time.perf_counter()
        frames = client.fetch(ids, markets=True, progress=False)
        wall = time.perf_counter() - started
        served = sandbox.requests
    log = frames.log
    listing = log.filter(pl.col("endpoint") == "listing")
    ok = set(frames.snapshot["token"])
    failed = set(frames.errors.filter(pl.col("endpoint") == "listing")["token"])
    lost = set(ids) - ok - failed
    duplicated = int(frames.snapshot["token"].is_duplicated().sum())
    kinds = frames.errors.group_by("kind").agg(pl.len()).sort("kind")
    retried = log.filter(pl.col("attempts") > 1).height
    real = [i for i in ids if not i.startswith("unknown")]
    print(
        "| ids | requests served | wall (s) | listing ok | lost | duplicated | retried exchanges | failures by kind |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| {len(ids):,} | {served:,} | {wall:.1f} | {len(ok & set(real)):,}/{len(real):,} ({len(ok & set(real)) / len(real):.2%}) "
        f"| {len(lost)} | {duplicated} | {retried:,} | {', '.join(f'{k} {n}' for k, n in kinds.iter_rows())} |"
    )
    assert listing.height == len(ids) and not lost and not duplicated


if __name__ == "__main__":
    main()
