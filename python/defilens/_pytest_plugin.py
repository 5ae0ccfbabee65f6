"""pytest plugin (entry point ``pytest11``): the ``defilens_sandbox`` fixture."""

from __future__ import annotations

from typing import Iterator

import pytest

from ._core import Sandbox

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
