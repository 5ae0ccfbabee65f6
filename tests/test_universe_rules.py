"""Universes that exclude and say why: `universe(..., exclude=, where=)` drops ids and tokens
failing a rule over the snapshot, the info and the markets as each stood at the moment (never
later), equals a brute-force read at every moment, and the rule travels with the study to the
history's journal."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Dict, List, Optional

import polars as pl
import pytest
from study_histories import random_walk_history

import defilens

pytest.importorskip("deltalake")

GENERIC = [f"coin-{i}" for i in range(14)]
TOKENS = ["bitcoin", "ethereum", "tether", "usd-coin", *GENERIC]
START = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)


def _edit(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """From the seventh round on, coin-5 is listed on two pairs only (venues that went away), and
    coin-7's markets were not fetched in rounds 3 to 5 (its latest fetch stands)."""
    if name != "markets":
        return frame
    late = pl.col("fetched_at") >= START + dt.timedelta(hours=6)
    gone = (pl.col("token") == "coin-5") & late & (pl.int_range(pl.len()).over("token", "fetched_at") >= 2)
    missed = (pl.col("token") == "coin-7") & pl.col("fetched_at").is_between(
        START + dt.timedelta(hours=3), START + dt.timedelta(hours=5)
    )
    return frame.filter(~gone & ~missed)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """18 tokens, hourly rounds for twelve hours, markets fetched; coin-3 missed round 4."""
    root = tmp_path_factory.mktemp("rules") / "h"
    random_walk_history(
        str(root), 17, TOKENS, 12, dt.timedelta(hours=1), skip={4: {"coin-3"}}, edit=_edit, markets=True
    )
    return root


def _latest(frame: pl.DataFrame, at: dt.datetime) -> pl.DataFrame:
    return frame.filter(pl.col("fetched_at") <= at).sort("fetched_at").group_by("token").last()


def view_at(root: Path, at: dt.datetime) -> pl.DataFrame:
    """By hand: each token's latest snapshot, info and markets fetch at or before ``at``."""
    snapshot = _latest(defilens.scan(root, "snapshot").collect(), at)
    info = defilens.scan(root, "info").collect()
    info = _latest(info.select("token", "fetched_at", *[c for c in info.columns if c not in snapshot.columns]), at)
    markets = defilens.scan(root, "markets").collect().filter(pl.col("fetched_at") <= at)
    last = markets.group_by("token").agg(pl.col("fetched_at").max().alias("last"))
    venues = (
        markets.join(last, on="token")
        .filter(pl.col("fetched_at") == pl.col("last"))
        .group_by("token")
        .agg(
            pl.col("exchange_name").n_unique().cast(pl.Int64).alias("venues"),
            pl.len().cast(pl.Int64).alias("pairs"),
            pl.col("volume_usd").sum(),
            pl.col("depth_usd_positive_two").sum(),
            pl.col("depth_usd_negative_two").sum(),
        )
    )
    return snapshot.join(info.drop("fetched_at"), on="token", how="left").join(venues, on="token", how="left")


def expected_members(
    view: pl.DataFrame, top: Optional[int], by: str, exclude: List[str], where: Optional[pl.Expr]
) -> Dict[str, int]:
    eligible = view.filter(~pl.col("token").is_in(exclude), pl.col(by).is_not_null())
    if where is not None:
        eligible = eligible.filter(where.fill_null(False))
    if by.endswith("_rank"):
        eligible = eligible.filter(pl.col(by) >= 1).sort(by, "token")
        chosen = eligible if top is None else eligible.head(top)
        return dict(chosen.select("token", pl.col(by).cast(pl.Int64)).rows())
    ordered = eligible.sort(pl.col(by), "token", descending=[True, False])
    chosen = ordered if top is None else ordered.head(top)
    return {token: place + 1 for place, token in enumerate(chosen["token"].to_list())}


def moments_of(root: Path) -> List[dt.datetime]:
    fetched = sorted(
        set(defilens.scan(root, "snapshot").select("fetched_at").collect()["fetched_at"].to_list())
        | set(defilens.scan(root, "markets").select("fetched_at").collect()["fetched_at"].to_list())
    )
    halfway = [a + (b - a) / 2 for a, b in itertools.pairwise(fetched)]
    return sorted(set(fetched) | set(halfway) | {fetched[0] - dt.timedelta(minutes=1)})


RULES = [
    ("exclusions by id", 6, "market_cap_rank", ["bitcoin", "tether", "usd-coin"], None),
    (
        "stablecoins by category, and venues",
        5,
        "market_cap_rank",
        [],
        ~pl.col("categories").list.contains("Stablecoins") & (pl.col("venues") >= 4),
    ),
    ("volume, by market cap", 4, "market_cap", ["ethereum"], pl.col("total_volume") > 2e5),
    ("an info column, every token that passes", None, "market_cap_rank", [], pl.col("reddit").is_not_null()),
    ("depth within 2%", 5, "total_volume", [], pl.col("depth_usd_negative_two") > 5e4),
]


@pytest.mark.parametrize("name, top, by, exclude, where", RULES, ids=[r[0] for r in RULES])
def test_a_universe_with_exclusions_equals_a_brute_force_read(history: Path, name, top, by, exclude, where) -> None:
    universe = defilens.universe(history, top, by, exclude=exclude, where=where)
    moments = moments_of(history)
    found = defilens.members(universe, moments)
    changed = 0
    previous: Optional[Dict[str, int]] = None
    for at in moments:
        expected = expected_members(view_at(history, at), top, by, exclude, where)
        assert dict(found.filter(pl.col("at") == at).select("token", "rank").rows()) == expected, (name, at)
        changed += previous is not None and expected != previous
        previous = expected
    assert changed >= 1, "the rule never changed the members: the test needs a change"


