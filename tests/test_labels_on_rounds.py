"""Labels on the rounds actually made: a collector restarted off its grid, one whose cadence
changed, tokens that missed rounds, and a history that recorded no rounds at all; every label is
held to a brute force over the rounds made (from how each history was built, not from what the
code infers), and the hand-offs to the backtesters sit on the same rounds."""

from __future__ import annotations

import bisect
import datetime as dt
import math
from typing import Dict, List, Optional, Sequence, Tuple

import polars as pl
import pytest
from study_histories import random_walk_history

import defilens

UTC = dt.timezone.utc
START = dt.datetime(2026, 1, 5, tzinfo=UTC)
TOKENS = [f"coin-{i}" for i in range(6)]
#: A round made: its start and the cadence of its run.
Made = Tuple[dt.datetime, dt.timedelta]


def collected(root: str, runs: Sequence[Tuple[str, int, dt.timedelta]], seed: int) -> List[Made]:
    """Runs of a real collector on one root, each ``(every, count, pause)``: ``pause`` of simulated
    time passes before the run starts (a restart off the old grid). One request in twelve fails
    with no retry, so tokens miss rounds. Returns the rounds made."""
    made: List[Made] = []
    with defilens.testing.Sandbox(now=START.isoformat(), seed=seed, speed=0, error_rate=1 / 12) as sandbox:
        client = defilens.Client(base_url=sandbox, max_retries=0)
        for every, count, pause in runs:
            if pause:
                sandbox.advance(pause)
            length = dt.timedelta(seconds=defilens._duration.parse_every(every, "every"))
            first = sandbox.now
            client.collect(TOKENS, every, count=count, out=root, markets=False, progress=False)
            made += [(first + length * k, length) for k in range(count)]
    return made


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Tuple[str, List[Made]]:
    """30-minute rounds for 12 hours; the collector restarted 40 minutes after its last round (10
    minutes off its old grid) for 12 more hours."""
    root = str(tmp_path_factory.mktemp("restarted"))
    minutes = dt.timedelta(minutes=1)
    return root, collected(root, [("30m", 24, 0 * minutes), ("30m", 24, 40 * minutes)], seed=3)


@pytest.fixture(scope="module")
def recadenced(tmp_path_factory: pytest.TempPathFactory) -> Tuple[str, List[Made]]:
    """15-minute rounds for 4 hours, then hourly ones for 10 hours (restarted 15 minutes later)."""
    root = str(tmp_path_factory.mktemp("recadenced"))
    minutes = dt.timedelta(minutes=1)
    return root, collected(root, [("15m", 16, 0 * minutes), ("1h", 10, 15 * minutes)], seed=4)


@pytest.fixture(scope="module")
def unrecorded(tmp_path_factory: pytest.TempPathFactory) -> Tuple[str, List[Made]]:
    """A history whose commits name no rounds: 30-minute rounds, a restart 10 minutes off the
    grid, and tokens skipping rounds."""
    root = str(tmp_path_factory.mktemp("unrecorded"))
    half_hour = dt.timedelta(minutes=30)
    offsets = [half_hour * k for k in range(20)] + [
        half_hour * 20 + dt.timedelta(minutes=10) + half_hour * k for k in range(20)
    ]
    skip = {3: {"coin-1"}, 7: {"coin-2", "coin-3"}, 20: {"coin-0"}, 21: {"coin-4"}, 30: {"coin-5"}}
    random_walk_history(root, 9, TOKENS, len(offsets), times=offsets, skip=skip)
    return root, [(START + offset, half_hour) for offset in offsets]


# -- the brute force ---------------------------------------------------------------------------------


