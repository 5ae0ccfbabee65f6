"""vectorbt compiles once per environment, as docs/research.md says: after `to_vectorbt`, the
simulation `Portfolio.from_signals` runs is kept in numba's on-disk cache, so a new process
compiles nothing of vectorbt's (it took 7-33 s in every new process)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
from study_histories import random_walk_history

SCRIPT = r"""
import json, sys, warnings
from numba.core import event

compiled = []


class Listener(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        function = ev.data["dispatcher"].py_func
        compiled.append(f"{function.__module__}.{function.__qualname__}")


event.register("numba:compile", Listener())
import polars as pl
import defilens

root = sys.argv[1]
grid = defilens.decision_times(root, "1h").gather_every(2)
study = defilens.asof(root, grid, frame="snapshot", columns="current_price").with_columns(
    (pl.col("token") == "coin-1").alias("chosen")
)
labels = defilens.forward_returns(root, study, "1h")
close, entries, exits = defilens.to_vectorbt(root, labels, "1h", signal="chosen")
import vectorbt as vbt

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    portfolio = vbt.Portfolio.from_signals(close, entries, exits)
    trades = len(portfolio.trades.records_readable)
print(json.dumps({"trades": trades, "compiled": [name for name in compiled if name.startswith("vectorbt.")]}))
"""


@pytest.mark.slow
def test_a_new_process_compiles_nothing_of_vectorbt_after_the_first(tmp_path: Path) -> None:
    pytest.importorskip("vectorbt")
    root = tmp_path / "h"
    random_walk_history(str(root), 3, ["coin-0", "coin-1", "coin-2"], 16, dt.timedelta(minutes=30))
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(root)], capture_output=True, text=True, timeout=600, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0]["trades"] == runs[1]["trades"] > 0
    assert runs[1]["compiled"] == [], f"compiled again in a new process: {runs[1]['compiled']}"
