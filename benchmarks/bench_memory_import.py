"""Peak memory of a large fetch against the size of its frames; import time against polars.

    python benchmarks/bench_memory_import.py [--quick] [--ids 20000] [--imports 5] [--json PATH]

Both run in fresh interpreters, so nothing measured earlier shares their heap or their module
cache. Memory: the Sandbox in its own process (no latency); the probe imports defilens,
records its RSS (the baseline), fetches every id with markets=False, and reports the peak RSS
of its lifetime (``ru_maxrss``) minus the baseline, against ``sum(frame.estimated_size())``.
Import: ``import polars`` and ``import defilens`` timed inside fresh interpreters (interpreter
start-up excluded), interleaved, best of N each.
"""

from __future__ import annotations

import argparse
import json
from typing import Dict

from _common import emit, run_python, sandbox_process, table, target

MEMORY_PROBE = r"""
import gc, json, resource, sys, time
import psutil
import polars as pl
import defilens
from defilens._frames import FRAME_NAMES  # the frames a Frames holds (errors is a view of log)


def long_string_bytes(strings):
    lengths = strings.str.len_bytes()
    return int(lengths.filter(lengths > 12).sum() or 0)


def column_nbytes(s):
    # estimated_size() counts only the characters of a String column; Arrow's string views
    # also take 16 bytes a row, with strings over 12 bytes stored once more in data buffers.
    n, validity = s.len(), (s.len() + 7) // 8 if s.null_count() else 0
    if s.dtype == pl.String:
        return 16 * n + long_string_bytes(s) + validity
    if s.dtype == pl.List(pl.String):
        inner = int(s.list.len().sum() or 0)
        return 8 * (n + 1) + validity + 16 * inner + long_string_bytes(s.explode())
    return s.estimated_size()


def frame_nbytes(df):
    return sum(column_nbytes(s) for s in df.iter_columns())


process = psutil.Process()
MIB = 2 ** 20
url, n = sys.argv[1], int(sys.argv[2])
client = defilens.Client(base_url=url, api_key="bench-key", concurrency=50, max_retries=3)
gc.collect()
baseline = process.memory_info().rss  # after imports and the client: what fetch adds is measured
started = time.perf_counter()
frames = client.fetch([f"mem-{i}" for i in range(n)], markets=False, progress=False)
wall = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
after = process.memory_info().rss
sizes = {name: getattr(frames, name).estimated_size() for name in FRAME_NAMES}
arrow_sizes = {name: frame_nbytes(getattr(frames, name)) for name in FRAME_NAMES}
tokens, errors = frames.snapshot.height, frames.errors.height
raw_kept = frames._raw_source.stored_bytes()
del frames
gc.collect()
print(json.dumps({
    "ids": n, "tokens": tokens, "errors": errors, "wall_s": wall,
    "baseline_mib": baseline / MIB, "peak_mib": peak / MIB, "after_fetch_mib": after / MIB,
    "after_release_mib": process.memory_info().rss / MIB,
    "frames_mib": sum(sizes.values()) / MIB, "frame_mib": {k: v / MIB for k, v in sizes.items()},
    "frames_arrow_mib": sum(arrow_sizes.values()) / MIB,
    # The bytes received (the Sandbox (seed 0) stands at _common.SANDBOX_NOW) and what
    # defilens holds of them for Frames.raw (compressed), part of what a fetch keeps.
    "bodies_mib": sum(len(defilens.testing.listing_body(f"mem-{i}", now="2026-11-23T00:00:00Z").encode()) for i in range(n)) / MIB,
    "raw_kept_mib": raw_kept / MIB,
}))
"""

IMPORT_PROBE = """
import time
started = time.perf_counter()
import {module}
print(time.perf_counter() - started)
"""