def brute_force(
    root: str,
    made: List[Made],
    decisions: pl.DataFrame,
    horizons: Sequence[dt.timedelta],
    knowable: str = "at",
    delay: Optional[dt.timedelta] = None,
) -> Dict[Tuple[int, dt.timedelta], Tuple[Optional[float], Optional[str]]]:
    """Each (decision row, horizon): (forward return, why none), by the documented rule over the
    rounds made, a loop at a time."""
    starts = [start for start, _ in made]
    fetched: Dict[Tuple[str, int], Tuple[dt.datetime, Optional[float]]] = {}
    opened: Dict[int, dt.datetime] = {}
    first_round: Dict[str, int] = {}
    snapshot = defilens.scan(root, "snapshot").select("token", "fetched_at", "current_price").collect()
    for token, at, price in sorted(snapshot.iter_rows(), key=lambda row: row[1]):
        k = bisect.bisect_right(starts, at) - 1
        opened[k] = min(opened.get(k, at), at)
        fetched.setdefault((token, k), (at, price))
        first_round.setdefault(token, k)
    out: Dict[Tuple[int, dt.timedelta], Tuple[Optional[float], Optional[str]]] = {}
    for index, row in enumerate(decisions.iter_rows(named=True)):
        token = row["token"]
        moment = row[knowable] + (delay or dt.timedelta(0))
        after = [
            k
            for k in range(first_round[token], len(made))
            if (opened.get(k, starts[k]) > moment if delay is None else opened.get(k, starts[k]) >= moment)
        ]
        entry_reason = None
        if not after:
            entry_reason = "past the history's end"
        else:
            k = after[0]
            start, every = made[k]
            late = start - moment > every if delay is None else start - moment >= every
            if late or (token, k) not in fetched:
                entry_reason = "no entry round"
            elif not _price(fetched[(token, k)][1]):
                entry_reason = "no price"
        for horizon in horizons:
            if entry_reason is not None:
                out[(index, horizon)] = (None, entry_reason)
                continue
            start, every = made[k]
            if every > horizon:
                out[(index, horizon)] = (None, "horizon under the cadence")
                continue
            target, on_time = start + horizon, every * 0.05
            later = [x for x in range(k, len(made)) if starts[x] >= target - on_time]
            if not later:
                out[(index, horizon)] = (None, "past the history's end")
                continue
            x = later[0]
            if starts[x] - target >= made[x][1] - on_time or (token, x) not in fetched:
                out[(index, horizon)] = (None, "no exit round")
            elif not _price(fetched[(token, x)][1]):
                out[(index, horizon)] = (None, "no price")
            else:
                out[(index, horizon)] = (fetched[(token, x)][1] / fetched[(token, k)][1] - 1, None)  # type: ignore[operator]
    return out


