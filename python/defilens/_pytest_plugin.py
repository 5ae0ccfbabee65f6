"""pytest plugin (entry point ``pytest11``): the ``defilens_sandbox`` fixture."""

from __future__ import annotations

from typing import Iterator

import pytest

from ._core import Sandbox


@pytest.fixture
def defilens_sandbox() -> Iterator[Sandbox]:
    """A running `defilens.testing.Sandbox` (seed 0, no faults), stopped after the test.

    Point a client at it: ``defilens.Client(base_url=defilens_sandbox.url)``.
    """
    with Sandbox() as sandbox:
        yield sandbox
