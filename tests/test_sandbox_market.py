"""The Sandbox as a market: its indicators against TA-Lib on the same candles, its clock, and
the relations a real market keeps (prices, ranks, exchanges)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import urllib.request

import numpy as np
import pattern_rules
import polars as pl
import pytest
import talib

import defilens
from defilens._core import INTERVAL_MS
from defilens.testing import Sandbox

NOW = "2026-03-14T15:07:00Z"
TA_INTERVALS = ["5m", "15m", "1h", "24h", "1w"]
INTERVAL_LENGTH = {name: dt.timedelta(milliseconds=ms) for name, ms in INTERVAL_MS.items()}
TOKENS = ["bitcoin", "ethereum", "dogecoin", "tether", "some-small-cap", "another-token"]


@pytest.fixture(scope="module")
def market():
    with Sandbox(now=NOW, seed=4) as sandbox:
        client = defilens.Client(base_url=sandbox.url, api_key="k")
        frames = client.fetch(TOKENS)
        yield sandbox, frames


def _indicators(frames, token: str, interval: str) -> dict:
    rows = frames.indicators.filter(pl.col("token") == token, pl.col("interval") == interval)
    return dict(zip(rows["indicator"].to_list(), rows["value"].to_list(), strict=True))


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9 * max(1.0, abs(b)))


@pytest.mark.parametrize("interval", TA_INTERVALS)
def test_indicators_match_talib_on_the_same_candles(market, interval):
    sandbox, frames = market
    for token in TOKENS:
        closes = sandbox.candles(token, interval)["close"].to_numpy()
        got = _indicators(frames, token, interval)
        for period in (7, 14, 25):
            assert _close(got[f"rsi{period}"], talib.RSI(closes, period)[-1]), (token, interval, period)
        for period in (5, 20, 100):
            assert _close(got[f"sma{period}"], talib.SMA(closes, period)[-1]), (token, interval, period)
        upper, middle, lower = (band[-1] for band in talib.BBANDS(closes, 20, 2, 2))
        assert _close(got["upper_bband"], upper) and _close(got["lower_bband"], lower), (token, interval)
        assert got["middle_bband"] == got["sma20"]  # exactly: one number by definition
        assert _close(got["middle_bband"], middle)
        line, signal, _ = talib.MACD(closes, 12, 26, 9)
        state = frames.signals.filter(
            pl.col("token") == token, pl.col("interval") == interval, pl.col("indicator") == "macd"
        )["value"].item()
        if abs(line[-1] - signal[-1]) > 1e-9 * closes[-1]:
            assert state == ("Cross Above" if line[-1] > signal[-1] else "Cross Below"), (token, interval)


def test_candlestick_rules_match_talib(market):
    """Doji and engulfing follow TA-Lib's definitions; checked at the last candle of many series."""
    sandbox, _ = market
    checked = {"doji": 0, "engulfing": 0}
    for i in range(40):
        token = f"pattern-token-{i}"
        body = json.loads(defilens.testing.listing_body(token, seed=4, now=sandbox.now))["data"]
        for interval in TA_INTERVALS:
            candles = sandbox.candles(token, interval)
            ohlc = [candles[name].to_numpy() for name in ("open", "high", "low", "close")]
            names = body[f"single_pattern_{interval}"] + body[f"double_pattern_{interval}"]
            doji = talib.CDLDOJI(*ohlc)[-1] != 0
            assert doji == any(name.endswith("doji") for name in names), (token, interval)
            engulfing = talib.CDLENGULFING(*ohlc)[-1]
            assert ("bullish_engulfing" in names) == (engulfing > 0), (token, interval)
            assert ("bearish_engulfing" in names) == (engulfing < 0), (token, interval)
            checked["doji"] += doji
            checked["engulfing"] += engulfing != 0
    assert checked["doji"] > 0 and checked["engulfing"] > 0, checked


FIELDS = {
    "single": "single_pattern",
    "double": "double_pattern",
    "triple": "tripple_pattern",
    "chart": "chartpattern",
    "summary": "candlestick_pattern",
}
GROUPED = {
    "triangle": "triangle_pattern",
    "head_shoulder": "head_shoulder_pattern",
    "multiple_top_bottom": "multiple_top_bottom_pattern",
    "double_top_bottom": "double_top_bottom_pattern",
    "wedge": "wedge_pattern",
    "channel": "channel_pattern",
}


