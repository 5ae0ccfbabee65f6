"""Polling on a schedule into a history of Delta tables, every round exactly once in every table."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import signal
import threading
import time
import uuid
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    TypeVar,
    Union,
)

from .. import _waiting
from .._clock import Clock
from .._duration import parse_every
from .._exceptions import DefiLensWarning, HistoryError
from .._names import checked_keywords, token_list
from .._progress import ProgressCallback, progress_callback
from .._stack import stacklevel_outside
from .._storage import PathLike, Root
from ._defaults import COMPACT_EVERY, DEFAULT_MAX_FAILED_ROUNDS
from ._fence import Fence, TakenOver
from ._info import INFO, new_changes
from ._kept import KeptTables
from ._layout import check_writable_layout, ready
from ._liveness import Running, check_collector_id, collector_running
from ._root import check_writable_root, require_history, root_of
from ._rounds import Round, round_of_fetch, tables_of
from ._settings import check_universe, collector_settings
from ._spool import Spool
from ._tables import COMMIT_THREADS, TABLES, NumberTaken, commit_round, load
from ._upkeep import Upkeep

if TYPE_CHECKING:
    from .._frames import Frames

T = TypeVar("T")


class Source(Protocol):
    """What `collect` asks of a client (`defilens.Client` is one): a batch of tokens fetched, and
    the clock it keeps (`defilens.Client.clock`: ``now``, ``speed``, ``advance``), by which rounds
    are scheduled and stamped."""

    @property
    def clock(self) -> Clock: ...

    def fetch(self, token_ids: List[str], *, markets: bool, progress: Optional[bool]) -> "Frames": ...


#: Failures that no later round can mend: the key is wrong or lacks permission.
STOP_AT_ONCE = ("auth", "forbidden")


def new_collector_id() -> str:
    """A collector's app id in every table's log, unless the caller names it: unique per run, so
    two collectors (or a restarted one) never take each other's rounds for their own."""
    return f"defilens-{uuid.uuid4().hex[:16]}"


class InterruptedCommit(KeyboardInterrupt):
    """A second Ctrl-C while a round was being committed: the collector stopped at once, and the
    round waits in the spool for the next collect."""


