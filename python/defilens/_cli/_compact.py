"""``defilens compact DIR``: the engine's optimize, a sort of closed days, checkpoint, vacuum."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any, Dict

from .._duration import format_duration, parse_every
from ..history import DEFAULT_MEMORY_BUDGET, DEFAULT_RETENTION, MIN_RETENTION, compact, format_bytes, megabytes
from ._arguments import duration, history_folder, plural, storage_option, storage_options


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "compact",
        help="compact a history's tables (optimize, sort closed days, checkpoint, vacuum)",
        description=(
            "Compact every table of a history with the engine: small files packed into large ones, each closed day "
            "sorted by token, a checkpoint, log entries and files older than --retention removed. Safe while "
            "collectors write, and safe to interrupt."
        ),
    )
    history_folder(parser)
    parser.add_argument(
        "--retention",
        type=duration("--retention"),
        help=f"how far time travel reaches back afterwards (default {format_duration(DEFAULT_RETENTION)}; at least "
        f"{format_duration(MIN_RETENTION)}): older files are vacuumed",
    )
    parser.add_argument(
        "--memory-budget",
        help=f"memory sorting a day may use before it spills to disk (default {format_bytes(DEFAULT_MEMORY_BUDGET)})",
    )
    parser.add_argument("--no-sort", action="store_true", help="pack files only; do not sort closed days by token")
    storage_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    given: Dict[str, Any] = {"retention": args.retention, "memory_budget": args.memory_budget}
    report = compact(
        args.folder,
        sort=not args.no_sort,
        storage_options=storage_options(args),
        **{name: value for name, value in given.items() if value is not None},
    )
    print(
        f"compacted: {report['files_before']:,} data files became {report['files_after']:,} "
        f"({report['files_removed']:,} packed into {report['files_added']:,}), "
        f"{plural(report['days_sorted'], 'closed day')} sorted by token, "
        f"{plural(report['files_vacuumed'], 'old file')} vacuumed"
    )
    if report["files_kept"]:
        retention = DEFAULT_RETENTION if args.retention is None else dt.timedelta(seconds=parse_every(args.retention))
        print(
            f"kept for time travel: {plural(report['files_kept'], 'replaced file')} "
            f"({megabytes(report['bytes_kept'])}) beside the {megabytes(report['bytes_live'])} the tables read now; "
            f"they stay until the retention of {format_duration(retention)} has passed and a later compaction vacuums "
            "them, so disk use grows until then"
        )
    return 0
