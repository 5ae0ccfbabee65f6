"""`Client` and `AsyncClient`. Settings are resolved here; the work happens in Rust."""

from __future__ import annotations

import datetime
import os
import warnings
from typing import Any, Iterable, Literal, Optional, Tuple, Union
from urllib.parse import urlsplit

import polars as pl

from . import _core
from ._clock import WALL_CLOCK, Clock, SandboxElsewhere
from ._exceptions import DefiLensError, DefiLensWarning
from ._frames import Frames, _from_core
from ._names import check_token_type, checked_keywords, token_list
from ._progress import progress_callback
from ._stack import stacklevel_outside
from .history import collect as collect_into_history

__all__ = ["Client", "AsyncClient", "DEFAULTS", "DEFAULT_BASE_URL"]

#: The client's defaults (defined once, in the Rust core).
DEFAULTS = _core.DEFAULTS
DEFAULT_BASE_URL: str = DEFAULTS["base_url"]
API_KEY_ENV = "DEFILENS_API_KEY"
BASE_URL_ENV = "DEFILENS_BASE_URL"

TokenIds = Union[str, Iterable[str]]


def _is_loopback(url: str) -> bool:
    return _core.is_loopback(url)


class _BaseClient:
    """What `Client` and `AsyncClient` share: settings, repr, lifetime."""

    @checked_keywords
    def __init__(
        self,
        *,
        api_key: Optional[str] = None,
        base_url: "Union[str, _core.Sandbox, None]" = None,
        timeout: float = DEFAULTS["timeout"],
        max_retries: int = DEFAULTS["max_retries"],
        concurrency: int = DEFAULTS["concurrency"],
        rate_limit: Union[float, str, None] = None,
        cache_ttl: Optional[float] = None,
        cache_max_bytes: int = DEFAULTS["cache_max_bytes"],
        cache_dir: Union[str, "os.PathLike[str]", None] = None,
        proxy: Optional[str] = None,
        max_response_bytes: int = DEFAULTS["max_response_bytes"],
        backoff: Tuple[float, float] = DEFAULTS["backoff"],
        clock: "Union[_core.Sandbox, Literal['sandbox'], None]" = None,
    ) -> None:
        if clock is None and isinstance(base_url, _core.Sandbox) and base_url.speed is not None:
            clock = base_url  # the Sandbox itself was given: its simulated time is the one time
        if isinstance(base_url, _core.Sandbox):
            base_url = base_url.url
        follow = isinstance(clock, str) and clock == "sandbox"
        sandbox = clock if isinstance(clock, _core.Sandbox) else None
        if clock is not None and not follow and sandbox is None:
            raise TypeError(
                f"clock must be a defilens.testing.Sandbox (whose clock the client then stamps fetched_at with), "
                f"'sandbox' (the clock of the Sandbox serving base_url, e.g. a `defilens sandbox` in another process) "
                f"or None for the wall clock, got {clock!r}"
            )
        base_url = _core.check_base_url(base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL)
        api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        # Every setting is checked in Rust (types and ranges), before anything is sent.
        settings: "dict[str, Any]" = dict(
            base_url=base_url,
            api_key=api_key or None,
            timeout=timeout,
            max_retries=max_retries,
            concurrency=concurrency,
            rate_limit=rate_limit,
            cache_ttl=cache_ttl,
            cache_max_bytes=cache_max_bytes,
            proxy=proxy,
            max_response_bytes=max_response_bytes,
            backoff=backoff,
        )
        if not api_key and not _is_loopback(base_url):
            _core.Engine(**settings)  # a bad setting is named first; this engine makes no folder and sends nothing
            raise DefiLensError(
                f"no API key: pass api_key=... (--api-key on the command line) or set the {API_KEY_ENV} environment "
                "variable"
            )
        self._engine = _core.Engine(
            **settings,
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            clock=None if sandbox is None else sandbox._clock(),
            follow_sandbox_clock=follow,
        )
        if urlsplit(base_url).scheme == "http" and not _is_loopback(base_url) and api_key:
            warnings.warn(
                f"base_url {base_url!r} uses plain http: the API key travels unencrypted",
                RuntimeWarning,
                stacklevel=stacklevel_outside(),
            )
        self._clock: Clock = (
            SandboxElsewhere(base_url, self._engine.followed_clock_speed, self.now)
            if follow
            else (sandbox if sandbox is not None else WALL_CLOCK)
        )
        self._settings = {
            "base_url": base_url,
            "timeout": timeout,
            "max_retries": max_retries,
            "concurrency": concurrency,
            "rate_limit": rate_limit,
            "cache_ttl": cache_ttl,
            "cache_dir": None if cache_dir is None else os.fspath(cache_dir),
        }
        if clock is not None:
            self._settings["clock"] = "sandbox"

        self._has_key = bool(api_key)
        self._closed = False

    def now(self) -> datetime.datetime:
        """The time on the client's clock (UTC): the wall clock, or the clock of the Sandbox the
        client was bound to (``clock=``), which is the time ``fetched_at`` is stamped with."""
        ms = self._engine.now_ms()
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)

    @property
    def clock(self) -> Clock:
        """The client's clock: the wall clock (``speed`` None), or the simulated clock of the
        Sandbox it was bound to (``clock=sandbox``, or a Sandbox given as ``base_url`` with a
        simulated clock), or of the `defilens sandbox` it follows (``clock="sandbox"``). It has
        ``now``, ``speed`` and ``advance``; `collect` waits for it and moves a still one."""
        return self._clock

    @property
    def rate_limit_learned(self) -> Optional[float]:
        """With ``rate_limit="auto"``: the rate (requests a second) the client has learned so far
        and sends at now; kept for the client's life, so across the rounds of a `collect`. None
        otherwise."""
        return self._engine.rate_limit_now if self._settings["rate_limit"] == "auto" else None

    @property
    def base_url(self) -> str:
        return str(self._settings["base_url"])

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self._settings.items())
        key = "set" if self._has_key else "not set"
        return f"{type(self).__name__}({settings}, api_key={key})"

    def _check_open(self) -> None:
        if self._closed:
            raise DefiLensError(f"this {type(self).__name__} is closed; create a new one")

    def close(self) -> None:
        """Releases the client. Connections are pooled process-wide and closed when idle."""
        if not self._closed:
            self._engine.clear_cache()
            self._closed = True

    def clear_cache(self) -> None:
        """Forgets every cached response (see ``cache_ttl``)."""
        self._engine.clear_cache()

    def _warn_about_the_cache(self) -> None:
        """A damaged or foreign file in the disk cache was ignored, or an entry not written: said
        once, never fatal (the response was fetched instead)."""
        for message in self._engine.take_cache_warnings():
            warnings.warn(message, DefiLensWarning, stacklevel=stacklevel_outside())

    def _start(self, ids: "list[str]", *, listing: bool, markets: bool) -> Any:
        self._check_open()
        return self._engine.start(ids, listing=listing, markets=markets)


