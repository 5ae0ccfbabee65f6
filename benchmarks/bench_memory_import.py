"""Peak memory of a 20,000-id fetch against the size of its frames, and import time.

Run by hand:  python benchmarks/bench_memory_import.py [--ids 20000]
Each measurement runs in a fresh subprocess so nothing else shares its heap.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Dict

from _common import sandbox_process

MEMORY_PROBE = """
import json, resource, sys
import defilens
def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
baseline = peak_mib()
client = defilens.Client(base_url=sys.argv[1], api_key="bench", concurrency=50)
frames = client.fetch([f"mem-{i}" for i in range(int(sys.argv[2]))], markets=False, progress=False)
size = sum(frame.estimated_size() for _, frame in frames.items()) / 2**20
print(json.dumps({"baseline_mib": baseline, "peak_mib": peak_mib(), "frames_mib": size, "tokens": frames.snapshot.height}))
"""


def memory(n: int) -> Dict[str, float]:
    with sandbox_process() as url:
        out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, url, str(n)], capture_output=True, text=True, check=True, timeout=600)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["growth_mib"] = report["peak_mib"] - report["baseline_mib"]
    report["ratio"] = report["growth_mib"] / report["frames_mib"]
    return report


def import_seconds(module: str, runs: int = 7) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ids", type=int, default=20000)
    args = parser.parse_args()
    m = memory(args.ids)
    polars_s, defilens_s = import_seconds("polars"), import_seconds("defilens")
    print(f"| peak RSS growth, fetch of {args.ids:,} ids | {m['growth_mib']:.0f} MiB | frames {m['frames_mib']:.0f} MiB | {m['ratio']:.2f}x the frames (target <= 3x) |")
    print(f"| import time | defilens {defilens_s * 1000:.0f} ms | polars {polars_s * 1000:.0f} ms | adds {(defilens_s - polars_s) * 1000:.0f} ms (target <= 50 ms) |")


if __name__ == "__main__":
    main()
