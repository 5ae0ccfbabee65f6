"""The ``defilens`` command: fetch, collect, compact, audit, convert, versions, sandbox."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import re
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator, List, NoReturn, Optional, Sequence, TextIO, Union

import polars as pl

from . import _waiting
from ._client import API_KEY_ENV, BASE_URL_ENV, DEFAULTS, Client
from ._duration import format_duration, parse_every
from ._exceptions import DefiLensError
from ._frames import Frames
from ._names import did_you_mean
from ._storage import FORMATS, check_writable, locate, missing_parents, one_line
from .history import DEFAULT_MAX_FAILED_ROUNDS, collect, compact, convert, versions
from .history._collect import InterruptedCommit
from .history._collect import prepare as prepare_root
from .history._liveness import check_collector_id
from .history._retained import megabytes
from .history._tables import COMMIT_THREADS
from .research import audit
from .research._scope import CANDLE_INTERVALS
from .testing import Sandbox

#: Exit codes: 0 done (with --strict: nothing failed), 1 an error or nothing fetched, 2 bad usage,
#: 3 some requests failed (fetch --strict), 130 interrupted.
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse, with "did you mean" for a mistyped command or option (argparse's own
    ``suggest_on_error`` needs Python 3.14)."""

    def error(self, message: str) -> "NoReturn":
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)'", message)
        if choice:
            known = [name for action in self._actions if action.choices for name in action.choices]
            message += did_you_mean(choice.group(2), known)
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            options = [option for action in self._actions for option in action.option_strings]
            for given in unknown.group(1).split():
                if given.startswith("-"):
                    hint = did_you_mean(given.split("=", 1)[0], options)
                    if hint:
                        message += hint
                        break
        super().error(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="defilens",
        description="DeFi Lens market data and technical indicators as polars DataFrames.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def connection_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--sandbox",
            action="store_true",
            help="run against a built-in local fake of the service (no key, no network)",
        )
        p.add_argument(
            "--now",
            help="with --sandbox: start its clock at this time (ISO 8601, e.g. 2026-01-01T00:00:00Z) and stamp "
            "everything with it; it stands still (collect moves it from round to round) unless --speed is given",
        )
        p.add_argument(
            "--speed",
            type=float,
            help="with --sandbox: run its clock this many times faster than real time (e.g. 60)",
        )
        p.add_argument("--api-key", help=f"API key (default: ${API_KEY_ENV}); never printed")
        p.add_argument("--base-url", help=f"service URL (default: ${BASE_URL_ENV} or {DEFAULTS['base_url']})")
        p.add_argument(
            "--clock",
            choices=("wall", "sandbox"),
            default="wall",
            help="whose time fetched_at is: the wall clock (default), or sandbox: the clock of the `defilens sandbox` "
            "serving --base-url (started with --now or --speed), read from it once and followed",
        )
        p.add_argument(
            "--timeout",
            type=float,
            default=DEFAULTS["timeout"],
            help=f"seconds per request attempt (default {DEFAULTS['timeout']:g})",
        )
        p.add_argument(
            "--max-retries",
            type=int,
            default=DEFAULTS["max_retries"],
            help=f"retries per request (default {DEFAULTS['max_retries']})",
        )
        p.add_argument(
            "--concurrency",
            type=int,
            default=DEFAULTS["concurrency"],
            help=f"requests in flight (default {DEFAULTS['concurrency']})",
        )
        p.add_argument(
            "--rate-limit",
            type=_rate_limit,
            help="max requests per second, or auto to learn the service's limit from 429s and rate headers",
        )
        p.add_argument(
            "--cache-dir",
            metavar="DIR",
            help="keep responses on disk in DIR (with --cache-ttl): reused by later runs, offline too",
        )
        p.add_argument("--cache-ttl", type=float, metavar="SECONDS", help="seconds a cached response is reused")
        p.add_argument("--no-progress", action="store_true", help="never show a progress bar")

    fetch = sub.add_parser(
        "fetch",
        help="fetch tokens and write their frames",
        description="Fetch tokens, print a summary and write the frames.",
    )
    fetch.add_argument("tokens", nargs="+", metavar="TOKEN", help="token ids, e.g. bitcoin ethereum")
    fetch.add_argument(
        "--markets",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also fetch each token's exchange markets (default; --no-markets to skip)",
    )
    fetch.add_argument("--out", help="folder to write the frames to (one file per frame)")
    fetch.add_argument(
        "--strict",
        action="store_true",
        help="exit 3 when any request failed (default: exit 0 if at least one token was fetched; for cron jobs and CI)",
    )
    fetch.add_argument(
        "--format",
        choices=FORMATS,
        default=FORMATS[0],
        help="file format for --out (default %(default)s)",
    )
    connection_options(fetch)

    coll = sub.add_parser(
        "collect",
        help="poll tokens on a schedule into a history of Delta tables",
        description=(
            "Poll tokens every --every and commit each round to a history of Delta Lake tables, one a frame "
            "(DIR/<frame>/, partitioned by date), every round exactly once in every table; several collectors may "
            "write one DIR at once. Read it with defilens.scan(DIR, frame), polars' scan_delta, DuckDB's delta_scan, "
            "Spark or pandas. Needs the history extra: pip install deltalake obstore."
        ),
    )
    coll.add_argument("tokens", nargs="+", metavar="TOKEN")
    coll.add_argument(
        "--every",
        required=True,
        type=_duration("--every"),
        help="interval between rounds, with its unit: 30s, 5m, 1h",
    )
    coll.add_argument(
        "--count",
        type=_positive("--count", "leave it out to collect until Ctrl-C"),
        help="stop after N rounds (default: until Ctrl-C)",
    )
    coll.add_argument("--out", required=True, help="the history: a folder, or s3://bucket/prefix")
    coll.add_argument(
        "--markets",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also fetch each token's exchange markets (default; --no-markets to skip)",
    )
    coll.add_argument(
        "--max-failed-rounds",
        type=_positive("--max-failed-rounds", f"leave it out for the default {DEFAULT_MAX_FAILED_ROUNDS}"),
        default=DEFAULT_MAX_FAILED_ROUNDS,
        help=f"stop after this many rounds in a row in which every request failed (default {DEFAULT_MAX_FAILED_ROUNDS})",
    )
    coll.add_argument(
        "--raw",
        action="store_true",
        help="also keep each round's response bodies in a raw table, for defilens.reparse and Sandbox.replay",
    )
    coll.add_argument("--compact", action="store_true", help="run `defilens compact` every hour as it goes")
    coll.add_argument(
        "--collector-id",
        metavar="ID",
        help="the collector's name in every table's log (letters, digits, '.', '_', '-'; default: a new random id "
        "a run); a stable id lets a restarted collector go on with its round numbers, and a second collector "
        "with a running one's id is refused",
    )
    coll.add_argument(
        "--universe",
        metavar="TEXT",
        help="the rule that chose these tokens (e.g. 'top 100 by market cap on 2026-03-01'), recorded verbatim with "
        "the collector's settings in every round (defilens.history.settings reads it back)",
    )
    coll.add_argument(
        "--audit", action="store_true", help="print the history's audit summary each time a day (UTC) closes"
    )
    storage_option(coll)
    connection_options(coll)

    comp = sub.add_parser(
        "compact",
        help="compact a history's tables (optimize, sort closed days, checkpoint, vacuum)",
        description=(
            "Compact every table of a history with the engine: small files packed into large ones, each closed day "
            "sorted by token, a checkpoint, log entries and files older than --retention removed. Safe while "
            "collectors write, and safe to interrupt."
        ),
    )
    history_folder(comp)
    comp.add_argument(
        "--retention",
        default="7d",
        type=_duration("--retention"),
        help="how far time travel reaches back afterwards (default 7d; at least 1h): older files are vacuumed",
    )
    comp.add_argument(
        "--memory-budget", default="1GB", help="memory sorting a day may use before it spills to disk (default 1GB)"
    )
    comp.add_argument("--no-sort", action="store_true", help="pack files only; do not sort closed days by token")
    storage_option(comp)

    aud = sub.add_parser(
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
    history_folder(aud)
    aud.add_argument(
        "--max-missing",
        type=int,
        metavar="N",
        help="exit 1 when a token and interval missed more than N observable candle closes",
    )
    aud.add_argument(
        "--expect",
        action="append",
        metavar="RULE",
        help="what to expect instead of the recorded cadence: 'every' (every close), a cadence ('15m'), or "
        "INTERVAL=every|none|CADENCE for one interval ('5m=none'); repeatable",
    )
    aud.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor keep the per-day summaries under DIR/_audit (each audit then reads the whole history)",
    )
    storage_option(aud)

    conv = sub.add_parser(
        "convert",
        help="turn a history of earlier versions (Hive-partitioned Parquet) into Delta tables, in place",
        description=(
            "Turn a history written by an earlier defilens (DIR/<frame>/date=YYYY-MM-DD/*.parquet) into the Delta "
            "tables collect writes now, in place. Safe to rerun; an interrupted conversion resumes."
        ),
    )
    history_folder(conv)
    storage_option(conv)

    ver = sub.add_parser(
        "versions",
        help="list the versions of a history's table that time travel (scan's as_of) can reach",
        description=(
            "List the versions of one table of a history that time travel can still reach: version, committed_at "
            "(what scan's as_of=moment goes by), operation, rows added, files added and removed, and each round's "
            "collector, round and round_start. Version 0 is the table's creation, without rows."
        ),
    )
    history_folder(ver)
    ver.add_argument(
        "frame", nargs="?", default="indicators", metavar="FRAME", help="the table, or errors (default indicators)"
    )
    storage_option(ver)

    sb = sub.add_parser(
        "sandbox",
        help="serve the fake service until stopped",
        description="Serve the local fake of the DeFi Lens service until Ctrl-C. Its market follows the wall clock unless --now or --speed is given.",
    )
    sb.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1, 0 to 65535 (default 0: a free one)")
    sb.add_argument(
        "--now",
        help="start a simulated clock at this time (ISO 8601, e.g. 2026-01-01T00:00:00Z); it stands still unless --speed is given",
    )
    sb.add_argument(
        "--replay",
        metavar="DIR",
        help="serve the responses recorded in DIR (a history collected with --raw, or frames written with raw=True) instead of the market",
    )
    sb.add_argument(
        "--speed",
        type=float,
        help="run the clock this many times faster than real time (e.g. 60: five minutes of market in five seconds)",
    )
    sb.add_argument("--seed", type=int, help="the market's seed: one seed, one market (not given: Sandbox()'s market)")
    sb.add_argument("--latency", type=float, help="seconds added to every answer (not given: none)")
    sb.add_argument("--api-key", help="require this x-partner-key")
    sb.add_argument(
        "--max-rps",
        type=float,
        help="enforce a real limit of this many requests a second (429 with Retry-After beyond it)",
    )
    sb.add_argument("--no-rate-headers", action="store_true", help="with --max-rps: send no X-RateLimit-* headers")
    sb.add_argument(
        "--repaint-rate",
        type=float,
        help="share of just-closed candles served with provisional indicator values for their first minute (not given: none)",
    )
    faults = {
        "error-rate": "503 Service Unavailable",
        "rate-limit-rate": "429 Too Many Requests",
        "drop-rate": "a dropped connection",
        "truncate-rate": "a body cut short",
        "invalid-json-rate": "a 200 whose body is not JSON",
    }
    for fault, answer in faults.items():
        sb.add_argument(
            f"--{fault}",
            type=float,
            metavar="SHARE",
            help=f"share of requests (0 to 1) answered with {answer} (not given: none)",
        )
    return parser