def _warn_if_everything_failed(frames: Frames) -> None:
    """One warning for a batch in which no request succeeded: a key, a URL or the network is
    wrong, and empty frames alone would not say so."""
    if not frames._every_request_failed():
        return
    log = frames.log
    kinds = log.get_column("kind").value_counts(sort=True)
    kind, count = kinds.row(0)
    example = log.filter(pl.col("kind") == kind).get_column("message")[0]
    warnings.warn(
        f"all {log.height} requests of this fetch failed, {count} of them with {kind}: {example} "
        "(frames.errors has every failure)",
        DefiLensWarning,
        stacklevel=stacklevel_outside(),
    )


def _raise_first_error(result: "dict[str, Any]") -> None:
    errors = result.get("_errors") or []
    if errors:
        raise errors[0]


class Client(_BaseClient):
    """A blocking client for the DeFi Lens partner API.

    Args:
        api_key: sent as ``x-partner-key``; default the ``DEFILENS_API_KEY`` variable.
        base_url: default ``DEFILENS_BASE_URL``, else ``https://api.defilens.ai``; a path such as
            ``https://gateway.example/defilens`` is kept. A `testing.Sandbox` works too.
        timeout: seconds per request attempt, from connecting to the last body byte.
        max_retries: retries of one request after the first attempt (429, 5xx, timeouts and
            connection failures, with capped exponential backoff and jitter).
        concurrency: requests in flight at once in batch calls.
        rate_limit: at most this many requests per second across the client, or ``"auto"`` to
            learn the service's limit while working (from 429s and rate headers; see
            ``rate_limit_learned``), or ``None`` for no limit.
        cache_ttl: seconds to reuse an identical successful response (``None``: off); a reused
            response keeps its ``fetched_at`` and is marked ``cached`` in ``log``.
        cache_max_bytes: the cache's bound; least recently used responses go first.
        cache_dir: keep the cache on disk, in this folder (with ``cache_ttl``): a second
            process, a restarted kernel or an offline session reuses its responses within the
            TTL; several processes may share it. Compressed; bounded by ``cache_max_bytes``;
            `Sandbox.replay` serves it.
        proxy: proxy URL; default the standard ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY``.
        max_response_bytes: a larger response body is refused while it is read.
        backoff: (first, maximum) retry delay in seconds.
        clock: a `testing.Sandbox` whose clock stamps ``fetched_at`` (and a `collect`'s rounds
            and ``date`` partitions), so a history of a Sandbox on a simulated clock is on one
            clock. Given ``base_url=sandbox`` (the Sandbox itself, not its URL), a client takes its
            clock unless told otherwise. ``"sandbox"``: the clock of the Sandbox serving
            ``base_url`` in another process (``defilens sandbox --now T --speed 60``), read from
            it once, when the client is made, and followed at its speed. Default: the wall clock;
            a client never takes its time from a server's ``Date`` header.

    Examples:
        >>> with defilens.testing.Sandbox() as sandbox, defilens.Client(base_url=sandbox.url) as client:
        ...     frames = client.fetch(["bitcoin", "ethereum"])
        >>> frames.tokens
        ['bitcoin', 'ethereum']
    """

    @checked_keywords
    def token(self, token_id: str, *, markets: bool = True) -> Frames:
        """Fetches one token (listing and, by default, markets) and raises on any failure."""
        check_token_type(token_id)
        result = self._start([token_id], listing=True, markets=markets).wait()
        self._warn_about_the_cache()
        _raise_first_error(result)
        return _from_core(result)

    @checked_keywords
    def markets(self, token_id: str) -> pl.DataFrame:
        """Fetches one token's exchange markets; raises on failure."""
        check_token_type(token_id)
        result = self._start([token_id], listing=False, markets=True).wait()
        self._warn_about_the_cache()
        _raise_first_error(result)
        return result["markets"]

    @checked_keywords
    def fetch(
        self,
        token_ids: TokenIds,
        *,
        markets: bool = True,
        progress: Optional[bool] = None,
    ) -> Frames:
        """Fetches many tokens concurrently. Never raises for one token's failure: each token
        is in ``snapshot`` or in ``errors``, and every exchange is in ``log``.

        Args:
            token_ids: ids (duplicates are fetched once).
            markets: also fetch each token's markets.
            progress: ``None`` shows a bar for large batches on a terminal or in a notebook.

        Ctrl-C stops the batch within a fraction of a second; the client stays usable.
        """
        frames = self._fetch(token_list(token_ids), markets=markets, progress=progress)
        _warn_if_everything_failed(frames)
        return frames

    def _fetch(self, ids: "list[str]", *, markets: bool, progress: Optional[bool]) -> Frames:
        job = self._start(ids, listing=True, markets=markets)
        # Duplicated ids are fetched once, so the bar counts distinct ids.
        with progress_callback(progress, len(dict.fromkeys(ids)) * (2 if markets else 1)) as callback:
            result = job.wait(callback)
        self._warn_about_the_cache()
        return _from_core(result)

    #: `defilens.collect` with this client as its first argument: one function, one signature
    #: (``client.collect(ids, "5m", out="history/")``).
    collect = collect_into_history

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClient(_BaseClient):
    """The asyncio twin of `Client`: same constructor, methods are coroutines.

    Works from ``asyncio.run`` and from a running Jupyter event loop (``await`` in a cell).
    Cancelling the awaiting task cancels the requests in flight.
    """

    async def _run(
        self, ids: "list[str]", *, listing: bool, markets: bool, progress: Optional[bool] = False
    ) -> "dict[str, Any]":
        import asyncio  # imported here: it costs ~30 ms, and only async users need it

        job = self._start(ids, listing=listing, markets=markets)
        loop = asyncio.get_running_loop()
        finished = loop.create_future()

        def wake() -> None:
            if not finished.done():
                finished.set_result(None)

        def on_done() -> None:
            try:
                loop.call_soon_threadsafe(wake)
            except RuntimeError:  # the loop closed while the batch ran
                pass

        job.add_done_callback(on_done)
        try:
            with progress_callback(progress, len(dict.fromkeys(ids)) * (int(listing) + int(markets))) as callback:
                while not finished.done():
                    await asyncio.wait({finished}, timeout=0.1 if callback else None)
                    if callback is not None:
                        callback(*job.progress())
        except asyncio.CancelledError:
            job.cancel()
            raise
        self._warn_about_the_cache()
        return job.result()

    async def token(self, token_id: str, *, markets: bool = True) -> Frames:
        """Fetches one token (listing and, by default, markets) and raises on any failure."""
        check_token_type(token_id)
        result = await self._run([token_id], listing=True, markets=markets)
        _raise_first_error(result)
        return _from_core(result)

    async def markets(self, token_id: str) -> pl.DataFrame:
        """Fetches one token's exchange markets; raises on failure."""
        check_token_type(token_id)
        result = await self._run([token_id], listing=False, markets=True)
        _raise_first_error(result)
        return result["markets"]

    async def fetch(
        self,
        token_ids: TokenIds,
        *,
        markets: bool = True,
        progress: Optional[bool] = None,
    ) -> Frames:
        """Fetches many tokens concurrently; see `Client.fetch`."""
        ids = token_list(token_ids)
        result = await self._run(ids, listing=True, markets=markets, progress=progress)
        frames = _from_core(result)
        _warn_if_everything_failed(frames)
        return frames

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def __enter__(self) -> "AsyncClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
