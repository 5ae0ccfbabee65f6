"""Events as episodes: events of one token that follow each other within a gap count as one
episode, entered at its first event that can be priced; the evaluation of an event reports both
counts and its t over episodes, with the same calibrated test as over events."""

from __future__ import annotations

import datetime as dt
import math
from typing import Dict, List, Tuple

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from study_histories import random_walk_history

import defilens
from defilens.research._evaluate import independent_windows, spacing_of
from defilens.research._inference import ewc_test

TOKENS = [f"coin-{i}" for i in range(12)]


@pytest.fixture(scope="module")
def labels(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    """12 tokens, 30-minute rounds for two days, hourly decisions; ``event`` is the top fifth of a
    persistent random score (so events cluster in runs), ``sparse`` a rarer one."""
    root = str(tmp_path_factory.mktemp("episodes"))
    random_walk_history(root, 31, TOKENS, 96, dt.timedelta(minutes=30), skip={40: {"coin-3", "coin-4"}})
    grid = defilens.decision_times(root, "1h")
    rng = np.random.default_rng(4)
    score = np.empty((grid.len(), len(TOKENS)))
    score[0] = rng.normal(size=len(TOKENS))
    for d in range(1, grid.len()):
        score[d] = 0.9 * score[d - 1] + math.sqrt(1 - 0.81) * rng.normal(size=len(TOKENS))
    frame = pl.DataFrame(
        {"at": np.repeat(grid.to_numpy(), len(TOKENS)), "token": TOKENS * grid.len(), "score": score.ravel()}
    ).with_columns(
        pl.col("at").cast(pl.Datetime("ms", "UTC")),
        (pl.col("score") > pl.col("score").quantile(0.8).over("at")).alias("event"),
        (pl.col("score") > pl.col("score").quantile(0.95).over("at")).alias("sparse"),
    )
    return defilens.forward_returns(root, frame, ["1h", "4h"])


def hand_episodes(
    labels: pl.DataFrame, signal: str, gap: dt.timedelta
) -> List[Tuple[str, dt.datetime, dt.datetime, int]]:
    """Episodes grouped by hand: per token, its events in time; a new episode wherever the next
    event comes more than ``gap`` after the one before."""
    events: Dict[str, List[dt.datetime]] = {}
    for token, at in labels.filter(pl.col(signal)).select("token", "at").unique().iter_rows():
        events.setdefault(token, []).append(at)
    found = []
    for token, times in events.items():
        times.sort()
        start = last = times[0]
        count = 1
        for at in times[1:]:
            if at - last > gap:
                found.append((token, start, last, count))
                start, count = at, 0
            last = at
            count += 1
        found.append((token, start, last, count))
    return sorted(found)


@pytest.mark.parametrize("gap", [None, "3h", dt.timedelta(minutes=30)])
def test_episodes_equal_a_grouping_by_hand(labels: pl.DataFrame, gap) -> None:
    evaluation = defilens.evaluate(labels, "event", episode_gap=gap)
    width = {None: dt.timedelta(hours=1), "3h": dt.timedelta(hours=3)}.get(gap, gap)  # None: the decisions' spacing
    expected = hand_episodes(labels, "event", width)
    found = sorted(evaluation.episodes.select("token", "start", "end", "events").iter_rows())
    assert found == expected
    assert evaluation.episodes["episode"].n_unique() == len(expected)
    events = labels.filter(pl.col("event")).select("token", "at").unique().height
    assert evaluation.episodes["events"].sum() == events
    if gap == dt.timedelta(minutes=30):  # shorter than the decisions' spacing: every event its own episode
        assert len(expected) == events
    else:
        assert len(expected) < events / 2  # a persistent score's events cluster


def test_the_t_over_episodes_is_the_calibrated_test_of_each_episode_entered_once(labels: pl.DataFrame) -> None:
    evaluation = defilens.evaluate(labels, "event", episode_gap="3h")
    episodes = hand_episodes(labels, "event", dt.timedelta(hours=3))
    spacing = spacing_of(labels.filter(pl.col("forward_return").is_not_null())["at"])
    for horizon in (dt.timedelta(hours=1), dt.timedelta(hours=4)):
        one = labels.filter((pl.col("horizon") == horizon) & pl.col("forward_return").is_not_null())
        means = dict(one.group_by("at").agg(pl.col("forward_return").mean()).iter_rows())
        priced = {
            (token, at): r - means[at]
            for token, at, r in one.filter(pl.col("event")).select("token", "at", "forward_return").iter_rows()
        }
        # Each episode entered at its first event with a forward return at this horizon.
        entered: Dict[dt.datetime, float] = {}
        count = 0
        for token, start, end, _ in episodes:
            firsts = sorted(at for (t, at) in priced if t == token and start <= at <= end)
            if firsts:
                entered[firsts[0]] = entered.get(firsts[0], 0.0) + priced[(token, firsts[0])]
                count += 1
        series = [entered.get(at, 0.0) for at in sorted(means)]
        test = ewc_test(series, independent_windows(len(series), spacing, horizon))
        row = evaluation.summary.filter(pl.col("horizon") == horizon).row(0, named=True)
        assert row["episodes"] == count
        assert row["events"] > count
        assert row["episode_excess"] == pytest.approx(sum(entered.values()) / count, rel=1e-12)
        if test.t is None:
            assert row["episode_t"] is None and row["episode_p"] is None
        else:
            assert row["episode_t"] == pytest.approx(test.t, rel=1e-9)
            assert row["episode_p"] == pytest.approx(test.p_value, rel=1e-9)
    # An episode whose first event missed its entry round is entered at its next one: the label
    # of a round a token missed is no reason to drop the episode.
    assert labels.filter(pl.col("event") & pl.col("forward_return").is_null()).height > 0


def test_episodes_do_not_depend_on_the_rows_order(labels: pl.DataFrame) -> None:
    first = defilens.evaluate(labels, "event")
    for seed in range(3):
        shuffled = defilens.evaluate(labels.sample(fraction=1.0, shuffle=True, seed=seed), "event")
        assert_frame_equal(shuffled.episodes, first.episodes)
        assert_frame_equal(shuffled.summary, first.summary, check_exact=False, rel_tol=1e-12)


def test_the_summary_prints_both_counts_and_the_t_over_episodes(labels: pl.DataFrame) -> None:
    evaluation = defilens.evaluate(labels, "sparse", episode_gap="2h")
    text = str(evaluation)
    assert "episodes" in text and "ep. t" in text
    row = evaluation.summary.row(0, named=True)
    assert f"{row['events']:,}" in text and f"{row['episodes']:,}" in text
    assert "episodes of one token's events within 2h" in text


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"episode_gap": "soon"}, ValueError, "episode_gap"),
        ({"episode_gap": -1}, TypeError, "episode_gap"),
        ({"episode_gap": "-1h"}, ValueError, "episode_gap"),
    ],
)
def test_a_bad_gap_says_what_to_give(labels: pl.DataFrame, kwargs, error, words) -> None:
    with pytest.raises(error, match=words):
        defilens.evaluate(labels, "event", **kwargs)


def test_a_score_has_no_episodes(labels: pl.DataFrame) -> None:
    with pytest.raises(ValueError, match="episodes group events"):
        defilens.evaluate(labels, "score", episode_gap="2h")
    assert defilens.evaluate(labels, "score").episodes.is_empty()
