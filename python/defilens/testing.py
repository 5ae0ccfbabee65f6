"""Testing helpers: a local fake of the service, for demos and for your own tests.

>>> with defilens.testing.Sandbox(seed=1) as sandbox:
...     client = defilens.Client(base_url=sandbox.url, api_key="anything")
...     frames = client.fetch(["bitcoin", "unknown-coin"])
>>> frames.tokens, frames.errors.get_column("kind").to_list()
(['bitcoin'], ['not_found', 'not_found'])

With pytest, the ``defilens_sandbox`` fixture gives a running Sandbox per test.
"""

from __future__ import annotations

import datetime as dt
from typing import Union

from ._core import Sandbox, sandbox_listing_body, sandbox_markets_body

__all__ = ["Sandbox", "listing_body", "markets_body"]

_Time = Union[str, dt.datetime, None]


def listing_body(token_id: str, seed: int = 0, now: _Time = None) -> str:
    """The listing body a Sandbox with this seed serves for ``token_id`` when its clock reads
    ``now`` (default: the wall clock). The same arguments give the same bytes."""
    return sandbox_listing_body(token_id, seed, now)


def markets_body(token_id: str, seed: int = 0, now: _Time = None) -> str:
    """The markets body a Sandbox with this seed serves for ``token_id`` at ``now``."""
    return sandbox_markets_body(token_id, seed, now)
