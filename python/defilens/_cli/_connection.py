"""Where `fetch` and `collect` get their data: a Client made from the flags (`CLIENT_OPTIONS`),
against the service, a running `defilens sandbox` (whose clock it may follow), or a built-in
Sandbox (``--sandbox``, its clock set by ``--now`` and ``--speed``)."""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterator

from .._client import Client
from ..testing import Sandbox
from ._options import CLIENT_OPTIONS, CLOCK, CLOCK_OPTIONS, add_options, keywords


def connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="run against a built-in local fake of the service (no key, no network)",
    )
    for option in CLOCK_OPTIONS:
        option.add_to(parser, CLOCK[option.keyword])
    add_options(parser, CLIENT_OPTIONS)
    parser.add_argument(
        "--clock",
        choices=("wall", "sandbox"),
        default="wall",
        help="whose time fetched_at is: the wall clock (default), or sandbox: the clock of the `defilens sandbox` "
        "serving --base-url (started with --now or --speed), read from it once and followed",
    )
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")


@contextlib.contextmanager
def client_of(args: argparse.Namespace) -> Iterator[Client]:
    """The Client the flags describe, for as long as the command runs (a built-in Sandbox too)."""
    settings = keywords(args, CLIENT_OPTIONS)
    if not settings.get("api_key"):
        settings.pop("api_key", None)  # an empty --api-key: the environment's, as none given
    clock = keywords(args, CLOCK_OPTIONS)
    if args.sandbox:
        given = [
            flag for flag, keyword in (("--base-url", "base_url"), ("--api-key", "api_key")) if settings.get(keyword)
        ]
        if given:
            # The built-in Sandbox has its own URL and needs no key: either flag would be ignored.
            raise ValueError(f"--sandbox runs against the built-in Sandbox; drop {' and '.join(given)} (or --sandbox)")
        if args.clock == "sandbox":
            raise ValueError(
                "--clock sandbox follows a `defilens sandbox` at --base-url; the built-in Sandbox's clock is used "
                "with --now or --speed: drop --clock"
            )
        # Given the Sandbox itself, the client stamps its time when it is simulated (--now, --speed).
        with Sandbox(**clock) as sandbox:
            settings.update(base_url=sandbox, api_key="sandbox")
            yield Client(**settings)
        return
    if clock:
        flags = " and ".join(f"--{name}" for name in clock)
        raise ValueError(
            f"{flags} set the built-in Sandbox's clock: add --sandbox (to follow a running `defilens sandbox`, "
            "give --base-url URL --clock sandbox)"
        )
    if args.clock == "sandbox":
        yield Client(clock="sandbox", **settings)
    else:
        yield Client(**settings)
