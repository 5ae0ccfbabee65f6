"""Trust in unattended use: each way a day of real use went wrong silently, now loud or right.

One test (or one table row) per case; each failed before the change that made it pass.
"""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict

import polars as pl
import pytest

import defilens
from bodies import listing, listing_bytes
from conftest import Reply, Seen, listing_reply, split_path
from defilens._cli import main
from defilens.testing import Sandbox

CLI = [sys.executable, "-m", "defilens"]
FAST = dict(backoff=(0.01, 0.05))


# --------------------------------------------------------------------------------------------
# collect fails loudly


def test_collect_with_a_refused_key_stops_at_once(tmp_path: Path) -> None:
    with Sandbox(api_key="the-right-key") as sb:
        client = defilens.Client(base_url=sb.url, api_key="expired", **FAST)
        started = time.monotonic()
        with pytest.raises(defilens.AuthenticationError):
            client.collect(["bitcoin", "ethereum"], "0.2s", count=5, out=tmp_path / "h")
    assert time.monotonic() - started < 5
    # The failed round is on record.
    log = defilens.scan(tmp_path / "h", "log").collect()
    assert log.height == 4 and log["kind"].unique().to_list() == ["auth"]


def test_collect_cli_with_a_refused_key_exits_1_with_one_line(tmp_path: Path) -> None:
    with Sandbox(api_key="the-right-key") as sb:
        result = subprocess.run(
            CLI
            + [
                "collect",
                "bitcoin",
                "--every",
                "0.2s",
                "--count",
                "5",
                "--out",
                str(tmp_path / "h"),
                "--base-url",
                sb.url,
                "--api-key",
                "expired",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("defilens: error: authentication failed"), result.stderr
    assert "wrote" not in result.stdout and "expired" not in result.stdout + result.stderr


def test_collect_against_a_service_that_is_down_stops_after_three_rounds(tmp_path: Path) -> None:
    client = defilens.Client(base_url="http://127.0.0.1:9", max_retries=0, **FAST)
    rounds = []
    with pytest.raises(defilens.ConnectionError):
        defilens.collect(
            client, ["bitcoin"], "0.05s", count=10, out=tmp_path / "h", on_round=lambda n, f: rounds.append(n)
        )
    assert rounds == [1, 2, 3]
    with pytest.raises(defilens.ConnectionError):
        client.collect(["bitcoin"], "0.05s", count=10, out=tmp_path / "h2", max_failed_rounds=1)
    with pytest.raises(ValueError, match="max_failed_rounds"):
        client.collect(["bitcoin"], "0.05s", count=1, out=tmp_path / "h3", max_failed_rounds=0)


@pytest.mark.slow
def test_collect_goes_on_when_single_tokens_fail(tmp_path: Path) -> None:
    with Sandbox() as sb:
        client = defilens.Client(base_url=sb.url)
        assert client.collect(["bitcoin", "unknown-x"], "0.05s", count=4, out=tmp_path / "h") == 4
    assert defilens.scan(tmp_path / "h", "snapshot").collect().height == 4
    errors = defilens.scan(tmp_path / "h", "errors").collect()
    assert errors.height == 8 and set(errors["token"]) == {"unknown-x"}


def test_fetch_in_which_everything_failed_warns_once() -> None:
    client = defilens.Client(base_url="http://127.0.0.1:9", max_retries=0, **FAST)
    with pytest.warns(defilens.DefiLensWarning) as record:
        frames = client.fetch(["bitcoin", "ethereum"])
    assert len(record) == 1
    message = str(record[0].message)
    assert "all 4 requests of this fetch failed, 4 of them with connection" in message
    assert "frames.errors" in message
    assert frames.errors.height == 4


# --------------------------------------------------------------------------------------------
# The cache tells the truth


def test_cached_responses_keep_their_time_and_say_so(scripted) -> None:
    server = scripted(lambda seen, n: listing_reply())
    client = defilens.Client(base_url=server.url, cache_ttl=60)
    first = client.fetch(["bitcoin"], markets=False)
    time.sleep(0.05)
    again = client.fetch(["bitcoin"], markets=False)
    assert len(server.seen) == 1
    assert first.log["cached"].to_list() == [False] and again.log["cached"].to_list() == [True]
    assert again.log["fetched_at"].to_list() == first.log["fetched_at"].to_list()
    assert again.snapshot["fetched_at"].to_list() == first.snapshot["fetched_at"].to_list()


def test_the_cache_is_bounded_by_bytes(scripted) -> None:
    server = scripted(lambda seen, n: Reply(200, listing_bytes(id=split_path(seen.path)[1])))
    size = len(listing_bytes(id="t0"))
    client = defilens.Client(base_url=server.url, cache_ttl=60, cache_max_bytes=int(size * 2.5))
    for token in ["t0", "t1", "t2"]:  # t0 is evicted: 3 bodies exceed the bound
        client.fetch([token], markets=False)
    for token in ["t1", "t2", "t0"]:
        client.fetch([token], markets=False)
    assert [split_path(p)[1] for p in server.paths()] == ["t0", "t1", "t2", "t0"]


# --------------------------------------------------------------------------------------------
# Type drift is a cell, not a token


def drifted_service(seen: Seen, n: int) -> Reply:
    endpoint, token = split_path(seen.path)
    if endpoint == "markets":
        body = {"data": [{"id": "m1", "marketPair": "BTC/USDT", "liquidity_score": 933.5, "price": 64000}], "total": 1}
        return Reply(200, json.dumps(body))
    return Reply(200, listing_bytes(id=token, current_price="N/A", github_commit=12.5, categories="Layer 1"))


def test_a_drifted_field_costs_one_cell_not_the_token(scripted, capsys: pytest.CaptureFixture) -> None:
    server = scripted(drifted_service)
    frames = defilens.Client(base_url=server.url).fetch(["bitcoin"])
    assert frames.errors.height == 0
    assert frames.snapshot.height == 1 and frames.markets.height == 1
    assert frames.indicators.height > 0
    assert frames.snapshot.select("current_price", "github_commit", "categories").row(0) == (None, None, None)
    assert frames.markets["liquidity_score"].to_list() == [None] and frames.markets["price"].to_list() == [64000.0]
    drift = frames.drift.sort("endpoint", "field")
    assert drift.select("endpoint", "field").rows() == [
        ("listing", "data.categories"),
        ("listing", "data.current_price"),
        ("listing", "data.github_commit"),
        ("markets", "data[0].liquidity_score"),
    ]
    assert drift["fetched_at"].null_count() == 0 and drift["token"].unique().to_list() == ["bitcoin"]
    # A frame like the others: concat, write and read.
    both = defilens.concat([frames, frames])
    assert both.drift.height == 8
    assert main(["fetch", "bitcoin", "--base-url", server.url, "--api-key", "k"]) == 0
    assert "4 values did not fit their type; see drift" in capsys.readouterr().out


def test_drift_is_written_read_and_collected(scripted, tmp_path: Path) -> None:
    server = scripted(drifted_service)
    client = defilens.Client(base_url=server.url)
    frames = client.fetch(["bitcoin"])
    back = defilens.read(frames.write(tmp_path / "f"))
    assert back.drift.equals(frames.drift)
    client.collect(["bitcoin"], "0.05s", count=2, out=tmp_path / "h")
    assert defilens.scan(tmp_path / "h", "drift").collect().height == 8


# --------------------------------------------------------------------------------------------
# Numbers from outside never panic


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "99999999999999999999"},
        {"Retry-After": "1e400"},
        {"retry-after-ms": "inf"},
        {"retry-after-ms": "-5"},
        {"retry-after-ms": "nan"},
        {"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"},
    ],
)
def test_hostile_retry_after_is_clamped(scripted, headers: Dict[str, str]) -> None:
    server = scripted(lambda seen, n: Reply(429, "{}", headers) if n == 1 else listing_reply())
    started = time.monotonic()
    frames = defilens.Client(base_url=server.url, max_retries=1, **FAST).token("bitcoin", markets=False)
    assert frames.snapshot.height == 1
    assert time.monotonic() - started < 5


