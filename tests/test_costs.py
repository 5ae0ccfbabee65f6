"""Net of costs: the cost of trading a notional at a moment, from the latest markets fetch at or
before it (a half-spread from the venues' price dispersion, and a linear impact within each
side's depth within 2%), held to a hand computation from the markets rows; labels net of entry
and exit costs; the look-ahead check passes a study of costs and flags one that reads the last
fetch."""

from __future__ import annotations

import datetime as dt
import itertools
import math
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import polars as pl
import pytest
from study_histories import random_walk_history

import defilens

pytest.importorskip("deltalake")

TOKENS = ["bitcoin", "ethereum", "tether", "solana", *[f"coin-{i}" for i in range(10)]]
START = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
NOTIONALS = [1_000.0, 50_000.0, 2_000_000.0]


def _edit(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """coin-2's markets were not fetched in rounds 5 to 9 (its older fetch stands), and one of
    coin-4's pairs has no price and another no depth at every fetch."""
    if name != "markets":
        return frame
    missed = (pl.col("token") == "coin-2") & pl.col("fetched_at").is_between(
        START + dt.timedelta(minutes=150), START + dt.timedelta(minutes=270)
    )
    place = pl.int_range(pl.len()).over("token", "fetched_at")
    coin4 = pl.col("token") == "coin-4"
    return frame.filter(~missed).with_columns(
        pl.when(coin4 & (place == 0)).then(None).otherwise(pl.col("price")).alias("price"),
        pl.when(coin4 & (place == 1))
        .then(0.0)
        .otherwise(pl.col("depth_usd_positive_two"))
        .alias("depth_usd_positive_two"),
    )


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """14 tokens, 30-minute rounds for a day, markets fetched."""
    root = tmp_path_factory.mktemp("costs") / "h"
    random_walk_history(str(root), 9, TOKENS, 48, dt.timedelta(minutes=30), edit=_edit, markets=True)
    return root


def markets_of(root: Path) -> pl.DataFrame:
    return defilens.scan(root, "markets").collect()


def hand_cost(rows: List[Dict], notional: float, side: str) -> Optional[float]:
    """One way, as a share of the notional, from one fetch's markets rows: the volume-weighted mean
    absolute deviation of the venues' prices from their volume-weighted mean (the half-spread),
    plus 1% of the notional over the side's summed depth within 2% (a book filled evenly to 2%)."""
    priced = [r for r in rows if r["price"] is not None and r["price"] > 0]
    weights = [r["volume_usd"] if r["volume_usd"] is not None and r["volume_usd"] > 0 else 0.0 for r in priced]
    if sum(weights) == 0:
        weights = [1.0] * len(priced)
    consensus = sum(w * r["price"] for w, r in zip(weights, priced, strict=True)) / sum(weights)
    half_spread = sum(w * abs(r["price"] - consensus) / consensus for w, r in zip(weights, priced, strict=True)) / sum(
        weights
    )
    column = "depth_usd_positive_two" if side == "buy" else "depth_usd_negative_two"
    depth = sum(r[column] for r in rows if r[column] is not None and r[column] > 0)
    return half_spread + 0.01 * notional / depth


def latest_rows(markets: pl.DataFrame, token: str, at: dt.datetime) -> List[Dict]:
    mine = markets.filter((pl.col("token") == token) & (pl.col("fetched_at") <= at))
    if mine.height == 0:
        return []
    return mine.filter(pl.col("fetched_at") == mine["fetched_at"].max()).to_dicts()


def test_a_round_trip_costs_what_the_markets_rows_say(history: Path) -> None:
    markets = markets_of(history)
    fetched = markets["fetched_at"].unique().sort().to_list()
    moments = [fetched[3], fetched[7] + dt.timedelta(minutes=10), fetched[20], fetched[-1] + dt.timedelta(hours=1)]
    found = defilens.costs(history, moments, NOTIONALS)
    assert found.columns[:4] == ["at", "token", "notional", "markets_at"]
    checked = 0
    for at in moments:
        for token in ["bitcoin", "tether", "coin-2", "coin-4", "coin-7"]:
            rows = latest_rows(markets, token, at)
            for notional in NOTIONALS:
                row = found.filter((pl.col("at") == at) & (pl.col("token") == token) & (pl.col("notional") == notional))
                assert row.height == 1
                row = row.row(0, named=True)
                assert row["markets_at"] == rows[0]["fetched_at"]
                buy, sell = hand_cost(rows, notional, "buy"), hand_cost(rows, notional, "sell")
                assert row["buy_cost"] == pytest.approx(buy, rel=1e-9)
                assert row["sell_cost"] == pytest.approx(sell, rel=1e-9)
                assert row["round_trip"] == pytest.approx(buy + sell, rel=1e-9)
                depth = min(row["depth_usd_positive_two"], row["depth_usd_negative_two"])
                assert row["beyond_depth"] == (notional > depth)
                checked += 1
    assert checked == 4 * 5 * 3
    # Bigger trades cost more; a thin token more than a deep one.
    one = found.filter(pl.col("at") == moments[0])
    assert one.filter(pl.col("token") == "coin-7")["buy_cost"].is_sorted()
    at_a_million = one.filter(pl.col("notional") == 2_000_000.0)
    assert at_a_million.filter(pl.col("token") == "bitcoin")["buy_cost"][0] < at_a_million["buy_cost"].max()


def test_a_cost_is_never_taken_from_a_later_fetch(history: Path) -> None:
    markets = markets_of(history)
    fetched = markets.filter(pl.col("token") == "coin-2")["fetched_at"].unique().sort().to_list()
    # coin-2's markets were not fetched for five rounds: its older fetch stands meanwhile.
    gap = next(b for a, b in itertools.pairwise(fetched) if b - a > dt.timedelta(minutes=30))
    before = gap - dt.timedelta(milliseconds=1)
    found = defilens.costs(history, [before, gap], 10_000.0, tokens=["coin-2"])
    assert found["markets_at"].to_list() == [max(t for t in fetched if t < gap), gap]
    first = markets["fetched_at"].min()
    assert defilens.costs(history, [first - dt.timedelta(seconds=1), first], 1.0)["at"].unique().to_list() == [first]


def honest_costs(root: str) -> pl.DataFrame:
    """The cost of a $10k round trip at each hour, as knowable then."""
    return defilens.costs(root, defilens.decision_times(root, "1h"), 10_000.0)


def leaky_costs(root: str) -> pl.DataFrame:
    """The same, from each token's last markets fetch of the whole history."""
    honest = honest_costs(root)
    last = defilens.costs(
        root, [defilens.scan(root, "markets").select(pl.col("fetched_at").max()).collect().item()], 10_000.0
    )
    return honest.drop("round_trip").join(last.select("token", "round_trip"), on="token")


def test_the_look_ahead_check_passes_costs_and_flags_the_last_fetch(history: Path) -> None:
    assert defilens.lookahead_check(honest_costs, str(history), cuts=3).ok
    report = defilens.lookahead_check(leaky_costs, str(history), cuts=3)
    assert not report.ok and "round_trip_whole" in report.flagged.columns


def random_scores(root: Path, seed: int = 0) -> pl.DataFrame:
    grid = defilens.decision_times(root, "1h")
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "at": np.repeat(grid.to_numpy(), len(TOKENS)),
            "token": TOKENS * grid.len(),
            "score": rng.normal(size=grid.len() * len(TOKENS)),
        }
    ).with_columns(pl.col("at").cast(pl.Datetime("ms", "UTC")))