@contextlib.contextmanager
def finishing_commit() -> Iterator[List[bool]]:
    """Holds a Ctrl-C that arrives while a round is committed until the round is in every table:
    the list it gives is then true, and the caller stops after the round. A second Ctrl-C stops
    at once (`InterruptedCommit`). Only in the main thread, and only where Ctrl-C would raise
    KeyboardInterrupt anyway (a caller's own SIGINT handler is left alone)."""
    interrupted: List[bool] = []
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield interrupted
        return

    def hold(signum: int, frame: Any) -> None:
        if interrupted:
            raise InterruptedCommit()
        interrupted.append(True)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def in_thread(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a thread of its own, waited for in slices: a call into obstore or
    delta-rs does not return to Python until it is done (a store that does not answer: minutes),
    and a Ctrl-C is seen only when the main thread runs Python."""
    future: "Future[T]" = Future()

    def run() -> None:
        try:
            future.set_result(function(*args))
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, name=f"{COMMIT_THREADS}-spool", daemon=True).start()
    while not wait([future], timeout=_waiting.SLICE_SECONDS).done:
        pass
    return future.result()


def next_round(root: Root, app_id: str) -> int:
    """The number of the next round of collector ``app_id``: one past the last any table records
    (a collector restarted with a stable id goes on, instead of being skipped as done)."""

    def last_in(name: str) -> int:
        table = load(root, name)
        done = table.transaction_version(app_id) if table is not None else None
        return -1 if done is None else done

    # The tables side by side: each load waits mostly on storage.
    with ThreadPoolExecutor(max_workers=4) as pool:
        return max(pool.map(last_in, TABLES)) + 1


def commit(
    root: Root,
    spool: Spool,
    round_: Round,
    path: str,
    kept: "Optional[KeptTables]" = None,
    fence: "Optional[Fence]" = None,
) -> None:
    """Puts the spooled round in every table it belongs to (once, whatever happened before),
    then takes it out of the spool. ``kept``: the collector's tables as its last round left them;
    ``fence``: the collector's (`Running.fence`). A round is counted as there only where a
    table's log records this very round (`_tables.NumberTaken` otherwise)."""
    tables, _ = tables_of(round_)
    if INFO in tables:
        # Info is kept only when it changes (_info), judged against the table as it is now.
        stored = kept.ready(root, INFO) if kept is not None else load(root, INFO)
        tables[INFO] = new_changes(stored, tables[INFO])
    commit_round(
        root,
        tables,
        round_.app_id,
        round_.number,
        round_.metadata,
        ready=ready if kept is None else kept.ready,
        fence=fence,
        round_=round_,
    )
    in_thread(spool.drop, path)


def _first_free(root: Root, spool: Spool, app_id: str) -> int:
    """A number no table and no spooled round of collector ``app_id`` has."""
    spooled = [
        int(match.group(1))
        for path in spool.paths()
        if (match := re.fullmatch(rf"{re.escape(app_id)}/(\d+)[^/]*", path.split("/", 1)[-1]))
    ]
    return max([next_round(root, app_id), *(number + 1 for number in spooled)])


def recover(root: Root, spool: Optional[Spool] = None, running: Optional[Running] = None) -> int:
    """Commits every round a stopped collector left in the spool to the tables it is missing
    from; returns how many rounds were finished. With ``running`` (the starting collector's hold
    on its id), the rounds of collectors that still run are left to them, and its own id's are
    committed behind its fence. A round whose number a table records for another round (two
    collectors used one id) is committed under a free number of its collector."""
    spool = spool or Spool(root)
    finished = 0
    for path, round_ in spool.pending():
        if running is not None and running.is_live(round_.app_id):
            continue
        fence = running.fence if running is not None and round_.app_id == running.app_id else None
        with finishing_commit() as interrupted:
            try:
                commit(root, spool, round_, path, fence=fence)
            except NumberTaken:
                renumbered = round_.renumbered(_first_free(root, spool, round_.app_id))
                new_path = in_thread(spool.put, renumbered)  # spooled under its new number before the old goes
                in_thread(spool.drop, path)
                commit(root, spool, renumbered, new_path, fence=fence)
        finished += 1
        if interrupted:
            raise KeyboardInterrupt
    return finished


def _before_spooling(round_: Round) -> None:
    """Called after a collector's check that it still holds its id, right before the round is
    spooled and committed: tests stall a collector here."""


def _not_committed(spool: Spool, round_: Round, path: str, error: HistoryError) -> HistoryError:
    """What a collector that could not commit its round to every table says: why, and where the
    round is now."""
    waiting = in_thread(spool.holds, path)
    if isinstance(error, NumberTaken):
        return HistoryError(
            f"round {round_.number} of the collector {round_.app_id!r} was not committed: {error}; it waits in the "
            "spool, and the next collect commits it under a free number"
        )
    where = (
        "it waits in the spool, and the next collect commits it"
        if waiting
        else "the collector that took over committed it"
    )
    return HistoryError(f"{error}: stopped without committing round {round_.number} itself; {where}")


class _Schedule:
    """When rounds start: on a fixed grid (start + k * every) of the client's clock, so slow rounds
    do not make the schedule drift and a round that overruns skips the ticks it missed.

    On the wall clock it sleeps. On a Sandbox's simulated clock (``Client(clock=sandbox)``) it
    waits for that clock: a clock that runs is waited for in real time divided by its speed; a
    clock that stands still is moved forward to the next tick by the collector itself (so ten
    simulated days of 15-minute rounds take as long as their requests), unless something else
    moved it since the last round (``on_round=lambda n, f: sandbox.advance("1h")``): then the
    round starts at once, at the time it was moved to."""

    def __init__(self, clock: Clock, every: float) -> None:
        self.every = every
        self.clock = clock
        if clock.speed == 0 and not getattr(clock, "movable", True):
            # A still clock the collector cannot move (another process's Sandbox) says why now,
            # before a round is written.
            clock.advance(every)
        self.origin: Union[float, dt.datetime] = time.monotonic() if clock.speed is None else clock.now
        self.tick = 0
        self.last_start: Optional[dt.datetime] = None

    def wait_for_next_round(self) -> dt.datetime:
        """Waits until the next round is due and returns its start on the client's clock."""
        if self.clock.speed is None:
            return self._wall()
        return self._simulated()

    def _wall(self) -> dt.datetime:
        assert isinstance(self.origin, float)
        if self.tick:
            elapsed_ticks = (time.monotonic() - self.origin) / self.every
            self.tick = max(self.tick, int(elapsed_ticks) + (0 if elapsed_ticks == int(elapsed_ticks) else 1))
        delay = self.origin + self.tick * self.every - time.monotonic()
        if delay > 0:
            _waiting.sleep(delay)
        self.tick += 1
        return self.clock.now

    def _simulated(self) -> dt.datetime:
        assert isinstance(self.origin, dt.datetime)
        now = self.clock.now
        if self.last_start is None:
            self.origin = now  # the grid starts with the first round
        elif now != self.last_start and self.clock.speed == 0:
            # Moved by somebody else since the last round: that move is the schedule.
            self.origin, self.tick = now, 0
        step = dt.timedelta(seconds=self.every)
        if self.tick:
            elapsed_ticks = (now - self.origin) / step
            self.tick = max(self.tick, int(elapsed_ticks) + (0 if elapsed_ticks == int(elapsed_ticks) else 1))
        due = self.origin + self.tick * step
        while now < due:
            speed = self.clock.speed
            if not speed:
                self.clock.advance(due - now)
            else:
                _waiting.sleep(max((due - now).total_seconds() / speed, 0.001))
            now = self.clock.now
        self.tick += 1
        self.last_start = now
        return now


def _check_positive_int(name: str, value: object, *, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        expected = "a positive int or None" if none_ok else "a positive int"
        raise ValueError(f"{name} must be {expected}, got {value!r}")


def prepare(out: PathLike, storage_options: Optional[Mapping[str, Any]]) -> Root:
    """Checks a root for collecting (before any request is sent): it must be writable and hold
    nothing but a defilens history."""
    require_history()
    root = root_of(out, storage_options)
    check_writable_root(root)
    check_writable_layout(root)
    return root


@checked_keywords
def collect(
    client: Source,
    token_ids: Union[str, Iterable[str]],
    every: Union[str, float, dt.timedelta],
    *,
    count: Optional[int] = None,
    out: PathLike,
    markets: bool = True,
    on_round: Optional[Callable[[int, "Frames"], None]] = None,
    progress: Optional[bool] = None,
    max_failed_rounds: Optional[int] = DEFAULT_MAX_FAILED_ROUNDS,
    raw: bool = False,
    compact: bool = False,
    storage_options: Optional[Mapping[str, Any]] = None,
    collector_id: Optional[str] = None,
    universe: Optional[str] = None,
) -> int:
    """Fetches ``token_ids`` every ``every`` and commits each round to the history at ``out``:
    one Delta table a frame (``out/<frame>/``, partitioned by ``date``), read with
    `defilens.scan`, polars' ``scan_delta``, DuckDB's ``delta_scan``, Spark or pandas.

    Every round lands exactly once in every table, whatever happens: it is written ahead to a
    spool under ``out``, then committed to each table with an app transaction (the run's
    collector id and the round's number), then dropped from the spool; after a crash or a
    ``kill -9`` the next `collect` on ``out`` first finishes what was fetched. Several
    collectors (token shards, machines) may write one history at once.

    Rounds start on a fixed grid (start + k * every), so slow rounds do not make the schedule
    drift; a round that overruns skips the ticks it missed. Stops after ``count`` rounds
    (``None``: until Ctrl-C) and returns the number of rounds committed. ``raw`` also keeps the
    response bodies in a ``raw`` table (`defilens.reparse` rebuilds the frames from it);
    Without ``compact`` the collector keeps its history healthy itself: it cleans the tables' logs
    every 100 rounds (a checkpoint interval) and packs each closed day's small files once the day has closed (commits
    stay flat over months); ``compact`` runs the whole `defilens.compact` every 1h instead
    (today's files packed too, closed days sorted by token). ``progress`` draws a bar over the
    rounds (a round counter without ``count``); ``None`` draws it on a terminal or in a notebook. ``out`` may be an object storage URL
    (``s3://bucket/prefix``) with polars-style ``storage_options``.

    ``collector_id`` names the collector in every table's log (default: a new random id a run);
    a stable id lets a restarted collector go on with its round numbers. Two running collectors
    never share an id: the second is refused with `HistoryError`. A Ctrl-C while a round is
    committed stops the collector once the round is in every table (a second one stops at once,
    leaving the round to the next collect).

    Every round's commits record the collector's settings (``every``, the ids, ``markets``,
    ``raw``, the clock, the version, the collector id, and ``universe``: the rule that chose the
    ids, as you state it, verbatim), read back with `defilens.history.settings`.

    ``client`` is a `defilens.Client` (``client.collect(...)`` is this function): rounds start
    and are stamped by its clock (`defilens.Client.clock`), and a simulated clock that stands
    still is moved forward by the collector.

    Fails loudly: an authentication or permission failure raises at once, and
    ``max_failed_rounds`` rounds in a row in which every request failed raise the last error
    (``None``: `DEFAULT_MAX_FAILED_ROUNDS`). Failures of single tokens never stop it. Needs the history extra (``pip install deltalake obstore``).
    """
    interval = parse_every(every)
    _check_positive_int("count", count, none_ok=True)
    if max_failed_rounds is None:
        max_failed_rounds = DEFAULT_MAX_FAILED_ROUNDS
    _check_positive_int("max_failed_rounds", max_failed_rounds)
    ids = token_list(token_ids)
    if not ids:
        raise ValueError("collect needs at least one token id")
    app_id = new_collector_id() if collector_id is None else check_collector_id(collector_id)
    recorded = collector_settings(
        client.clock, ids, interval, markets=markets, raw=raw, collector=app_id, universe=check_universe(universe)
    )
    root = prepare(out, storage_options)
    # One bar over rounds (a counter without ``count``), not a request bar per round.
    with (
        collector_running(root, app_id) as running,
        progress_callback(progress, count or 0, "collect", "rounds", threshold=0) as on_progress,
    ):
        return _collect_rounds(
            client,
            ids,
            interval,
            root,
            running,
            count=count,
            markets=markets,
            on_round=on_round,
            on_progress=on_progress,
            max_failed_rounds=max_failed_rounds,
            raw=raw,
            compact=compact,
            storage_options=storage_options,
            first=0 if collector_id is None else None,
            settings=recorded,
        )


def _collect_rounds(
    client: Source,
    ids: List[str],
    interval: float,
    root: Root,
    running: Running,
    *,
    count: Optional[int],
    markets: bool,
    on_round: Optional[Callable[[int, "Frames"], None]],
    on_progress: Optional[ProgressCallback],
    max_failed_rounds: int,
    raw: bool,
    compact: bool,
    storage_options: Optional[Mapping[str, Any]],
    first: Optional[int],
    settings: Optional[Dict[str, Any]] = None,
) -> int:
    progress = False  # one bar over the rounds (on_progress), none over each round's requests
    app_id = running.app_id
    spool = Spool(root)
    if first is None:
        in_thread(running.fence_tables)  # an id of its own: an earlier holder may still be stalled
    finished = recover(root, spool, running)
    if finished:
        warnings.warn(
            f"finished {finished} round(s) that a stopped collector had fetched but not committed to every table",
            DefiLensWarning,
            stacklevel=stacklevel_outside(),
        )
    number = next_round(root, app_id) if first is None else first
    schedule = _Schedule(client.clock, interval)
    kept = KeptTables(root)  # loaded once, brought up to date each round: a load grows with the table
    rounds = 0
    failed_in_a_row = 0
    last_compacted: Optional[float] = None
    upkeep = Upkeep(root, pack_days=not compact)  # logs cleaned, closed days packed: no manual compact needed
    while count is None or rounds < count:
        started = schedule.wait_for_next_round()
        with warnings.catch_warnings():
            # A round in which everything failed is handled below, not warned about each time.
            warnings.simplefilter("ignore", DefiLensWarning)
            frames = client.fetch(ids, markets=markets, progress=progress)
        round_ = round_of_fetch(frames, app_id, number, started, keep_raw=raw, settings=settings)
        in_thread(running.check)  # may renew its lease: a call into obstore
        _before_spooling(round_)
        with finishing_commit() as interrupted:
            path = in_thread(spool.put, round_)
            try:
                commit(root, spool, round_, path, kept, running.fence)
            except (TakenOver, NumberTaken) as error:
                raise _not_committed(spool, round_, path, error) from None
        rounds += 1
        number += 1
        if on_progress is not None:
            on_progress(rounds, count or 0)
        if interrupted:
            # Ctrl-C during the commit: the round is in every table; stop after reporting it.
            if on_round is not None:
                on_round(rounds, frames)
            raise KeyboardInterrupt
        trouble = in_thread(upkeep.after_round, rounds, started)
        if trouble:
            warnings.warn(trouble, DefiLensWarning, stacklevel=stacklevel_outside())
        if compact and (last_compacted is None or time.monotonic() - last_compacted >= COMPACT_EVERY.total_seconds()):
            from ._compact import compact as compact_history
            from ._lock import Busy

            try:
                compact_history(root.url, storage_options=storage_options, now=client.clock.now)
            except Busy:
                pass  # another process is compacting this history: it does the work
            last_compacted = time.monotonic()
        if on_round is not None:
            on_round(rounds, frames)
        errors = frames.exceptions
        if frames.log.height and not frames.log.get_column("ok").any() and errors:
            failed_in_a_row += 1
            last_error = errors[-1]
            if getattr(last_error, "kind", None) in STOP_AT_ONCE or failed_in_a_row >= max_failed_rounds:
                raise last_error
        else:
            failed_in_a_row = 0
    return rounds