def _price(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def assert_equal_to_brute_force(
    root: str,
    made: List[Made],
    decisions: pl.DataFrame,
    horizons: Sequence[str],
    knowable: str = "at",
    entry_delay: Optional[str] = None,
) -> pl.DataFrame:
    lengths = [dt.timedelta(seconds=defilens._duration.parse_every(h, "horizon")) for h in horizons]
    delay = None if entry_delay is None else dt.timedelta(seconds=defilens._duration.parse_every(entry_delay, "delay"))
    expected = brute_force(root, made, decisions, lengths, knowable, delay)
    labels = defilens.forward_returns(root, decisions, horizons, knowable=knowable, entry_delay=entry_delay)
    assert labels.height == decisions.height * len(horizons)
    wrong = []
    for position, row in enumerate(labels.iter_rows(named=True)):
        index = position // len(horizons)
        want_return, want_reason = expected[(index, row["horizon"])]
        same_return = (want_return is None and row["forward_return"] is None) or (
            want_return is not None
            and row["forward_return"] is not None
            and math.isclose(row["forward_return"], want_return, rel_tol=1e-12, abs_tol=1e-15)
        )
        if not same_return or want_reason != row["missing"]:
            wrong.append((row["token"], row[knowable], row["horizon"], row["missing"], want_reason))
    assert not wrong, f"{len(wrong)} of {labels.height} labels differ from the brute force, first: {wrong[:5]}"
    return labels


def hourly(root: str, offset: str = "0s") -> pl.DataFrame:
    grid = defilens.decision_times(root, "1h", offset=offset) if offset != "0s" else defilens.decision_times(root, "1h")
    return grid.to_frame().join(pl.DataFrame({"token": TOKENS}), how="cross").select("token", "at")


# -- the labels --------------------------------------------------------------------------------------


@pytest.mark.parametrize("history", ["restarted", "recadenced", "unrecorded"])
@pytest.mark.parametrize("offset", ["0s", "5m"])
def test_labels_equal_a_brute_force_over_the_rounds_made(history: str, offset: str, request) -> None:
    root, made = request.getfixturevalue(history)
    horizons = ["30m", "1h", "4h"] if history != "recadenced" else ["15m", "1h", "4h"]
    labels = assert_equal_to_brute_force(root, made, hourly(root, offset), horizons)
    # A restart or a change of cadence costs at most the decisions around it: every other null
    # is a round the token itself missed (one request in twelve fails), or the history's end.
    entries = labels.filter(pl.col("missing") == "no entry round").height / labels.height
    assert entries < 0.15, f"{entries:.0%} of labels have no entry round"


@pytest.mark.parametrize("history", ["restarted", "recadenced", "unrecorded"])
def test_panel_signals_and_an_entry_delay_of_one_cadence_equal_the_brute_force(history: str, request) -> None:
    root, made = request.getfixturevalue(history)
    signals = defilens.panel(root, intervals="15m", indicators="rsi14").select("token", "first_seen_at").collect()
    assert signals.height > 50
    assert_equal_to_brute_force(root, made, signals, ["1h", "4h"], knowable="first_seen_at")
    delay = "30m" if history != "recadenced" else "15m"
    labels = assert_equal_to_brute_force(root, made, hourly(root), ["1h"], entry_delay=delay)
    # Beside a missing round, no entry one round late: the entry is within one cadence of the
    # moment plus the delay.
    entered = labels.filter(pl.col("missing").is_null())
    late = entered.filter(
        pl.col("entry_at") - pl.col("at") - pl.duration(minutes=int(delay[:-1]))
        >= pl.duration(minutes=30 if history != "recadenced" else 60)
    )
    assert late.is_empty(), late


def test_a_restart_off_the_grid_keeps_its_labels(restarted: Tuple[str, List[Made]]) -> None:
    """The decisions between the two runs enter the restarted run's first round, and a 1h label
    across the restart is held from round start to round start (1h10m when it spans the gap)."""
    root, made = restarted
    restart = made[24][0]
    assert restart.minute in (10, 40)
    decisions = pl.DataFrame(
        {"token": ["coin-0"] * 2, "at": [restart - dt.timedelta(minutes=25), restart - dt.timedelta(hours=1)]}
    )
    labels = defilens.forward_returns(root, decisions, "1h")
    first = labels.row(0, named=True)
    if first["missing"] is None:
        assert first["entry_at"] >= restart and first["entry_at"] - restart < dt.timedelta(minutes=1)
    spanning = labels.row(1, named=True)
    if spanning["missing"] is None:
        assert spanning["exit_at"] - spanning["entry_at"] >= dt.timedelta(minutes=69)


# -- the hand-offs -----------------------------------------------------------------------------------


def test_the_backtesters_prices_are_the_rounds_made(restarted: Tuple[str, List[Made]]) -> None:
    pytest.importorskip("pandas")
    root, made = restarted
    decisions = hourly(root).with_columns(pl.lit(1.0).alias("value"))
    factor, prices = defilens.to_alphalens(root, decisions)
    assert [moment.to_pydatetime() for moment in prices.index] == [start for start, _ in made]
    assert prices.index.freq is None  # two grids: no one frequency to count rounds by
    labels = defilens.forward_returns(root, decisions, "1h")
    # Each factor's date is the round its label entered in.
    entered = {
        (row["token"], row["at"]): row["entry_at"]
        for row in labels.filter(pl.col("missing").is_null()).iter_rows(named=True)
    }
    starts = [start for start, _ in made]
    dates: Dict[str, List[dt.datetime]] = {asset: [] for asset in TOKENS}
    for date, asset in factor.index:
        dates[asset].append(date.to_pydatetime())
    for (token, _), entry_at in entered.items():
        k = bisect.bisect_right(starts, entry_at) - 1
        assert starts[k] in dates[token]
    close, entries, exits = defilens.to_vectorbt(root, labels, "1h")
    assert close.index.equals(prices.index)
    assert int(entries.to_numpy().sum()) == int(exits.to_numpy().sum()) == len(entered)