def history_folder(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", metavar="DIR", help="the history: a folder, or s3://bucket/prefix")


def storage_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option for object storage, as polars and delta-rs take them (e.g. aws_region=eu-west-1); repeatable. "
        "The standard AWS_* environment variables work too",
    )


def _storage_options(args: argparse.Namespace) -> "Optional[dict[str, str]]":
    options = {}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--storage-option takes KEY=VALUE, got {item!r}")
        options[key.strip()] = value
    return options or None


def _rate_limit(text: str) -> "Union[float, str]":
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a rate limit is requests per second or auto, got {text!r}") from None


def _duration(flag: str) -> "Callable[[str], str]":
    """A duration option: checked by the one duration grammar (`parse_every`), with its unit
    required on the command line, where a bare number would silently be seconds."""

    def check(text: str) -> str:
        if re.fullmatch(r"\s*[0-9.]+\s*", text):
            raise argparse.ArgumentTypeError(
                f"give {flag} a unit: {text.strip()}s, {text.strip()}m, {text.strip()}h or {text.strip()}d "
                "(a bare number would be seconds)"
            )
        try:
            parse_every(text, flag)
        except (ValueError, TypeError) as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return text

    return check


def _positive(flag: str, otherwise: str) -> "Callable[[str], int]":
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be 1 or more, got {value} ({otherwise})")
        return value

    return check