def memory(n: int) -> Dict[str, object]:
    with sandbox_process(0.0) as url:
        report = json.loads(run_python(MEMORY_PROBE, url, str(n), timeout=300).strip().splitlines()[-1])
    if report["tokens"] != n or report["errors"]:
        raise RuntimeError(f"the memory probe fetched {report['tokens']} of {n} tokens, {report['errors']} errors")
    report["growth_mib"] = report["peak_mib"] - report["baseline_mib"]
    report["ratio"] = report["growth_mib"] / report["frames_mib"]
    return report


def import_times(runs: int) -> Dict[str, float]:
    """Best in-process import time of each module, fresh interpreter per run, interleaved."""
    best = {"polars": float("inf"), "defilens": float("inf")}
    for _ in range(runs):
        for module in best:
            best[module] = min(best[module], float(run_python(IMPORT_PROBE.format(module=module), timeout=60)))
    return best


def report(m: Dict[str, object], imports: Dict[str, float], runs: int) -> Dict[str, object]:
    frames = ", ".join(f"{k} {v:.1f}" for k, v in m["frame_mib"].items() if v >= 0.05)  # type: ignore[union-attr]
    added_ms = (imports["defilens"] - imports["polars"]) * 1000
    rows = [
        ["RSS after imports and Client() (baseline)", f"{m['baseline_mib']:.0f} MiB"],
        [f"peak RSS during fetch of {m['ids']:,} ids ({m['wall_s']:.1f} s)", f"{m['peak_mib']:.0f} MiB"],
        ["peak growth over the baseline", f"{m['growth_mib']:.0f} MiB"],
        ["RSS after fetch returned (frames alive)", f"{m['after_fetch_mib']:.0f} MiB"],
        ["RSS after the frames were released", f"{m['after_release_mib']:.0f} MiB"],
        ["frames' estimated_size(), summed (the target's measure)", f"{m['frames_mib']:.1f} MiB ({frames})"],
        ["frames' Arrow buffers, string views counted", f"{m['frames_arrow_mib']:.1f} MiB (peak growth: {m['growth_mib'] / m['frames_arrow_mib']:.2f}x)"],
        ["response bodies received", f"{m['bodies_mib']:.1f} MiB"],
        ["of which kept for `Frames.raw` (lz4-compressed)", f"{m['raw_kept_mib']:.1f} MiB"],
        [f"import polars (best of {runs}, fresh interpreters)", f"{imports['polars'] * 1000:.0f} ms"],
        ["import defilens (includes polars)", f"{imports['defilens'] * 1000:.0f} ms"],
    ]
    targets = [
        target(f"peak memory of a {m['ids']:,}-id fetch vs frames' size",
               f"{m['ratio']:.2f}x ({m['growth_mib']:.0f} MiB vs {m['frames_mib']:.0f} MiB)", "<= 3x", m["ratio"] <= 3.0),  # type: ignore[operator]
        target("time import defilens adds to import polars", f"{added_ms:+.0f} ms", "<= 50 ms", added_ms <= 50),
    ]
    body = (
        "Memory: a fresh interpreter fetches every id (markets=False, no latency) from the Sandbox in another "
        "process; peak = `ru_maxrss`, baseline = RSS after imports and `Client()`. The ratio uses polars' "
        "`estimated_size()`, which counts only the characters of String columns; the frames' real Arrow "
        "buffers (16-byte string views per row) are larger, so the ratio to them is smaller. Import: time of "
        "the import statement alone inside fresh interpreters, interleaved.\n\n" + table(["measure", "value"], rows, "lr")
    )
    return {"title": "Memory and import", "body": body, "targets": targets, "results": {"memory": m, "imports": imports}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2,000 ids, 3 import runs")
    parser.add_argument("--ids", type=int)
    parser.add_argument("--imports", type=int, help="import runs per module")
    parser.add_argument("--json", help="also write the figures to this file (for run_all.py)")
    args = parser.parse_args()
    n = args.ids or (2000 if args.quick else 20000)
    runs = args.imports or (3 if args.quick else 5)
    emit(report(memory(n), import_times(runs), runs), args.json)


if __name__ == "__main__":
    main()
