"""``defilens fetch TOKEN...``: fetch tokens, print a summary, write the frames."""

from __future__ import annotations

import argparse
import sys
import time

from .._storage import FORMATS
from ._arguments import EXIT_FAILURE, EXIT_PARTIAL
from ._connection import client_of, connection_options
from ._summary import failures, summary
from ._traces import check_out_folder


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "fetch",
        help="fetch tokens and write their frames",
        description="Fetch tokens, print a summary and write the frames.",
    )
    parser.add_argument("tokens", nargs="+", metavar="TOKEN", help="token ids, e.g. bitcoin ethereum")
    parser.add_argument(
        "--markets",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also fetch each token's exchange markets (default; --no-markets to skip)",
    )
    parser.add_argument("--out", help="folder to write the frames to (one file per frame)")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 3 when any request failed (default: exit 0 if at least one token was fetched; for cron jobs and CI)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=FORMATS[0],
        help="file format for --out (default %(default)s)",
    )
    connection_options(parser)
    parser.set_defaults(run=run, creates_out=True)


def run(args: argparse.Namespace) -> int:
    if args.out:
        check_out_folder(args.out)
    started = time.monotonic()
    with client_of(args) as client:
        # The failures are printed below, so no warning on top of them.
        frames = client._fetch(args.tokens, markets=args.markets, progress=False if args.no_progress else None)
    print(summary(frames, time.monotonic() - started))
    failed = failures(frames)
    if failed:
        print(failed, file=sys.stderr)
    if frames.snapshot.height == 0:
        # Exit 1, and as every failed command, no folder: empty frames would read as a fetch that worked.
        if args.out:
            print(f"no token was fetched: nothing written to {args.out}", file=sys.stderr)
        return EXIT_FAILURE
    if args.out:
        folder = frames.write(args.out, format=args.format)
        print(f"wrote {len(list(frames.items()))} frames to {folder}/ ({args.format})")
    if args.strict and frames.errors.height:
        return EXIT_PARTIAL
    return 0
