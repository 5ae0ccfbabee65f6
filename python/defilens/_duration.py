"""Durations as users write them: ``"5m"``, ``"30s"``, ``"1h"``, ``"250ms"``, seconds or a timedelta."""

from __future__ import annotations

import datetime as dt
import re
from typing import Union

__all__ = ["parse_every"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_every(every: Union[str, float, int, dt.timedelta], name: str = "every") -> float:
    """``"5m"``, ``"30s"``, ``"1h"``, ``"250ms"``, a number of seconds or a timedelta -> seconds.
    ``name`` is the argument's name in error messages."""
    if isinstance(every, dt.timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, (int, float)) and not isinstance(every, bool):
        seconds = float(every)
    elif isinstance(every, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", every)
        if not match:
            raise ValueError(f"{name} must look like 30s, 5m, 1h or 1d, got {every!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise TypeError(f"{name} must be a str such as '5m', seconds or a timedelta, got {type(every).__name__}")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{name} must be a positive, finite duration, got {every!r}")
    return seconds
