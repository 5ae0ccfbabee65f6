"""Parsing benchmark: defilens.parse_tokens against orjson alone and two Python implementations.

Run by hand:  python benchmarks/bench_parse.py [--sizes 2000 20000] [--repeat 5]

The Python implementations build the same snapshot and long frames (indicators, signals,
patterns, ta_updated) by the same JSON-type rule, so the comparison is like for like.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Callable, Dict, List

import orjson
import polars as pl

import defilens

INTERVALS = ("5m", "15m", "1h", "4h", "24h", "1w")
SUFFIXED = re.compile(r"^(?P<family>.+)_(?P<interval>5m|15m|1h|4h|24h|1w)$")
TA = re.compile(r"^ta_(?P<interval>5m|15m|1h|4h|24h|1w)_updated_at$")
MARKET_FIGURES = set(defilens.parse_token(defilens.testing.listing_body("x")).snapshot.columns)


def bodies(n: int) -> List[bytes]:
    return [defilens.testing.listing_body(f"token-{i}", seed=1).encode() for i in range(n)]


def split_fields(data: dict) -> tuple:
    snapshot, indicators, signals, patterns, ta = {}, [], [], [], []
    token = data.get("id")
    for key, value in data.items():
        if key in MARKET_FIGURES:
            snapshot[key] = value
            continue
        match = TA.match(key)
        if match:
            ta.append((token, match["interval"], value))
            continue
        match = SUFFIXED.match(key)
        if not match:
            continue
        family, interval = match["family"], match["interval"]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            indicators.append((token, interval, family, float(value)))
        elif isinstance(value, str):
            signals.append((token, interval, family, value))
        elif isinstance(value, list):
            name = "triple" if family == "tripple_pattern" else family.replace("_pattern", "").replace("chartpattern", "chart")
            patterns.extend((token, interval, name, p) for p in value)
    snapshot["current_price"] = float(snapshot["current_price"])
    return snapshot, indicators, signals, patterns, ta


def idiomatic_python(raw: List[bytes]) -> Dict[str, pl.DataFrame]:
    """json + one dict per row + pl.DataFrame(rows): what most client code does."""
    snapshots, indicators, signals, patterns, ta = [], [], [], [], []
    for body in raw:
        data = json.loads(body)["data"]
        s, i, g, p, t = split_fields(data)
        snapshots.append(s)
        indicators += [dict(token=a, interval=b, indicator=c, value=d) for a, b, c, d in i]
        signals += [dict(token=a, interval=b, indicator=c, value=d) for a, b, c, d in g]
        patterns += [dict(token=a, interval=b, family=c, pattern=d) for a, b, c, d in p]
        ta += [dict(token=a, interval=b, updated_at=c) for a, b, c in t]
    interval = pl.Enum(list(INTERVALS))
    return {
        "snapshot": pl.DataFrame(snapshots, infer_schema_length=None),
        "indicators": pl.DataFrame(indicators).with_columns(pl.col("interval").cast(interval)),
        "signals": pl.DataFrame(signals).with_columns(pl.col("interval").cast(interval)),
        "patterns": pl.DataFrame(patterns).with_columns(pl.col("interval").cast(interval)),
        "ta_updated": pl.DataFrame(ta).with_columns(
            pl.col("interval").cast(interval),
            pl.col("updated_at").str.to_datetime("%Y-%m-%d %H:%M:%S%#z", time_unit="ms"),
        ),
    }


def tuned_python(raw: List[bytes]) -> Dict[str, pl.DataFrame]:
    """orjson + column lists + one polars constructor per frame."""
    snapshot_rows = []
    cols: Dict[str, List[list]] = {name: [[], [], [], []] for name in ("indicators", "signals", "patterns")}
    ta_cols: List[list] = [[], [], []]
    for body in raw:
        s, i, g, p, t = split_fields(orjson.loads(body)["data"])
        snapshot_rows.append(s)
        for name, rows in (("indicators", i), ("signals", g), ("patterns", p)):
            target = cols[name]
            for row in rows:
                for column, value in zip(target, row):
                    column.append(value)
        for row in t:
            for column, value in zip(ta_cols, row):
                column.append(value)
    interval = pl.Enum(list(INTERVALS))

    def long(name: str, third: str, fourth: str) -> pl.DataFrame:
        a, b, c, d = cols[name]
        return pl.DataFrame({"token": a, "interval": pl.Series(b, dtype=interval), third: c, fourth: d})

    return {
        "snapshot": pl.from_dicts(snapshot_rows, infer_schema_length=None),
        "indicators": long("indicators", "indicator", "value"),
        "signals": long("signals", "indicator", "value"),
        "patterns": long("patterns", "family", "pattern"),
        "ta_updated": pl.DataFrame({"token": ta_cols[0], "interval": pl.Series(ta_cols[1], dtype=interval), "updated_at": ta_cols[2]}).with_columns(
            pl.col("updated_at").str.to_datetime("%Y-%m-%d %H:%M:%S%#z", time_unit="ms")
        ),
    }


def best_time(function: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best


def run(sizes: List[int], repeat: int) -> List[dict]:
    results = []
    for n in sizes:
        raw = bodies(n)
        megabytes = sum(map(len, raw)) / 1e6
        reference = defilens.parse_tokens(raw)
        python_frames = tuned_python(raw)
        assert python_frames["indicators"].height == reference.indicators.height
        assert python_frames["patterns"].height == reference.patterns.height
        timings = {
            "defilens.parse_tokens": best_time(lambda: defilens.parse_tokens(raw), repeat),
            "orjson.loads only (floor)": best_time(lambda: [orjson.loads(b) for b in raw], repeat),
            "tuned Python (orjson + columns + polars)": best_time(lambda: tuned_python(raw), max(1, repeat // 2)),
            "idiomatic Python (json + row dicts + polars)": best_time(lambda: idiomatic_python(raw), max(1, repeat // 2)),
        }
        ours = timings["defilens.parse_tokens"]
        for name, seconds in timings.items():
            results.append(
                {"bodies": n, "MB": round(megabytes, 1), "implementation": name, "seconds": seconds,
                 "MB/s": megabytes / seconds, "vs defilens": seconds / ours}
            )
    return results


def markdown(results: List[dict]) -> str:
    lines = ["| bodies | MB | implementation | best of runs (ms) | MB/s | time vs defilens |", "|---:|---:|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['bodies']:,} | {r['MB']} | {r['implementation']} | {r['seconds'] * 1000:,.1f} | {r['MB/s']:,.0f} | {r['vs defilens']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(markdown(run(args.sizes, args.repeat)))


if __name__ == "__main__":
    main()
