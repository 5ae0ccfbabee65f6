"""defilens: the DeFi Lens partner API as polars DataFrames, with a Rust core.

>>> import defilens
>>> with defilens.testing.Sandbox() as sandbox:
...     frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin", "ethereum"])
>>> frames.snapshot.height
2
"""

from ._polars_version import check_polars

check_polars()

# The imports below come after the check, so an old polars fails with its message, not theirs.
from . import testing
from ._client import AsyncClient, Client
from ._core import __version__
from ._exceptions import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionError,
    DecodeError,
    DefiLensError,
    DefiLensWarning,
    HistoryError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RequestFailedError,
    ServerError,
    TimeoutError,
    TransportError,
)
from ._frames import INTERVAL, Frames, concat, read
from ._parsing import parse_markets, parse_token, parse_tokens
from .history import collect, compact, convert, reparse, scan

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
    "compact",
    "convert",
    "reparse",
    "testing",
    "DefiLensError",
    "DefiLensWarning",
    "APIError",
    "BadRequestError",
    "AuthenticationError",
    "RequestFailedError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "RateLimitError",
    "ServerError",
    "TransportError",
    "TimeoutError",
    "ConnectionError",
    "DecodeError",
    "HistoryError",
    "__version__",
]
