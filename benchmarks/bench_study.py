"""What a study net of costs adds to its time, on the 150-token, ten-day shape: forward returns
and the evaluation gross and net of costs, and a universe with and without a rule over the
markets, on a Sandbox history with markets.

    python benchmarks/bench_study.py [--tokens 150] [--days 10] [--every-minutes 15] [--folder F] [--repeat 3]

The history is the Sandbox's (generic ids coin-0 ...), fetched over HTTP round by round on its
simulated clock with markets, and committed as `collect` lays the tables out (snapshot, markets
and info only: the study reads nothing else); it is kept in ``--folder`` and reused. Each figure is
the median of ``--repeat`` runs in this process, after one warm-up run. Prints Markdown.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np
import polars as pl

import defilens
from _common import machine
from defilens.history._root import root_of
from defilens.history._rounds import round_of_fetch, tables_of
from defilens.history._tables import commit_round

KEPT = ("snapshot", "markets", "info")
START = "2026-01-05T00:00:00Z"


def build(root: str, tokens: List[str], days: int, every: dt.timedelta) -> float:
    """Writes the history (unless it is there); returns the seconds it took."""
    if Path(root, "snapshot").exists():
        return 0.0
    started = time.perf_counter()
    rounds = int(dt.timedelta(days=days) / every)
    parts: Dict[str, List[pl.DataFrame]] = defaultdict(list)
    with defilens.testing.Sandbox(now=START, seed=11, speed=0) as sandbox:
        client = defilens.Client(base_url=sandbox, concurrency=32)
        for number in range(rounds):
            if number:
                sandbox.advance(every)
            frames = client.fetch(tokens, markets=True, progress=False)
            tables, failed = tables_of(round_of_fetch(frames, "bench", number, sandbox.now, keep_raw=False))
            assert failed == 0
            for name in KEPT:
                parts[name].append(tables[name])
            if number % 96 == 95:
                print(f"day {(number + 1) // 96} fetched ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    commit_round(root_of(root, None), {name: pl.concat(frames) for name, frames in parts.items()}, "bench", 0, {})
    return time.perf_counter() - started


def timed(work: Callable[[], object], repeat: int) -> float:
    work()  # warm-up: imports, the first scans
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=150)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--every-minutes", type=int, default=15)
    parser.add_argument("--folder", default="/tmp/defilens-bench-study")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore", defilens.DefiLensWarning)
    tokens = [f"coin-{i}" for i in range(args.tokens)]
    root = os.path.join(args.folder, f"study-{args.tokens}-{args.days}-{args.every_minutes}")
    building = build(root, tokens, args.days, dt.timedelta(minutes=args.every_minutes))
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    snapshot_rows = defilens.scan(root, "snapshot").select(pl.len()).collect().item()
    markets_rows = defilens.scan(root, "markets").select(pl.len()).collect().item()

    grid = defilens.decision_times(root, "1h")
    rng = np.random.default_rng(0)
    decisions = pl.DataFrame(
        {
            "at": np.repeat(grid.to_numpy(), len(tokens)),
            "token": tokens * grid.len(),
            "score": rng.normal(size=grid.len() * len(tokens)),
        }
    ).with_columns(pl.col("at").cast(pl.Datetime("ms", "UTC")))
    horizons = ["1h", "4h", "24h"]
    gross = defilens.forward_returns(root, decisions, horizons)
    net = defilens.forward_returns(root, decisions, horizons, notional=100_000.0)
    deep = pl.col("depth_usd_negative_two") > 1e5
    figures = {
        "forward_returns": timed(lambda: defilens.forward_returns(root, decisions, horizons), args.repeat),
        "forward_returns, notional=100_000": timed(
            lambda: defilens.forward_returns(root, decisions, horizons, notional=100_000.0), args.repeat
        ),
        "evaluate": timed(lambda: defilens.evaluate(gross, "score"), args.repeat),
        "evaluate, net (capacity, turnover, curve)": timed(lambda: defilens.evaluate(net, "score"), args.repeat),
        "costs at every decision, one notional": timed(lambda: defilens.costs(root, grid, 100_000.0), args.repeat),
        "universe(top=100)": timed(lambda: defilens.universe(root, 100, "market_cap"), args.repeat),
        "universe(top=100, where=depth within 2% > $100k)": timed(
            lambda: defilens.universe(root, 100, "market_cap", where=deep), args.repeat
        ),
    }
    load_after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(
        f"{machine()}. History: {args.tokens} tokens, {args.days} days of {args.every_minutes}-minute rounds "
        f"({snapshot_rows:,} snapshot rows, {markets_rows:,} markets rows; built in {building:.0f} s), "
        f"{grid.len():,} hourly decisions x {len(tokens)} tokens x {len(horizons)} horizons "
        f"({gross.height:,} labels). Load {load_before} before, {load_after} after; median of {args.repeat}.\n"
    )
    print("| step | seconds |\n|---|---:|")
    for name, seconds in figures.items():
        print(f"| {name} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
