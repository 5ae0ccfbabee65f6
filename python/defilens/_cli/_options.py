"""The settings of the Client and of the Sandbox on the command line: one table each, whose rows
make both the flags (``--max-retries``) and the keywords they fill (``max_retries=``). A flag not
given fills nothing, so the default is the Client's or the Sandbox's own, and the help's figures
are read from the same constants. A setting of either is one row here."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence

from .._client import API_KEY_ENV, BASE_URL_ENV, DEFAULTS
from ._arguments import port, rate_limit


@dataclass(frozen=True)
class Option:
    """A keyword of the Client or the Sandbox as a flag: ``--`` and the keyword with dashes
    (``flag`` when it reads otherwise), its value checked by ``type``; ``switch_off``: a flag
    without a value that sets the keyword false (``--no-rate-headers``)."""

    keyword: str
    help: str
    type: Callable[[str], Any] = str
    metavar: Optional[str] = None
    flag: Optional[str] = None
    switch_off: bool = False

    @property
    def flag_name(self) -> str:
        return self.flag or "--" + self.keyword.replace("_", "-")

    def add_to(self, parser: argparse.ArgumentParser, said: Optional[str] = None) -> None:
        """Adds the flag (with ``said`` in place of the row's, where a command says it otherwise)."""
        if self.switch_off:
            parser.add_argument(
                self.flag_name, dest=self.keyword, action="store_false", default=None, help=said or self.help
            )
        else:
            parser.add_argument(
                self.flag_name, dest=self.keyword, type=self.type, metavar=self.metavar, help=said or self.help
            )


def add_options(parser: argparse.ArgumentParser, table: Sequence[Option]) -> None:
    for option in table:
        option.add_to(parser)


def keywords(args: argparse.Namespace, table: Sequence[Option]) -> Dict[str, Any]:
    """The keywords the flags given fill (a flag not given leaves the setting's default)."""
    given = {option.keyword: getattr(args, option.keyword) for option in table}
    return {keyword: value for keyword, value in given.items() if value is not None}


#: The Client's settings (`defilens.Client`'s keywords) that `fetch` and `collect` take.
CLIENT_OPTIONS = (
    Option("api_key", f"API key (default: ${API_KEY_ENV}); never printed"),
    Option("base_url", f"service URL (default: ${BASE_URL_ENV} or {DEFAULTS['base_url']})"),
    Option("timeout", f"seconds per request attempt (default {DEFAULTS['timeout']:g})", float),
    Option("max_retries", f"retries per request (default {DEFAULTS['max_retries']})", int),
    Option("concurrency", f"requests in flight (default {DEFAULTS['concurrency']})", int),
    Option(
        "rate_limit",
        "max requests per second, or auto to learn the service's limit from 429s and rate headers",
        rate_limit,
    ),
    Option(
        "cache_dir",
        "keep responses on disk in DIR (with --cache-ttl): reused by later runs, offline too",
        metavar="DIR",
    ),
    Option("cache_ttl", "seconds a cached response is reused", float, metavar="SECONDS"),
)

_FAULTS = {
    "error_rate": "503 Service Unavailable",
    "rate_limit_rate": "429 Too Many Requests",
    "drop_rate": "a dropped connection",
    "truncate_rate": "a body cut short",
    "invalid_json_rate": "a 200 whose body is not JSON",
}

#: The Sandbox's settings (`defilens.testing.Sandbox`'s keywords) that `defilens sandbox` takes;
#: ``now`` and ``speed`` are also the built-in Sandbox's clock for `fetch` and `collect` (`CLOCK`).
SANDBOX_OPTIONS = (
    Option("port", "port on 127.0.0.1, 0 to 65535 (default 0: a free one)", port),
    Option(
        "now",
        "start a simulated clock at this time (ISO 8601, e.g. 2026-01-01T00:00:00Z); it stands still unless --speed "
        "is given",
    ),
    Option(
        "speed",
        "run the clock this many times faster than real time (e.g. 60: five minutes of market in five seconds)",
        float,
    ),
    Option("seed", "the market's seed: one seed, one market (not given: Sandbox()'s market)", int),
    Option("latency", "seconds added to every answer (not given: none)", float),
    Option("api_key", "require this x-partner-key"),
    Option("max_rps", "enforce a real limit of this many requests a second (429 with Retry-After beyond it)", float),
    Option("rate_headers", "with --max-rps: send no X-RateLimit-* headers", flag="--no-rate-headers", switch_off=True),
    Option(
        "repaint_rate",
        "share of just-closed candles served with provisional indicator values for their first minute (not given: "
        "none)",
        float,
    ),
    *(
        Option(fault, f"share of requests (0 to 1) answered with {answer} (not given: none)", float, metavar="SHARE")
        for fault, answer in _FAULTS.items()
    ),
)

#: The Sandbox's clock, as `fetch --sandbox` and `collect --sandbox` set it: its rows, and their
#: help there.
CLOCK = {
    "now": "with --sandbox: start its clock at this time (ISO 8601, e.g. 2026-01-01T00:00:00Z) and stamp everything "
    "with it; it stands still (collect moves it from round to round) unless --speed is given",
    "speed": "with --sandbox: run its clock this many times faster than real time (e.g. 60)",
}
CLOCK_OPTIONS = tuple(option for option in SANDBOX_OPTIONS if option.keyword in CLOCK)
