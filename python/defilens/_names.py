"""The closest known name to a mistyped one: one rule for every "did you mean" defilens prints
(catalogue names, keyword arguments, command-line options and commands)."""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable, Optional, Sequence, TypeVar

__all__ = ["closest", "did_you_mean", "checked_keywords"]

F = TypeVar("F", bound=Callable[..., Any])


def closest(value: str, known: Sequence[str]) -> Optional[str]:
    """The known name most like ``value`` (case aside), or None when none is close."""
    lowered = {name.lower(): name for name in known}
    close = difflib.get_close_matches(value.lower(), list(lowered), n=1, cutoff=0.5)
    return lowered[close[0]] if close else None


def did_you_mean(value: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or ``""``."""
    name = closest(value, known)
    return f" (did you mean {name!r}?)" if name else ""


def checked_keywords(function: F) -> F:
    """Makes a method refuse arguments it does not take with a `TypeError` that names the class
    the user called (``Client()``) and, for an unknown keyword, the closest valid one, instead of
    Python's message naming an internal function."""
    signature = inspect.signature(function)
    accepted = [
        name
        for name, parameter in signature.parameters.items()
        if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD) and name != "self"
    ]

    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        owner = f"{type(self).__name__}()"
        unknown = [name for name in kwargs if name not in signature.parameters]
        if unknown:
            name = unknown[0]
            raise TypeError(
                f"{owner} got an unexpected argument {name!r}{did_you_mean(name, accepted)}: it takes "
                f"{', '.join(accepted)}"
            )
        try:
            signature.bind(self, *args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{owner}: {error} (its arguments are keywords: {', '.join(accepted)})") from None
        return function(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
