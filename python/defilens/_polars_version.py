"""The polars this package needs, checked at import so that an old one fails clearly."""

from __future__ import annotations

import re

import polars

#: The oldest polars whose frames cross from Rust intact (the Enum included); pyproject.toml
#: declares the same floor.
MIN_POLARS = (1, 32)


def parse_version(text: str) -> "tuple[int, int]":
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def check_polars(version: str = polars.__version__) -> None:
    """Raises ImportError naming the version needed when ``version`` is too old."""
    if parse_version(version) < MIN_POLARS:
        needed = ".".join(map(str, MIN_POLARS))
        raise ImportError(
            f"defilens needs polars >= {needed}, but polars {version} is installed: pip install -U 'polars>={needed}'"
        )