def test_every_pattern_rule_matches_a_second_implementation(market):
    """Every pattern field of 30 tokens at every interval against tests/pattern_rules.py, written
    from the rules in the module's documentation."""
    sandbox, _ = market
    fired: "dict[str, int]" = {}
    for i in range(30):
        token = f"pattern-token-{i}"
        data = json.loads(defilens.testing.listing_body(token, seed=4, now=sandbox.now))["data"]
        for interval in ["5m", "15m", "1h", "4h", "24h", "1w"]:
            rows = sandbox.candles(token, interval).select("open", "high", "low", "close").rows()
            expected = pattern_rules.detect(rows)
            fields = {**(FIELDS if interval != "4h" else {}), **(GROUPED if interval != "1w" else {})}
            for key, field in fields.items():
                assert data[f"{field}_{interval}"] == expected[key], (token, interval, field)
                for name in expected[key]:
                    fired[name] = fired.get(name, 0) + 1
    # The rules fire, and not everywhere: most series show a few patterns, none shows them all.
    assert len(fired) >= 15, sorted(fired)


def test_snapshot_figures_come_from_the_candles(market):
    sandbox, frames = market
    for token in TOKENS:
        row = frames.snapshot.filter(pl.col("token") == token).row(0, named=True)
        five = sandbox.candles(token, "5m")
        assert row["current_price"] == five["close"][-1]
        closes = pl.concat([sandbox.candles(token, i)["close"] for i in INTERVAL_LENGTH])
        assert row["ath"] >= closes.max() and row["atl"] <= closes.min()
        assert row["market_cap"] == pytest.approx(row["current_price"] * row["circulating_supply"], abs=0.006)  # cents
        day_ago = five["close"][-1 - 288]
        assert row["price_percent_change_24h"] == pytest.approx((row["current_price"] / day_ago - 1) * 100, abs=1e-4)
        updated = frames.ta_updated.filter(pl.col("token") == token)
        for interval, updated_at in zip(updated["interval"].to_list(), updated["updated_at"].to_list(), strict=True):
            last_open = sandbox.candles(token, interval)["open_time"][-1]
            assert updated_at == last_open + INTERVAL_LENGTH[interval], (token, interval)


