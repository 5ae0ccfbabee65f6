"""Type stubs for the compiled Rust core, ``defilens._core``. Checked by mypy's stubtest."""

import datetime as dt
import os
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

import polars as pl
from typing_extensions import Self, TypedDict, disjoint_base, final

__all__ = [
    "DEFAULTS",
    "FRAME_NAMES",
    "INTERVALS",
    "INTERVAL_MS",
    "FAMILY_INTERVALS",
    "INDICATOR_KINDS",
    "INDICATOR_RECIPES",
    "MAX_TOKEN_ID_CHARS",
    "check_base_url",
    "is_loopback",
    "read_cache_folder",
    "__version__",
    "BoundClock",
    "Engine",
    "FetchJob",
    "RawBodies",
    "Sandbox",
    "empty_frames",
    "frame_buffer_bytes",
    "parse_markets",
    "parse_many",
    "parse_duration",
    "format_duration",
    "backoff_seconds",
    "ta_series",
    "indicator_text",
    "parse_token",
    "parse_tokens",
    "sandbox_listing_body",
    "sandbox_markets_body",
]

class _Defaults(TypedDict):
    base_url: str
    timeout: float
    max_retries: int
    concurrency: int
    max_response_bytes: int
    backoff: Tuple[float, float]
    cache_max_bytes: int

class _Recipe(TypedDict):
    kind: str
    params: Dict[str, Any]
    column: Optional[str]
    period: int
    warm_up: int
    text: Optional[Tuple[str, str]]

__version__: str
#: The client's defaults, defined once in the Rust core.
DEFAULTS: _Defaults
#: The frames of `Frames`, in order (``errors`` is derived from ``log``).
FRAME_NAMES: List[str]
#: Every known interval-suffixed family as the frames show it: (frame, name, the intervals the
#: service's reference gives it). Which intervals exist for which family.
FAMILY_INTERVALS: List[Tuple[str, str, List[str]]]
#: The kinds of indicator `ta_series` computes (the functions of `defilens.ta`).
INDICATOR_KINDS: List[str]
#: Every indicator family's recipe, the core's one table: family -> the kind and parameters of
#: `ta_series`, the column it reports (of a kind with several), its period (what a warm-up of N
#: candles counts in), its warm-up (the fewest closes that give a value), and the (above, below)
#: texts a text family is reported as by the sign.
INDICATOR_RECIPES: Dict[str, _Recipe]
INTERVALS: List[str]
#: How long a candle of each interval is, in milliseconds.
INTERVAL_MS: Dict[str, int]
#: Longer token ids are refused before any request.
MAX_TOKEN_ID_CHARS: int

def read_cache_folder(path: Union[str, "os.PathLike[str]"]) -> Tuple[List[str], List[str], List[int], List[bytes], int]:
    """A disk cache folder as a recording for `Sandbox.replay`: (endpoints, tokens,
    fetched_at_ms, bodies, start_ms). ValueError for a folder that is not a cache."""

def is_loopback(url: str) -> bool:
    """Whether ``url`` points at this machine (``localhost`` or a loopback address)."""

def check_base_url(base_url: str) -> str:
    """The base URL as requests use it; ValueError unless an http(s) URL with a host."""

_Body = Union[bytes, bytearray, str]

@final
class BoundClock:
    """A clock other than the wall clock that a client stamps ``fetched_at`` with
    (`Sandbox._clock()`)."""

    def now_ms(self) -> int: ...

@final
class Engine:
    """The Rust side of `Client` / `AsyncClient`; settings arrive resolved."""

    def __new__(
        cls,
        *,
        base_url: str,
        api_key: Optional[str],
        timeout: float,
        max_retries: int,
        concurrency: int,
        rate_limit: Union[float, str, None],
        cache_ttl: Optional[float],
        cache_max_bytes: int,
        proxy: Optional[str],
        max_response_bytes: int,
        backoff: Tuple[float, float],
        cache_dir: Optional[str] = None,
        clock: Optional[BoundClock] = None,
        follow_sandbox_clock: bool = False,
    ) -> Engine:
        """Checks every setting (TypeError / ValueError naming it) and makes the client;
        ``follow_sandbox_clock`` then reads the clock of the Sandbox serving ``base_url`` (one
        request; ValueError when it reports none) and stamps ``fetched_at`` with it."""
    @property
    def followed_clock_speed(self) -> Optional[float]:
        """With ``follow_sandbox_clock``: the followed clock's speed (0: it stands still)."""
    def now_ms(self) -> int:
        """The time on the client's clock (the wall clock unless bound), in ms since the epoch."""
    def start(self, token_ids: Sequence[str], *, listing: bool, markets: bool) -> FetchJob:
        """Starts fetching ``token_ids`` (validated, duplicates dropped); returns the job."""
    def url_for(self, token_id: str, endpoint: str) -> str:
        """The URL a request for ``token_id`` goes to."""
    def clear_cache(self) -> None: ...
    def take_cache_warnings(self) -> List[str]:
        """What the disk cache had to ignore since the last call (damaged or foreign entries)."""
    @property
    def rate_limit_now(self) -> Optional[float]:
        """The rate requests go at now (requests a second): the fixed ``rate_limit``, what
        ``rate_limit="auto"`` has learned so far, or None."""

