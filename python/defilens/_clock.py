"""Whose time a client keeps: the wall clock, or the simulated clock of a Sandbox (one in this
process, or a `defilens sandbox` at the client's ``base_url`` that it follows). `Clock` is what
the history asks of one: the time, its speed, and a move forward; `Client.clock` gives it."""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable, Optional, Protocol, Union

Step = Union[str, float, dt.timedelta]


class Clock(Protocol):
    """A client's clock. ``speed``: None for the wall clock, 0 for a simulated clock that stands
    still until ``advance`` moves it, else simulated seconds a real second. ``advance`` raises
    `ValueError` for a clock that cannot be moved from here."""

    @property
    def now(self) -> dt.datetime: ...

    @property
    def speed(self) -> Optional[float]: ...

    def advance(self, step: Step) -> Any: ...


class WallClock:
    """The system's clock, which a client bound to no simulated clock stamps everything with."""

    @property
    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc)

    @property
    def speed(self) -> Optional[float]:
        return None

    def advance(self, step: Step) -> Any:
        raise ValueError(
            "the wall clock cannot be moved: bind the client to a Sandbox with a simulated clock "
            "(Client(base_url=Sandbox(now=...))) to move time"
        )

    def __repr__(self) -> str:
        return "WallClock()"


#: The one wall clock.
WALL_CLOCK = WallClock()


class SandboxElsewhere:
    """The clock of a Sandbox in another process that a client follows (``clock="sandbox"``): its
    time as the client reads it, its speed, and a clear refusal to move a clock it does not own."""

    #: A collector cannot move it: one that stands still is refused before a round is written.
    movable = False

    def __init__(self, url: str, speed: Optional[float], now: Callable[[], dt.datetime]) -> None:
        self.url = url
        self._speed = speed
        self._now = now

    @property
    def now(self) -> dt.datetime:
        return self._now()

    @property
    def speed(self) -> Optional[float]:
        return self._speed

    def advance(self, step: Step) -> Any:
        raise ValueError(
            f"the Sandbox at {self.url} stands still (started with --now and no --speed), and a collector cannot "
            "move the clock of another process's Sandbox: start it with --speed (e.g. 60), or collect from a "
            "Sandbox of its own (defilens collect --sandbox --now ..., or Client(base_url=sandbox) in Python)"
        )

    def __repr__(self) -> str:
        return f"SandboxElsewhere({self.url!r}, speed={self._speed!r})"