def _plural(count: int, word: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a port is a whole number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is from 0 to 65535, got {port}")
    return port


def _writable_folder(path: str) -> None:
    """Makes sure ``--out`` can be written before any request, so a bad path never throws away
    a finished fetch; creates nothing (the frames are written once fetched). An object storage
    URL is left to the upload."""
    empty = "--out is empty: give a folder such as out/ or a URL such as s3://bucket/out"
    check_writable(locate(path, empty=empty), f"--out {path!r}")


@contextlib.contextmanager
def _nothing_left_on_failure(path: Optional[str]) -> Iterator[None]:
    """Removes the folder ``path`` (and empty folders in it) again when the command fails and
    the folder did not exist before it and holds no file: a failed command leaves no trace."""
    # The outermost folder the command may create: --out, or the first of its parents missing.
    created = missing_parents(locate(path, empty="")) if path and path.strip() else None
    try:
        yield
    except BaseException:
        if created is not None:
            _remove_empty(created)
        raise


def _remove_empty(folder: Path) -> None:
    if not folder.is_dir():
        return
    for _dirpath, _, filenames in os.walk(folder):
        if filenames:
            return
    for dirpath, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)


@contextlib.contextmanager
def _client(args: argparse.Namespace) -> Iterator[Client]:
    settings = dict(
        timeout=args.timeout,
        max_retries=args.max_retries,
        concurrency=args.concurrency,
        rate_limit=args.rate_limit,
        cache_ttl=args.cache_ttl,
        cache_dir=args.cache_dir,
    )
    clock = {name: value for name, value in (("now", args.now), ("speed", args.speed)) if value is not None}
    if args.sandbox:
        given = [flag for flag, value in (("--base-url", args.base_url), ("--api-key", args.api_key)) if value]
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
            yield Client(base_url=sandbox, api_key="sandbox", **settings)
    else:
        if clock:
            flags = " and ".join(f"--{name}" for name in clock)
            raise ValueError(
                f"{flags} set the built-in Sandbox's clock: add --sandbox (to follow a running `defilens sandbox`, "
                "give --base-url URL --clock sandbox)"
            )
        api_key = args.api_key or os.environ.get(API_KEY_ENV)
        if args.clock == "sandbox":
            yield Client(api_key=api_key, base_url=args.base_url, clock="sandbox", **settings)
        else:
            yield Client(api_key=api_key, base_url=args.base_url, **settings)


