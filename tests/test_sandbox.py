"""The Sandbox through the public client: data, faults, keys, and accounting for every token."""

from __future__ import annotations

import urllib.error
import urllib.request

import polars as pl
import pytest

import defilens
from defilens.testing import Sandbox

FAST = dict(backoff=(0.01, 0.05))


def test_sandbox_serves_every_frame(defilens_sandbox: Sandbox) -> None:
    client = defilens.Client(base_url=defilens_sandbox.url, api_key="anything")
    frames = client.token("bitcoin")
    for name in ("snapshot", "indicators", "signals", "patterns", "ta_updated", "info", "markets"):
        assert getattr(frames, name).height > 0, name
    snap = frames.snapshot.row(0, named=True)
    assert snap["number_of_holders"] is None and snap["ohlc_updated_time"] is None
    assert isinstance(snap["current_price"], float) and snap["current_price"] > 0
    assert set(frames.signals["indicator"]) == {"macd"}
    assert set(frames.signals["value"]) <= {"Cross Above", "Cross Below"}
    intervals = set(frames.indicators["interval"].cast(pl.String))
    assert intervals == {"5m", "15m", "1h", "24h", "1w"}
    assert defilens_sandbox.requests == 2


def test_sandbox_is_deterministic() -> None:
    def fetch(seed: int) -> defilens.Frames:
        with Sandbox(seed=seed) as sb:
            return defilens.Client(base_url=sb.url).fetch(["bitcoin", "ethereum"])

    a, b, c = fetch(1), fetch(1), fetch(2)
    assert a.indicators.equals(b.indicators) and a.markets.drop("fetched_at").equals(b.markets.drop("fetched_at"))
    assert not a.indicators.equals(c.indicators)


def test_sandbox_unknown_ids_are_404(defilens_sandbox: Sandbox) -> None:
    client = defilens.Client(base_url=defilens_sandbox.url)
    with pytest.raises(defilens.NotFoundError):
        client.token("unknown-coin")
    frames = client.fetch(["bitcoin", "unknown-coin"])
    assert frames.snapshot["token"].to_list() == ["bitcoin"]
    assert set(frames.errors["token"]) == {"unknown-coin"}
    assert set(frames.errors["kind"]) == {"not_found"}


def test_sandbox_key_check() -> None:
    with Sandbox(api_key="right-key") as sb:
        with pytest.raises(defilens.AuthenticationError):
            defilens.Client(base_url=sb.url, api_key="wrong-key").token("bitcoin")
        assert defilens.Client(base_url=sb.url, api_key="right-key").token("bitcoin").snapshot.height == 1


def test_sandbox_faults_each_kind() -> None:
    cases = [
        (dict(error_rate=1.0), defilens.ServerError),
        (dict(rate_limit_rate=1.0, retry_after=0), defilens.RateLimitError),
        (dict(drop_rate=1.0), defilens.ConnectionError),
        (dict(truncate_rate=1.0), defilens.ConnectionError),
        (dict(invalid_json_rate=1.0), defilens.DecodeError),
    ]
    for knobs, error in cases:
        with Sandbox(**knobs) as sb, pytest.raises(error):
            defilens.Client(base_url=sb.url, max_retries=1, **FAST).token("bitcoin", markets=False)


def test_sandbox_latency_and_url() -> None:
    with Sandbox(latency=0.2) as sb:
        assert sb.url.startswith("http://127.0.0.1:")
        frames = defilens.Client(base_url=sb.url).token("bitcoin", markets=False)
        assert frames.log["elapsed_ms"][0] >= 190


def test_sandbox_rejects_bad_rates() -> None:
    with pytest.raises(ValueError):
        Sandbox(error_rate=1.5)
    with pytest.raises(ValueError):
        Sandbox(error_rate=0.6, drop_rate=0.6)


def test_sandbox_stop_refuses_connections() -> None:
    sb = Sandbox()
    url = sb.url
    sb.stop()
    sb.stop()
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(url + "/listings/bitcoin", timeout=2)


def test_batch_with_faults_loses_no_token() -> None:
    ids = [f"token-{i}" for i in range(1000)] + ["unknown-1", "unknown-2"]
    with Sandbox(seed=7, error_rate=0.1, rate_limit_rate=0.05, retry_after=0, drop_rate=0.02, truncate_rate=0.01) as sb:
        client = defilens.Client(base_url=sb.url, max_retries=3, concurrency=32, **FAST)
        frames = client.fetch(ids, markets=True)
    listing_log = frames.log.filter(pl.col("endpoint") == "listing")
    assert listing_log.height == len(ids)
    assert set(listing_log["token"]) == set(ids)
    snapshot_tokens = set(frames.snapshot["token"])
    failed = set(frames.errors.filter(pl.col("endpoint") == "listing")["token"])
    assert snapshot_tokens | failed == set(ids) and not snapshot_tokens & failed
    assert frames.snapshot["token"].is_duplicated().sum() == 0
    assert {"unknown-1", "unknown-2"} <= failed
    assert len(snapshot_tokens) >= 0.99 * 1000
    assert frames.log.filter(pl.col("endpoint") == "markets").height == len(ids)
    assert frames.log.filter(pl.col("attempts") > 1).height > 0


def test_a_screen_over_the_sandbox_is_not_misled() -> None:
    """What a newcomer's first screen met: stablecoins that never move (RSI 0 topped every
    oversold screen), tickers shared by several ids, ids the real service could not have served
    as coins, a token quoted in itself, bitcoin among the meme coins."""
    import polars as pl

    from defilens.testing import Sandbox

    assert {"bitcoin", "ethereum", "tether", "usd-coin"} <= set(Sandbox.known_ids)
    ids = ["tether", "usd-coin", "bitcoin", "ethereum"] + [f"coin-{i:03d}" for i in range(60)]
    with Sandbox(now="2026-03-01T00:00:00Z") as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        frames = client.fetch([*ids, "Bitcoin", "BTC", "bit coin"], progress=False)
    rsi = frames.indicators.filter(pl.col("indicator") == "rsi14", pl.col("token").is_in(["tether", "usd-coin"]))
    assert rsi.height == 10 and rsi["value"].is_between(5, 95).all(), rsi
    symbols = frames.snapshot.select("token", "symbol")
    assert symbols["symbol"].n_unique() == symbols.height
    assert sorted(frames.errors["token"].unique()) == ["BTC", "Bitcoin", "bit coin"]
    assert frames.errors["status"].unique().to_list() == [404]
    assert frames.markets.filter(pl.col("base") == pl.col("quote")).height == 0
    bitcoin = frames.snapshot.filter(pl.col("token") == "bitcoin")["categories"].item().to_list()
    assert "Meme" not in bitcoin and "Proof of Work" in bitcoin