def test_net_returns_are_below_gross_by_the_hand_computed_cost(history: Path) -> None:
    markets = markets_of(history)
    notional = 250_000.0
    labels = defilens.forward_returns(history, random_scores(history), ["1h", "4h"], notional=notional)
    for column in ("notional", "entry_cost", "exit_cost", "net_return", "entry_market", "exit_market"):
        assert column in labels.columns
    priced = labels.filter(pl.col("forward_return").is_not_null())
    assert priced["net_return"].null_count() == 0
    sample = priced.sample(60, seed=1).to_dicts()
    drags = []
    for row in sample:
        entry = hand_cost(latest_rows(markets, row["token"], row["entry_at"]), notional, "buy")
        exit_ = hand_cost(latest_rows(markets, row["token"], row["exit_at"]), notional, "sell")
        assert row["entry_cost"] == pytest.approx(entry, rel=1e-9)
        assert row["exit_cost"] == pytest.approx(exit_, rel=1e-9)
        # Bought at the price plus the entry's cost, sold at the exit's price less its cost.
        net = row["exit_price"] * (1 - exit_) / (row["entry_price"] * (1 + entry)) - 1
        assert row["net_return"] == pytest.approx(net, rel=1e-9, abs=1e-12)
        drags.append(row["forward_return"] - net)
    assert all(d > 0 for d in drags)
    gap = (pl.Series([r["forward_return"] for r in sample]) - pl.Series([r["net_return"] for r in sample])).mean()
    assert gap == pytest.approx(sum(drags) / len(drags), rel=1e-9)
    # coin-2's entries in the rounds its markets were not fetched pay the older fetch's cost.
    stale = priced.filter(
        (pl.col("token") == "coin-2") & (pl.col("entry_market").struct.field("fetched_at") < pl.col("entry_at"))
    )
    assert stale.height > 0


def test_a_fixed_cost_is_the_same_on_every_trade(history: Path) -> None:
    labels = defilens.forward_returns(history, random_scores(history), "1h", costs=0.001)
    priced = labels.filter(pl.col("forward_return").is_not_null())
    assert (priced["entry_cost"] == 0.001).all() and (priced["exit_cost"] == 0.001).all()
    expected = (1 + priced["forward_return"]) * 0.999 / 1.001 - 1
    assert np.allclose(priced["net_return"].to_numpy(), expected.to_numpy(), rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"notional": 0}, ValueError, "notional"),
        ({"notional": -5.0}, ValueError, "notional"),
        ({"notional": "big"}, TypeError, "notional"),
        ({"notional": math.inf}, ValueError, "notional"),
        ({"costs": -0.01}, ValueError, "costs"),
        ({"costs": "cheap"}, ValueError, "costs"),
        ({"costs": "markets"}, ValueError, "notional"),
    ],
)
def test_bad_costs_say_what_to_give(history: Path, kwargs, error, words) -> None:
    with pytest.raises(error, match=words):
        defilens.forward_returns(history, random_scores(history), "1h", **kwargs)


def test_a_history_without_markets_says_how_to_get_them(tmp_path: Path) -> None:
    root = tmp_path / "bare"
    random_walk_history(str(root), 2, TOKENS[:4], 6, dt.timedelta(minutes=30))
    with pytest.raises(defilens.HistoryError, match="markets"):
        defilens.costs(root, START + dt.timedelta(hours=1), 1_000.0)
    with pytest.raises(defilens.HistoryError, match="markets"):
        defilens.forward_returns(root, random_scores(root), "1h", notional=1_000.0)
