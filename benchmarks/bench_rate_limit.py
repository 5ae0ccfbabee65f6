"""A limit the client is not told, by hand: the share of requests refused with 429 and the pace
against the ideal, for rate_limit="auto" (with and without the rate headers) and for fixed
limits of half and twice the true one; and the learned rate over a fetch, as a plot.

    python benchmarks/bench_rate_limit.py                # max_rps 40, 400 ids (markets off)
    python benchmarks/bench_rate_limit.py --plot docs/rate_limit.png

The Sandbox enforces `max_rps` (a token bucket with a burst of one second) and runs in this
process on its own threads. The ideal is requests / max_rps: what a client that knew the limit
and never overran it would take.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import defilens
from _common import emit, machine, table, target
from defilens.testing import Sandbox


def run(max_rps: float, ids: int, rate_limit: Any, headers: bool, sample: bool = False) -> Dict[str, Any]:
    with Sandbox(now="2026-01-01T00:00:00Z", max_rps=max_rps, rate_headers=headers) as sandbox:
        client = defilens.Client(base_url=sandbox.url, rate_limit=rate_limit, max_retries=50)
        samples: List[Tuple[float, float]] = []
        done = threading.Event()
        started = time.perf_counter()

        def sampler() -> None:
            while not done.wait(0.05):
                rate = client.rate_limit_learned
                if rate is not None:
                    samples.append((time.perf_counter() - started, rate))

        thread = threading.Thread(target=sampler, daemon=True)
        if sample:
            thread.start()
        frames = client.fetch([f"coin-{i:04d}" for i in range(ids)], markets=False, progress=False)
        elapsed = time.perf_counter() - started
        done.set()
        served = sandbox.requests
    assert frames.snapshot.height == ids, frames.errors
    refused = served - ids
    return {
        "mode": str(rate_limit),
        "headers": headers,
        "elapsed": elapsed,
        "ideal": ids / max_rps,
        "served": served,
        "refused": refused,
        "share": refused / served,
        "learned": client.rate_limit_learned,
        "samples": samples,
    }


def plot(results: List[Dict[str, Any]], max_rps: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for result, colour in zip(results, ("tab:blue", "tab:orange"), strict=False):
        times = [t for t, _ in result["samples"]]
        rates = [r for _, r in result["samples"]]
        label = "auto, rate headers on" if result["headers"] else "auto, rate headers off"
        ax.plot(times, rates, color=colour, lw=1.2, label=label)
    ax.axhline(max_rps, color="black", lw=0.8, ls="--", label=f"the Sandbox's max_rps ({max_rps:g})")
    ax.set_xlabel("seconds into the fetch")
    ax.set_ylabel("requests per second")
    ax.set_title('rate_limit="auto" learning a limit it was not told')
    ax.set_ylim(0, max_rps * 1.8)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-rps", type=float, default=40.0)
    parser.add_argument("--ids", type=int, default=400)
    parser.add_argument("--plot", default=None, help="where to save the plot of the learned rate (PNG)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    with open("/proc/loadavg") as loadavg:
        load_before = " ".join(loadavg.read().split()[:3])
    results = [
        run(args.max_rps, args.ids, "auto", True, sample=True),
        run(args.max_rps, args.ids, "auto", False, sample=True),
        run(args.max_rps, args.ids, args.max_rps / 2, False),
        run(args.max_rps, args.ids, args.max_rps * 2, False),
        run(args.max_rps, args.ids, None, False),
    ]
    if args.plot:
        plot(results[:2], args.max_rps, args.plot)
    names = [
        "auto (rate headers on)",
        "auto (rate headers off)",
        "fixed, half the limit",
        "fixed, twice the limit",
        "none",
    ]
    rows = [
        [
            name,
            f"{r['elapsed']:.2f} s",
            f"{r['elapsed'] / r['ideal']:.2f}x",
            f"{r['served']:,}",
            f"{r['refused']:,} ({r['share']:.1%})",
            "-" if r["learned"] is None else f"{r['learned']:.1f}",
        ]
        for name, r in zip(names, results, strict=True)
    ]
    body = (
        f"Machine: {machine()}. Load before: {load_before}. max_rps {args.max_rps:g}, {args.ids} ids (markets off), "
        f"ideal {args.ids / args.max_rps:.1f} s.\n\n"
        + table(["rate_limit", "time", "vs ideal", "requests", "refused (429)", "learned rate"], rows, "lrrrrr")
    )
    targets = []
    for name, r in zip(names[:2], results[:2], strict=True):
        passed = r["share"] <= 0.10 and r["elapsed"] <= 1.3 * r["ideal"]
        targets.append(
            target(
                f"{name}: 429 share, pace (max_rps {args.max_rps:g}, {args.ids} ids)",
                f"{r['share']:.1%}, {r['elapsed'] / r['ideal']:.2f}x the ideal",
                "<= 10%, <= 1.3x",
                passed,
            )
        )
    emit({"title": "A limit the client is not told", "body": body, "targets": targets, "results": results}, args.json)


if __name__ == "__main__":
    main()
