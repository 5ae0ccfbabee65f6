"""Peak memory of a large fetch against the size of its frames; import time against polars.

    python benchmarks/bench_memory_import.py [--quick] [--ids 20000] [--imports 5] [--json PATH]

Both run in fresh interpreters, so nothing measured earlier shares their heap or their module
cache. Memory: the Sandbox in its own process (no latency); the probe imports defilens, makes a
`Client`, fetches 200 other ids once and drops them (the warm-up: the first fetch of a process
pages in the code of the network, parsing and frame paths and starts the runtime's threads, some
15 MiB of RSS that a second fetch, or a fetch of ten times as many ids, does not add again),
makes the list of ids, records its RSS (the baseline), fetches every id with markets=False, and reports the peak RSS of
its lifetime (``ru_maxrss``) minus the baseline, against the frames' Arrow buffers. The same
probe without the warm-up is reported beside it. Import: ``import polars`` and ``import
defilens`` timed inside fresh interpreters (interpreter start-up excluded), interleaved, best
of N each.
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


process = psutil.Process()
MIB = 2 ** 20
url, n, warm = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "warm"


def rss_parts():  # (anonymous, file-backed) RSS in bytes: code paged in from the libraries is file-backed
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return tuple(int(fields[name].split()[0]) * 1024 for name in ("RssAnon", "RssFile"))


client = defilens.Client(base_url=url, api_key="bench-key", concurrency=50, max_retries=3)
if warm:
    client.fetch([f"warm-{i}" for i in range(200)], markets=False, progress=False)
ids = [f"mem-{i}" for i in range(n)]  # the caller's input, made before the baseline
gc.collect()
baseline = process.memory_info().rss  # after imports, the client (and the warm-up): what fetch adds is measured
anon_before, file_before = rss_parts()
started = time.perf_counter()
frames = client.fetch(ids, markets=False, progress=False)
wall = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
after = process.memory_info().rss
anon_after, file_after = rss_parts()
sizes = {name: getattr(frames, name).estimated_size() for name in FRAME_NAMES}
# What the buffers really hold: 16-byte string views, strings shared by many rows once.
arrow_sizes = {name: defilens._core.frame_buffer_bytes(getattr(frames, name)) for name in FRAME_NAMES}
tokens, errors = frames.snapshot.height, frames.errors.height
raw_kept = frames._raw_source.stored_bytes()
del frames
gc.collect()
released = process.memory_info().rss
print(json.dumps({
    "ids": n, "tokens": tokens, "errors": errors, "wall_s": wall,
    "baseline_mib": baseline / MIB, "peak_mib": peak / MIB, "after_fetch_mib": after / MIB,
    "after_release_mib": released / MIB,
    "anon_growth_mib": (anon_after - anon_before) / MIB, "file_growth_mib": (file_after - file_before) / MIB,
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


def memory(n: int, warm: bool) -> Dict[str, object]:
    with sandbox_process(0.0) as url:
        output = run_python(MEMORY_PROBE, url, str(n), "warm" if warm else "cold", timeout=300)
        report = json.loads(output.strip().splitlines()[-1])
    if report["tokens"] != n or report["errors"]:
        raise RuntimeError(f"the memory probe fetched {report['tokens']} of {n} tokens, {report['errors']} errors")
    report["growth_mib"] = report["peak_mib"] - report["baseline_mib"]
    report["ratio"] = report["growth_mib"] / report["frames_mib"]
    report["arrow_ratio"] = report["growth_mib"] / report["frames_arrow_mib"]
    report["kept_ratio"] = report["growth_mib"] / (report["frames_arrow_mib"] + report["raw_kept_mib"])
    report["retained_mib"] = report["after_release_mib"] - report["baseline_mib"]
    return report


def import_times(runs: int) -> Dict[str, float]:
    """Best in-process import time of each module, fresh interpreter per run, interleaved."""
    best = {"polars": float("inf"), "defilens": float("inf")}
    for _ in range(runs):
        for module in best:
            best[module] = min(best[module], float(run_python(IMPORT_PROBE.format(module=module), timeout=60)))
    return best


def report(m: Dict[str, object], cold: Dict[str, object], imports: Dict[str, float], runs: int) -> Dict[str, object]:
    frames = ", ".join(f"{k} {v:.1f}" for k, v in m["frame_mib"].items() if v >= 0.05)  # type: ignore[union-attr]
    added_ms = (imports["defilens"] - imports["polars"]) * 1000
    rows = [
        ["RSS after imports, Client() and a warm-up fetch of 200 ids (baseline)", f"{m['baseline_mib']:.0f} MiB"],
        [f"peak RSS during fetch of {m['ids']:,} ids ({m['wall_s']:.1f} s)", f"{m['peak_mib']:.0f} MiB"],
        ["peak growth over the baseline", f"{m['growth_mib']:.1f} MiB"],
        ["RSS after fetch returned (frames alive)", f"{m['after_fetch_mib']:.0f} MiB"],
        [
            "of its growth: anonymous memory / file-backed pages (code)",
            f"{m['anon_growth_mib']:.1f} / {m['file_growth_mib']:.1f} MiB",
        ],
        [
            "RSS after the frames were released",
            f"{m['after_release_mib']:.0f} MiB (+{m['retained_mib']:.0f} MiB over the baseline)",
        ],
        ["frames' estimated_size(), summed", f"{m['frames_mib']:.1f} MiB ({frames})"],
        [
            "frames' Arrow buffers (`_core.frame_buffer_bytes`: views counted, shared strings once; the target's measure)",
            f"{m['frames_arrow_mib']:.1f} MiB (peak growth: {m['arrow_ratio']:.2f}x)",
        ],
        ["response bodies received", f"{m['bodies_mib']:.1f} MiB"],
        ["of which kept for `Frames.raw` (zstd streams)", f"{m['raw_kept_mib']:.1f} MiB"],
        [
            "what the fetch returns: frames' buffers + `Frames.raw`",
            f"{m['frames_arrow_mib'] + m['raw_kept_mib']:.1f} MiB (peak growth: {m['kept_ratio']:.2f}x)",
        ],
        [
            "the same fetch in a process that has not fetched before (no warm-up): peak growth",
            f"{cold['growth_mib']:.1f} MiB ({cold['arrow_ratio']:.2f}x the frames' buffers; anonymous {cold['anon_growth_mib']:.1f}, "
            f"file-backed {cold['file_growth_mib']:.1f} MiB)",
        ],
        [f"import polars (best of {runs}, fresh interpreters)", f"{imports['polars'] * 1000:.0f} ms"],
        ["import defilens (includes polars)", f"{imports['defilens'] * 1000:.0f} ms"],
    ]
    targets = [
        target(
            f"peak memory of a {m['ids']:,}-id fetch vs frames' size",
            f"{m['ratio']:.2f}x ({m['growth_mib']:.0f} MiB vs {m['frames_mib']:.0f} MiB)",
            "<= 3x",
            m["ratio"] <= 3.0,
        ),  # type: ignore[operator]
        target(
            f"peak memory of a {m['ids']:,}-id fetch vs frames' Arrow buffers",
            f"{m['arrow_ratio']:.2f}x ({m['growth_mib']:.0f} MiB vs {m['frames_arrow_mib']:.0f} MiB; "
            f"{cold['arrow_ratio']:.2f}x in a process's first fetch)",
            "<= 1.3x",
            m["arrow_ratio"] <= 1.3,
        ),  # type: ignore[operator]
        target(
            "memory kept after the frames are released",
            f"+{m['retained_mib']:.0f} MiB over the baseline",
            "returned (<= 25% of the peak growth)",
            m["retained_mib"] <= 0.25 * m["growth_mib"],
        ),  # type: ignore[operator]
        target("time import defilens adds to import polars", f"{added_ms:+.0f} ms", "<= 50 ms", added_ms <= 50),
    ]
    body = (
        "Memory: a fresh interpreter fetches every id (markets=False, no latency) from the Sandbox in another "
        "process; peak = `ru_maxrss`, baseline = RSS after imports, `Client()` and a warm-up fetch of 200 other ids "
        "(a process's first fetch pages in the code it runs and starts the runtime's threads: file-backed and "
        "fixed-size, reported on the last row, where the probe skips the warm-up). The ratios use the frames' real "
        "Arrow buffers (16-byte string views per row, a string shared by many rows once); polars' "
        "`estimated_size()` counts only the characters of String columns. A fetch also keeps every body, "
        "compressed, for `Frames.raw`. Import: time of "
        "the import statement alone inside fresh interpreters, interleaved.\n\n"
        + table(["measure", "value"], rows, "lr")
    )
    return {
        "title": "Memory and import",
        "body": body,
        "targets": targets,
        "results": {"memory": m, "memory_first_fetch": cold, "imports": imports},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2,000 ids, 3 import runs")
    parser.add_argument("--ids", type=int)
    parser.add_argument("--imports", type=int, help="import runs per module")
    parser.add_argument("--json", help="also write the figures to this file (for run_all.py)")
    args = parser.parse_args()
    n = args.ids or (2000 if args.quick else 20000)
    runs = args.imports or (3 if args.quick else 5)
    emit(report(memory(n, warm=True), memory(n, warm=False), import_times(runs), runs), args.json)


if __name__ == "__main__":
    main()