SETTINGS_CASES: "list[tuple[Dict[str, Any], type, str]]" = [
    (dict(timeout=1e300), ValueError, "timeout must be a number of seconds above 0 and at most 86400"),
    (dict(timeout=0), ValueError, "timeout"),
    (dict(timeout=float("nan")), ValueError, "timeout"),
    (dict(timeout=None), TypeError, "timeout must be a number, got NoneType"),
    (dict(timeout="30"), TypeError, "timeout must be a number, got str"),
    (dict(rate_limit=1e-300), ValueError, "rate_limit must be a number of requests per second"),
    (dict(rate_limit=float("inf")), ValueError, "rate_limit"),
    (dict(backoff=(1e300, 1e300)), ValueError, "backoff must be a number of seconds above 0 and at most 3600"),
    (dict(backoff=5), TypeError, "backoff must be a (first, maximum) pair"),
    (dict(cache_ttl=-1), ValueError, "cache_ttl"),
    (dict(max_response_bytes=-1), ValueError, "max_response_bytes must be an int from 1 to"),
    (dict(max_response_bytes=2**70), ValueError, "max_response_bytes is out of range"),
    (dict(cache_max_bytes=0), ValueError, "cache_max_bytes"),
    (dict(concurrency=10**9), ValueError, "concurrency must be an int from 1 to 10000"),
    (dict(concurrency=True), TypeError, "concurrency must be an int, got bool"),
    (dict(max_retries=-1), ValueError, "max_retries must be an int from 0 to 100"),
    (dict(max_retries=2.5), TypeError, "max_retries must be an int, got float"),
    (dict(proxy="garbage"), ValueError, "proxy must be an http:// or https:// URL with a host"),
    (dict(proxy="socks9://x"), ValueError, "proxy"),
    (dict(base_url="127.0.0.1:9"), ValueError, "base_url must be an http:// or https:// URL with a host"),
    (dict(base_url="not a url"), ValueError, "base_url"),
    (dict(base_url="http://"), ValueError, "base_url"),
    (dict(base_url=5), TypeError, "base_url must be a str"),
]


