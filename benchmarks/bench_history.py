"""The history on Delta Lake at scale, by hand: commit time per round, the log's read time as
versions grow, compaction of a closed day and of a year's backlog, one token's query over the
year, object storage (moto, in its own process) beside the local disk.

    python benchmarks/bench_history.py commit             # 200 and 2,000 tokens, local and S3
    python benchmarks/bench_history.py log                # 3,000 versions, with and without checkpoints
    python benchmarks/bench_history.py day --tokens 2000  # 288 rounds of one day, then compaction
    python benchmarks/bench_history.py year --tokens 200  # a year's backlog of 5-minute rounds
    python benchmarks/bench_history.py rounds --rounds 3000 --tokens 3   # commit time as a collector's log grows
    python benchmarks/bench_history.py collected --tokens 30 --days 1 --folder F   # reads, audit, compaction of what collect leaves
    python benchmarks/bench_history.py all --json out.json

Rounds are real: the Sandbox's bodies for each token, parsed and committed exactly as `collect`
commits a round (spool, tables, one idempotent commit a table, spool dropped). Only the HTTP
exchange is left out, since this measures the history, not the network. The year's backlog is
written a day a commit with one file a round (what 288 separate commits leave behind, without
waiting for 105,120 commits), which is what compaction then works through.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import polars as pl

import defilens
from _common import emit, machine, table, target
from defilens._duration import parse_every
from defilens.history._collect import new_collector_id
from defilens.history._root import root_of
from defilens.history._rounds import Round, tables_of
from defilens.history._spool import Spool
from defilens.history._tables import TABLES, commit_round, to_disk

UTC = dt.timezone.utc
START = dt.datetime(2025, 1, 1, tzinfo=UTC)
STEP = dt.timedelta(minutes=5)
ROUNDS_A_DAY = 288


def token_ids(count: int) -> List[str]:
    return [f"coin-{i:04d}" for i in range(count)]


def round_bodies(ids: List[str], at: dt.datetime) -> pl.DataFrame:
    """Every body of one round (listing and markets), as `Frames.bodies` gives them."""
    now = at.isoformat()
    listing = [defilens.testing.listing_body(token, now=now).encode() for token in ids]
    markets = [defilens.testing.markets_body(token, now=now).encode() for token in ids]
    n = len(ids)
    return pl.DataFrame(
        {
            "token": ids + ids,
            "endpoint": ["listing"] * n + ["markets"] * n,
            "fetched_at": [at] * (2 * n),
            "status": [200] * (2 * n),
            "error": [None] * (2 * n),
            "body": listing + markets,
        },
        schema={
            "token": pl.String,
            "endpoint": pl.String,
            "fetched_at": pl.Datetime("ms", "UTC"),
            "status": pl.Int64,
            "error": pl.String,
            "body": pl.Binary,
        },
    )


def round_log(bodies: pl.DataFrame) -> pl.DataFrame:
    empty = defilens._core.empty_frames()["log"]
    rows = bodies.select(
        "token",
        "endpoint",
        pl.lit(True).alias("ok"),
        "status",
        pl.lit(None, pl.String).alias("kind"),
        pl.lit(None, pl.String).alias("message"),
        pl.lit(1, pl.Int64).alias("attempts"),
        pl.lit(20.0).alias("elapsed_ms"),
        pl.lit(None, pl.Int64).alias("total"),
        "fetched_at",
        pl.lit(False).alias("cached"),
    )
    return rows.cast(dict(empty.schema))  # type: ignore[arg-type]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --------------------------------------------------------------------------- object storage


@contextlib.contextmanager
def moto() -> Iterator[Dict[str, str]]:
    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        options = {
            "aws_endpoint_url": f"http://127.0.0.1:{port}",
            "aws_access_key_id": "a",
            "aws_secret_access_key": "b",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
        }
        boto3.client(
            "s3",
            endpoint_url=options["aws_endpoint_url"],
            aws_access_key_id="a",
            aws_secret_access_key="b",
            region_name="us-east-1",
        ).create_bucket(Bucket="bench")
        yield options
    finally:
        server.terminate()
        server.wait()


# --------------------------------------------------------------------------- commit


def bench_commit(tokens: List[int], rounds: int, s3: bool) -> List[Dict[str, Any]]:
    """The time to commit a fetched round to every table, as collect does, median of ``rounds``."""
    results = []
    stores = ["local"] + (["S3 (moto)"] if s3 else [])
    for count in tokens:
        ids = token_ids(count)
        bodies = round_bodies(ids, START)
        log = round_log(bodies)
        for store in stores:
            with contextlib.ExitStack() as stack:
                if store == "local":
                    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-history-"))
                    root = root_of(f"{folder}/h")
                else:
                    options = stack.enter_context(moto())
                    root = root_of(f"s3://bench/h-{uuid.uuid4().hex[:6]}", options)
                spool = Spool(root)
                app = new_collector_id()
                timings: Dict[str, List[float]] = {"spool": [], "tables": [], "commits": [], "round": []}
                for number in range(rounds):
                    started = START + number * STEP
                    round_ = Round(
                        app,
                        number,
                        started,
                        bodies.with_columns(pl.lit(started).cast(pl.Datetime("ms", "UTC")).alias("fetched_at")),
                        log,
                        True,
                    )
                    t0 = time.perf_counter()
                    path = spool.put(round_)
                    t1 = time.perf_counter()
                    tables, _ = tables_of(round_)
                    t2 = time.perf_counter()
                    commit_round(root, tables, app, number, round_.metadata)
                    spool.drop(path)
                    t3 = time.perf_counter()
                    for key, value in zip(timings, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                        timings[key].append(value)
                rows = sum(frame.height for frame in tables.values())
                median = {key: statistics.median(values) for key, values in timings.items()}
                results.append(
                    {
                        "tokens": count,
                        "store": store,
                        "rows": rows,
                        "rounds": rounds,
                        **median,
                        "p90": sorted(timings["round"])[int(0.9 * (rounds - 1))],
                        "load": load(),
                    }
                )
                print(f"commit {count} tokens {store}: {median['round'] * 1000:.0f} ms a round", flush=True)
    return results


# --------------------------------------------------------------------------- log


def bench_log(versions: int, step: int, tokens: int) -> List[Dict[str, Any]]:
    """Commit latency and a snapshot's load time as a table's log grows: with checkpoints every
    100 commits (what collect's tables have), with checkpoints and the log cleaned up as
    compaction does (a retention of a minute stands for the week of a real table), and without
    checkpoints (to a third of the versions: it slows down too much to go further)."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    ids = token_ids(tokens)
    bodies = round_bodies(ids, START)
    tables, _ = tables_of(Round("x", 0, START, bodies, round_log(bodies), False))
    data = to_disk(tables["indicators"])
    results = []
    variants = [
        ("checkpoints", {"delta.checkpointInterval": "100"}, versions, False),
        (
            "checkpoints, log cleaned",
            {"delta.checkpointInterval": "100", "delta.logRetentionDuration": "interval 1 minute"},
            versions,
            True,
        ),
        ("none", {"delta.checkpointInterval": "1000000"}, versions // 3, False),
    ]
    for name, configuration, last, clean in variants:
        with tempfile.TemporaryDirectory(prefix="bench-log-") as folder:
            uri = f"{folder}/indicators"
            write_deltalake(uri, data.head(0), partition_by=["date"], configuration=configuration)
            for version in range(1, last + 1):
                t0 = time.perf_counter()
                table = DeltaTable(uri)
                table.transaction_version("bench")
                write_deltalake(
                    table,
                    data,
                    mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction("bench", version)]),
                )
                commit = time.perf_counter() - t0
                if version % step == 0:
                    if clean:
                        DeltaTable(uri).cleanup_metadata()
                    t1 = time.perf_counter()
                    for _ in range(3):
                        DeltaTable(uri).transaction_version("bench")
                    load_time = (time.perf_counter() - t1) / 3
                    log_files = len(list(Path(uri, "_delta_log").glob("*.json")))
                    results.append(
                        {
                            "variant": name,
                            "version": version,
                            "commit": commit,
                            "load": load_time,
                            "log files": log_files,
                            "loadavg": load(),
                        }
                    )
                    print(
                        f"log ({name}) v{version}: commit {commit * 1000:.0f} ms, snapshot load {load_time * 1000:.0f} ms, "
                        f"{log_files} log files",
                        flush=True,
                    )
    return results


