"""The client and the history apart (issue 48, item 5): the client's clock is public, the
history asks of a client only what its `Source` protocol names (a fetch and a clock), and
`Client.collect` is `defilens.collect` itself, one signature."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import List, Optional

import pytest

import defilens
from defilens.testing import Sandbox

UTC = dt.timezone.utc


def test_the_clock_of_a_client_is_public() -> None:
    client = defilens.Client(base_url="http://127.0.0.1:9")
    assert client.clock.speed is None
    assert abs(client.clock.now - dt.datetime.now(UTC)) < dt.timedelta(seconds=5)
    with pytest.raises(ValueError, match="wall clock cannot be moved"):
        client.clock.advance("1h")
    with Sandbox(now="2026-01-01T00:00:00Z") as sandbox:
        bound = defilens.Client(base_url=sandbox)
        assert bound.clock is sandbox and bound.clock.speed == 0
        bound.clock.advance("1h")
        assert bound.now() == bound.clock.now == dt.datetime(2026, 1, 1, 1, tzinfo=UTC)


def test_a_followed_sandbox_is_a_clock_that_says_it_cannot_be_moved(tmp_path: Path) -> None:
    with Sandbox(now="2026-01-01T00:00:00Z") as elsewhere:
        client = defilens.Client(base_url=elsewhere.url, clock="sandbox")
        assert client.clock.now == dt.datetime(2026, 1, 1, tzinfo=UTC) and client.clock.speed == 0
        with pytest.raises(ValueError, match="cannot move the clock of another process's Sandbox"):
            client.clock.advance("5m")
        with pytest.raises(ValueError, match="stands still"):
            client.collect(["bitcoin"], "5m", count=1, out=tmp_path / "h")
    assert not (tmp_path / "h" / "snapshot").exists()


def test_client_collect_is_defilens_collect() -> None:
    assert defilens.Client.collect is defilens.collect
    with pytest.raises(
        TypeError, match=r"Client.collect\(\) got an unexpected argument 'evry' \(did you mean 'every'\?\)"
    ):
        defilens.Client(base_url="http://127.0.0.1:9").collect(["bitcoin"], evry="1h", out="h")  # type: ignore[call-arg]


class _StillClock:
    """A clock of the caller's own making: it stands still until the collector moves it."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.moves: List[dt.timedelta] = []

    @property
    def now(self) -> dt.datetime:
        return self.sandbox.now

    @property
    def speed(self) -> Optional[float]:
        return 0.0

    def advance(self, step: object) -> dt.datetime:
        assert isinstance(step, dt.timedelta)
        self.moves.append(step)
        return self.sandbox.advance(step)


class _Source:
    """Not a Client: what the history's protocol names, and nothing else."""

    def __init__(self, client: defilens.Client, clock: _StillClock) -> None:
        self._client, self._clock = client, clock

    @property
    def clock(self) -> _StillClock:
        return self._clock

    def fetch(self, token_ids: List[str], *, markets: bool, progress: Optional[bool]) -> defilens.Frames:
        return self._client.fetch(token_ids, markets=markets, progress=progress)


def test_the_history_asks_a_client_only_for_a_fetch_and_a_clock(tmp_path: Path) -> None:
    with Sandbox(now="2026-01-01T00:00:00Z", seed=3) as sandbox:
        clock = _StillClock(sandbox)
        source = _Source(defilens.Client(base_url=sandbox, clock=sandbox), clock)
        assert defilens.collect(source, ["bitcoin"], "1h", count=3, out=tmp_path / "h") == 3
    assert clock.moves == [dt.timedelta(hours=1)] * 2  # the collector moved the still clock between rounds
    fetched = sorted(defilens.scan(tmp_path / "h", "snapshot").collect().get_column("fetched_at").to_list())
    assert fetched == [dt.datetime(2026, 1, 1, hour, tzinfo=UTC) for hour in range(3)]
    recorded = defilens.history.settings(tmp_path / "h")
    assert recorded.get_column("clock").to_list() == ["simulated"]
