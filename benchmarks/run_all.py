"""Runs every benchmark and writes benchmarks/RESULTS.md (run by hand; not part of the tests).

    .venv/bin/python benchmarks/run_all.py [--quick] [--out PATH]

Each benchmark runs in its own interpreter (so one's threads, caches and heap do not colour the
next) under a time limit; the Sandboxes they start are ended with them. The report starts with
the machine and every target with PASS / MISS, then each benchmark's table. ``--quick`` uses
small sizes, for a smoke run of a minute or so; its figures are not the ones to publish.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from _common import HERE, PYTHON, machine, targets_table

# (script, time limit in seconds for a full run); together well under ten minutes on 2 cores.
BENCHMARKS: List[Tuple[str, int]] = [
    ("bench_parse.py", 300),
    ("bench_fetch.py", 300),
    ("bench_memory_import.py", 180),
    ("bench_scaling.py", 600),
]


def run(script: str, limit: int, quick: bool, folder: Path) -> Dict[str, object]:
    """Runs one benchmark; a failure becomes a section saying so, and the others still run."""
    out = folder / f"{script}.json"
    command = [PYTHON, str(HERE / script), "--json", str(out)] + (["--quick"] if quick else [])
    started = time.perf_counter()
    print(f"running {script} ...", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, timeout=limit)
        failure = None if done.returncode == 0 else f"exit status {done.returncode}:\n\n```\n{done.stderr[-3000:]}\n```"
    except subprocess.TimeoutExpired:  # subprocess.run kills the child; its Sandbox dies with its finally
        failure = f"timed out after {limit} s"
    print(
        f"  {script}: {time.perf_counter() - started:.0f} s{' FAILED' if failure else ''}", file=sys.stderr, flush=True
    )
    if failure:
        return {"title": script, "body": f"Failed: {failure}", "targets": [], "failed": True}
    return json.loads(out.read_text())


def document(sections: List[Dict[str, object]], quick: bool, seconds: float, load: str) -> str:
    targets = [t for s in sections for t in s["targets"]]  # type: ignore[union-attr]
    misses = sum(1 for t in targets if t["passed"] is False)
    passes = sum(1 for t in targets if t["passed"] is True)
    parts = [
        "# Benchmark results" + (" (quick run: small sizes, not for publication)" if quick else ""),
        "",
        f"Machine: {machine()}.",
        "",
        f"Run with `.venv/bin/python benchmarks/run_all.py{' --quick' if quick else ''}` in {seconds:.0f} s. "
        "Every figure comes from this one run; the Sandbox served every request from a separate process on 127.0.0.1. "
        f"Load average (1 min) before and after: {load} (other work on the machine skews the figures).",
        "",
        f"## Targets: {passes} PASS, {misses} MISS",
        "",
        targets_table(targets),  # type: ignore[arg-type]
        "",
    ]
    for s in sections:
        parts += [f"## {s['title']}", "", str(s["body"]), ""]
    return "\n".join(parts)


def kept_sections(previous: str, made: List[str]) -> str:
    """The sections of an earlier report that this run does not make (benchmarks run by hand, such
    as the parser's shapes and the research over a history), as they were: a run of the four
    benchmarks must not erase figures it did not measure."""
    chunks = re.split(r"(?m)^(?=## )", previous)[1:]
    kept = [c for c in chunks if not (c.startswith("## Targets:") or c.splitlines()[0][3:] in made)]
    return "".join(kept)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args()
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="defilens-bench-") as folder:
        sections = [run(script, limit, args.quick, Path(folder)) for script, limit in BENCHMARKS]
    load = f"{load_before:.2f} / {os.getloadavg()[0]:.2f}"
    text = document(sections, args.quick, time.perf_counter() - started, load)
    if args.out.exists():
        text += kept_sections(args.out.read_text(), [str(s["title"]) for s in sections])
    args.out.write_text(text)
    print(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 1 if any(s.get("failed") for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
