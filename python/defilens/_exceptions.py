"""The exceptions defilens raises on purpose. The Rust core builds these (``to_py_err``)."""

from __future__ import annotations

import builtins
from typing import Optional

__all__ = [
    "DefiLensWarning",
    "DefiLensError",
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
]


class DefiLensError(Exception):
    """Base of every exception defilens raises on purpose.

    Attributes:
        token: the token id the failed request was for, if any.
        endpoint: ``"listing"`` or ``"markets"``, if the error belongs to a request.
        kind: the ``kind`` value this error has in a ``Frames.log`` row.
    """

    def __init__(
        self,
        message: str = "",
        *,
        token: Optional[str] = None,
        endpoint: Optional[str] = None,
        kind: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.token = token
        self.endpoint = endpoint
        self.kind = kind


class APIError(DefiLensError):
    """The service answered with a non-2xx status.

    Attributes:
        status: the HTTP status code.
        body: a short excerpt of the response body.
        retry_after: seconds the service asked to wait (``Retry-After``), or None; only a 429 or
            a 503 carries one.
    """

    def __init__(
        self,
        message: str = "",
        *,
        status: int = 0,
        body: str = "",
        token: Optional[str] = None,
        endpoint: Optional[str] = None,
        kind: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message, token=token, endpoint=endpoint, kind=kind)
        self.status = status
        self.body = body
        self.retry_after = retry_after


class BadRequestError(APIError):
    """400: a required parameter is missing."""


class AuthenticationError(APIError):
    """401: no API key was sent, or the service rejected the one sent (the message says which).
    Pass ``api_key=`` or set ``DEFILENS_API_KEY``; check the key."""


class RequestFailedError(APIError):
    """402: the parameters were valid but the request failed."""


class PermissionDeniedError(APIError):
    """403: the API key lacks permission for this resource."""


class NotFoundError(APIError):
    """404: no such token (check the id)."""


class ConflictError(APIError):
    """409: the request conflicts with another."""


class RateLimitError(APIError):
    """429: too many requests. Retried automatically (after ``retry_after`` seconds when the
    service says); raised when retries ran out."""


class ServerError(APIError):
    """5xx: the service's fault. 500/502/503/504 are retried first (a 503 after its
    ``retry_after`` when it has one)."""


class TransportError(DefiLensError):
    """No usable response arrived."""


class TimeoutError(TransportError, builtins.TimeoutError):  # noqa: A001 - the contract's name
    """No complete response within ``timeout`` seconds (after retries).

    Also a ``builtins.TimeoutError``, so ``except TimeoutError:`` catches it either way."""


class ConnectionError(TransportError, builtins.ConnectionError):  # noqa: A001 - the contract's name
    """The connection failed, was dropped, or the body was cut short (after retries).

    Also a ``builtins.ConnectionError`` (an ``OSError``)."""


class DefiLensWarning(UserWarning):
    """Something worth knowing that is not an error: for example a `fetch` in which every
    request failed, or values that did not fit their columns (see ``frames.drift``)."""


class DecodeError(DefiLensError):
    """A 2xx body that is not the documented JSON shape.

    Attributes:
        field: the field being read when it failed, where known (e.g. ``"data.current_price"``).
        offset: the byte offset in the body, where known.
    """

    def __init__(
        self,
        message: str = "",
        *,
        field: Optional[str] = None,
        offset: Optional[int] = None,
        token: Optional[str] = None,
        endpoint: Optional[str] = None,
        kind: Optional[str] = "decode",
    ) -> None:
        super().__init__(message, token=token, endpoint=endpoint, kind=kind)
        self.field = field
        self.offset = offset


class HistoryError(DefiLensError):
    """A history cannot be written or read as asked: its root is a file or read-only, a table at
    a frame's path is not one of ours, it is in the layout of an earlier version (run
    ``defilens convert``), or its storage failed (a full disk, an object store that is down or
    never answers). The message says what to do; the history itself is left as it was."""
