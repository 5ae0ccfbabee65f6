"""`Frames.write` of a large `Frames`, by hand: a local path and a ``file://`` URL, and the two
ways a local file can be written whole or not at all.

    python benchmarks/bench_write.py                 # 4,500 copies of a 15-token fetch (~7.4M rows, ~86 MB)
    python benchmarks/bench_write.py --copies 500 --repeats 3

The frames are one fetch of the Sandbox's known tokens, stacked ``--copies`` times with each copy's
tokens renamed and its floats nudged (so Parquet cannot fold the copies into one). The ways, run
in turn ``--repeats`` times and reported by their median:

- ``Frames.write(path)`` and ``Frames.write(file://)``: what users call (one path since both are
  the same folder to `defilens._storage.locate`);
- ``sink, temporary name, rename``: polars' local sink to a hidden name beside the target, then
  ``os.replace`` (what `_storage.write_file` does for a local folder);
- ``sink to file:// (object_store)``: polars' sink to the file's URL, which object_store's local
  store writes to a staged name (``frame.parquet#1``) and renames itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

import polars as pl

import defilens
from _common import emit, machine, table
from defilens.testing import Sandbox


def large_frames(copies: int) -> defilens.Frames:
    with Sandbox(now="2026-11-23T00:00:00Z", seed=1) as sandbox:
        base = defilens.Client(base_url=sandbox.url).fetch(sandbox.known_ids, markets=True, progress=False)

    def grow(frame: pl.DataFrame) -> pl.DataFrame:
        if frame.height == 0:
            return frame
        big = pl.concat([frame] * copies, rechunk=True).with_row_index("_i")
        changes = [(pl.col("token") + "-" + (pl.col("_i") // frame.height).cast(pl.String)).alias("token")]
        changes += [
            pl.col(name) * (1 + pl.col("_i").cast(pl.Float64) * 1e-9)
            for name, dtype in frame.schema.items()
            if dtype == pl.Float64
        ]
        return big.with_columns(changes).drop("_i")

    return defilens.Frames({name: grow(frame) for name, frame in base.items() if name != "errors"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=4500)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--folder", default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    frames = large_frames(args.copies)
    rows = sum(frame.height for name, frame in frames.items() if name != "errors")
    work = Path(tempfile.mkdtemp(prefix="bench-write-", dir=args.folder))

    def temporary_then_rename(folder: Path) -> None:
        folder.mkdir()
        for name, frame in frames.items():
            temporary = folder / f".{name}.parquet.tmp"
            frame.lazy().sink_parquet(temporary)
            os.replace(temporary, folder / f"{name}.parquet")

    def object_store(folder: Path) -> None:
        for name, frame in frames.items():
            frame.lazy().sink_parquet((folder / f"{name}.parquet").as_uri())

    ways: Dict[str, Callable[[Path], object]] = {
        "Frames.write(path)": frames.write,
        "Frames.write(file://)": lambda folder: frames.write(folder.as_uri()),
        "sink, temporary name, rename": temporary_then_rename,
        "sink to file:// (object_store)": object_store,
    }
    times: Dict[str, List[float]] = {name: [] for name in ways}
    cpu: Dict[str, List[float]] = {name: [] for name in ways}
    loads = [os.getloadavg()[0]]
    try:
        for repeat in range(args.repeats):
            for index, (name, way) in enumerate(ways.items()):
                folder = work / f"{index}-{repeat}"
                started, cpu_started = time.perf_counter(), time.process_time()
                way(folder)
                times[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - cpu_started)
                size = sum(path.stat().st_size for path in folder.iterdir())
                shutil.rmtree(folder)
            loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    body = (
        f"{rows:,} rows in {len(list(frames.items())) - 1} frames, {size / 1e6:.1f} MB of Parquet a write; median of "
        f"{args.repeats} runs in turn (wall: fastest-slowest; CPU: every thread of the process); 1-minute load {min(loads):.1f}-{max(loads):.1f}.\n\n"
        + table(
            ["way", "wall, median", "wall, range", "CPU, median"],
            [
                [
                    name,
                    f"{statistics.median(t) * 1000:,.0f} ms",
                    f"{min(t) * 1000:,.0f}-{max(t) * 1000:,.0f} ms",
                    f"{statistics.median(cpu[name]) * 1000:,.0f} ms",
                ]
                for name, t in times.items()
            ],
            "lrrr",
        )
        + f"\n\n{machine()}"
    )
    emit({"title": "Frames.write of a large Frames", "body": body, "targets": []}, args.json)


if __name__ == "__main__":
    main()
