"""Turning response bodies into frames without the network (the same code the clients use)."""

from __future__ import annotations

import datetime as dt
import warnings
from typing import Optional, Sequence, Union

import polars as pl

from . import _core
from ._exceptions import DefiLensWarning
from ._frames import Frames
from ._stack import stacklevel_outside
from ._time import aware

__all__ = ["parse_token", "parse_tokens", "parse_markets"]

Body = Union[bytes, str]
When = Union[dt.datetime, int, None]


def _fetched_at_ms(fetched_at: When) -> Optional[int]:
    if fetched_at is None:
        return None
    if isinstance(fetched_at, dt.datetime):
        return int(aware(fetched_at).timestamp() * 1000)
    if isinstance(fetched_at, int) and not isinstance(fetched_at, bool):
        return fetched_at
    raise TypeError(f"fetched_at must be a datetime or milliseconds since the epoch, got {type(fetched_at).__name__}")


def parse_token(body: Body, token_id: Optional[str] = None, fetched_at: When = None) -> Frames:
    """Parses a listing response body (``bytes`` or ``str``) into `Frames`.

    ``token`` is ``token_id`` if given, else the body's ``data.id``; ``fetched_at`` is the
    given time (a datetime, naive meaning UTC, or ms since the epoch), else null. A malformed body
    raises `DecodeError` naming the token and, where it can, the field and byte offset.
    """
    result = _core.parse_token(body, token_id, _fetched_at_ms(fetched_at))
    token = result["snapshot"]["token"][0]
    raw_body = body.encode() if isinstance(body, str) else bytes(body)
    return Frames(result, [(token, "listing", raw_body)])


def parse_tokens(
    bodies: Sequence[Body],
    token_ids: Optional[Sequence[Optional[str]]] = None,
    fetched_at: When = None,
) -> Frames:
    """Parses many listing bodies into one `Frames` in one call into Rust (using all cores).

    ``token_ids`` (same length as ``bodies``) names each body's token; ``None`` entries, or no
    list at all, take ``data.id``. The first malformed body raises `DecodeError`.
    """
    bodies = list(bodies)
    ids = None if token_ids is None else list(token_ids)
    result = _core.parse_tokens(bodies, ids, _fetched_at_ms(fetched_at))
    return Frames(result, _ListingBodies(result["snapshot"]["token"], bodies))


class _ListingBodies:
    """The bodies `parse_tokens` read, for `Frames.raw`: paired with their tokens only when
    asked (a batch of 20,000 bodies would otherwise spend longer building the pairs than
    parsing). Bodies that are not ``bytes`` or ``str`` are copied now, so that later changes to
    a ``bytearray`` do not change what was parsed."""

    __slots__ = ("_tokens", "_bodies")

    def __init__(self, tokens: pl.Series, bodies: "list[Body]") -> None:
        self._tokens = tokens
        self._bodies = [body if isinstance(body, (bytes, str)) else bytes(body) for body in bodies]

    def __len__(self) -> int:
        return len(self._bodies)

    def stored_bytes(self) -> int:
        return sum(len(body) for body in self._bodies)

    def items(self) -> "list[tuple[str, str, bytes]]":
        return [
            (token, "listing", body.encode() if isinstance(body, str) else body)
            for token, body in zip(self._tokens.to_list(), self._bodies, strict=True)
        ]


def parse_markets(body: Body, token_id: str, fetched_at: When = None) -> pl.DataFrame:
    """Parses a markets response body into the markets frame for ``token_id``."""
    frame, _total, drift = _core.parse_markets(body, token_id, _fetched_at_ms(fetched_at))
    if drift.height:
        fields = ", ".join(drift.get_column("field").head(5).to_list())
        warnings.warn(
            f"{drift.height} value(s) of the markets body did not fit their columns and are null ({fields}); "
            "Client.fetch keeps such rows in frames.drift",
            DefiLensWarning,
            stacklevel=stacklevel_outside(),
        )
    return frame
