"""``defilens sandbox``: serve the fake service until stopped."""

from __future__ import annotations

import argparse
import sys

from .. import _waiting
from ..testing import Sandbox
from ._options import SANDBOX_OPTIONS, add_options, keywords


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "sandbox",
        help="serve the fake service until stopped",
        description="Serve the local fake of the DeFi Lens service until Ctrl-C. Its market follows the wall clock "
        "unless --now or --speed is given.",
    )
    add_options(parser, SANDBOX_OPTIONS)
    parser.add_argument(
        "--replay",
        metavar="DIR",
        help="serve the responses recorded in DIR (a history collected with --raw, or frames written with raw=True) "
        "instead of the market",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Only what was given: every default is the Sandbox's own, so `defilens sandbox` serves the
    # market `Sandbox()` does.
    settings = keywords(args, SANDBOX_OPTIONS)
    sandbox = Sandbox(**settings) if args.replay is None else Sandbox.replay(args.replay, **settings)
    with sandbox:
        try:
            # Inside the try: a Ctrl-C right after the line is printed still stops cleanly.
            simulated = args.now is not None or args.speed is not None or args.replay is not None
            clock = f"market time {sandbox.now:%Y-%m-%d %H:%M:%S} UTC" if simulated else ""
            if args.replay is not None:
                clock = f"replaying {args.replay}, {clock}"
            if clock:
                clock += f" running {args.speed:g}x; " if args.speed else " standing still; "
            print(f"serving the DeFi Lens sandbox at {sandbox.url} ({clock}Ctrl-C to stop)", flush=True)
            if simulated and args.replay is None:
                print(
                    f"a history on its clock: defilens collect TOKEN... --every 5m --out DIR --base-url {sandbox.url} "
                    "--clock sandbox",
                    flush=True,
                )
            while True:
                _waiting.sleep(3600)
        except KeyboardInterrupt:
            print(f"stopped after {sandbox.requests} requests", file=sys.stderr)
    return 0