def test_the_rules_columns_are_taken_when_they_were_knowable(history: Path) -> None:
    # coin-5 lost its venues from the seventh round: a member by venues before, not after.
    universe = defilens.universe(history, None, exclude=[], where=pl.col("venues") >= 3)
    before = defilens.members(universe, START + dt.timedelta(hours=5, minutes=30))
    after = defilens.members(universe, START + dt.timedelta(hours=6, minutes=30))
    assert "coin-5" in before["token"].to_list() and "coin-5" not in after["token"].to_list()
    # coin-7's markets were not fetched for three rounds: its last fetch stands meanwhile.
    assert "coin-7" in defilens.members(universe, START + dt.timedelta(hours=4))["token"].to_list()


def test_the_rule_is_recorded_with_the_study(history: Path, tmp_path: Path) -> None:
    where = ~pl.col("categories").list.contains("Stablecoins")
    universe = defilens.universe(history, 8, exclude=["bitcoin"], where=where)
    rule = universe["rule"].unique().to_list()
    assert rule == [f"top 8 by market_cap_rank; excluding bitcoin; where {where}"]
    assert defilens.universe(history, 8)["rule"].unique().to_list() == ["top 8 by market_cap_rank"]
    decisions = defilens.decision_times(history, "1h").to_frame().join(pl.DataFrame({"token": TOKENS}), how="cross")
    decisions = decisions.with_columns((pl.col("token").hash() % 7).cast(pl.Float64).alias("score"))
    labels = defilens.forward_returns(history, decisions, "1h", universe=universe)
    assert labels["universe"].unique().to_list() == rule
    defilens.evaluate(labels, "score", history=history, min_tokens=2)
    journal = defilens.journal(history)
    assert journal["universe"].to_list()[-1] == rule[0]
    # A universe typed by hand (no rule) is recorded as such.
    hand = universe.drop("rule")
    unruled = defilens.forward_returns(history, decisions, "1h", universe=hand)
    assert unruled["universe"].unique().to_list() == ["given without a rule"]


def test_a_journal_written_before_universes_were_recorded_still_reads(history: Path, tmp_path: Path) -> None:
    from defilens.history import JOURNAL, append_table, open_for_reading

    root = tmp_path / "old"
    random_walk_history(str(root), 3, GENERIC[:5], 4, dt.timedelta(hours=1))
    old = pl.DataFrame(
        [
            {
                "recorded_at": START,
                "signal": "old",
                "kind": "score",
                "fingerprint": "f" * 32,
                "horizons": "1h",
                "decisions": 3,
                "tokens": 5,
                "p_value": 0.5,
            }
        ],
        schema={
            "recorded_at": pl.Datetime("ms", "UTC"),
            "signal": pl.String,
            "kind": pl.String,
            "fingerprint": pl.String,
            "horizons": pl.String,
            "decisions": pl.Int64,
            "tokens": pl.Int64,
            "p_value": pl.Float64,
        },
    )
    append_table(open_for_reading(str(root), None), JOURNAL, old)
    read = defilens.journal(root)
    assert read["signal"].to_list() == ["old"] and read["universe"].to_list() == [None]
    universe = defilens.universe(root, 3, "market_cap")
    decisions = defilens.decision_times(root, "1h").to_frame().join(pl.DataFrame({"token": GENERIC[:5]}), how="cross")
    decisions = decisions.with_columns((pl.col("token").hash() % 5).cast(pl.Float64).alias("score"))
    labels = defilens.forward_returns(root, decisions, "1h", universe=universe)
    evaluation = defilens.evaluate(labels, "score", history=root, min_tokens=2)
    assert evaluation.tries == 2
    assert defilens.journal(root)["universe"].to_list() == [None, "top 3 by market_cap"]


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"where": pl.col("venue") >= 3}, ValueError, "did you mean 'venues'"),
        ({"where": "venues >= 3"}, TypeError, "polars expression"),
        ({"where": pl.col("venues") + 1}, TypeError, "true or false"),
        ({"exclude": "bitcoin"}, TypeError, "list of token ids"),
        ({"exclude": [1, 2]}, TypeError, "list of token ids"),
        ({"top": 0}, ValueError, "top"),
    ],
)
def test_bad_rules_say_what_to_give(history: Path, kwargs, error, words) -> None:
    arguments = {"top": 5, **kwargs}
    with pytest.raises(error, match=words):
        defilens.universe(history, **arguments)


def test_only_the_sandboxs_stablecoins_are_tagged_stablecoins() -> None:
    """A rule over categories must find the stablecoins and only them: generic ids float."""
    ids = ["tether", "usd-coin", "bitcoin", *[f"coin-{i}" for i in range(300)]]
    bodies = [defilens.testing.listing_body(token, seed=11, now="2026-01-05T00:00:00Z") for token in ids]
    snapshot = defilens.parse_tokens(bodies, ids).snapshot
    tagged = snapshot.filter(pl.col("categories").list.contains("Stablecoins"))["token"].to_list()
    assert sorted(tagged) == ["tether", "usd-coin"]
    assert snapshot.filter(pl.col("categories").list.len() > 0).height > 200  # the others keep their tags


def test_the_look_ahead_check_passes_a_study_over_a_universe_with_a_markets_rule(history: Path) -> None:
    def study(root: str) -> pl.DataFrame:
        universe = defilens.universe(root, 6, "total_volume", where=pl.col("venues") >= 3)
        return defilens.members(universe, defilens.decision_times(root, "1h"))

    report = defilens.lookahead_check(study, str(history), cuts=3)
    assert report.ok, report
    assert report.cuts["checked"].sum() > 0
