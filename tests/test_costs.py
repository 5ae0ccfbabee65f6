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

LIQUID = ["bitcoin", "ethereum", "tether", "solana", "ripple", "binancecoin", "dogecoin", "cardano"]
TOKENS = [*LIQUID, *[f"coin-{i}" for i in range(10)]]
START = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
NOTIONALS = [1_000.0, 50_000.0, 2_000_000.0]


def _edit(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """coin-2's markets were not fetched in rounds 5 to 9 (its older fetch stands), and one of
    ripple's pairs has no price and another no depth at every fetch."""
    if name != "markets":
        return frame
    missed = (pl.col("token") == "coin-2") & pl.col("fetched_at").is_between(
        START + dt.timedelta(minutes=150), START + dt.timedelta(minutes=270)
    )
    place = pl.int_range(pl.len()).over("token", "fetched_at")
    edited = pl.col("token") == "ripple"
    return frame.filter(~missed).with_columns(
        pl.when(edited & (place == 0)).then(None).otherwise(pl.col("price")).alias("price"),
        pl.when(edited & (place == 1))
        .then(0.0)
        .otherwise(pl.col("depth_usd_positive_two"))
        .alias("depth_usd_positive_two"),
    )


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """18 tokens, 30-minute rounds for a day, markets fetched."""
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
        for token in ["bitcoin", "tether", "ripple", "coin-2", "coin-7"]:
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


# -- the evaluation net of costs ---------------------------------------------------------------------


def quantile_of(frame: pl.DataFrame, signal: str, quantiles: int = 5) -> pl.DataFrame:
    """Quantiles as `evaluate` assigns them: average ranks within each decision and horizon."""
    rank = pl.col(signal).rank("average").over("horizon", "at")
    return frame.with_columns(
        (((rank - 0.5) * quantiles / pl.len().over("horizon", "at")).floor().cast(pl.Int64) + 1).alias("quantile")
    )


def hand_books(markets: pl.DataFrame, frame: pl.DataFrame) -> Dict[tuple, Dict[str, float]]:
    """Per (token, moment) of the labels' entries and exits, the half-spread and the slope of
    each side's cost (per USD), computed by hand from the markets rows."""
    books = {}
    for token, moment in set(frame.select("token", "entry_at").rows()) | set(frame.select("token", "exit_at").rows()):
        rows = latest_rows(markets, token, moment)
        half = hand_cost(rows, 0.0, "buy")
        books[(token, moment)] = {
            "half": half,
            "buy": hand_cost(rows, 1.0, "buy") - half,
            "sell": hand_cost(rows, 1.0, "sell") - half,
        }
    return books


def knowing(labels: pl.DataFrame) -> pl.DataFrame:
    """``knows``: a score that knows the 1h return (its rank across tokens, plus noise of one
    rank), and ``knows_event``, its top fifth."""
    rng = np.random.default_rng(8)
    known = labels.filter(pl.col("horizon") == dt.timedelta(hours=1)).select(
        "at", "token", pl.col("forward_return").rank().over("at").alias("_rank")
    )
    noise = pl.Series(rng.normal(0, 1.0, size=known.height))
    known = known.with_columns((pl.col("_rank") + noise).alias("knows"))
    return labels.join(known.select("at", "token", "knows"), on=["at", "token"], how="left").with_columns(
        (pl.col("knows") > pl.col("knows").quantile(0.8).over("at", "horizon")).alias("knows_event")
    )


@pytest.fixture(scope="module")
def priced(history: Path) -> pl.DataFrame:
    """Every token's labels at $100k a trade, with a random score and one that knows the return."""
    labels = defilens.forward_returns(history, random_scores(history, seed=3), ["1h", "4h"], notional=100_000.0)
    return knowing(labels)


@pytest.fixture(scope="module")
def liquid(history: Path) -> pl.DataFrame:
    """The same, among the tokens with more than $1M of bids within 2% at the moment."""
    deep = defilens.universe(history, None, "market_cap", where=pl.col("depth_usd_negative_two") > 1e6)
    labels = defilens.forward_returns(
        history, random_scores(history, seed=3), ["1h", "4h"], notional=100_000.0, universe=deep
    )
    return knowing(labels)


def test_quantiles_and_the_spread_net_of_costs_equal_a_hand_computation(history: Path, priced: pl.DataFrame) -> None:
    markets = markets_of(history)
    evaluation = defilens.evaluate(priced, "score")
    rows = quantile_of(priced.filter(pl.col("forward_return").is_not_null()), "score")
    books = hand_books(markets, rows)
    notional = 100_000.0
    for horizon in (dt.timedelta(hours=1), dt.timedelta(hours=4)):
        one = rows.filter(pl.col("horizon") == horizon)
        table = evaluation.quantiles.filter(pl.col("horizon") == horizon).sort("quantile")
        for q in range(1, 6):
            mine = one.filter(pl.col("quantile") == q)
            assert table.filter(pl.col("quantile") == q)["mean_net_return"][0] == pytest.approx(
                mine["net_return"].mean(), rel=1e-9
            )

        def drag(row: Dict, short: bool) -> float:
            entry, exit_ = books[(row["token"], row["entry_at"])], books[(row["token"], row["exit_at"])]
            r = row["forward_return"]
            if short:  # sold at the entry, bought back at the exit
                ce = entry["half"] + entry["sell"] * notional
                cx = exit_["half"] + exit_["buy"] * notional
                return ce + cx * (1 + r)
            ce = entry["half"] + entry["buy"] * notional
            cx = exit_["half"] + exit_["sell"] * notional
            return (1 + r) * (ce + cx) / (1 + ce)

        top = one.filter(pl.col("quantile") == 5).to_dicts()
        bottom = one.filter(pl.col("quantile") == 1).to_dicts()
        row = evaluation.summary.filter(pl.col("horizon") == horizon).row(0, named=True)
        expected = (
            row["top_minus_bottom"]
            - sum(drag(r, False) for r in top) / len(top)
            - sum(drag(r, True) for r in bottom) / len(bottom)
        )
        assert row["net_top_minus_bottom"] == pytest.approx(expected, rel=1e-9)
        assert row["net_top_minus_bottom"] < row["top_minus_bottom"]
    # The same labels priced at another size: costs grow with it.
    bigger = defilens.evaluate(priced, "score", notional=1_000_000.0)
    assert (bigger.summary["net_top_minus_bottom"] < evaluation.summary["net_top_minus_bottom"]).all()
    assert bigger.notional == 1_000_000.0 and evaluation.notional == 100_000.0


def test_turnover_of_the_top_and_bottom_and_its_cost_equal_a_hand_computation(
    history: Path, priced: pl.DataFrame
) -> None:
    markets = markets_of(history)
    notional = 100_000.0
    evaluation = defilens.evaluate(priced, "score")
    rows = quantile_of(priced.filter(pl.col("forward_return").is_not_null()), "score")
    for horizon in (dt.timedelta(hours=1), dt.timedelta(hours=4)):
        one = rows.filter(pl.col("horizon") == horizon)
        decisions = one["at"].unique().sort().to_list()
        legs = {
            (at, leg): set(one.filter((pl.col("at") == at) & (pl.col("quantile") == q))["token"].to_list())
            for at in decisions
            for leg, q in (("top", 5), ("bottom", 1))
        }
        entries = dict(((t, at), e) for t, at, e in one.select("token", "at", "entry_at").rows())
        turnover = {"top": [], "bottom": []}
        costs_per_decision = []
        for before, at in itertools.pairwise(decisions):
            spent = 0.0
            for leg in ("top", "bottom"):
                now, then = legs[(at, leg)], legs[(before, leg)]
                turnover[leg].append(len(now - then) / len(now))
                for token in (now - then) | (then - now):
                    moment = entries.get((token, at), entries.get((token, before)))
                    buying = (leg == "top") == (token in now)  # entering the long leg or leaving the short one
                    spent += hand_cost(latest_rows(markets, token, moment), notional, "buy" if buying else "sell")
            costs_per_decision.append(spent / (len(legs[(at, "top")]) + len(legs[(at, "bottom")])))
        row = evaluation.summary.filter(pl.col("horizon") == horizon).row(0, named=True)
        assert row["top_turnover"] == pytest.approx(sum(turnover["top"]) / len(turnover["top"]), rel=1e-12)
        assert row["bottom_turnover"] == pytest.approx(sum(turnover["bottom"]) / len(turnover["bottom"]), rel=1e-12)
        assert row["turnover_cost"] == pytest.approx(sum(costs_per_decision) / len(costs_per_decision), rel=1e-9)
        assert 0.5 < row["top_turnover"] < 1.0  # a random score changes most of its top each hour


def hand_capacity(history: Path, frame: pl.DataFrame, horizon: dt.timedelta, long: str, short: Optional[str]) -> float:
    """The notional at which the net spread (or events' net excess) reaches zero, by hand and to
    first order: per decision the gross edge g less the spread part a less the slope b times N,
    so N = (mean g - mean a) / mean b, with every cost from the markets rows."""
    markets = markets_of(history)
    one = frame.filter((pl.col("horizon") == horizon) & pl.col("forward_return").is_not_null())
    one = one.with_columns((pl.col("forward_return") - pl.col("forward_return").mean().over("at")).alias("excess"))
    books = hand_books(markets, one)
    g, a, b = [], [], []
    for at in one["at"].unique().sort().to_list():
        here = one.filter(pl.col("at") == at)
        legs = [(here.filter(pl.col(long)).to_dicts(), False)]
        if short is not None:
            legs.append((here.filter(pl.col(short)).to_dicts(), True))
        gd = ad = bd = 0.0
        for rows, is_short in legs:
            if not rows:
                continue
            sign = -1.0 if is_short else 1.0
            gd += sign * sum(r["excess"] for r in rows) / (len(rows) if short is not None else 1)
            for r in rows:
                entry, exit_ = books[(r["token"], r["entry_at"])], books[(r["token"], r["exit_at"])]
                slope = entry["sell"] + exit_["buy"] if is_short else entry["buy"] + exit_["sell"]
                scale = len(rows) if short is not None else 1
                ad += (entry["half"] + exit_["half"]) / scale
                bd += slope / scale
        g.append(gd)
        a.append(ad)
        b.append(bd)
    return (sum(g) - sum(a)) / sum(b)


def test_the_capacity_of_a_signal_that_knows_the_return_is_the_notional_computed_by_hand(
    history: Path, liquid: pl.DataFrame
) -> None:
    hour = dt.timedelta(hours=1)
    priced = liquid
    assert 8 <= priced["token"].n_unique() < len(TOKENS)
    evaluation = defilens.evaluate(priced.filter(pl.col("horizon") == hour), "knows")
    row = evaluation.summary.row(0, named=True)
    assert row["top_minus_bottom"] > 0.01  # a known edge, far above the spread
    ranked = quantile_of(priced.filter((pl.col("horizon") == hour) & pl.col("forward_return").is_not_null()), "knows")
    ranked = ranked.with_columns((pl.col("quantile") == 5).alias("_top"), (pl.col("quantile") == 1).alias("_bottom"))
    expected = hand_capacity(history, ranked, hour, "_top", "_bottom")
    assert 1e4 < expected < 1e9
    assert row["capacity"] == pytest.approx(expected, rel=0.2)
    assert row["capacity_low"] < row["capacity"] < row["capacity_high"]
    # At its capacity the net spread is zero; the curve of net against notional crosses there.
    curve = evaluation.net.filter(pl.col("horizon") == hour).sort("notional")
    assert curve["net"].is_sorted(descending=True)
    assert curve["net"][0] > 0 > curve["net"][-1]
    text = str(evaluation)
    assert "capacity" in text and "net of costs at $100k a trade" in text


def test_the_capacity_of_an_event_that_knows_the_return_is_the_notional_computed_by_hand(
    history: Path, liquid: pl.DataFrame
) -> None:
    hour = dt.timedelta(hours=1)
    priced = liquid
    frame = priced.filter(pl.col("horizon") == hour)
    evaluation = defilens.evaluate(frame, "knows_event")
    row = evaluation.summary.row(0, named=True)
    events = frame.filter(pl.col("knows_event") & pl.col("forward_return").is_not_null())
    assert row["event_net_excess"] == pytest.approx(
        row["event_excess"] - (events["forward_return"] - events["net_return"]).mean(), rel=1e-9
    )
    expected = hand_capacity(history, frame, hour, "knows_event", None)
    assert row["capacity"] == pytest.approx(expected, rel=0.2)


def test_a_random_score_has_no_capacity_to_speak_of(priced: pl.DataFrame) -> None:
    evaluation = defilens.evaluate(priced, "score")
    for row in evaluation.summary.iter_rows(named=True):
        # Nothing to trade: the net is below zero at any size, or its interval reaches zero.
        assert row["capacity"] == 0.0 or row["capacity_low"] == 0.0


def test_the_plot_draws_net_return_against_notional(priced: pl.DataFrame, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    figure = defilens.evaluate(priced, "knows").plot()
    assert len(figure.axes) == 3
    net = figure.axes[2]
    assert net.get_xscale() == "log" and "notional" in net.get_xlabel()
    assert len(net.lines) >= 2  # a curve a horizon (and the zero line)
    event = defilens.evaluate(priced, "knows_event").plot()
    assert len(event.axes) == 2 and event.axes[1].get_xscale() == "log"


def test_trades_larger_than_the_book_are_counted_and_said(priced: pl.DataFrame, liquid: pl.DataFrame) -> None:
    evaluation = defilens.evaluate(priced, "score")
    rows = priced.filter(pl.col("forward_return").is_not_null())
    thinner = pl.min_horizontal(
        pl.col("entry_market").struct.field("depth_usd_positive_two"),
        pl.col("exit_market").struct.field("depth_usd_negative_two"),
    )
    expected = rows.filter(thinner < 100_000.0).height
    assert expected > 0 and evaluation.beyond_depth == expected
    assert f"{expected:,} trades exceed their token's depth within 2%" in str(evaluation)
    assert defilens.evaluate(liquid, "score").beyond_depth == 0


def test_a_fixed_cost_is_evaluated_net_without_a_capacity(history: Path) -> None:
    labels = defilens.forward_returns(history, random_scores(history), "1h", costs=0.002)
    evaluation = defilens.evaluate(labels, "score")
    row = evaluation.summary.row(0, named=True)
    assert row["capacity"] is None and evaluation.net.is_empty()
    assert row["net_top_minus_bottom"] < row["top_minus_bottom"]
    assert "net of a fixed cost of +0.20% a trade each way" in str(evaluation)
    with pytest.raises(ValueError, match="fixed cost"):
        defilens.evaluate(labels, "score", notional=1_000.0)
    with pytest.raises(ValueError, match="notional="):
        defilens.evaluate(
            labels.drop("notional", "entry_cost", "exit_cost", "net_return", "entry_market", "exit_market"),
            "score",
            notional=1_000.0,
        )
