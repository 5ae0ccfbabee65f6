"""Sandbox histories for the study tests: the Sandbox's random walk, fetched over HTTP round by
round on its simulated clock, and committed to a history's tables in one commit per table
(`collect` commits each round; the rows are the same, and twenty seeds build in a minute or two).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set

import polars as pl

import defilens
from defilens.history._root import root_of
from defilens.history._rounds import round_of_fetch, tables_of
from defilens.history._tables import commit_round

START = "2026-01-05T00:00:00Z"


def random_walk_history(
    root: str,
    seed: int,
    tokens: Sequence[str],
    rounds: int,
    every: dt.timedelta = dt.timedelta(minutes=15),
    skip: Mapping[int, Set[str]] = {},
    edit: Optional[Callable[[str, pl.DataFrame], pl.DataFrame]] = None,
    times: Optional[Sequence[dt.timedelta]] = None,
    start: str = START,
    markets: bool = False,
) -> None:
    """``rounds`` rounds of ``tokens`` from a Sandbox with ``seed``, every ``every`` of simulated
    time from ``start``, written to ``root`` as `collect` would lay them out, but in one commit
    that names no rounds (so their rounds are inferred from the fetches). ``times`` places the
    rounds instead (offsets from ``start``, increasing). ``skip`` leaves tokens out of some rounds
    (round number -> tokens), as a round that failed for them would; ``edit`` changes a table's
    rows (table name, rows) before they are committed."""
    offsets = list(times) if times is not None else [every * number for number in range(rounds)]
    parts: Dict[str, List[pl.DataFrame]] = defaultdict(list)
    with defilens.testing.Sandbox(now=start, seed=seed, speed=0) as sandbox:
        client = defilens.Client(base_url=sandbox)
        origin = sandbox.now
        for number, offset in enumerate(offsets):
            if origin + offset > sandbox.now:
                sandbox.advance(origin + offset - sandbox.now)
            started = sandbox.now
            ids = [token for token in tokens if token not in skip.get(number, set())]
            frames = client.fetch(ids, markets=markets)
            tables, failed = tables_of(round_of_fetch(frames, "study", number, started, keep_raw=False))
            assert failed == 0
            for name, frame in tables.items():
                parts[name].append(frame)
    tables = {name: pl.concat(frames) for name, frames in parts.items()}
    if edit is not None:
        tables = {name: edit(name, frame) for name, frame in tables.items()}
    commit_round(root_of(root, None), tables, "study", 0, {"defilens.collector": "study"})