@final
class FetchJob:
    """A batch running in Rust."""

    def wait(self, progress: Optional[Callable[[int, int], object]] = None) -> Dict[str, Any]:
        """Blocks (GIL released) until done; Ctrl-C cancels and raises KeyboardInterrupt."""
    def result(self) -> Dict[str, Any]:
        """The outcome of a finished batch; RuntimeError before it finished."""
    def done(self) -> bool: ...
    def progress(self) -> Tuple[int, int]:
        """(finished exchanges, all exchanges)"""
    def cancel(self) -> None: ...
    def add_done_callback(self, callback: Callable[[], object]) -> None:
        """Calls ``callback()`` from a Rust thread when the batch ends."""

@final
class RawBodies:
    """Successful response bodies kept for ``Frames.raw``."""

    def __len__(self) -> int: ...
    def stored_bytes(self) -> int:
        """Bytes held for the bodies, which are kept zstd-compressed."""
    def items(self) -> List[Tuple[str, str, bytes]]:
        """``[(token, endpoint, body), ...]`` in fetch order."""

@disjoint_base
class Sandbox:
    """A local fake of the DeFi Lens service, served from Rust on 127.0.0.1.

    Data are a deterministic function of (seed, token id, time): each token follows a seeded
    price path, and every listing value is derived from its candles. Faults are drawn per
    request, so a retry can succeed. Ids beginning with ``unknown`` get 404.

    The clock is the wall clock, unless ``now`` is given: then it is simulated, starts there and
    stands still (``speed=None``) until ``advance`` moves it, or runs ``speed`` times faster than
    real time. ``speed`` alone runs a simulated clock from the wall clock's time.
    """

    #: The ids with realistic levels, tickers and categories (``bitcoin``, ``ethereum``,
    #: ``tether``, ...); every other lowercase slug is served as a plausible small or mid cap.
    known_ids: ClassVar[List[str]]

    def __new__(
        cls,
        *,
        latency: Optional[float] = None,
        api_key: Optional[str] = None,
        seed: Optional[int] = None,
        error_rate: float = 0.0,
        rate_limit_rate: float = 0.0,
        retry_after: Optional[int] = None,
        drop_rate: float = 0.0,
        truncate_rate: float = 0.0,
        invalid_json_rate: float = 0.0,
        host: Optional[str] = None,
        port: Optional[int] = None,
        now: Union[str, dt.datetime, None] = None,
        speed: Optional[float] = None,
        max_rps: Optional[float] = None,
        rate_headers: bool = True,
        repaint_rate: float = 0.0,
        _recording: Any = None,
    ) -> Self:
        """Starts serving. ``None`` means the default: latency 0 s (at most 3,600), seed 0,
        retry_after 1 s (0 to 86,400), host 127.0.0.1, port 0 (a free one; 0 to 65,535), the
        wall clock. ``now``: ISO 8601 text or a datetime (naive means UTC), from 2000 to 2200;
        ``speed``: 0 to 100,000. ``max_rps`` enforces a real limit (a token bucket with a burst
        of one second; 0.1 to 1,000,000 requests a second): requests beyond it get 429 with
        ``Retry-After`` and, unless ``rate_headers=False``, ``X-RateLimit-Limit`` / ``-Remaining``
        / ``-Reset``. ``repaint_rate`` (0 to 1): the share of (token, 5-minute close) pairs whose
        just-closed candles are served with provisional indicator values (computed from a close
        0.2% to 1% off) for the first minute after the close, then the final ones, as a service
        that repaints does."""
    @property
    def url(self) -> str:
        """Base URL to pass as ``base_url=``."""
    @property
    def port(self) -> int: ...
    @property
    def requests(self) -> int:
        """Number of requests served so far."""
    @property
    def now(self) -> dt.datetime:
        """The Sandbox's current time (UTC)."""
    @property
    def speed(self) -> Optional[float]:
        """Simulated seconds per real second: 0 for a simulated clock that stands still until
        ``advance``, None for the wall clock."""
    def _clock(self) -> BoundClock:
        """The Sandbox's clock, for ``Client(clock=sandbox)``."""
    def advance(self, step: Union[str, float, dt.timedelta]) -> dt.datetime:
        """Moves a simulated clock forward by ``step`` (``"5m"``, ``"1h"``, ``"2d"``, seconds or a
        timedelta) and returns the new time. ValueError for the wall clock."""
    def candles(self, token_id: str, interval: str) -> pl.DataFrame:
        """The last 300 closed candles of ``interval`` (``"5m"``, ``"15m"``, ``"1h"``, ``"4h"``,
        ``"24h"``, ``"1w"``) behind the current time: ``open_time`` (Datetime UTC), ``open``,
        ``high``, ``low``, ``close``, ``volume`` (in tokens), oldest first."""
    def stop(self) -> None:
        """Stops serving. Idempotent."""
    def __enter__(self) -> Self: ...
    def __exit__(self, *_exc: object) -> bool: ...