# --------------------------------------------------------------------------- rounds


def bench_rounds(rounds: int, tokens: int, every: str, folder: str, kept: bool = True) -> Dict[str, Any]:
    """``rounds`` rounds of a real `collect` on a Sandbox's still clock (``Client(clock=sandbox)``:
    collect moves it a tick a round, so days of rounds take as long as their requests), no manual
    compaction; each round's commit (every table, as `collect` commits it) timed. What grows is
    the tables' logs and files, not the rounds: a few tokens measure the commit's own cost.

    The log's retention (a week) is judged by delta-rs on the files' real ages, and these rounds
    come hundreds of times faster than their cadence: after the first 20 rounds each table's log
    retention is set to the real time a week of rounds takes here, so the log is cleaned at each
    checkpoint as a collector's is in real time; the files vacuum keeps for time travel likewise.
    ``kept=False`` loads every table from scratch
    every round (the collector before it kept its tables)."""
    from deltalake import DeltaTable

    from defilens.history import _collect, _upkeep
    from defilens.testing import Sandbox

    root = f"{folder}/rounds-{tokens}"
    timings: List[float] = []
    cpu: List[float] = []
    upkeep: List[float] = []  # the collector's own upkeep after each round (logs cleaned, closed days packed)
    original = _collect.commit
    original_upkeep = _upkeep.Upkeep.after_round
    cadence = parse_every(every)
    began = [0.0]

    def timed(*args: Any) -> None:
        if not kept:
            args = args[:4]
        if len(timings) == 0:
            began[0] = time.perf_counter()
        if len(timings) == 20:  # the real time a week of rounds takes here
            seconds = max(1, int((time.perf_counter() - began[0]) / 20 * 7 * 86400 / cadence))
            for name in TABLES:
                with contextlib.suppress(Exception):
                    DeltaTable(f"{root}/{name}").alter.set_table_properties(
                        {
                            "delta.logRetentionDuration": f"interval {seconds} seconds",
                            # what vacuum keeps for time travel, on the same compressed clock
                            "delta.deletedFileRetentionDuration": f"interval {seconds} seconds",
                        }
                    )
        # Wall time, and the CPU time of the whole process meanwhile (every thread, delta-rs's too):
        # on a machine shared with other work the wall time waits for the CPU, the CPU time less so.
        t0, c0 = time.perf_counter(), time.process_time()
        original(*args)
        timings.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)

    def timed_upkeep(self: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original_upkeep(self, *args)
        finally:
            upkeep.append(time.perf_counter() - t0)

    _collect.commit = timed  # type: ignore[assignment]
    _upkeep.Upkeep.after_round = timed_upkeep  # type: ignore[method-assign]
    started = time.perf_counter()
    try:
        with Sandbox(now="2026-01-01T00:00:00Z", seed=3) as sandbox:
            client = defilens.Client(base_url=sandbox.url, clock=sandbox)

            def progress(n: int, frames: Any) -> None:
                if n % 500 == 0:
                    recent = statistics.mean(timings[-100:])
                    print(f"rounds: {n} committed, last 100 {recent * 1000:.0f} ms a round", flush=True)

            client.collect(token_ids_known(tokens), every, count=rounds, out=root, on_round=progress)
    finally:
        _collect.commit = original  # type: ignore[assignment]
        _upkeep.Upkeep.after_round = original_upkeep  # type: ignore[method-assign]
    elapsed = time.perf_counter() - started
    first, last = statistics.mean(timings[:100]), statistics.mean(timings[-100:])
    files = sum(1 for _ in Path(root).rglob("*.parquet") if "_delta_log" not in str(_))
    log_files = sum(1 for _ in Path(root).rglob("_delta_log/*.json"))
    result = {
        "rounds": rounds,
        "tokens": tokens,
        "every": every,
        "tables kept": kept,
        "first 100": first,
        "last 100": last,
        "ratio": last / first,
        "first 100 cpu": statistics.mean(cpu[:100]),
        "last 100 cpu": statistics.mean(cpu[-100:]),
        "cpu ratio": statistics.mean(cpu[-100:]) / statistics.mean(cpu[:100]),
        # every 100 rounds' mean CPU time (ms): flat, or growing with the log and the files
        "cpu by 100": [round(statistics.mean(cpu[i : i + 100]) * 1000) for i in range(0, len(cpu), 100)],
        # upkeep: nothing most rounds; a day's packing once a day, a log cleanup every 100 rounds
        "upkeep per round": statistics.mean(upkeep),
        "upkeep max": max(upkeep),
        "upkeep by 100": [round(sum(upkeep[i : i + 100]), 1) for i in range(0, len(upkeep), 100)],
        "data files": files,
        "log entries": log_files,
        "elapsed": elapsed,
        "load": load(),
    }
    print(f"rounds: {result}", flush=True)
    return result


def token_ids_known(count: int) -> List[str]:
    """``count`` ids the Sandbox knows."""
    from defilens.testing import Sandbox

    return list(Sandbox.known_ids[:count])


# --------------------------------------------------------------------------- a day, a year


def _child_peak(code: str) -> "tuple[float, float]":
    """Runs ``code`` in a fresh process; returns (seconds, peak RSS in MiB)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    elapsed = time.perf_counter() - started
    return elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def query_one_token(root: str, token: str) -> float:
    def run() -> int:
        return (
            defilens.scan(root, "indicators")
            .filter(pl.col("token") == token, pl.col("indicator") == "rsi14", pl.col("interval") == "1h")
            .select("fetched_at", "value")
            .collect()
            .height
        )

    run()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        rows = run()
        best = min(best, time.perf_counter() - t0)
    assert rows > 0
    return best


def bench_day(tokens: int, rounds: int, folder: str) -> Dict[str, Any]:
    """``rounds`` rounds of one day committed as collect commits them, then the day compacted
    (optimize) and sorted (z-order within 1 GB), each in a fresh process for its peak memory."""
    root = f"{folder}/day-{tokens}"
    ids = token_ids(tokens)
    template = round_bodies(ids, START)
    log = round_log(template)
    spool = Spool(root_of(root))
    app = new_collector_id()
    t0 = time.perf_counter()
    for number in range(rounds):
        started = START + number * STEP
        round_ = Round(
            app,
            number,
            started,
            template.with_columns(pl.lit(started).cast(pl.Datetime("ms", "UTC")).alias("fetched_at")),
            log,
            False,
        )
        path = spool.put(round_)
        tables, _ = tables_of(round_)
        commit_round(root_of(root), tables, app, number, round_.metadata)
        spool.drop(path)
    writing = time.perf_counter() - t0
    rows = defilens.scan(root, "indicators").select(pl.len()).collect().item()
    before = query_one_token(root, ids[0])
    files = len(list(Path(root, "indicators").rglob("*.parquet")))
    optimize, optimize_rss = _child_peak(
        "import defilens, datetime as dt\n"
        f"defilens.compact({root!r}, sort=False, now=dt.datetime(2025, 1, 1, 12, tzinfo=dt.timezone.utc))\n"
    )
    compacted = query_one_token(root, ids[0])
    zorder, zorder_rss = _child_peak(
        "import defilens, datetime as dt\n"
        f"defilens.compact({root!r}, memory_budget='1GB', now=dt.datetime(2025, 1, 3, tzinfo=dt.timezone.utc))\n"
    )
    sorted_query = query_one_token(root, ids[0])
    result = {
        "tokens": tokens,
        "rounds": rounds,
        "indicator rows": rows,
        "files before": files,
        "writing": writing,
        "optimize": optimize,
        "optimize rss": optimize_rss,
        "zorder": zorder,
        "zorder rss": zorder_rss,
        "query before": before,
        "query compacted": compacted,
        "query sorted": sorted_query,
        "load": load(),
    }
    print(f"day {tokens} tokens: {result}", flush=True)
    return result


def bench_year(tokens: int, days: int, folder: str) -> Dict[str, Any]:
    """A year's backlog of the indicators table: ``days`` days of 5-minute rounds, one file a
    round, then compacted (all partitions at once), then one token's RSI(14) 1h over the year."""
    from deltalake import write_deltalake

    root = f"{folder}/year-{tokens}"
    ids = token_ids(tokens)
    bodies = round_bodies(ids, START)
    tables, _ = tables_of(Round("x", 0, START, bodies, round_log(bodies), False))
    one_round = to_disk(tables["indicators"]).drop("fetched_at", "date")
    per_round = one_round.height
    uri = f"{root}/indicators"
    t0 = time.perf_counter()
    file_size = max(4096, int(one_round.estimated_size() * 0.25))
    for day in range(days):
        date = (START + dt.timedelta(days=day)).date()
        stamps = pl.datetime_range(
            START + dt.timedelta(days=day),
            START + dt.timedelta(days=day + 1) - STEP,
            STEP,
            time_unit="ms",
            time_zone="UTC",
            eager=True,
        )
        frame = (
            pl.DataFrame({"fetched_at": stamps})
            .join(one_round, how="cross")
            .with_columns(
                pl.lit(date).alias("date"),
                (pl.col("value") * (1 + 0.001 * pl.col("fetched_at").dt.minute())).alias("value"),
            )
            .select(list(one_round.columns) + ["fetched_at", "date"])
        )
        write_deltalake(uri, frame, mode="append", partition_by=["date"], target_file_size=file_size)
        if day % 30 == 0:
            print(f"year: day {day} written ({time.perf_counter() - t0:.0f} s)", flush=True)
    writing = time.perf_counter() - t0
    files = len(list(Path(uri).rglob("*.parquet")))
    before = query_one_token(root, ids[0])
    backlog, backlog_rss = _child_peak(
        "import defilens, datetime as dt\n"
        f"defilens.compact({root!r}, sort=False, retention='1h', now=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc))\n"
    )
    after_files = len(defilens.history._tables.load(root_of(root), "indicators").file_uris())  # type: ignore[union-attr]
    compacted = query_one_token(root, ids[0])
    result = {
        "tokens": tokens,
        "days": days,
        "rows": per_round * ROUNDS_A_DAY * days,
        "files before": files,
        "files after": after_files,
        "writing": writing,
        "compaction": backlog,
        "compaction rss": backlog_rss,
        "query before": before,
        "query compacted": compacted,
        "load": load(),
    }
    print(f"year {tokens} tokens: {result}", flush=True)
    return result


def research_history(root: str, tokens: int, step_minutes: int) -> "Callable[[int], None]":
    """A writer of a history's days for the research benchmarks: rounds every ``step_minutes``
    for ``tokens`` tokens, each a day a commit to ``indicators``, ``ta_updated`` and ``snapshot``.
    Values move from round to round (and so from candle to candle), as a service's do."""
    from deltalake import write_deltalake

    ids = token_ids(tokens)
    bodies = round_bodies(ids, START)
    tables, _ = tables_of(Round("x", 0, START, bodies, round_log(bodies), False))
    indicators = to_disk(tables["indicators"]).drop("fetched_at", "date")
    ta_updated = to_disk(tables["ta_updated"]).drop("fetched_at", "date", "updated_at")
    snapshot = to_disk(tables["snapshot"]).drop("fetched_at", "date")
    step = dt.timedelta(minutes=step_minutes)

    def write_day(day: int) -> None:
        begin = START + dt.timedelta(days=day)
        stamps = pl.DataFrame(
            {
                "fetched_at": pl.datetime_range(
                    begin, begin + dt.timedelta(days=1) - step, step, time_unit="ms", time_zone="UTC", eager=True
                )
            }
        ).with_columns(pl.lit(begin.date()).alias("date"))
        moved = 1 + 0.001 * pl.col("fetched_at").dt.minute()
        write_deltalake(
            f"{root}/indicators",
            stamps.join(indicators, how="cross").with_columns(pl.col("value") * moved),
            mode="append",
            partition_by=["date"],
        )
        write_deltalake(
            f"{root}/snapshot",
            stamps.join(snapshot, how="cross").with_columns(pl.col("current_price") * moved),
            mode="append",
            partition_by=["date"],
            schema_mode="merge",
        )
        # Each interval's last close: hourly polls see every 1h candle once, a 4h one four times.
        closes = stamps.join(ta_updated, how="cross").with_columns(
            pl.coalesce(
                pl.when(pl.col("interval").cast(pl.String) == name).then(pl.col("fetched_at").dt.truncate(every))
                for name, every in (
                    ("5m", "5m"),
                    ("15m", "15m"),
                    ("1h", "1h"),
                    ("4h", "4h"),
                    ("24h", "1d"),
                    ("1w", "1w"),
                )
            ).alias("updated_at")
        )
        write_deltalake(f"{root}/ta_updated", closes, mode="append", partition_by=["date"])

    return write_day


def bench_research(tokens: int, days: int, folder: str, step_minutes: int = 60) -> Dict[str, Any]:
    """panel and audit over a year: ``days`` days of rounds every ``step_minutes`` for ``tokens``
    tokens (indicators and ta_updated, a day a commit), then one token's panel, the whole
    panel counted, and the audit, each timed."""
    root = f"{folder}/research-{tokens}"
    ids = token_ids(tokens)
    write_day = research_history(root, tokens, step_minutes)

    t0 = time.perf_counter()
    for day in range(days):
        write_day(day)
    writing = time.perf_counter() - t0
    rows = defilens.scan(root, "indicators").select(pl.len()).collect().item()
    t1 = time.perf_counter()
    one = defilens.panel(root).filter(pl.col("token") == ids[0], pl.col("indicator") == "rsi14").collect()
    one_token = time.perf_counter() - t1
    # The first audit summarizes every day and keeps the summaries; the next ones read them.
    t3 = time.perf_counter()
    report = defilens.audit(root, progress=False)
    audit_first = time.perf_counter() - t3
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t4 = time.perf_counter()
    again = defilens.audit(root, progress=False)
    audit_again = time.perf_counter() - t4
    assert again.coverage.equals(report.coverage) and again.revisions.equals(report.revisions)
    write_day(days)  # the next day's rounds, as a collector adds them
    t5 = time.perf_counter()
    defilens.audit(root, progress=False)
    audit_next_day = time.perf_counter() - t5
    print(
        f"research: written in {writing:.0f} s, one token's panel {one_token:.2f} s, audit {audit_first:.1f} s "
        f"(peak {peak:,.0f} MiB), again {audit_again:.2f} s, after one more day {audit_next_day:.2f} s",
        flush=True,
    )
    t2 = time.perf_counter()
    # Counting every candle of a year is a whole-table aggregate: the streaming engine's job.
    whole = defilens.panel(root).select(pl.len()).collect(engine="streaming").item()
    whole_panel = time.perf_counter() - t2
    result = {
        "tokens": tokens,
        "days": days,
        "step minutes": step_minutes,
        "indicator rows": rows,
        "writing": writing,
        "panel one token": one_token,
        "panel rows (one token, rsi14)": one.height,
        "panel whole": whole_panel,
        "panel rows": whole,
        "audit": audit_first,
        "audit again": audit_again,
        "audit next day": audit_next_day,
        "audit pairs": report.coverage.height,
        "peak rss MiB": peak,
        "load": load(),
    }
    print(f"research {tokens} tokens: {result}", flush=True)
    return result


_ASOF_CHILD = """
import datetime as dt, json, sys, time
import polars as pl
import defilens

def peak_mib():
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024

root, kind, first, hours, step = sys.argv[1], sys.argv[2], dt.datetime.fromisoformat(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
moments = [first + dt.timedelta(hours=h) for h in range(0, hours, step)]
scopes = {
    "unscoped, then filtered": dict(),
    "one indicator": dict(intervals="1h", indicators="rsi14"),
    "snapshot prices": dict(frame="snapshot", columns="current_price"),
    "cross-section": dict(intervals="1h"),
}
# ru_maxrss would count the parent's pages before exec; the high-water mark is reset instead.
open("/proc/self/clear_refs", "w").write("5")
baseline = peak_mib()
started = time.perf_counter()
answer = defilens.asof(root, moments, **scopes[kind])
if kind.startswith("unscoped"):
    answer = answer.filter(pl.col("interval") == "1h", pl.col("indicator") == "rsi14")
rows = answer.height
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "rows": rows, "moments": len(moments), "peak_mib": peak_mib(), "baseline_mib": baseline}))
"""


def _asof_child(root: str, kind: str, first: dt.datetime, hours: int, step: int = 1) -> Dict[str, Any]:
    """One as-of read in a fresh process: its time (the call alone) and the process's peak RSS."""
    import json

    out = subprocess.run(
        [sys.executable, "-c", _ASOF_CHILD, root, kind, first.isoformat(), str(hours), str(step)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_asof(tokens: int, days: int, folder: str, step_minutes: int) -> Dict[str, Any]:
    """Scoped as-of reads on a history of ``days`` days of rounds every ``step_minutes`` for
    ``tokens`` tokens: one indicator at one interval and the snapshot's price at an hourly grid of
    decision times over the whole history, and a whole cross-section (every token, every
    indicator of 1h) at the last moment; each in a fresh process, timed and its peak RSS read."""
    root = f"{folder}/asof-{tokens}-{days}-{step_minutes}"
    write_day = research_history(root, tokens, step_minutes)
    t0 = time.perf_counter()
    for day in range(days):
        write_day(day)
        if day % 30 == 29:
            print(f"asof: day {day + 1} written ({time.perf_counter() - t0:.0f} s)", flush=True)
    writing = time.perf_counter() - t0
    rows = defilens.scan(root, "indicators").select(pl.len()).collect().item()
    first = START + dt.timedelta(hours=1)
    hours = days * 24 - 1
    result: Dict[str, Any] = {
        "tokens": tokens,
        "days": days,
        "step minutes": step_minutes,
        "indicator rows": rows,
        "writing": writing,
    }
    kinds = [("one indicator", (hours, 1))]
    if days <= 30:
        kinds.append(("unscoped, then filtered", (hours, 1)))  # what an as-of of every key costs
    for kind, grid in (
        *kinds,
        ("snapshot prices", (hours, 1)),
        ("cross-section", (1, 1)),
    ):
        start = first if kind != "cross-section" else START + dt.timedelta(days=days) - dt.timedelta(minutes=1)
        measured = _asof_child(root, kind, start, *grid)
        result[kind] = measured
        print(f"asof {kind}: {measured}", flush=True)
    result["load"] = load()
    print(f"asof {tokens} tokens: {result}", flush=True)
    return result


# --------------------------------------------------------------------------- a collected history


def collected_history(root: str, tokens: int, days: int, every: str) -> float:
    """A history as `collect` leaves it: rounds every ``every`` for ``days`` days of the Sandbox's
    still clock, raw bodies kept, closed days packed by the collector itself (unless ``root``
    holds one already). Returns the seconds it took (0 when reused)."""
    from defilens.testing import Sandbox

    if Path(root, "indicators").exists():
        return 0.0
    rounds = int(days * 86400 / parse_every(every))
    t0 = time.perf_counter()
    with Sandbox(now="2026-01-05T00:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url, clock=sandbox)
        client.collect(token_ids(tokens), every, count=rounds, out=root, raw=True, progress=False)
    return time.perf_counter() - t0


_READS_CHILD = """
import datetime as dt, json, statistics, sys, time
import polars as pl
import defilens

root, repeats = sys.argv[1], int(sys.argv[2])
if sys.argv[3] == "uncached":  # every read loads its tables from scratch, as before they were kept
    from defilens.history import _scan
    _scan.kept_for_reading = lambda root, name, load: load()
first = defilens.scan(root, "snapshot").select(pl.col("fetched_at").min()).collect().item()
last = defilens.scan(root, "snapshot").select(pl.col("fetched_at").max()).collect().item()
moments = [first + dt.timedelta(hours=h) for h in range(1, int((last - first).total_seconds() // 3600) + 1)]
times, rows = [], 0
for _ in range(repeats + 1):
    started = time.perf_counter()
    rows = defilens.asof(root, moments, intervals="1h", indicators="rsi14").height
    times.append(time.perf_counter() - started)
print(json.dumps({"moments": len(moments), "rows": rows, "first": times[0], "best": min(times[1:]),
                  "median": statistics.median(times[1:])}))
"""

_AUDIT_CHILD = """
import json, sys, time
import defilens

def peak_mib():
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024

if sys.argv[2] == "one pass":  # every day in one pass, as before the audit read a day a pass
    from defilens.research import _day_summaries
    _day_summaries.BATCH_ROWS = 10_000_000
open("/proc/self/clear_refs", "w").write("5")  # the high-water mark from here (after imports)
baseline = peak_mib()
started = time.perf_counter()
report = defilens.audit(sys.argv[1], cache=False, progress=False)
print(json.dumps({"seconds": time.perf_counter() - started, "peak_mib": peak_mib(), "baseline_mib": baseline,
                  "pairs": report.coverage.height}))
"""

_COMPACT_CHILD = """
import datetime as dt, json, sys, time
import defilens
from defilens.history import _compact

if sys.argv[2] == "every-day":  # the sort of every closed day (before the sort paid its way)
    _compact.SORT_FROM_ROWS = 0
started = time.perf_counter()
report = defilens.compact(sys.argv[1], sort=sys.argv[2] != "no-sort", now=dt.datetime(2027, 1, 1, tzinfo=dt.timezone.utc))
print(json.dumps({"seconds": time.perf_counter() - started, "days_sorted": report["days_sorted"]}))
"""


def _child_json(code: str, *args: str) -> Dict[str, Any]:
    import json

    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def bench_collected(tokens: int, days: int, folder: str, every: str, repeats: int = 10) -> Dict[str, Any]:
    """On a history as `collect` leaves it (`collected_history`): a scoped as-of read (rsi14 of
    1h at every hour) timed in one process, first call and repeated; the audit without its kept
    summaries, with its peak RSS; compaction without sorting, with the sort where it pays, and
    with every closed day sorted (each on its own copy), and one token's query after each."""
    root = f"{folder}/collected-{tokens}-{days}-{every}"
    writing = collected_history(root, tokens, days, every)
    size = sum(path.stat().st_size for path in Path(root).rglob("*") if path.is_file())
    result: Dict[str, Any] = {"tokens": tokens, "days": days, "every": every, "writing": writing, "bytes": size}
    result["load before"] = load()
    for kept in ("cached", "uncached"):
        key = "asof" if kept == "cached" else "asof uncached"
        result[key] = _child_json(_READS_CHILD, root, str(repeats), kept)
        print(f"collected {key}: {result[key]} (load {load()})", flush=True)
    for passes in ("a day a pass", "one pass"):
        key = "audit" if passes == "a day a pass" else "audit one pass"
        result[key] = _child_json(_AUDIT_CHILD, root, passes)
        print(f"collected {key}: {result[key]} (load {load()})", flush=True)
    token = token_ids(tokens)[0]
    result["query before"] = query_one_token(root, token)
    for how in ("no-sort", "sort", "every-day"):
        copy = f"{folder}/compacted-{how}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(root, copy)
        result[f"compact {how}"] = _child_json(_COMPACT_CHILD, copy, how)
        result[f"query {how}"] = query_one_token(copy, token)
        print(f"collected compact {how}: {result[f'compact {how}']}, query {result[f'query {how}']:.3f} s", flush=True)
        shutil.rmtree(copy, ignore_errors=True)
    result["load"] = load()
    print(f"collected {tokens} tokens {days} days: {result}", flush=True)
    return result


# --------------------------------------------------------------------------- report


def report(results: Dict[str, Any]) -> Dict[str, Any]:
    sections = [f"Machine: {machine()}. Load before: {results['load_before']}."]
    targets = []
    if "commit" in results:
        rows = [
            [
                str(r["tokens"]),
                r["store"],
                f"{r['rows']:,}",
                f"{r['spool'] * 1000:.0f}",
                f"{r['tables'] * 1000:.0f}",
                f"{r['commits'] * 1000:.0f}",
                f"{r['round'] * 1000:.0f}",
                f"{r['p90'] * 1000:.0f}",
                r["load"],
            ]
            for r in results["commit"]
        ]
        sections.append(
            "Commit of one round to every table (ms, median of the rounds):\n\n"
            + table(
                ["tokens", "store", "rows", "spool", "tables", "commits", "round", "p90", "load"], rows, "rlrrrrrrl"
            )
        )
        local = [r for r in results["commit"] if r["tokens"] == 2000 and r["store"] == "local"]
        if local:
            targets.append(
                target(
                    "2,000-token round committed to every table",
                    f"{local[0]['round'] * 1000:.0f} ms",
                    "< 1 s",
                    local[0]["round"] < 1.0,
                )
            )
    if "rounds" in results:
        r = results["rounds"]
        sections.append(
            f"{r['rounds']:,} rounds of a collect of {r['tokens']} tokens every {r['every']} on a still simulated clock, no "
            f"manual compaction (the collector packs each closed day itself), tables "
            f"{'kept between rounds' if r['tables kept'] else 'loaded every round'}: a round's commit "
            f"{r['first 100'] * 1000:.0f} ms over the first 100 rounds, {r['last 100'] * 1000:.0f} ms over the last 100 "
            f"({r['ratio']:.2f}x wall time); CPU time {r['first 100 cpu'] * 1000:.0f} ms and {r['last 100 cpu'] * 1000:.0f} ms "
            f"({r['cpu ratio']:.2f}x; every 100 rounds: {', '.join(map(str, r['cpu by 100']))} ms). The collector's upkeep "
            f"after a round (a day's packing, a log cleanup every 100 rounds, else nothing) {r['upkeep per round'] * 1000:.0f} "
            f"ms a round on average, at most {r['upkeep max']:.2f} s (every 100 rounds, s: "
            f"{', '.join(map(str, r['upkeep by 100']))}). {r['data files']:,} data files on disk, "
            f"{r['log entries']:,} log entries kept. Load {r['load']}."
        )
        targets.append(
            target(
                f"commit CPU time over {r['rounds']:,} rounds, last 100 against first 100 (wall time: a shared machine's)",
                f"{r['cpu ratio']:.2f}x",
                "within 20%",
                r["cpu ratio"] <= 1.2,
            )
        )
    if "log" in results:
        rows = [
            [
                r["variant"],
                f"{r['version']:,}",
                f"{r['commit'] * 1000:.0f}",
                f"{r['load'] * 1000:.0f}",
                str(r["log files"]),
                r["loadavg"],
            ]
            for r in results["log"]
        ]
        sections.append(
            "The log as versions grow (ms):\n\n"
            + table(["checkpoints", "version", "commit", "snapshot load", "log files", "load"], rows, "lrrrrl")
        )
    if "day" in results:
        r = results["day"]
        sections.append(
            f"A closed day, {r['tokens']:,} tokens, {r['rounds']} rounds ({r['indicator rows']:,} indicator rows, {r['files before']} files a "
            f"table): written in {r['writing']:.0f} s; optimize {r['optimize']:.1f} s (peak {r['optimize rss']:.0f} MiB), z-order by token "
            f"{r['zorder']:.1f} s (peak {r['zorder rss']:.0f} MiB, budget 1 GB); one token's RSI(14) 1h over the day {r['query before'] * 1000:.0f} "
            f"ms as collected, {r['query compacted'] * 1000:.0f} ms compacted, {r['query sorted'] * 1000:.0f} ms sorted. Load {r['load']}."
        )
    if "research" in results:
        r = results["research"]
        sections.append(
            f"panel and audit over {r['days']} days of rounds every {r['step minutes']} minutes for {r['tokens']} tokens "
            f"({r['indicator rows']:,} indicator rows): one token's RSI(14) panel {r['panel one token']:.2f} s "
            f"({r['panel rows (one token, rsi14)']:,} rows), the whole panel counted (streaming engine) {r['panel whole']:.1f} s "
            f"({r['panel rows']:,} rows), the first audit {r['audit']:.1f} s ({r['audit pairs']} token-interval pairs; summarizing every day; "
            f"peak RSS of the process until then {r['peak rss MiB']:,.0f} MiB), the audit again {r['audit again']:.2f} s (from the kept "
            f"summaries), after one more day {r['audit next day']:.2f} s. Load {r['load']}."
        )
        targets.append(
            target(
                f"audit of {r['days']} days, every {r['step minutes']} minutes, {r['tokens']} tokens, summaries kept",
                f"{r['audit again']:.2f} s, {r['audit next day']:.2f} s with a new day",
                "seconds (< 10 s)",
                r["audit next day"] < 10,
            )
        )
    if "year" in results:
        r = results["year"]
        sections.append(
            f"A year's backlog of `indicators`, {r['tokens']:,} tokens, {r['days']} days of 5-minute rounds ({r['rows']:,} rows, "
            f"{r['files before']:,} files): compacted in {r['compaction']:.0f} s (peak {r['compaction rss']:.0f} MiB) to {r['files after']:,} "
            f"files; one token's RSI(14) 1h over the year {r['query before']:.2f} s as collected, {r['query compacted']:.3f} s compacted. Load {r['load']}."
        )
        if r["days"] >= 365:
            targets.append(
                target(
                    "a year's backlog compacted", f"{r['compaction'] / 60:.1f} min", "< 10 min", r["compaction"] < 600
                )
            )
            targets.append(
                target(
                    "one token's rsi14 1h over the year, compacted",
                    f"{r['query compacted']:.3f} s",
                    "< 1 s",
                    r["query compacted"] < 1,
                )
            )
    if "asof" in results:
        r = results["asof"]
        kinds = [k for k in ("one indicator", "snapshot prices", "cross-section", "unscoped, then filtered") if k in r]
        rows = [
            [k, f"{r[k]['moments']:,}", f"{r[k]['rows']:,}", f"{r[k]['seconds']:.2f}", f"{r[k]['peak_mib']:,.0f}"]
            for k in kinds
        ]
        sections.append(
            f"As-of reads over {r['days']} days of rounds every {r['step minutes']} minutes for {r['tokens']} tokens "
            f"({r['indicator rows']:,} indicator rows, one file a day a table), each in a fresh process (seconds: the "
            f"call alone; peak RSS: the process's high-water mark, reset after import, about 70 MiB). Load {r['load']}.\n\n"
            + table(["read", "decision times", "rows", "seconds", "peak RSS MiB"], rows, "lrrrr")
        )
        goal = (0.5, 300) if r["days"] <= 30 else (30, 2048)
        for k in ("one indicator", "snapshot prices", "cross-section"):
            if k in r:
                targets.append(
                    target(
                        f"asof {k}, {r['days']} days, {r['tokens']} tokens",
                        f"{r[k]['seconds']:.2f} s, {r[k]['peak_mib']:,.0f} MiB",
                        f"< {goal[0]} s and < {goal[1]} MiB",
                        r[k]["seconds"] < goal[0] and r[k]["peak_mib"] < goal[1],
                    )
                )
    if "collected" in results:
        r = results["collected"]
        a, audit = r["asof"], r["audit"]
        sections.append(
            f"A history as collect leaves it: {r['tokens']} tokens, {r['days']} days of rounds every {r['every']} "
            f"({r['bytes'] / 1e6:,.0f} MB). Scoped asof (rsi14 1h, {a['moments']} hourly moments): first call "
            f"{a['first']:.3f} s, then best {a['best']:.3f} s, median {a['median']:.3f} s (tables loaded for every "
            f"read, as before: best {r['asof uncached']['best']:.3f} s, median {r['asof uncached']['median']:.3f} s)."
            f" audit(cache=False): {audit['seconds']:.1f} s, peak {audit['peak_mib']:,.0f} MiB (every day in one pass,"
            f" as before: {r['audit one pass']['seconds']:.1f} s, {r['audit one pass']['peak_mib']:,.0f} MiB)."
            " compact: no sort "
            f"{r['compact no-sort']['seconds']:.1f} s, sort where it pays {r['compact sort']['seconds']:.1f} s "
            f"({r['compact sort']['days_sorted']} days sorted), every closed day sorted "
            f"{r['compact every-day']['seconds']:.1f} s; one token's query before {r['query before']:.3f} s, then "
            f"{r['query no-sort']:.3f} / {r['query sort']:.3f} / {r['query every-day']:.3f} s. Load {r['load']}."
        )
        goal = 0.1 if r["days"] <= 1 else 0.3
        targets.append(
            target(
                f"scoped asof, {r['days']} days, {r['tokens']} tokens, repeated",
                f"{a['best']:.3f} s (median {a['median']:.3f})",
                f"< {goal} s idle",
                a["best"] < goal,
            )
        )
        targets.append(
            target("audit(cache=False) peak", f"{audit['peak_mib']:,.0f} MiB", "< 500 MB", audit["peak_mib"] < 477)
        )
        plain = r["compact no-sort"]["seconds"]
        targets.append(
            target(
                "compact with sort vs without",
                f"{r['compact sort']['seconds'] / plain:.2f}x",
                "<= 2x",
                r["compact sort"]["seconds"] <= 2 * plain,
            )
        )
    return {"title": "History on Delta Lake", "body": "\n\n".join(sections), "targets": targets, "results": results}


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "part", choices=["commit", "rounds", "log", "day", "year", "research", "asof", "collected", "all"]
    )
    parser.add_argument(
        "--tokens", type=int, default=None, help="tokens for day/year (default 2,000 for day, 200 for year)"
    )
    parser.add_argument("--rounds", type=int, default=20, help="rounds timed by commit (default 20)")
    parser.add_argument("--versions", type=int, default=3000)
    parser.add_argument("--every", default="15m", help="rounds: the simulated cadence (default 15m)")
    parser.add_argument("--reload", action="store_true", help="rounds: load every table every round (the old way)")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--step-minutes", type=int, default=60, help="research: minutes between rounds (default 60)")
    parser.add_argument(
        "--folder", default=None, help="where day/year histories go (default a temporary folder, removed)"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    results: Dict[str, Any] = {"load_before": load()}
    folder = args.folder or tempfile.mkdtemp(prefix="bench-history-")
    try:
        if args.part in ("commit", "all"):
            results["commit"] = bench_commit([200, 2000], args.rounds, s3=not args.no_s3)
        if args.part == "rounds":  # not in "all": 3,000 rounds take an hour on a busy machine
            results["rounds"] = bench_rounds(args.rounds, args.tokens or 3, args.every, folder, not args.reload)
        if args.part in ("log", "all"):
            results["log"] = bench_log(args.versions, max(1, args.versions // 6), 200)
        if args.part in ("day", "all"):
            results["day"] = bench_day(args.tokens or 2000, ROUNDS_A_DAY, folder)
        if args.part in ("year", "all"):
            results["year"] = bench_year(args.tokens or 200, args.days, folder)
        if args.part in ("research", "all"):
            results["research"] = bench_research(args.tokens or 200, args.days, folder, args.step_minutes)
        if args.part in ("asof", "all"):
            results["asof"] = bench_asof(args.tokens or 150, args.days, folder, args.step_minutes)
        if args.part == "collected":  # not in "all": collecting ten days of 150 tokens takes half an hour
            results["collected"] = bench_collected(args.tokens or 30, args.days, folder, args.every)
    finally:
        if args.folder is None:
            shutil.rmtree(folder, ignore_errors=True)
    emit(report(results), args.json)


if __name__ == "__main__":
    os.environ.setdefault("POLARS_MAX_THREADS", str(os.cpu_count() or 2))
    main()
