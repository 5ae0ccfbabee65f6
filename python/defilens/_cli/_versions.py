"""``defilens versions DIR [FRAME]``: the versions of a table that time travel reaches."""

from __future__ import annotations

import argparse

import polars as pl

from ..history import versions
from ._arguments import history_folder, storage_option, storage_options


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "versions",
        help="list the versions of a history's table that time travel (scan's as_of) can reach",
        description=(
            "List the versions of one table of a history that time travel can still reach: version, committed_at "
            "(what scan's as_of=moment goes by), operation, rows added, files added and removed, and each round's "
            "collector, round and round_start. Version 0 is the table's creation, without rows."
        ),
    )
    history_folder(parser)
    parser.add_argument(
        "frame", nargs="?", default="indicators", metavar="FRAME", help="the table, or errors (default indicators)"
    )
    storage_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    listed = versions(args.folder, args.frame, storage_options=storage_options(args))
    if listed.is_empty():
        print(f"{args.frame}: no versions (the table was never written)")
        return 0
    with pl.Config(
        tbl_rows=-1, tbl_cols=-1, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True, tbl_width_chars=250
    ):
        print(listed)
    return 0