def test_every_interval_samples_one_path(market):
    sandbox, _ = market
    five = sandbox.candles("bitcoin", "5m").select(
        (pl.col("open_time") + pl.duration(minutes=5)).alias("close_time"), "close"
    )
    for interval in ["15m", "1h"]:
        coarse = sandbox.candles("bitcoin", interval).select(
            (pl.col("open_time") + pl.duration(minutes=INTERVAL_LENGTH[interval] // dt.timedelta(minutes=1))).alias(
                "close_time"
            ),
            pl.col("close").alias("coarse"),
        )
        joined = five.join(coarse, on="close_time")
        assert joined.height > 10
        assert (joined["close"] == joined["coarse"]).all(), interval


def test_levels_and_ranks_look_like_a_market(market):
    _, frames = market
    snapshot = frames.snapshot
    price = dict(zip(snapshot["token"], snapshot["current_price"], strict=True))
    assert 10_000 < price["bitcoin"] < 1_000_000
    assert abs(price["tether"] - 1) < 0.01
    ranked = snapshot.sort("market_cap", descending=True)["market_cap_rank"].to_list()
    assert ranked == sorted(ranked)
    assert snapshot.filter(pl.col("token") == "bitcoin")["market_cap_rank"].item() <= 3
    rsi = frames.indicators.filter(pl.col("indicator") == "rsi14")["value"]
    assert 25 < rsi.mean() < 75 and rsi.std() < 25


def test_markets_sit_around_the_token(market):
    sandbox, frames = market
    for token in TOKENS:
        price = frames.snapshot.filter(pl.col("token") == token)["current_price"].item()
        body = json.loads(defilens.testing.markets_body(token, seed=4, now=sandbox.now))
        entries = body["data"]
        assert all(abs(e["price"] / price - 1) < 0.01 for e in entries), token
        shares = sum(e["volumePercent"] for e in entries)
        assert shares <= 100.01 and (body["total"] > len(entries) or abs(shares - 100) < 0.01), token
        by_depth = sorted(entries, key=lambda e: e["depthUsdPositiveTwo"] + e["depthUsdNegativeTwo"])
        scores = [e["liquidity_score"] for e in by_depth]
        assert scores == sorted(scores), token


def _get(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"x-partner-key": "k"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


def test_same_seed_and_time_serve_the_same_bytes():
    paths = ["/listings/bitcoin", "/listings/market/bitcoin"]
    with Sandbox(now=NOW, seed=9) as a, Sandbox(now=NOW, seed=9) as b, Sandbox(now=NOW, seed=10) as c:
        served = {name: [_get(s.url + path) for path in paths] for name, s in (("a", a), ("b", b), ("c", c))}
    assert served["a"] == served["b"]
    assert served["a"][0] != served["c"][0]
    assert served["a"][0].decode() == defilens.testing.listing_body("bitcoin", seed=9, now=NOW)
    assert defilens.testing.listing_body("bitcoin", seed=9, now=NOW) == defilens.testing.listing_body(
        "bitcoin", seed=9, now=dt.datetime(2026, 3, 14, 15, 7)
    )
    later = defilens.testing.listing_body("bitcoin", seed=9, now="2026-03-14T15:12:00Z")
    assert later != defilens.testing.listing_body("bitcoin", seed=9, now=NOW)


def test_history_over_simulated_time_moves():
    with Sandbox(now="2026-01-01T00:00:00Z") as sandbox:
        client = defilens.Client(base_url=sandbox.url, api_key="k")
        prices, times = [], []
        for _ in range(6):
            frames = client.fetch(["bitcoin", "solana"])
            prices.append(frames.snapshot.sort("token")["current_price"].to_list())
            times.append(frames.ta_updated.filter(pl.col("interval") == "5m")["updated_at"].max())
            sandbox.advance("1h")
        assert sandbox.now == dt.datetime(2026, 1, 1, 6, tzinfo=dt.timezone.utc)
    assert len({tuple(p) for p in prices}) == 6
    assert [b - a for a, b in itertools.pairwise(times)] == [dt.timedelta(hours=1)] * 5


def test_clock_settings_are_checked():
    with Sandbox() as wall:
        assert abs(wall.now - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(seconds=5)
        with pytest.raises(ValueError, match="simulated clock"):
            wall.advance("5m")
    with Sandbox(now=NOW) as still:
        with pytest.raises(ValueError, match="step must look like"):
            still.advance("soon")
        with pytest.raises(ValueError, match="positive"):
            still.advance(-5)
        with pytest.raises(TypeError, match="step must be"):
            still.advance([1])
        assert still.advance(dt.timedelta(minutes=5)) == dt.datetime(2026, 3, 14, 15, 12, tzinfo=dt.timezone.utc)
        with pytest.raises(ValueError, match="unknown interval"):
            still.candles("bitcoin", "2h")
        with pytest.raises(ValueError, match="404"):
            still.candles("unknown-coin", "1h")
    with pytest.raises(ValueError, match="now must be"):
        Sandbox(now="1999-01-01")
    with pytest.raises(ValueError, match="now must be a time"):
        Sandbox(now="yesterday")
    with pytest.raises(TypeError, match="now must be a datetime"):
        Sandbox(now=12)
    with pytest.raises(ValueError, match="speed must be"):
        Sandbox(speed=-1)


def test_a_fast_clock_runs():
    with Sandbox(now=NOW, speed=3600) as fast:
        start = fast.now
        import time

        time.sleep(0.2)
        assert fast.now - start >= dt.timedelta(minutes=10)


def test_candles_frame_shape(market):
    sandbox, _ = market
    candles = sandbox.candles("ethereum", "1h")
    assert candles.columns == ["open_time", "open", "high", "low", "close", "volume"]
    assert candles.schema["open_time"] == pl.Datetime("ms", "UTC")
    assert candles.height == 300
    checks = candles.select(
        (pl.col("high") >= pl.max_horizontal("open", "close")).all().alias("high"),
        (pl.col("low") <= pl.min_horizontal("open", "close")).all().alias("low"),
    )
    assert checks.row(0) == (True, True)
    assert candles["open_time"].diff().drop_nulls().unique().to_list() == [dt.timedelta(hours=1)]
    assert np.all(candles["volume"].to_numpy() > 0)
