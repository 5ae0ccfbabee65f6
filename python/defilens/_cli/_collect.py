"""``defilens collect TOKEN... --every 5m --out DIR``: poll on a schedule into a history."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
from typing import Callable, List

import polars as pl

from .._duration import format_duration, parse_every
from .._frames import Frames
from ..history import (
    COMPACT_EVERY,
    DEFAULT_MAX_FAILED_ROUNDS,
    InterruptedCommit,
    check_collector_id,
    collect,
    commits_in_flight,
    prepare,
)
from ..research import audit
from ._arguments import EXIT_INTERRUPTED, duration, plural, positive, storage_option, storage_options
from ._connection import client_of, connection_options


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "collect",
        help="poll tokens on a schedule into a history of Delta tables",
        description=(
            "Poll tokens every --every and commit each round to a history of Delta Lake tables, one a frame "
            "(DIR/<frame>/, partitioned by date), every round exactly once in every table; several collectors may "
            "write one DIR at once. Read it with defilens.scan(DIR, frame), polars' scan_delta, DuckDB's delta_scan, "
            "Spark or pandas. Needs the history extra: pip install deltalake obstore."
        ),
    )
    parser.add_argument("tokens", nargs="+", metavar="TOKEN")
    parser.add_argument(
        "--every",
        required=True,
        type=duration("--every"),
        help="interval between rounds, with its unit: 30s, 5m, 1h",
    )
    parser.add_argument(
        "--count",
        type=positive("--count", "leave it out to collect until Ctrl-C"),
        help="stop after N rounds (default: until Ctrl-C)",
    )
    parser.add_argument("--out", required=True, help="the history: a folder, or s3://bucket/prefix")
    parser.add_argument(
        "--markets",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also fetch each token's exchange markets (default; --no-markets to skip)",
    )
    parser.add_argument(
        "--max-failed-rounds",
        type=positive("--max-failed-rounds", f"leave it out for the default {DEFAULT_MAX_FAILED_ROUNDS}"),
        default=DEFAULT_MAX_FAILED_ROUNDS,
        help=f"stop after this many rounds in a row in which every request failed (default {DEFAULT_MAX_FAILED_ROUNDS})",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="also keep each round's response bodies in a raw table, for defilens.reparse and Sandbox.replay",
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help=f"run `defilens compact` every {format_duration(COMPACT_EVERY)} as it goes",
    )
    parser.add_argument(
        "--collector-id",
        metavar="ID",
        help="the collector's name in every table's log (letters, digits, '.', '_', '-'; default: a new random id "
        "a run); a stable id lets a restarted collector go on with its round numbers, and a second collector "
        "with a running one's id is refused",
    )
    parser.add_argument(
        "--universe",
        metavar="TEXT",
        help="the rule that chose these tokens (e.g. 'top 100 by market cap on 2026-03-01'), recorded verbatim with "
        "the collector's settings in every round (defilens.history.settings reads it back)",
    )
    parser.add_argument(
        "--audit", action="store_true", help="print the history's audit summary each time a day (UTC) closes"
    )
    storage_option(parser)
    connection_options(parser)
    parser.set_defaults(run=run, creates_out=True)


def run(args: argparse.Namespace) -> int:
    # Fail on a bad interval or root before starting a Sandbox or sending anything.
    parse_every(args.every)
    if args.collector_id is not None:
        check_collector_id(args.collector_id)
    options = storage_options(args)
    prepare(args.out, options)
    rounds_done = 0
    last_day: "list[object]" = [None]
    clock: "List[Callable[[], dt.datetime]]" = []  # the client's, once it is made

    def report(round_number: int, frames: Frames) -> None:
        nonlocal rounds_done
        rounds_done = round_number
        if args.audit:
            # Each time a day (UTC) closes on the client's clock, the summary of the history so far.
            today = clock[0]().date()
            if last_day[0] is not None and today != last_day[0]:
                print(f"-- audit as {last_day[0]} closed --\n{audit(args.out, storage_options=options)}", flush=True)
            last_day[0] = today
        print(f"round {round_number}: {plural(frames.snapshot.height, 'token')}", flush=True)
        errors = frames.errors
        if errors.height:
            # One line a round: an overnight log stays readable; the rows are in the history's log.
            kinds = ", ".join(f"{k} {n}" for k, n in errors.group_by("kind").agg(pl.len()).sort("kind").iter_rows())
            print(
                f"round {round_number}: {plural(errors.height, 'failed request')} ({kinds})",
                file=sys.stderr,
                flush=True,
            )

    with client_of(args) as client:
        clock.append(client.now)
        try:
            collect(
                client,
                args.tokens,
                args.every,
                count=args.count,
                out=args.out,
                markets=args.markets,
                on_round=report,
                progress=False,
                max_failed_rounds=args.max_failed_rounds,
                raw=args.raw,
                compact=args.compact,
                storage_options=options,
                collector_id=args.collector_id,
                universe=args.universe,
            )
        except InterruptedCommit:
            # Ctrl-C twice: the calls into delta-rs and obstore under way are left unfinished (as by a kill -9,
            # which the spool is made for); Python would wait for them at exit, and a thread inside Rust must not
            # run into the interpreter's finalization. More Ctrl-Cs change nothing now.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            print(
                f"stopped during a commit after {plural(rounds_done, 'round')} (the next collect finishes what the spool holds of "
                f"it); history in {args.out}",
                file=sys.stderr,
                flush=True,
            )
            if commits_in_flight():
                sys.stdout.flush()
                os._exit(EXIT_INTERRUPTED)  # Python would wait for delta-rs to finish them
            return EXIT_INTERRUPTED
        except KeyboardInterrupt:
            print(f"stopped after {plural(rounds_done, 'round')}; history in {args.out}", file=sys.stderr)
            return EXIT_INTERRUPTED
    print(
        f"committed {plural(rounds_done, 'round')} to {args.out} (read with defilens.scan({str(args.out)!r}, 'indicators'))"
    )
    return 0