def parse_token(
    body: _Body, token_id: Optional[str] = None, fetched_at_ms: Optional[int] = None
) -> Dict[str, pl.DataFrame]:
    """Parses one listing body into the listing frames."""

def parse_tokens(
    bodies: Sequence[_Body],
    token_ids: Optional[Sequence[Optional[str]]] = None,
    fetched_at_ms: Union[int, Sequence[Optional[int]], None] = None,
) -> Dict[str, pl.DataFrame]:
    """Parses many listing bodies into one set of frames in one call; ``fetched_at_ms`` is one
    time for all of them or one per body."""

def parse_markets(
    body: _Body, token_id: str, fetched_at_ms: Optional[int] = None
) -> Tuple[pl.DataFrame, Optional[int], pl.DataFrame]:
    """Parses one markets body; returns (markets frame, the body's ``total``, drift frame)."""

def parse_many(
    endpoint: str, bodies: Sequence[_Body], token_ids: Sequence[str], fetched_at_ms: Sequence[Optional[int]]
) -> Tuple[Dict[str, pl.DataFrame], List[Optional[str]]]:
    """Parses many bodies of one endpoint (``"listing"`` or ``"markets"``) without stopping at a
    body that cannot be read: (frames, one error message or None per body); a failed body adds
    no rows."""

def parse_duration(value: Union[str, float, dt.timedelta], name: str = "every") -> float:
    """A duration as users write it (``"250ms"``, ``"30s"``, ``"5m"``, ``"1h"``, ``"1d"``, seconds,
    or a timedelta) in seconds: positive and finite, else ValueError naming ``name``."""

def format_duration(value: Union[str, float, dt.timedelta]) -> str:
    """A duration as the grammar writes it, in its largest whole unit: ``7d``, ``24h`` (one day,
    as the service's interval), ``90m``, ``45s``, ``250ms``; ValueError unless positive."""

def backoff_seconds(attempt: int, first: float, maximum: float) -> float:
    """The wait in seconds after failed try number ``attempt`` (1-based) by the client's one
    backoff rule: ``first * 2**(attempt-1)`` up to ``maximum``, times a jitter in (0.75, 1]."""

def ta_series(
    kind: str, values: pl.Series, n: int = 14, k: float = 2.0, fast: int = 12, slow: int = 26, signal: int = 9
) -> Union[pl.Series, pl.DataFrame]:
    """One indicator series over ``values`` (closes, oldest first); ``kind`` is one of
    `INDICATOR_KINDS`: ``rsi`` or ``sma`` give a Series, ``bbands`` (upper, middle, lower) and
    ``macd`` (macd, signal, hist) a DataFrame. A null, NaN or infinite close is null in every
    window holding it, and the indicator starts again after it."""

def indicator_text(family: str, value: float) -> str:
    """The text the service writes for ``value`` of the text family ``family`` (``macd``:
    ``Cross Above`` when positive, else ``Cross Below``); `ValueError` for a numeric family."""

def empty_frames() -> Dict[str, pl.DataFrame]:
    """Every frame with its full schema and no rows."""

def frame_buffer_bytes(frame: pl.DataFrame) -> int:
    """The bytes the frame's Arrow buffers hold (string views included, shared buffers once)."""

def sandbox_listing_body(token_id: str, seed: int = 0, now: Union[str, dt.datetime, None] = None) -> str:
    """The listing body the Sandbox serves for ``token_id``."""

def sandbox_markets_body(token_id: str, seed: int = 0, now: Union[str, dt.datetime, None] = None) -> str:
    """The markets body the Sandbox serves for ``token_id``."""