def _format_number(value: object, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _format_price(value: object) -> str:
    """Prices keep four significant digits however small: 64,123.52, 0.5123, 0.00004012."""
    if not isinstance(value, float) or value == 0 or not math.isfinite(value):
        return _format_number(value)
    if abs(value) >= 1:
        return f"{value:,.2f}"
    decimals = 3 - math.floor(math.log10(abs(value)))
    return f"{value:,.{decimals}f}"


#: Up to this many tokens are listed one per line; beyond, the largest by market cap and totals.
MAX_LISTED_TOKENS = 20


def summary(frames: Frames, elapsed: float) -> str:
    """A compact, readable summary of a fetch: a line of counts and a table of tokens (the
    largest 20 by market cap, then totals, for bigger batches). Failures are in `failures`."""
    log = frames.log
    lines = []
    requested = log.get_column("token").n_unique() if log.height else 0
    failures = frames.errors
    lines.append(
        f"fetched {frames.snapshot.height} of {_plural(requested, 'token')} "
        f"({_plural(log.height, 'request')}, {failures.height} failed) in {elapsed:.2f}s"
    )
    if frames.snapshot.height:
        rsi = (
            frames.indicators.filter(pl.col("indicator") == "rsi14")
            .with_columns(pl.col("interval").cast(pl.String))
            .pivot(on="interval", index="token", values="value")
        )
        macd = frames.signals.filter((pl.col("indicator") == "macd") & (pl.col("interval") == "24h")).select(
            "token", pl.col("value").alias("macd_24h")
        )
        pattern_counts = frames.patterns.group_by("token").agg(pl.len().alias("patterns"))
        market_counts = frames.markets.group_by("token").agg(pl.len().alias("markets"))
        table = (
            frames.snapshot.select(
                "token", "symbol", "current_price", "price_change_percentage_24h", "market_cap_rank", "market_cap"
            )
            .join(rsi.select("token", *[c for c in ("1h", "24h") if c in rsi.columns]), on="token", how="left")
            .join(macd, on="token", how="left")
            .join(pattern_counts, on="token", how="left")
            .join(market_counts, on="token", how="left")
        )
        shown = table
        if table.height > MAX_LISTED_TOKENS:
            shown = table.sort("market_cap", descending=True, nulls_last=True).head(MAX_LISTED_TOKENS)
        headers = [
            "token",
            "symbol",
            "price",
            "24h %",
            "rank",
            "rsi14 1h",
            "rsi14 24h",
            "macd 24h",
            "patterns",
            "markets",
        ]
        rows = []
        for row in shown.iter_rows(named=True):
            rows.append(
                [
                    str(row["token"]),
                    str(row["symbol"] or "-"),
                    _format_price(row["current_price"]),
                    _format_number(row["price_change_percentage_24h"]),
                    _format_number(row["market_cap_rank"]),
                    _format_number(row.get("1h"), 1),
                    _format_number(row.get("24h"), 1),
                    str(row["macd_24h"] or "-"),
                    _format_number(row["patterns"] or 0),
                    _format_number(row["markets"]) if frames.markets.height else "-",
                ]
            )
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
        for r in rows:
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
        if table.height > shown.height:
            total_cap = table.get_column("market_cap").sum()
            lines.append(
                f"... and {table.height - shown.height} more tokens (the {shown.height} largest by market cap shown; "
                f"all {table.height}: market cap {_format_number(float(total_cap or 0), 0)}, "
                f"{frames.patterns.height} patterns, {frames.markets.height} markets)"
            )
    if frames.drift.height:
        lines.append(f"{frames.drift.height} values did not fit their type; see drift")
    return "\n".join(lines)


def failures(frames: Frames) -> str:
    """The failed requests, by kind and the first few, for stderr ("" when none failed)."""
    errors = frames.errors
    lines = []
    if errors.height:
        by_kind = errors.group_by("kind").agg(pl.len().alias("n")).sort("kind")
        kinds = ", ".join(f"{k} {n}" for k, n in by_kind.iter_rows())
        lines.append(f"failures by kind: {kinds}")
        said = _said_once(errors)
        lines.extend(f"  {message}" for message in said[:5])
        if len(said) > 5:
            lines.append(f"  ... {len(said) - 5} more in frames.errors (errors.parquet with --out)")
    # Notes from the data, not from the log's wording: a markets list shorter than its `total`,
    # and a body that named another token than the one asked for.
    sent = frames.markets.group_by("token").agg(pl.len().alias("sent"))
    incomplete = (
        frames.log.filter(pl.col("ok") & (pl.col("endpoint") == "markets") & pl.col("total").is_not_null())
        .join(sent, on="token", how="left")
        .filter(pl.col("total") > pl.col("sent").fill_null(0))
    )
    for row in incomplete.head(3).iter_rows(named=True):
        lines.append(
            f"note: {row['token']} markets: the service reports {row['total']} markets but sent {row['sent'] or 0}"
        )
    for row in frames.drift.filter(pl.col("field") == "data.id").head(3).iter_rows(named=True):
        lines.append(
            f"note: {row['token']}: the listing body is for {row['found']}; kept under {row['token']!r} (see drift)"
        )
    return "\n".join(lines)


def _said_once(errors: pl.DataFrame) -> "list[str]":
    """The failures' messages (each names its token and endpoint), a token's endpoints that failed
    alike said once: ``not found ... for token "x" (listing, markets): HTTP 404``."""
    said: "dict[tuple[str, str], list[str]]" = {}
    for row in errors.iter_rows(named=True):
        endpoint = f"({row['endpoint']})"
        # The message as it would read for any endpoint, to tell failures alike.
        alike = (row["token"], str(row["message"]).replace(endpoint, "(\x00)", 1))
        said.setdefault(alike, []).append(row["endpoint"])
    return [message.replace("\x00", ", ".join(endpoints), 1) for (_, message), endpoints in said.items()]


def _fetch(args: argparse.Namespace) -> int:
    if args.out:
        _writable_folder(args.out)
    started = time.monotonic()
    with _client(args) as client:
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


def _collect(args: argparse.Namespace) -> int:
    # Fail on a bad interval or root before starting a Sandbox or sending anything.
    parse_every(args.every)
    if args.collector_id is not None:
        check_collector_id(args.collector_id)
    options = _storage_options(args)
    prepare_root(args.out, options)
    rounds_done = 0
    last_day: "list[object]" = [None]
    clock: "list[Callable[[], dt.datetime]]" = []  # the client's, once it is made

    def report(round_number: int, frames: Frames) -> None:
        nonlocal rounds_done
        rounds_done = round_number
        if args.audit:
            # Each time a day (UTC) closes on the client's clock, the summary of the history so far.
            today = clock[0]().date()
            if last_day[0] is not None and today != last_day[0]:
                print(f"-- audit as {last_day[0]} closed --\n{audit(args.out, storage_options=options)}", flush=True)
            last_day[0] = today
        print(f"round {round_number}: {_plural(frames.snapshot.height, 'token')}", flush=True)
        errors = frames.errors
        if errors.height:
            # One line a round: an overnight log stays readable; the rows are in the history's log.
            kinds = ", ".join(f"{k} {n}" for k, n in errors.group_by("kind").agg(pl.len()).sort("kind").iter_rows())
            print(
                f"round {round_number}: {_plural(errors.height, 'failed request')} ({kinds})",
                file=sys.stderr,
                flush=True,
            )

    with _client(args) as client:
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
                f"stopped during a commit after {_plural(rounds_done, 'round')} (the next collect finishes what the spool holds of "
                f"it); history in {args.out}",
                file=sys.stderr,
                flush=True,
            )
            if any(thread.name.startswith(COMMIT_THREADS) and thread.is_alive() for thread in threading.enumerate()):
                sys.stdout.flush()
                os._exit(EXIT_INTERRUPTED)  # Python would wait for delta-rs to finish them
            return EXIT_INTERRUPTED
        except KeyboardInterrupt:
            print(f"stopped after {_plural(rounds_done, 'round')}; history in {args.out}", file=sys.stderr)
            return EXIT_INTERRUPTED
    print(
        f"committed {_plural(rounds_done, 'round')} to {args.out} (read with defilens.scan({str(args.out)!r}, 'indicators'))"
    )
    return 0


