"""kill -9 soak of the history, by hand: collectors killed at random moments, locally and in S3
(moto, in its own process), then the next collect finishes what they left, and every table is
checked against the others (every listing fetch in snapshot, indicators, ta_updated, log and raw
exactly once).

    python benchmarks/soak_history.py --local 60 --s3 15

The CI test (tests/test_history.py) runs 12 local trials; this runs as many as you ask.
"""

from __future__ import annotations

import argparse
import glob
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

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


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", type=int, default=40)
    parser.add_argument("--s3", type=int, default=10)
    args = parser.parse_args(argv)
    import warnings

    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as folder:
        print(f"local: {args.local} kills", flush=True)
        local = soak(f"{folder}/local", args.local, None, 1)
        print(f"local: {local}", flush=True)
    if args.s3:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_history import moto

        with moto() as options:
            print(f"S3 (moto): {args.s3} kills", flush=True)
            remote = soak("s3://bench/soak", args.s3, options, 2)
            print(f"S3 (moto): {remote}", flush=True)


if __name__ == "__main__":
    main()
