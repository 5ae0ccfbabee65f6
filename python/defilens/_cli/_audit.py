"""``defilens audit DIR``: a history's coverage, gaps, failures, stale fetches and repaints."""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional, Union

from ..research import CANDLE_INTERVALS, audit
from ._arguments import EXIT_FAILURE, history_folder, storage_option, storage_options


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "audit",
        help="report a history's coverage, gaps, failures, stale fetches and repainted candles",
        description=(
            "Audit a collected history: candle closes observable at the rounds' cadence, seen, missed and "
            "unobservable per token and interval, the gaps, failed requests, stale fetches and repainted candles. "
            "The cadence is the one each run recorded (or inferred from the rounds of a history that recorded "
            "none); --expect replaces it. With --max-missing N, exit 1 when a token and interval missed more than "
            "N observable closes (for cron jobs and CI)."
        ),
    )
    history_folder(parser)
    parser.add_argument(
        "--max-missing",
        type=int,
        metavar="N",
        help="exit 1 when a token and interval missed more than N observable candle closes",
    )
    parser.add_argument(
        "--expect",
        action="append",
        metavar="RULE",
        help="what to expect instead of the recorded cadence: 'every' (every close), a cadence ('15m'), or "
        "INTERVAL=every|none|CADENCE for one interval ('5m=none'); repeatable",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor keep the per-day summaries under DIR/_audit (each audit then reads the whole history)",
    )
    storage_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.max_missing is not None and args.max_missing < 0:
        raise ValueError(f"--max-missing must be 0 or more, got {args.max_missing}")
    report = audit(
        args.folder, storage_options=storage_options(args), cache=not args.no_cache, expect=_expect(args.expect)
    )
    print(report)
    if args.max_missing is not None and report.max_missing() > args.max_missing:
        worst = report.worst(1).row(0, named=True)
        print(
            f"defilens: {worst['token']} {worst['interval']} misses {worst['missed']} observable candle closes, more "
            f"than --max-missing {args.max_missing}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return 0


def _expect(rules: Optional[List[str]]) -> "Union[str, Dict[str, str], None]":
    """``--expect`` as `audit`'s ``expect``: one rule for every interval, or some per interval (on
    top of one rule for the others, when one is given too)."""
    if not rules:
        return None
    whole = [rule for rule in rules if "=" not in rule]
    if len(whole) > 1:
        raise ValueError(f"--expect without INTERVAL= was given {len(whole)} times ({', '.join(whole)}): give it once")
    per_interval = dict(rule.split("=", 1) for rule in rules if "=" in rule)
    if not per_interval:
        return whole[0]
    if whole:
        return {**dict.fromkeys(CANDLE_INTERVALS, whole[0]), **per_interval}
    return per_interval
