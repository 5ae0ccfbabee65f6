"""defilens: the DeFi Lens partner API as polars DataFrames, with a Rust core.

Examples:
    >>> import defilens
    >>> with defilens.testing.Sandbox() as sandbox:
    ...     frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin", "ethereum"])
    >>> frames.snapshot.height
    2
"""

from ._polars_version import check_polars

check_polars()

# The imports below come after the check, so an old polars fails with its message, not theirs.
from . import _exceptions, research, ta, testing
from ._client import AsyncClient, Client
from ._core import __version__

# The exception classes, their names written once (in _exceptions.__all__).
from ._exceptions import *  # noqa: F403
from ._frames import INTERVAL, Frames, concat, read
from ._parsing import parse_markets, parse_token, parse_tokens
from .history import collect, compact, convert, reparse, scan, versions

# The research functions, their names written once (in research.__all__).
from .research import *  # noqa: F403

__all__ = [
    "Client",
    "AsyncClient",
    "Frames",
    "INTERVAL",
    "parse_token",
    "parse_tokens",
    "parse_markets",
    "concat",
    "read",
    "collect",
    "scan",
    "versions",
    "compact",
    "convert",
    "reparse",
    "ta",
    "testing",
    "__version__",
]
__all__ += research.__all__ + _exceptions.__all__