def _compact(args: argparse.Namespace) -> int:
    report = compact(
        args.folder,
        retention=args.retention,
        memory_budget=args.memory_budget,
        sort=not args.no_sort,
        storage_options=_storage_options(args),
    )
    print(
        f"compacted: {report['files_before']:,} data files became {report['files_after']:,} "
        f"({report['files_removed']:,} packed into {report['files_added']:,}), "
        f"{_plural(report['days_sorted'], 'closed day')} sorted by token, "
        f"{_plural(report['files_vacuumed'], 'old file')} vacuumed"
    )
    if report["files_kept"]:
        retention = format_duration(parse_every(args.retention))
        print(
            f"kept for time travel: {_plural(report['files_kept'], 'replaced file')} "
            f"({megabytes(report['bytes_kept'])}) beside the {megabytes(report['bytes_live'])} the tables read now; "
            f"they stay until the retention of {retention} has passed and a later compaction vacuums them, so disk "
            "use grows until then"
        )
    return 0


def _audit(args: argparse.Namespace) -> int:
    if args.max_missing is not None and args.max_missing < 0:
        raise ValueError(f"--max-missing must be 0 or more, got {args.max_missing}")
    report = audit(
        args.folder, storage_options=_storage_options(args), cache=not args.no_cache, expect=_expect(args.expect)
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


def _expect(rules: "Optional[list[str]]") -> "Union[str, dict[str, str], None]":
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


def _versions(args: argparse.Namespace) -> int:
    listed = versions(args.folder, args.frame, storage_options=_storage_options(args))
    if listed.is_empty():
        print(f"{args.frame}: no versions (the table was never written)")
        return 0
    with pl.Config(
        tbl_rows=-1, tbl_cols=-1, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True, tbl_width_chars=250
    ):
        print(listed)
    return 0


def _convert(args: argparse.Namespace) -> int:
    with _nothing_left_on_failure(args.folder):
        report = convert(args.folder, storage_options=_storage_options(args))
    if not report["tables"]:
        print(f"{args.folder} holds no table in the old layout: nothing to convert")
        return 0
    print(
        f"converted {report['tables']} tables, {report['rows']:,} rows, to Delta tables in place (rows compared "
        "with the old files, which are deleted)"
    )
    return 0


def _sandbox(args: argparse.Namespace) -> int:
    start = Sandbox if args.replay is None else lambda **settings: Sandbox.replay(args.replay, **settings)
    # Only what was given: every default is the Sandbox's own, so `defilens sandbox` serves the
    # market `Sandbox()` does.
    given = {
        "seed": args.seed,
        "latency": args.latency,
        "api_key": args.api_key,
        "error_rate": args.error_rate,
        "rate_limit_rate": args.rate_limit_rate,
        "drop_rate": args.drop_rate,
        "truncate_rate": args.truncate_rate,
        "invalid_json_rate": args.invalid_json_rate,
        "now": args.now,
        "speed": args.speed,
        "max_rps": args.max_rps,
        "repaint_rate": args.repaint_rate,
    }
    settings = {name: value for name, value in given.items() if value is not None}
    if args.no_rate_headers:
        settings["rate_headers"] = False
    with start(port=args.port, **settings) as sandbox:
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # The command's own parser says it, so that "did you mean" looks among its options.
        commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    handler = {
        "fetch": _fetch,
        "collect": _collect,
        "compact": _compact,
        "convert": _convert,
        "audit": _audit,
        "versions": _versions,
        "sandbox": _sandbox,
    }[args.command]
    out = getattr(args, "out", None) if args.command in ("fetch", "collect") else None
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            with _nothing_left_on_failure(out):
                code = handler(args)
                if code not in (0, EXIT_PARTIAL):
                    raise _Failed(code)
                return code
        except _Failed as failed:
            return failed.code
        except BrokenPipeError:
            # The reader went away (`defilens audit DIR | head`): nothing more to say to it.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_FAILURE
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except (DefiLensError, ValueError, TypeError, OSError, ImportError) as error:
            print(f"defilens: error: {_one_line(error)}", file=sys.stderr)
            return EXIT_FAILURE


class _Failed(Exception):
    """A command that ended with a failing exit code (its message already printed)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _show_warning(
    message: "Warning | str",
    category: "type[Warning]",
    filename: str,
    lineno: int,
    file: "Optional[TextIO]" = None,
    line: Optional[str] = None,
) -> None:
    """A warning on the command line: one line, without the source line Python would print."""
    text = one_line(message, limit=None) if isinstance(message, BaseException) else " ".join(str(message).split())
    print(f"defilens: warning: {text}", file=sys.stderr, flush=True)


def _one_line(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror and not isinstance(error, DefiLensError):
        # "[Errno 2] No such file or directory: '/proc/nope'" as a sentence, without the errno.
        why = f"{error.strerror[:1].lower()}{error.strerror[1:]}"
        return f"cannot use {str(error.filename)!r}: {why}" if error.filename else why
    return one_line(error, limit=None)


__all__: List[str] = ["main", "summary", "failures"]
