"""Numbers in printed summaries, one way."""

from __future__ import annotations

import re

__all__ = ["with_separators"]

#: A whole number of four digits or more standing alone: not part of a name (``coin1000``), a
#: date (``2026-01-05``), a time, a decimal or a number that already has its separators.
_BARE_COUNT = re.compile(r"(?<![\w.,:/-])(\d{4,})(?![\w.,:/%-])")


def with_separators(text: str) -> str:
    """``text`` with every count written with thousands separators (``12,345``), so that a
    summary reads alike whichever line a count is on."""
    return _BARE_COUNT.sub(lambda match: f"{int(match.group(1)):,}", text)
