"""The point-in-time universe (`defilens.universe`, `defilens.members`) and the research reads
filtered by it, on a history collected from a Sandbox on its simulated clock, where ranks
cross the cut-off as prices move."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import polars as pl
import pytest
from study_histories import random_walk_history

import defilens

pytest.importorskip("deltalake")

TOKENS = [
    "bitcoin",
    "ethereum",
    "tether",
    "ripple",
    "binancecoin",
    "solana",
    "usd-coin",
    "tron",
    "dogecoin",
    "cardano",
]
TOP = 6  # solana and usd-coin trade places at rank 6 in this window


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("universe") / "h"
    random_walk_history(str(root), 11, TOKENS, rounds=60, every=dt.timedelta(hours=2))
    return root


def _snapshot(root: Path) -> pl.DataFrame:
    return defilens.scan(root, "snapshot").select("token", "fetched_at", "market_cap_rank", "market_cap").collect()


def _moments(snapshot: pl.DataFrame) -> list:
    fetched = snapshot["fetched_at"].unique().sort().to_list()
    halfway = [a + (b - a) / 2 for a, b in itertools.pairwise(fetched)]
    return sorted(set(fetched) | set(halfway) | {fetched[-1] + dt.timedelta(days=1)})


def _latest_at(snapshot: pl.DataFrame, at: dt.datetime) -> pl.DataFrame:
    return snapshot.filter(pl.col("fetched_at") <= at).sort("fetched_at").group_by("token").last()


def test_membership_at_each_moment_is_the_rank_snapshot_then(history: Path) -> None:
    snapshot = _snapshot(history)
    # The Sandbox's ranks are distinct at every fetch and cross the cut-off during the window.
    per_fetch = snapshot.group_by("fetched_at").agg(pl.col("market_cap_rank").n_unique(), pl.len())
    assert (per_fetch["market_cap_rank"] == per_fetch["len"]).all()
    inside = snapshot.group_by("token").agg((pl.col("market_cap_rank") <= TOP).n_unique().alias("states"))
    crossed = inside.filter(pl.col("states") == 2)["token"].to_list()
    assert crossed, "no token crossed the cut-off: the test needs a crossing"

    universe = defilens.universe(history, top=TOP, by="market_cap_rank")
    assert universe.columns == ["token", "valid_from", "valid_to", "rank", "rule"]
    assert set(crossed) <= set(universe["token"])
    assert universe.filter(pl.col("valid_to").is_not_null())["token"].n_unique() >= len(crossed)
    moments = _moments(snapshot)
    members = defilens.members(universe, moments)
    for at in moments:
        latest = _latest_at(snapshot, at)
        expected = dict(latest.filter(pl.col("market_cap_rank") <= TOP).select("token", "market_cap_rank").rows())
        found = dict(members.filter(pl.col("at") == at).select("token", "rank").rows())
        assert found == expected, at
    assert members["at"].n_unique() == len(moments)  # every moment had members


def test_a_rule_over_another_column_ranks_the_tokens_known_then(history: Path) -> None:
    snapshot = _snapshot(history)
    universe = defilens.universe(history, top=3, by="market_cap")
    moments = _moments(snapshot)
    members = defilens.members(universe, moments)
    for at in moments:
        latest = _latest_at(snapshot, at).sort(pl.col("market_cap"), "token", descending=[True, False])
        expected = {token: place + 1 for place, token in enumerate(latest["token"].head(3).to_list())}
        assert dict(members.filter(pl.col("at") == at).select("token", "rank").rows()) == expected, at
    smallest = defilens.members(defilens.universe(history, top=1, by="market_cap", descending=False), moments[-1])
    assert smallest["token"].to_list() == [_latest_at(snapshot, moments[-1]).sort("market_cap")["token"][0]]


def test_before_the_first_fetch_nobody_is_a_member(history: Path) -> None:
    universe = defilens.universe(history, top=TOP)
    first = universe["valid_from"].min()
    assert defilens.members(universe, first - dt.timedelta(seconds=1)).height == 0
    assert defilens.members(universe, first).height == TOP


def test_max_age_ends_the_membership_of_a_token_no_longer_fetched(history: Path) -> None:
    snapshot = _snapshot(history)
    last = snapshot["fetched_at"].max()
    universe = defilens.universe(history, top=TOP, max_age="3h")
    assert defilens.members(universe, last + dt.timedelta(hours=2)).height == TOP
    assert defilens.members(universe, last + dt.timedelta(hours=4)).height == 0
    assert universe["valid_to"].null_count() == 0
    # Between rounds two hours apart, three hours is no lapse.
    assert defilens.universe(history, top=TOP).height == universe.height


def test_the_research_reads_keep_a_token_only_while_it_was_a_member(history: Path) -> None:
    universe = defilens.universe(history, top=TOP)
    snapshot = _snapshot(history)

    rows = defilens.panel(history, "snapshot", columns=["market_cap_rank"], universe=universe).collect()
    assert rows.height == snapshot.filter(pl.col("market_cap_rank") <= TOP).height
    assert (rows["market_cap_rank"] <= TOP).all()

    candles = defilens.panel(history, "indicators", intervals="1h", indicators="rsi14").collect()
    kept = defilens.panel(history, "indicators", intervals="1h", indicators="rsi14", universe=universe).collect()
    assert 0 < kept.height < candles.height
    expected = candles.join(
        defilens.members(universe, candles["first_seen_at"].unique().sort()),
        left_on=["token", "first_seen_at"],
        right_on=["token", "at"],
        how="semi",
    )
    assert kept.sort("token", "candle_close").equals(expected.sort("token", "candle_close"))

    moments = _moments(snapshot)[5:40:7]
    answer = defilens.asof(history, moments, frame="snapshot", columns=["market_cap_rank"], universe=universe)
    assert isinstance(answer, pl.DataFrame)
    assert (answer["market_cap_rank"] <= TOP).all() and answer.height == TOP * len(moments)
    values = defilens.asof(history, moments, intervals="1h", indicators="rsi14", universe=universe)
    assert isinstance(values, pl.DataFrame)
    members = defilens.members(universe, moments)
    assert set(values.select("at", "token").unique().rows()) == set(members.select("at", "token").rows())

    decisions = pl.DataFrame({"token": TOKENS * 2, "at": [moments[0]] * len(TOKENS) + [moments[1]] * len(TOKENS)})
    labels = defilens.forward_returns(history, decisions, "4h", universe=universe)
    assert set(labels.select("at", "token").rows()) == set(
        members.filter(pl.col("at") <= moments[1]).select("at", "token").rows()
    )


def test_a_rank_of_0_or_below_is_unranked_not_first(tmp_path: Path) -> None:
    # Some services rank a token they do not rank as 0: "at most top" would make it a member.
    def unranked(name: str, frame: pl.DataFrame) -> pl.DataFrame:
        if name != "snapshot":
            return frame
        token, rank = pl.col("token"), pl.col("market_cap_rank")
        broken = pl.when(token == "cardano").then(0).when(token == "tron").then(-3).otherwise(rank)
        return frame.with_columns(broken.cast(frame.schema["market_cap_rank"]).alias("market_cap_rank"))

    root = tmp_path / "h"
    random_walk_history(str(root), 11, TOKENS, rounds=4, every=dt.timedelta(hours=2), edit=unranked)
    found = defilens.universe(root, top=TOP)
    assert not {"cardano", "tron"} & set(found["token"]), found
    assert found["rank"].min() >= 1
    every = defilens.members(
        found, defilens.scan(root, "snapshot").select("fetched_at").unique().collect()["fetched_at"]
    )
    assert every.group_by("at").len()["len"].max() <= TOP


def test_bad_rules_say_what_to_do(history: Path) -> None:
    with pytest.raises(ValueError, match="market_cap_rank"):
        defilens.universe(history, top=10, by="market_cap_rnk")
    with pytest.raises(ValueError, match="a number"):
        defilens.universe(history, top=10, by="symbol")
    for top in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="top must be a positive int"):
            defilens.universe(history, top=top)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="universe has no valid_from"):
        defilens.members(pl.DataFrame({"token": ["bitcoin"]}), dt.datetime(2026, 3, 2))
    with pytest.raises(TypeError, match="universe must be"):
        defilens.panel(history, "snapshot", universe="top 10").collect()  # type: ignore[arg-type]


def test_the_universe_of_an_empty_answer_is_empty_and_typed(history: Path) -> None:
    members = defilens.members(defilens.universe(history, top=TOP), dt.datetime(2020, 1, 1))
    assert members.height == 0 and members.schema["at"] == pl.Datetime("ms", "UTC")