@pytest.mark.parametrize("settings, error, message", SETTINGS_CASES)
def test_bad_settings_are_refused_by_name_before_anything_is_sent(
    settings: Dict[str, Any], error: type, message: str
) -> None:
    kwargs: Dict[str, Any] = {"base_url": "http://127.0.0.1:9", "api_key": "k", **settings}
    with pytest.raises(error) as info:
        defilens.Client(**kwargs)
    assert message in str(info.value)
    assert type(info.value).__name__ != "PanicException"


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(latency=1e300), "latency must be a number of seconds from 0 to 3600"),
        (dict(latency=-1), "latency"),
        (dict(port=99999), "port must be an int from 0 to 65535"),
        (dict(retry_after=-1), "retry_after"),
        (dict(seed=-1), "seed"),
        (dict(error_rate=2.0), "error_rate must be between 0 and 1"),
    ],
)
def test_bad_sandbox_settings_are_value_errors(settings: Dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Sandbox(**settings)


def test_a_base_url_path_is_kept_and_joined(scripted) -> None:
    server = scripted(lambda seen, n: listing_reply() if seen.path.startswith("/v1/listings/") else Reply(404, "{}"))
    frames = defilens.Client(base_url=server.url + "/v1/").token("bitcoin", markets=False)
    assert frames.snapshot.height == 1
    assert server.paths() == ["/v1/listings/bitcoin"]


def test_a_sandbox_object_works_where_a_url_does() -> None:
    with Sandbox() as sb:
        client = defilens.Client(base_url=sb)
        assert client.base_url == sb.url
        assert client.token("bitcoin").snapshot.height == 1


def test_a_huge_token_id_is_refused_before_any_request(scripted) -> None:
    server = scripted(lambda seen, n: listing_reply())
    client = defilens.Client(base_url=server.url)
    with pytest.raises(ValueError, match=f"at most {defilens._core.MAX_TOKEN_ID_CHARS} characters"):
        client.fetch(["x" * 100_000])
    assert server.seen == []


def test_cli_sandbox_port_out_of_range_is_one_line() -> None:
    result = subprocess.run(CLI + ["sandbox", "--port", "99999"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "from 0 to 65535" in result.stderr


# --------------------------------------------------------------------------------------------
# Exceptions that mean what their names say; chains as sent


def test_timeouts_and_connection_failures_are_builtin_errors_too(scripted) -> None:
    server = scripted(lambda seen, n: Reply(action="stall"))
    try:
        defilens.Client(base_url=server.url, timeout=0.2, max_retries=0).token("bitcoin", markets=False)
    except builtins.TimeoutError as error:
        assert isinstance(error, defilens.TimeoutError) and isinstance(error, defilens.TransportError)
        assert error.kind == "timeout" and error.token == "bitcoin"
    else:
        pytest.fail("no TimeoutError")
    with pytest.raises(builtins.ConnectionError) as info:
        defilens.Client(base_url="http://127.0.0.1:9", max_retries=0).token("bitcoin")
    assert isinstance(info.value, defilens.ConnectionError) and isinstance(info.value, defilens.DefiLensError)
    assert "connection failed" in str(info.value)


def test_chains_keep_the_services_key_order() -> None:
    body = listing()
    body["generalInfo"]["chains"] = [{"name": "ethereum", "address": "0xabc", "decimals": 18}]
    frames = defilens.parse_token(json.dumps(body, indent=2))
    assert frames.info["chains"].to_list() == [['{"name":"ethereum","address":"0xabc","decimals":18}']]


# --------------------------------------------------------------------------------------------
# The command line


def test_cli_summarises_big_batches_and_prints_small_prices(capsys: pytest.CaptureFixture, scripted) -> None:
    def service(seen: Seen, n: int) -> Reply:
        endpoint, token = split_path(seen.path)
        if endpoint == "markets":
            return Reply(200, '{"data": [], "total": 0}')
        index = int(token[1:])
        price = "0.00004012" if index == 0 else f"{1000 + index}.5"
        return Reply(200, listing_bytes(id=token, current_price=price, market_cap=float(index)))

    server = scripted(service)
    tokens = [f"t{i}" for i in range(25)]
    assert main(["fetch", *tokens, "--base-url", server.url, "--api-key", "k", "--no-markets"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line[:2] in {f"t{d}" for d in range(10)}]
    assert len(table) == 20
    assert table[0].startswith("t24 ")  # the largest market cap first
    assert "... and 5 more tokens" in out
    assert main(["fetch", "t0", "--base-url", server.url, "--api-key", "k", "--no-markets"]) == 0
    out = capsys.readouterr().out
    assert "0.00004012" in out and " 0.00 " not in out
    assert not any(split_path(p)[0] == "markets" for p in server.paths())


def test_cli_checks_out_before_any_request(tmp_path: Path, scripted, capsys: pytest.CaptureFixture) -> None:
    server = scripted(lambda seen, n: listing_reply())
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["fetch", "bitcoin", "--base-url", server.url, "--api-key", "k", "--out", str(a_file)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("defilens: error: --out") and err.count("\n") == 1
    assert server.seen == []


def test_cli_fetches_markets_by_default() -> None:
    with Sandbox() as sb:
        result = subprocess.run(
            CLI + ["fetch", "bitcoin", "--base-url", sb.url, "--api-key", "k"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ},
        )
        assert result.returncode == 0, result.stderr
        assert sb.requests == 2


def test_an_old_polars_is_refused_with_the_version_needed() -> None:
    from defilens._polars_version import MIN_POLARS, check_polars

    check_polars("1.32.0")
    check_polars("2.1.0")
    for old in ("1.31.3", "1.20.0", "0.20.31"):
        with pytest.raises(ImportError, match=r"needs polars >= 1\.32, but polars .* is installed"):
            check_polars(old)
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert f'"polars>={MIN_POLARS[0]}.{MIN_POLARS[1]}"' in pyproject, "pyproject.toml declares another floor"


@pytest.mark.slow
def test_ctrl_c_during_a_write_never_leaves_a_temporary_or_partial_file(tmp_path: Path) -> None:
    import random
    import signal
    import threading

    from defilens._storage import Root, write_file

    frame = pl.DataFrame({"x": list(range(300_000)), "y": [str(i) for i in range(300_000)]})
    target = tmp_path / "frame.parquet"
    interrupted = 0
    rng = random.Random(7)
    for _ in range(25):
        target.unlink(missing_ok=True)
        timer = threading.Timer(rng.uniform(0.0, 0.05), os.kill, (os.getpid(), signal.SIGINT))
        try:
            timer.start()
            write_file(frame, Root(str(tmp_path)), target.name, "parquet")
            timer.join()
        except KeyboardInterrupt:
            interrupted += 1
            timer.join()
        assert not list(tmp_path.glob("*.tmp"))
        if target.exists():
            assert pl.read_parquet(target).equals(frame)
    assert interrupted > 0


def test_a_body_for_another_token_is_kept_under_the_id_asked_for_with_a_drift_row(scripted) -> None:
    """A proxy that answers /ethereum with bitcoin's body: the rows stay under `ethereum` (the
    id asked for) and the mix-up is visible in drift and log, never silent."""

    def misrouting_proxy(seen, n):
        endpoint, token = split_path(seen.path)
        if endpoint == "markets":
            return Reply(200, b'{"data": [], "total": 0}')
        return listing_reply("bitcoin" if token == "ethereum" else token)

    server = scripted(misrouting_proxy)
    frames = defilens.Client(base_url=server.url).fetch(["ethereum", "solana"], progress=False)
    assert sorted(frames.snapshot["token"]) == ["ethereum", "solana"]
    drift = frames.drift.filter(pl.col("field") == "data.id")
    assert drift.select("token", "found").rows() == [("ethereum", '"bitcoin"')]
    note = frames.log.filter((pl.col("token") == "ethereum") & (pl.col("endpoint") == "listing"))["message"].item()
    assert note.startswith('warning: the body is for "bitcoin"')
    assert frames.log.filter(pl.col("token") == "solana")["message"].is_null().all()


def test_the_cli_notes_come_from_the_data(scripted) -> None:
    from defilens._cli import failures

    def short_markets(seen, n):
        endpoint, token = split_path(seen.path)
        if endpoint == "markets":
            body = json.loads(
                Path(__file__).resolve().parent.parent.joinpath("src/model/samples/markets.json").read_text()
            )
            body["total"] = len(body["data"]) + 7
            return Reply(200, json.dumps(body).encode())
        return listing_reply("bitcoin" if token == "ethereum" else token)

    frames = defilens.Client(base_url=scripted(short_markets).url).fetch(["ethereum"], progress=False)
    notes = failures(frames)
    assert "the service reports" in notes and "markets but sent" in notes
    assert "the listing body is for \"bitcoin\"; kept under 'ethereum'" in notes
