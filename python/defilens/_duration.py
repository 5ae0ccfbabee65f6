"""Durations as users write them (``"5m"``, ``"30s"``, ``"1h"``, ``"250ms"``, seconds or a
timedelta): the core's one rule, for the Python callers."""

from __future__ import annotations

import datetime as dt
from typing import Any, Union

from . import _core

__all__ = ["parse_every", "format_duration"]


def parse_every(every: Union[str, float, int, dt.timedelta], name: str = "every") -> float:
    """``every`` in seconds (positive and finite); ``name`` is the argument's name in errors."""
    return _core.parse_duration(every, name)


def format_duration(value: Union[float, dt.timedelta]) -> str:
    """A duration as the grammar writes it, in its largest whole unit: ``7d``, ``24h``, ``90m``,
    ``45s``, ``250ms`` (the core's `format_seconds`, beside its parser)."""
    return _core.format_duration(value)


def positive_duration(what: str, value: Any) -> dt.timedelta:
    """``value`` (a duration such as ``"4h"``, or a timedelta) as a positive timedelta; ``what``
    names it in errors (TypeError for another type, ValueError for zero or less)."""
    if isinstance(value, dt.timedelta):
        duration = value
    elif isinstance(value, str):
        duration = dt.timedelta(seconds=parse_every(value, what))
    else:
        raise TypeError(f"{what} must be a duration such as '4h' or a timedelta, got {type(value).__name__}: {value!r}")
    if duration <= dt.timedelta(0):
        raise ValueError(f"{what} must be positive, got {value!r}")
    return duration
