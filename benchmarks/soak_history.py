"""Soaks of the history, by hand, locally and in S3 (moto on 127.0.0.1, in its own process).

kill -9: collectors killed at random moments, then the next collect finishes what they left, and
every table is checked against the others (every listing fetch in snapshot, indicators,
ta_updated, log and raw exactly once).

maintenance (issue 36, F5 and F1): collectors (CLI processes, one token shard each), readers
(`defilens.scan` in a loop) and compactions back to back with log cleanup always due (retention
10 s instead of at least an hour), for a bounded time; it prints collector exits, collectors
killed for overrunning (still running at `OVERRUN_BUDGET` times the soak's length: slowness, not
a crash), failed reads, compactions run/refused/failed with their durations split by step, and
rows doubled. ``--no-fence`` and ``--no-compaction`` are A/B runs (start them beside a normal
one: the machine's load is part of what is measured).

    python benchmarks/soak_history.py --local 60 --s3 15
    python benchmarks/soak_history.py --local 0 --s3 0 --maintenance 180 --collectors 4 --readers 2
    python benchmarks/soak_history.py --local 0 --s3 0 --maintenance 600 --where s3 --every 20s

The CI tests run short versions: tests/test_history.py (12 local kills) and
tests/test_compaction_safety.py (the maintenance soak for seconds, locally and in S3).
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from history_checks import assert_whole_rounds

import defilens
from defilens.testing import Sandbox

CLI = [sys.executable, "-m", "defilens"]


def soak(root: str, trials: int, options: Optional[Dict[str, str]], seed: int) -> Dict[str, int]:
    rng = random.Random(seed)
    flags = [arg for key, value in (options or {}).items() for arg in ("--storage-option", f"{key}={value}")]
    spooled = 0
    for trial in range(trials):
        child = subprocess.Popen(
            CLI
            + ["collect", "bitcoin", "ethereum", "solana", "unknown-x", "--sandbox", "--every", "0.02s", "--raw"]
            + ["--out", root, *flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(1.5, 4.0))
        child.kill()
        child.wait()
        if options is None:
            spooled += bool(glob.glob(str(Path(root) / "_spool" / "*" / "*.round")))
        print(f"  trial {trial + 1}/{trials} killed", flush=True)
    with Sandbox() as sandbox:
        defilens.Client(base_url=sandbox.url).collect(
            ["bitcoin"], "0.01s", count=1, out=root, raw=True, storage_options=options
        )
    fetches = assert_whole_rounds(root, options)
    return {"trials": trials, "fetches": fetches, "kills that left a round in the spool": spooled}


#: One shard of tokens a collector (two collectors fetching one token in the same millisecond
#: would write byte-identical rows, which the check below cannot tell from a doubled row).
SHARDS = [
    ["bitcoin", "ethereum"],
    ["solana", "dogecoin"],
    ["cardano", "ripple"],
    ["litecoin", "polkadot"],
    ["chainlink", "tron"],
    ["stellar", "avalanche-2"],
]


#: A collector still running this many times the soak's length after it started is killed (and
#: counted as overrunning, not as an exit): its rounds cannot keep up with its cadence.
OVERRUN_BUDGET = 3


def maintenance_soak(
    root: str,
    options: Optional[Dict[str, str]],
    seconds: float,
    collectors: int = 4,
    readers: int = 2,
    every: str = "0.5s",
    retention: str = "10s",
    fence: bool = True,
    compactions: bool = True,
) -> Dict[str, Any]:
    """Collectors, readers and compactions (log cleanup due each time) at once for ``seconds``;
    returns what went wrong, counted, and where each compaction's time went. Everything stops by
    itself: the collectors after their ``--count`` rounds. A collector still running at its
    budget (`OVERRUN_BUDGET` times the soak's length, at least a minute) is killed and counted
    apart from the collectors that exited with an error: an overrun is slowness, not a crash.
    ``fence=False`` (an A/B of the fence's cost, never for real use) compacts without the fence's
    metadata commit."""
    import obstore

    from defilens.history import _compact
    from defilens.history._lock import Busy

    flags = [arg for key, value in (options or {}).items() for arg in ("--storage-option", f"{key}={value}")]
    rounds = max(1, int(seconds / float(every.rstrip("s"))))
    # A first round so that every table exists before the readers and compactions start.
    first = subprocess.run(
        CLI + ["collect", "bitcoin", "--sandbox", "--every", every, "--count", "1", "--raw", "--out", root, *flags],
        capture_output=True,
        text=True,
    )
    assert first.returncode == 0, first.stderr
    started = time.monotonic()
    children = [
        subprocess.Popen(
            CLI
            + ["collect", *SHARDS[i % len(SHARDS)], "--sandbox", "--every", every, "--count", str(rounds)]
            + ["--raw", "--out", root, *flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(collectors)
    ]
    stop = threading.Event()
    counts = {"reads": 0, "failed reads": 0, "compactions": 0, "refused": 0, "failed compactions": 0}
    errors: List[str] = []
    lock = threading.Lock()

    def note(key: str, error: Optional[BaseException] = None) -> None:
        with lock:
            counts[key] += 1
            if error is not None and len(errors) < 20:
                errors.append(f"{key}: {type(error).__name__}: {str(error)[:300]}")

    def read() -> None:
        while not stop.is_set():
            for name in ("indicators", "snapshot", "log", "raw"):
                try:
                    defilens.scan(root, name, storage_options=options).collect()
                    note("reads")
                except Exception as error:
                    note("failed reads", error)

    # Log cleanup due all the time: the retention scaled down from at least an hour to 10 s (the
    # log's; vacuum keeps its hour), so entries older than 10 s are removed by every compaction.
    _compact.MIN_RETENTION = dt.timedelta(0)

    durations: List[float] = []
    steps: Dict[str, float] = {}
    reached: Dict[str, int] = {}
    last_step: List[Any] = [None, 0.0]

    def step_reached(step: str, table: str) -> None:
        """`_compact._before_commit`: the time since the previous step goes to that step."""
        now = time.monotonic()
        reached[step] = reached.get(step, 0) + 1
        if last_step[0] is not None:
            with lock:
                steps[last_step[0]] = steps.get(last_step[0], 0.0) + now - last_step[1]
        last_step[:] = [step, now]

    _compact._before_commit = step_reached  # type: ignore[assignment]
    if not fence:
        from defilens.history._tables import load

        _compact._fence = lambda root, name, lease, retention: load(root, name)  # type: ignore[assignment]
        _compact._checked = lambda root, name, lease, table=None, current=True: (  # type: ignore[assignment]
            load(root, name) if table is None else _compact._fresh(root, name, table) if current else table
        )

    def compact() -> None:
        while not stop.is_set():
            began = time.monotonic()
            last_step[:] = ["load and fence", began]
            try:
                _compact.compact(
                    root,
                    retention=retention,
                    storage_options=options,
                    now=dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc),
                )
                note("compactions")
                durations.append(time.monotonic() - began)
                step_reached("", 0.0)  # the last step (vacuum, files counted) ends here
                last_step[0] = None
            except Busy:
                note("refused")
            except Exception as error:
                note("failed compactions", error)

    threads = [threading.Thread(target=read) for _ in range(readers)]
    if compactions:
        threads.append(threading.Thread(target=compact))
    for thread in threads:
        thread.start()
    exits: List[str] = []
    overran = 0
    budget = max(60.0, OVERRUN_BUDGET * seconds)
    try:
        for child in children:
            try:
                _, err = child.communicate(timeout=max(1.0, budget - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                child.kill()
                child.communicate()
                overran += 1
                continue
            if child.returncode != 0:
                exits.append(f"exit {child.returncode}: {(err or '').strip().splitlines()[-1:]}")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        _compact._before_commit = lambda step, table: None  # type: ignore[assignment]
    elapsed = time.monotonic() - started
    if overran:  # finish the rounds the killed ones left
        subprocess.run(
            CLI + ["collect", "bitcoin", "--sandbox", "--every", every, "--count", "1", "--raw", "--out", root, *flags],
            capture_output=True,
        )
    snapshot = defilens.scan(root, "snapshot", storage_options=options).collect()
    committed = [snapshot.filter(pl.col("token") == SHARDS[i % len(SHARDS)][0]).height for i in range(collectors)]
    indicators = defilens.scan(root, "indicators", storage_options=options).collect()
    doubled = (snapshot.height - snapshot.select("token", "fetched_at").n_unique()) + (
        indicators.height - indicators.select("token", "fetched_at", "interval", "indicator").n_unique()
    )
    from deltalake import DeltaTable

    from defilens.history._root import root_of

    listed = [
        meta["path"]
        for batch in obstore.list(root_of(root, options).store(), prefix="indicators/_delta_log/")
        for meta in batch
    ]
    versions = DeltaTable(f"{root}/indicators", storage_options=options).version() + 1
    try:
        fetches = assert_whole_rounds(root, options)
        whole = "yes"
    except AssertionError as error:
        fetches, whole = 0, f"NO: {error}"
    return {
        "seconds": round(elapsed),
        "collectors": collectors,
        "collector exits": len(exits),
        "collectors killed for overrunning": overran,
        "overrun budget (s)": round(budget),
        "rounds committed per collector": f"{committed} of {rounds}",
        **counts,
        "compaction seconds (min-median-max)": (
            f"{min(durations, default=0):.0f}-{statistics.median(durations or [0]):.0f}-{max(durations, default=0):.0f}"
        ),
        "compaction seconds by step (all compactions)": {key: round(value) for key, value in sorted(steps.items())},
        "steps reached (fence: one a try)": {key: value for key, value in sorted(reached.items()) if key},
        "rows doubled": doubled,
        "indicators: versions / log entries kept": f"{versions} / {sum(p.endswith('.json') for p in listed)}",
        "listing fetches": fetches,
        "every round whole and once": whole,
        "exits": exits,
        "errors": errors,
    }


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", type=int, default=40, help="kill -9 trials on local disk")
    parser.add_argument("--s3", type=int, default=10, help="kill -9 trials in S3 (moto)")
    parser.add_argument("--maintenance", type=float, default=0, help="seconds of the maintenance soak, each way")
    parser.add_argument("--collectors", type=int, default=4)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--where", default="local,s3", help="where the maintenance soak runs: local, s3 or both")
    parser.add_argument("--every", default="0.5s", help="the collectors' interval")
    parser.add_argument("--no-fence", action="store_true", help="A/B only: compact without the fence's metadata commit")
    parser.add_argument("--no-compaction", action="store_true", help="A/B only: collectors and readers alone")
    args = parser.parse_args(argv)
    import warnings

    warnings.simplefilter("ignore")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_history import moto

    with tempfile.TemporaryDirectory() as folder:
        if args.local:
            print(f"local: {args.local} kills", flush=True)
            local = soak(f"{folder}/local", args.local, None, 1)
            print(f"local: {local}", flush=True)
        if args.maintenance and "local" in args.where:
            print(f"local: maintenance soak, {args.maintenance:.0f} s", flush=True)
            print(
                f"local: {maintenance_soak(f'{folder}/maintenance', None, args.maintenance, args.collectors, args.readers, args.every, fence=not args.no_fence, compactions=not args.no_compaction)}",
                flush=True,
            )
    if args.s3 or (args.maintenance and "s3" in args.where):
        with moto() as options:
            if args.s3:
                print(f"S3 (moto): {args.s3} kills", flush=True)
                remote = soak("s3://bench/soak", args.s3, options, 2)
                print(f"S3 (moto): {remote}", flush=True)
            if args.maintenance and "s3" in args.where:
                print(f"S3 (moto): maintenance soak, {args.maintenance:.0f} s", flush=True)
                found = maintenance_soak(
                    "s3://bench/maintenance",
                    options,
                    args.maintenance,
                    args.collectors,
                    args.readers,
                    args.every,
                    fence=not args.no_fence,
                    compactions=not args.no_compaction,
                )
                print(f"S3 (moto): {found}", flush=True)


if __name__ == "__main__":
    main()
