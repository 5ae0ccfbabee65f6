"""Helpers shared by the benchmarks: the Sandbox in its own process, timing, verdicts, reports.

Every benchmark script can run by hand and prints Markdown; with ``--json PATH`` it also writes
its figures for ``run_all.py``. Only 127.0.0.1 is ever contacted: proxies are switched off
below, before any HTTP library reads the environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

# A proxy variable in the environment would send the benchmark's traffic elsewhere (and
# measure the proxy). Every client here talks to 127.0.0.1 only.
for _variable in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_variable, None)
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable


# --------------------------------------------------------------------------- the Sandbox


SANDBOX_NOW = "2026-11-23T00:00:00Z"


@contextlib.contextmanager
def sandbox_process(latency: float = 0.0, seed: int = 0, startup_timeout: float = 60.0) -> Iterator[str]:
    """Runs ``defilens sandbox`` in a separate process and yields its URL.

    A separate process, so that the server's CPU is not counted against the client being
    measured (``time.process_time`` counts every thread of the calling process). The process
    is ended on the way out, whatever happens in the ``with`` block.
    """
    # A clock that stands still: every round sees the same market, and the Sandbox's body cache
    # (filled by an untimed priming pass) stays valid for the whole run.
    command = [
        PYTHON,
        "-m",
        "defilens",
        "sandbox",
        "--port",
        "0",
        "--seed",
        str(seed),
        "--latency",
        str(latency),
        "--now",
        SANDBOX_NOW,
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _first_line(process, startup_timeout)
        # "serving the DeFi Lens sandbox at http://127.0.0.1:PORT (Ctrl-C to stop)"
        url = line.split(" at ", 1)[1].split()[0] if " at " in line else ""
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the sandbox did not start on 127.0.0.1: {line!r} {_stderr(process)}")
        yield url
    finally:
        _stop(process)


def _first_line(process: subprocess.Popen, timeout: float) -> str:
    """The first stdout line, read in a thread so that a hung start cannot hang the benchmark."""
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise RuntimeError(f"the sandbox printed nothing in {timeout:.0f} s") from None


def _stderr(process: subprocess.Popen) -> str:
    if process.poll() is None:
        return ""
    return (process.stderr.read() or "")[-2000:]  # type: ignore[union-attr]


def _stop(process: subprocess.Popen) -> None:
    """Ends the one process we started: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def run_python(code: str, *args: str, timeout: float = 600) -> str:
    """Runs ``code`` in a fresh interpreter (killed on timeout) and returns its stdout."""
    done = subprocess.run([PYTHON, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"subprocess failed ({done.returncode}): {done.stderr[-3000:]}")
    return done.stdout


# --------------------------------------------------------------------------- timing


def best_of(function: Callable[[], object], runs: int) -> float:
    """Best wall time of ``runs`` calls: the least disturbed by the rest of the machine."""
    best = float("inf")
    for _ in range(max(1, runs)):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best


def cpu_seconds() -> float:
    """CPU time (user + system) of this process, every thread included (Rust's and polars')."""
    return time.process_time()


# --------------------------------------------------------------------------- reporting


def target(name: str, measured: str, goal: str, passed: Optional[bool]) -> Dict[str, object]:
    """One target row: what was measured, what was wanted, and PASS / MISS."""
    return {"target": name, "measured": measured, "goal": goal, "passed": passed}


def verdict(passed: Optional[bool]) -> str:
    return "n/a" if passed is None else ("PASS" if passed else "**MISS**")


def targets_table(targets: List[Dict[str, object]]) -> str:
    lines = ["| target | measured | goal | result |", "|---|---|---|---|"]
    for t in targets:
        lines.append(f"| {t['target']} | {t['measured']} | {t['goal']} | {verdict(t['passed'])} |")  # type: ignore[arg-type]
    return "\n".join(lines)


def table(header: List[str], rows: List[List[str]], align: str) -> str:
    """A Markdown table; ``align`` has one letter per column, ``l`` or ``r``."""
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def emit(report: Dict[str, object], json_path: Optional[str]) -> None:
    """Prints a section (its tables and targets); writes it as JSON for run_all when asked."""
    print(f"## {report['title']}\n\n{report['body']}\n\n{targets_table(report['targets'])}\n")  # type: ignore[arg-type]
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1))


def machine() -> str:
    """CPU model, cores, RAM, Python and polars versions, date: what the figures depend on."""
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as lines:
        for line in lines:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = "unknown RAM"
    with contextlib.suppress(OSError), open("/proc/meminfo") as lines:
        for line in lines:
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 2**20:.1f} GiB RAM"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import polars

    try:
        from importlib.metadata import version

        defilens_version = version("defilens")
    except Exception:
        defilens_version = "?"
    return (
        f"{cpu} ({simd_level()}); {usable} usable cores ({os.cpu_count()} online); {memory}; {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}; polars {polars.__version__}; "
        f"defilens {defilens_version} at commit {commit()}; {time.strftime('%Y-%m-%d %H:%M %Z')}"
    )


def simd_level() -> str:
    """The widest x86 SIMD the CPU offers (what a SIMD parser runs at), from /proc/cpuinfo."""
    flags: "set[str]" = set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as lines:
        for line in lines:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    for level in ("avx512bw", "avx512f", "avx2", "sse4_2"):
        if level in flags:
            return level
    return "no x86 SIMD flags" if not flags else "baseline SIMD"


def commit() -> str:
    """The commit the figures were measured on (with "+changes" when the tree differs from it)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=10", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
