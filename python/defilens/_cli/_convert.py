"""``defilens convert DIR``: a history of earlier versions (Hive-Parquet) into Delta tables."""

from __future__ import annotations

import argparse

from ..history import convert
from ._arguments import history_folder, storage_option, storage_options
from ._traces import nothing_left_on_failure


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "convert",
        help="turn a history of earlier versions (Hive-partitioned Parquet) into Delta tables, in place",
        description=(
            "Turn a history written by an earlier defilens (DIR/<frame>/date=YYYY-MM-DD/*.parquet) into the Delta "
            "tables collect writes now, in place. Safe to rerun; an interrupted conversion resumes."
        ),
    )
    history_folder(parser)
    storage_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with nothing_left_on_failure(args.folder):
        report = convert(args.folder, storage_options=storage_options(args))
    if not report["tables"]:
        print(f"{args.folder} holds no table in the old layout: nothing to convert")
        return 0
    print(
        f"converted {report['tables']} tables, {report['rows']:,} rows, to Delta tables in place (rows compared "
        "with the old files, which are deleted)"
    )
    return 0
