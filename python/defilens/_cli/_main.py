"""The ``defilens`` command: its commands' parsers put together, and what every command's end
looks like (exit codes, one line on stderr for an error or a warning, no folder left by a
failure)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from typing import Optional, Sequence, TextIO

from .._exceptions import DefiLensError
from .._storage import one_line
from . import _audit, _collect, _compact, _convert, _fetch, _sandbox, _versions
from ._arguments import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_PARTIAL, Parser
from ._traces import nothing_left_on_failure

#: The commands, in the order `defilens --help` lists them: each a module that registers its
#: parser (with ``run`` as its default) and runs it.
COMMANDS = (_fetch, _collect, _compact, _audit, _convert, _versions, _sandbox)


def parser() -> argparse.ArgumentParser:
    made = Parser(prog="defilens", description="DeFi Lens market data and technical indicators as polars DataFrames.")
    commands = made.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True
    for command in COMMANDS:
        command.register(commands)
    return made


def main(argv: Optional[Sequence[str]] = None) -> int:
    made = parser()
    args, extra = made.parse_known_args(argv)
    if extra:
        # The command's own parser says it, so that "did you mean" looks among its options.
        commands = next(action for action in made._actions if isinstance(action, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    out = args.out if getattr(args, "creates_out", False) else None
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            with nothing_left_on_failure(out):
                code: int = args.run(args)
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
