"""Durations as users write them (``"5m"``, ``"30s"``, ``"1h"``, ``"250ms"``, seconds or a
timedelta): the core's one rule, for the Python callers."""

from __future__ import annotations

import datetime as dt
from typing import Union

from . import _core

__all__ = ["parse_every", "format_duration"]


def parse_every(every: Union[str, float, int, dt.timedelta], name: str = "every") -> float:
    """``every`` in seconds (positive and finite); ``name`` is the argument's name in errors."""
    return _core.parse_duration(every, name)


def format_duration(value: Union[float, dt.timedelta]) -> str:
    """A duration as the grammar writes it, in its largest whole unit: ``7d``, ``24h``, ``90m``,
    ``45s``, ``250ms`` (the core's `format_seconds`, beside its parser)."""
    return _core.format_duration(value)
