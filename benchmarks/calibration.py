"""How often `evaluate` calls a signal significant where nothing can work, and how often it finds
one that does: persistent random scores and events on Sandbox random walks (the null), and scores
with an injected effect of known size (the power), per horizon and for the family of horizons.

    python benchmarks/calibration.py [--seeds 8] [--scores 60] [--out calibration.md]

Each history is a Sandbox random walk of 30 tokens (the study tests' shapes: one day and four days
of 30-minute rounds, fourteen days of hourly ones), labelled once at 1h, 4h, 8h and 24h; each
score is an AR(1) per token over the hourly decisions (phi 0.9, 0.95 or 0.99, drawn apart from the
market), each event the top fifth of such a score. The Newey-West t with lags = horizon / spacing
and |t| >= 2 (what `evaluate` used before) is measured on the same draws. The injected score is
``noise + beta * rank of the 4h forward return`` across tokens at each decision, with beta set for
a mean rank IC of about 0.05 and 0.10 at 4h; the injected event is the top fifth of that score.
Events are judged twice: over events (each decision's summed excess) and over episodes (a
token's events at consecutive decisions are one episode, entered once). Prints Markdown
(docs/research.md quotes it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from study_histories import random_walk_history

import defilens
from defilens.research._inference import holm

TOKENS = [f"coin-{i}" for i in range(30)]
HORIZONS = ["1h", "4h", "8h", "24h"]
#: (name, rounds, spacing between rounds)
SHAPES: Sequence[Tuple[str, int, dt.timedelta]] = (
    ("1 day, 30m rounds", 48, dt.timedelta(minutes=30)),
    ("4 days, 30m rounds", 192, dt.timedelta(minutes=30)),
    ("14 days, 1h rounds", 336, dt.timedelta(hours=1)),
)
PHIS = (0.9, 0.95, 0.99)
#: The injected effects: (label, the share of the score that is the 4h return's rank).
EFFECTS = (("IC ~0.05 at 4h", 0.052), ("IC ~0.10 at 4h", 0.105))


def newey_west_t(values: Sequence[float], lags: int) -> float:
    """The t of a mean with the Newey-West (Bartlett) long-run variance: the test replaced."""
    n = len(values)
    if n < 2:
        return math.nan
    x = np.asarray(values, dtype=float)
    e = x - x.mean()
    variance = float(e @ e) / n
    for lag in range(1, min(lags, n - 1) + 1):
        variance += 2.0 * (1.0 - lag / (lags + 1.0)) * float(e[lag:] @ e[:-lag]) / n
    return float(x.mean() / math.sqrt(variance / n)) if variance > 0 else math.nan


def ar1(rng: np.random.Generator, decisions: int, phi: float) -> np.ndarray:
    score = np.empty((decisions, len(TOKENS)))
    score[0] = rng.normal(size=len(TOKENS))
    noise = math.sqrt(1 - phi * phi)
    for d in range(1, decisions):
        score[d] = phi * score[d - 1] + noise * rng.normal(size=len(TOKENS))
    return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8, help="random-walk histories per shape")
    parser.add_argument("--scores", type=int, default=60, help="random scores (and events) per history")
    parser.add_argument("--out", help="also write the Markdown here")
    parser.add_argument(
        "--rsi-walks",
        type=int,
        default=0,
        help="instead: the documented RSI study (rsi14 on 1h as of each hour) on this many four-day random walks",
    )
    args = parser.parse_args()
    if args.rsi_walks:
        rsi_study(args.rsi_walks, args.out)
        return
    warnings.simplefilter("ignore", defilens.DefiLensWarning)
    started = time.time()
    lines = [
        f"Measured {dt.date.today()} on {platform.machine()} ({os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f} at the start): {args.seeds} histories per shape, {args.scores} random scores and "
        f"{args.scores} random events per history (phi {', '.join(map(str, PHIS))}), 30 tokens, hourly decisions.",
        "",
        "| shape | test | " + " | ".join(HORIZONS) + " | family |",
        "|---|---|" + "---|" * (len(HORIZONS) + 1),
    ]
    with tempfile.TemporaryDirectory() as folder:
        for name, rounds, every in SHAPES:
            counts: Dict[str, Dict[str, List[bool]]] = {}

            def tally(
                test: str, horizon: str, rejected: bool, counts: Dict[str, Dict[str, List[bool]]] = counts
            ) -> None:
                counts.setdefault(test, {}).setdefault(horizon, []).append(rejected)

            judged: Dict[str, List[float]] = {}
            for seed in range(args.seeds):
                root = os.path.join(folder, f"{rounds}-{seed}")
                random_walk_history(root, 1000 + seed, TOKENS, rounds, every)
                grid = defilens.decision_times(root, "1h")
                decisions = grid.to_frame().join(pl.DataFrame({"token": TOKENS}), how="cross")
                labels = defilens.forward_returns(root, decisions, HORIZONS)
                four = labels.filter(pl.col("horizon") == dt.timedelta(hours=4)).select(
                    "at", "token", pl.col("forward_return").rank().over("at").alias("_rank")
                )
                rng = np.random.default_rng(seed)
                times = np.repeat(grid.to_numpy(), len(TOKENS))
                for draw in range(args.scores):
                    score = ar1(rng, grid.len(), PHIS[draw % len(PHIS)])
                    frame = pl.DataFrame({"at": times, "token": TOKENS * grid.len(), "score": score.ravel()})
                    frame = frame.with_columns(
                        pl.col("at").cast(pl.Datetime("ms", "UTC")),
                        (pl.col("score") > pl.col("score").quantile(0.8).over("at")).alias("event"),
                    )
                    scored = labels.join(frame, on=["at", "token"])
                    for signal in ("score", "event"):
                        result = defilens.evaluate(scored, signal)
                        family = result.p_value
                        tally(f"{signal}: calibrated", "family", family is not None and family < 0.05)
                        if signal == "event":
                            episodes = holm([r["episode_p"] for r in result.summary.iter_rows(named=True)])
                            judged_p = [p for p in episodes if p is not None]
                            tally("event: over episodes", "family", bool(judged_p) and min(judged_p) < 0.05)
                        for row in result.summary.iter_rows(named=True):
                            horizon = defilens._duration.format_duration(row["horizon"])
                            if row["p_value"] is not None:
                                tally(f"{signal}: calibrated", horizon, row["p_value"] < 0.05)
                                judged.setdefault(horizon, []).append(row["windows"])
                            if signal == "event" and row["episode_p"] is not None:
                                tally("event: over episodes", horizon, row["episode_p"] < 0.05)
                            if signal == "score":
                                values = result.ic.filter(pl.col("horizon") == row["horizon"])["ic"].to_list()
                                lags = round(row["horizon"] / dt.timedelta(hours=1))
                                tally("score: Newey-West, abs(t) >= 2", horizon, abs(newey_west_t(values, lags)) >= 2)
                    for effect, beta in EFFECTS:
                        noisy = frame.join(four, on=["at", "token"]).with_columns(
                            (pl.col("score") + beta * (pl.col("_rank") - 15.5) / 8.66).alias("injected")
                        )
                        result = defilens.evaluate(labels.join(noisy, on=["at", "token"]), "injected")
                        row = result.summary.filter(pl.col("horizon") == dt.timedelta(hours=4)).row(0, named=True)
                        tally(f"power, {effect}", "4h", row["p_value"] is not None and row["p_value"] < 0.05)
                        tally(f"power, {effect}", "family", result.p_value is not None and result.p_value < 0.05)
                        # The event: the top fifth of the injected score, over events and over episodes.
                        flagged = noisy.with_columns(
                            (pl.col("injected") > pl.col("injected").quantile(0.8).over("at")).alias("flagged")
                        )
                        result = defilens.evaluate(labels.join(flagged, on=["at", "token"]), "flagged")
                        row = result.summary.filter(pl.col("horizon") == dt.timedelta(hours=4)).row(0, named=True)
                        tally(f"power, event, {effect}", "4h", row["p_value"] is not None and row["p_value"] < 0.05)
                        tally(
                            f"power, event over episodes, {effect}",
                            "4h",
                            row["episode_p"] is not None and row["episode_p"] < 0.05,
                        )
            for test, by in counts.items():
                cells = []
                for horizon in [*HORIZONS, "family"]:
                    drawn = by.get(horizon)
                    if drawn:
                        cells.append(f"{100 * sum(drawn) / len(drawn):.1f}% of {len(drawn)}")
                    elif horizon in judged or test.startswith("power"):
                        cells.append("")
                    else:
                        cells.append("not judged")
                lines.append(f"| {name} | {test} | " + " | ".join(cells) + " |")
            windows = ", ".join(f"{h} {min(w):.0f}-{max(w):.0f}" for h, w in judged.items())
            lines.append(f"| {name} | independent windows judged | {windows} |" + " |" * len(HORIZONS))
            print(f"{name}: done after {time.time() - started:.0f} s", file=sys.stderr)
    text = "\n".join(lines + ["", f"{time.time() - started:.0f} s in all."])
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def rsi_study(walks: int, out: "str | None") -> None:
    """The docs' honest RSI study on ``walks`` random walks of four days of 30-minute rounds: how
    often each horizon's p is below 5%, and the verdict significant (Newey-West beside it)."""
    warnings.simplefilter("ignore", defilens.DefiLensWarning)
    started = time.time()
    counts: Dict[str, int] = {}
    worst = (1.0, "")
    with tempfile.TemporaryDirectory() as folder:
        for seed in range(walks):
            root = os.path.join(folder, f"walk{seed}")
            random_walk_history(root, 2000 + seed, TOKENS, 192, dt.timedelta(minutes=30))
            signal = defilens.asof(root, defilens.decision_times(root, "1h"), intervals="1h", indicators="rsi14")
            result = defilens.evaluate(defilens.forward_returns(root, signal, HORIZONS), "value")
            counts["significant"] = counts.get("significant", 0) + result.significant
            for row in result.summary.iter_rows(named=True):
                horizon = defilens._duration.format_duration(row["horizon"])
                if row["p_value"] is not None:
                    counts[horizon] = counts.get(horizon, 0) + (row["p_value"] < 0.05)
                values = result.ic.filter(pl.col("horizon") == row["horizon"])["ic"].to_list()
                lags = round(row["horizon"] / dt.timedelta(hours=1))
                counts[f"{horizon} NW"] = counts.get(f"{horizon} NW", 0) + (abs(newey_west_t(values, lags)) >= 2)
            if result.p_value is not None and result.p_value < worst[0]:
                worst = (result.p_value, result.verdict)
    text = (
        f"The documented RSI study on {walks} random walks (30 tokens, four days of 30-minute rounds), "
        f"{time.time() - started:.0f} s: p < 5% at "
        + ", ".join(f"{h} in {counts.get(h, 0)}" for h in HORIZONS if h in counts)
        + f"; significant in {counts['significant']}; Newey-West abs(t) >= 2 at "
        + ", ".join(f"{h} in {counts[h + ' NW']}" for h in HORIZONS)
        + f". Its lowest family p: {worst[1]}"
    )
    print(text)
    if out:
        Path(out).write_text(text + "\n")


if __name__ == "__main__":
    main()
