"""What every command's arguments share: the parser with its "did you mean", the checked types
of values (a duration with its unit, a whole number of at least 1, a port, a rate limit), the
history's folder and its storage options, and the exit codes."""

from __future__ import annotations

import argparse
import re
from typing import Callable, Dict, NoReturn, Optional, Union

from .._duration import parse_every
from .._names import did_you_mean

#: Exit codes: 0 done (with --strict: nothing failed), 1 an error or nothing fetched, 2 bad usage,
#: 3 some requests failed (fetch --strict), 130 interrupted.
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
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


def history_folder(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", metavar="DIR", help="the history: a folder, or s3://bucket/prefix")


def storage_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option for object storage, as polars and delta-rs take them (e.g. aws_region=eu-west-1); repeatable. "
        "The standard AWS_* environment variables work too",
    )


def storage_options(args: argparse.Namespace) -> "Optional[Dict[str, str]]":
    """``--storage-option KEY=VALUE`` as the ``storage_options`` of the Python API."""
    options = {}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--storage-option takes KEY=VALUE, got {item!r}")
        options[key.strip()] = value
    return options or None


def rate_limit(text: str) -> "Union[float, str]":
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a rate limit is requests per second or auto, got {text!r}") from None


def duration(flag: str) -> "Callable[[str], str]":
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


def positive(flag: str, otherwise: str) -> "Callable[[str], int]":
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be 1 or more, got {value} ({otherwise})")
        return value

    return check


def port(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a port is a whole number, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"a port is from 0 to 65535, got {number}")
    return number


def plural(count: int, word: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"
