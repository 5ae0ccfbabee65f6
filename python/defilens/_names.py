"""The closest known name to a mistyped one: one rule for every "did you mean" defilens prints
(catalogue names, keyword arguments, command-line options and commands)."""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable, Iterable, List, Optional, Sequence, TypeVar, Union

__all__ = ["closest", "did_you_mean", "checked_keywords", "check_interval", "token_list", "check_token_type"]

F = TypeVar("F", bound=Callable[..., Any])


def closest(value: str, known: Sequence[str]) -> Optional[str]:
    """The known name most like ``value`` (case aside), or None when none is close."""
    lowered = {name.lower(): name for name in known}
    close = difflib.get_close_matches(value.lower(), list(lowered), n=1, cutoff=0.5)
    return lowered[close[0]] if close else None


def closest_interval(value: str) -> Optional[str]:
    """The interval, as the frames spell it, that ``value`` most likely means: the one of the same
    length by the duration grammar (``"1d"`` and ``"60m"`` are ``24h`` and ``1h``), else the most
    alike (``"1hr"`` is ``1h``)."""
    from ._core import INTERVAL_MS, INTERVALS, parse_duration

    try:
        milliseconds = round(parse_duration(value, "interval") * 1000)
    except (ValueError, TypeError):
        return closest(value, INTERVALS)
    return next((name for name, length in INTERVAL_MS.items() if length == milliseconds), None) or closest(
        value, INTERVALS
    )


def check_interval(value: object) -> str:
    """``value`` if it is an interval the catalogue knows, as the frames spell it (``5m``, ``15m``,
    ``1h``, ``4h``, ``24h``, ``1w``); else a `ValueError` naming the closest and the known ones."""
    from ._core import INTERVAL_MS, INTERVALS

    if not isinstance(value, str):
        raise TypeError(f"an interval is a str such as '1h', got {type(value).__name__}")
    if value not in INTERVAL_MS:
        near = closest_interval(value)
        hint = f" (did you mean {near!r}?)" if near else ""
        raise ValueError(f"unknown interval {value!r}{hint}: the known ones are {', '.join(INTERVALS)}")
    return value


def did_you_mean(value: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or ``""``."""
    name = closest(value, known)
    return f" (did you mean {name!r}?)" if name else ""


def checked_keywords(function: F) -> F:
    """Makes a method (or a function of a client, its first argument) refuse arguments it does not take with a `TypeError` that names what the
    user called (``Client()``, ``Client.fetch()``) and, for an unknown keyword, the closest valid
    one, instead of Python's message naming an internal function."""
    signature = inspect.signature(function)
    receiver = next(iter(signature.parameters))  # ``self``, or ``client`` of a function made a method
    accepted = [
        name
        for name, parameter in signature.parameters.items()
        if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD) and name != receiver
    ]

    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        method = "" if function.__name__ == "__init__" else f".{function.__name__}"
        owner = f"{type(self).__name__}{method}()"
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
            raise TypeError(f"{owner}: {error} (it takes {', '.join(accepted)}, the settings as keywords)") from None
        return function(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def unknown_name(what: str, value: str, known: Sequence[str]) -> ValueError:
    """The error for a name that is not one of ``known``: the closest one, and all of them."""
    return ValueError(f"unknown {what} {value!r}{did_you_mean(value, known)}: the known ones are {', '.join(known)}")


def token_list(token_ids: "Union[str, Iterable[str]]") -> List[str]:
    """Token ids as a list, each a `str` (one id alone is a list of one), or a `TypeError`
    before anything is sent."""
    if isinstance(token_ids, str):
        token_ids = [token_ids]
    elif isinstance(token_ids, (bytes, bytearray)):
        raise TypeError("token ids must be str, got bytes")
    try:
        ids = list(token_ids)
    except TypeError:
        raise TypeError(f"token_ids must be a str or an iterable of str, got {type(token_ids).__name__}") from None
    for token_id in ids:
        check_token_type(token_id)
    return ids


def check_token_type(token_id: object) -> None:
    if not isinstance(token_id, str):
        raise TypeError(f"token ids must be str, got {type(token_id).__name__}: {token_id!r}")
