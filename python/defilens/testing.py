"""Testing helpers: a local fake of the service, for demos and for your own tests.

Examples:
    >>> with defilens.testing.Sandbox(seed=1) as sandbox:
    ...     client = defilens.Client(base_url=sandbox.url, api_key="anything")
    ...     frames = client.fetch(["bitcoin", "unknown-coin"])
    >>> frames.tokens, frames.errors.get_column("kind").to_list()
    (['bitcoin'], ['not_found', 'not_found'])

With pytest, the ``defilens_sandbox`` fixture gives a running Sandbox per test.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

if TYPE_CHECKING:
    import polars as pl

from . import _core
from ._core import sandbox_listing_body, sandbox_markets_body
from ._names import check_interval

__all__ = ["Sandbox", "listing_body", "markets_body"]

_Time = Union[str, dt.datetime, None]


class Sandbox(_core.Sandbox):
    __doc__ = _core.Sandbox.__doc__

    def candles(self, token_id: str, interval: str) -> "pl.DataFrame":
        """The last 300 closed candles of ``interval`` (``"5m"``, ``"15m"``, ``"1h"``, ``"4h"``,
        ``"24h"``, ``"1w"``) behind the current time: ``open_time`` (Datetime UTC), ``open``,
        ``high``, ``low``, ``close``, ``volume`` (in tokens), oldest first. An interval the
        catalogue does not know is a `ValueError` naming the closest (``"1d"``: ``24h``)."""
        return super().candles(token_id, check_interval(interval))

    @classmethod
    def replay(
        cls,
        path: Union[str, "os.PathLike[str]"],
        *,
        storage_options: Optional[Mapping[str, Any]] = None,
        **settings: Any,
    ) -> "Sandbox":
        """A Sandbox serving recorded responses instead of its market: a history collected with
        ``raw=True`` (its folder), a folder written by ``frames.write(path, raw=True)``, or a
        disk cache folder (``Client(cache_dir=...)``). Each
        request gets the last body recorded for its id at or before the clock's time, which starts
        at the first recorded time and stands still until ``advance``; other ids and earlier times
        get 404. ``settings`` are `Sandbox`'s (faults, latency, key, ``now``, ``speed``); a history
        in object storage takes ``storage_options``."""
        if os.path.isfile(os.path.join(os.fspath(path), "DEFILENS-CACHE")):
            # A disk cache folder (Client(cache_dir=...)): one layout for recorded bodies.
            return cls(_recording=_core.read_cache_folder(path), **settings)
        from .history import read_recording  # the history's engines only when a history is replayed

        return cls(_recording=read_recording(path, storage_options), **settings)


def listing_body(token_id: str, seed: int = 0, now: _Time = None) -> str:
    """The listing body a Sandbox with this seed serves for ``token_id`` when its clock reads
    ``now`` (default: the wall clock). The same arguments give the same bytes."""
    return sandbox_listing_body(token_id, seed, now)


def markets_body(token_id: str, seed: int = 0, now: _Time = None) -> str:
    """The markets body a Sandbox with this seed serves for ``token_id`` at ``now``."""
    return sandbox_markets_body(token_id, seed, now)
