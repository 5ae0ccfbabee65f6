"""pytest plugin (entry point ``pytest11``): the ``defilens_sandbox`` and ``defilens_replay`` fixtures."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, List, Union

import pytest

from .testing import Sandbox

#: Where the fixture's clock stands, so that every run of a test sees the same market.
FIXTURE_NOW = "2026-01-01T00:00:00Z"


@pytest.fixture
def defilens_sandbox() -> Iterator[Sandbox]:
    """A running `defilens.testing.Sandbox` (seed 0, no faults), stopped after the test.

    Its clock is simulated and stands at 2026-01-01T00:00:00Z until the test moves it with
    ``defilens_sandbox.advance("1h")``, so the data are the same on every run.
    Point a client at it: ``defilens.Client(base_url=defilens_sandbox.url)``.
    """
    with Sandbox(now=FIXTURE_NOW) as sandbox:
        yield sandbox


@pytest.fixture
def defilens_replay() -> Iterator[Callable[..., Sandbox]]:
    """Starts Sandboxes that replay recorded responses, stopped after the test:
    ``sandbox = defilens_replay("tests/recordings")`` (a history collected with ``raw=True``,
    or a folder written by ``frames.write(path, raw=True)``; settings as `Sandbox.replay`)."""
    started: List[Sandbox] = []

    def replay(path: Union[str, "os.PathLike[str]"], **settings: Any) -> Sandbox:
        sandbox = Sandbox.replay(path, **settings)
        started.append(sandbox)
        return sandbox

    yield replay
    for sandbox in started:
        sandbox.stop()
