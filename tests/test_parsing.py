"""Offline parsing: every frame of the contract, its columns, dtypes and values."""

from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import defilens
from bodies import (
    CANDLE_FAMILIES,
    CHANGE_FIELDS,
    DERIVATIVE_FIELDS,
    GROUPED_FAMILIES,
    NUMERIC_FAMILIES,
    TA_INTERVALS,
    listing,
    listing_bytes,
    markets,
)

UTC_MS = pl.Datetime("ms", "UTC")
INTERVAL = pl.Enum(["5m", "15m", "1h", "4h", "24h", "1w"])


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def frames() -> defilens.Frames:
    return defilens.parse_token(json.dumps(listing()), fetched_at=utc(2024, 5, 1, 13))


def test_every_frame_exists_with_token_first(frames: defilens.Frames) -> None:
    for name, frame in frames.items():
        assert isinstance(frame, pl.DataFrame), name
        assert frame.columns[0] == "token", name
        assert all(c == c.lower() and " " not in c for c in frame.columns), name


def test_snapshot_schema_and_values(frames: defilens.Frames) -> None:
    snap = frames.snapshot
    assert snap.height == 1
    schema = snap.schema
    assert list(schema)[:3] == ["token", "fetched_at", "id"]
    expected = {
        "token": pl.String,
        "fetched_at": UTC_MS,
        "id": pl.String,
        "name": pl.String,
        "categories": pl.List(pl.String),
        "tags": pl.List(pl.String),
        "exchanges": pl.List(pl.String),
        "is_active": pl.Boolean,
        "infinite_supply": pl.Boolean,
        "last_updated": UTC_MS,
        "updated_at": UTC_MS,
        "ohlc_updated_time": UTC_MS,
        "current_price": pl.Float64,
        "market_cap_rank": pl.Int64,
        "github_commit": pl.Int64,
        "max_supply": pl.Float64,
        "number_of_holders": pl.Float64,
        "tvl": pl.Float64,
    }
    for column, dtype in expected.items():
        assert schema[column] == dtype, column
    for column in CHANGE_FIELDS + DERIVATIVE_FIELDS:
        assert schema[column] == pl.Float64, column
    row = snap.row(0, named=True)
    body = listing()["data"]
    assert row["token"] == "bitcoin"
    assert row["fetched_at"] == utc(2024, 5, 1, 13)
    assert row["current_price"] == 64123.52
    assert row["categories"] == ["Layer 1", "Proof of Work"]
    assert row["is_active"] is True and row["infinite_supply"] is False
    assert row["last_updated"] == utc(2024, 5, 1, 12, 34, 56, 789000)
    assert row["ohlc_updated_time"] is None
    assert row["number_of_holders"] is None
    assert row["market_cap_rank"] == 1 and row["github_commit"] == 41234
    assert row["max_supply"] == 21000000.0
    for column in CHANGE_FIELDS + DERIVATIVE_FIELDS:
        assert row[column] == body[column], column
    # every scalar of the body has a column; no suffixed indicator does
    for key, value in body.items():
        is_scalar = not isinstance(value, list) or key in ("categories", "tags", "exchanges")
        if is_scalar and not any(key.startswith(f + "_") for f in NUMERIC_FAMILIES + ["macd", "ta"]):
            assert key in schema, key
    assert "rsi14_1h" not in schema and "macd_1h" not in schema


def test_indicators_long_form(frames: defilens.Frames) -> None:
    ind = frames.indicators
    assert ind.schema == pl.Schema(
        {"token": pl.String, "interval": INTERVAL, "indicator": pl.String, "value": pl.Float64}
    )
    assert ind.height == len(NUMERIC_FAMILIES) * len(TA_INTERVALS)
    body = listing()["data"]
    for token, interval, indicator, value in ind.iter_rows():
        assert token == "bitcoin"
        assert value == body[f"{indicator}_{interval}"]
    assert set(ind["indicator"]) == set(NUMERIC_FAMILIES)
    # change and derivative fields stay in snapshot
    assert not ind.filter(pl.col("indicator").str.contains("change|liquidation|ratio")).height


def test_signals_hold_macd_text(frames: defilens.Frames) -> None:
    sig = frames.signals
    assert sig.schema == pl.Schema(
        {"token": pl.String, "interval": INTERVAL, "indicator": pl.String, "value": pl.String}
    )
    assert sig.sort("interval")["value"].to_list() == [
        "Cross Above",
        "Cross Below",
        "Cross Above",
        "Cross Below",
        "Cross Above",
    ]
    assert sig.sort("interval")["interval"].cast(pl.String).to_list() == TA_INTERVALS


def test_patterns_one_row_per_name(frames: defilens.Frames) -> None:
    pat = frames.patterns
    assert pat.schema == pl.Schema(
        {"token": pl.String, "interval": INTERVAL, "family": pl.String, "pattern": pl.String}
    )
    rows = {(i, f, p) for _, i, f, p in pat.iter_rows()}
    assert rows == {
        ("1h", "single", "bullish_hammer"),
        ("24h", "triple", "three_white_soldiers"),
        ("1w", "chart", "Ascending Triangle"),
        ("1w", "chart", "Wedge Up"),
        ("5m", "candlestick", "bullish_inverted_hammer"),
        ("5m", "candlestick", "basic_doji"),
        ("4h", "double_top_bottom", "double_bottom"),
        ("1h", "channel", "Channel Up"),
    }
    families = set(CANDLE_FAMILIES.values()) | set(GROUPED_FAMILIES.values())
    assert set(pat["family"]) <= families
    assert "tripple" not in set(pat["family"])


def test_ta_updated(frames: defilens.Frames) -> None:
    ta = frames.ta_updated
    assert ta.schema == pl.Schema({"token": pl.String, "interval": INTERVAL, "updated_at": UTC_MS})
    assert ta.sort("interval")["updated_at"].to_list() == [utc(2024, 5, 1, 10 + i) for i in range(5)]


def test_info(frames: defilens.Frames) -> None:
    info = frames.info
    assert info.columns == [
        "token",
        "description",
        "websites",
        "explorers",
        "twitter",
        "reddit",
        "facebook",
        "github",
        "telegram",
        "chains",
        "categories",
    ]
    assert info.schema["websites"] == pl.List(pl.String)
    assert info.schema["chains"] == pl.List(pl.String)
    row = info.row(0, named=True)
    assert row["description"] == "The first cryptocurrency."
    assert row["explorers"] == ["https://mempool.space", "https://blockchair.com"]
    assert row["twitter"] == "https://twitter.com/bitcoin" and row["facebook"] is None
    assert row["chains"] == []


def test_markets_frame() -> None:
    frame = defilens.parse_markets(json.dumps(markets()), "bitcoin", fetched_at=utc(2024, 1, 1))
    assert frame.columns == [
        "token",
        "id",
        "exchange_name",
        "exchange_image",
        "market_pair",
        "base",
        "quote",
        "market_url",
        "price",
        "volume_usd",
        "liquidity_score",
        "depth_usd_positive_two",
        "depth_usd_negative_two",
        "volume_percent",
        "market_reputation",
        "fetched_at",
    ]
    assert frame.schema["liquidity_score"] == pl.Int64
    assert frame.schema["price"] == pl.Float64 and frame.schema["market_reputation"] == pl.Float64
    assert frame.schema["fetched_at"] == UTC_MS
    first, second = frame.rows(named=True)
    assert (first["base"], first["quote"], first["exchange_name"]) == ("BTC", "USDT", "Binance")
    assert (first["price"], first["liquidity_score"], first["depth_usd_negative_two"]) == (64120.5, 987, 27000000.0)
    assert (second["quote"], second["price"], second["market_reputation"]) == ("EUR", 59000.0, 0.9)
    assert first["fetched_at"] == utc(2024, 1, 1)


def test_empty_frames_keep_schemas(frames: defilens.Frames) -> None:
    empty = defilens.concat([])
    for name, frame in empty.items():
        assert frame.height == 0
        assert frame.schema == getattr(frames, name).schema, name
    assert empty.log.columns == [
        "token",
        "endpoint",
        "ok",
        "status",
        "kind",
        "message",
        "attempts",
        "elapsed_ms",
        "total",
        "fetched_at",
        "cached",
    ]
    assert empty.drift.columns == ["token", "endpoint", "field", "expected", "found", "fetched_at"]
    assert empty.log.schema["status"] == pl.Int64 and empty.log.schema["ok"] == pl.Boolean


def test_token_defaults_to_data_id_and_fetched_at_to_null() -> None:
    frames = defilens.parse_token(listing_bytes(id="wrapped-btc"))
    assert frames.snapshot["token"].to_list() == ["wrapped-btc"]
    assert frames.snapshot["fetched_at"].to_list() == [None]
    named = defilens.parse_token(listing_bytes(), token_id="asked-for")
    assert set(named.indicators["token"]) == {"asked-for"}


def test_quirks_are_tolerated() -> None:
    frames = defilens.parse_token(
        listing_bytes(
            current_price=64000,  # a number where the reference has a string
            market_cap="1000.5",  # a string where a number is meant
            market_cap_rank="3",
            macd_1h=0.75,  # macd as a number lands in indicators
            rsi14_1h="42.5",  # a number in a string for a numeric family
            ema50_1h=101.5,  # an unknown family
            supertrend_4h="up",
            flag_pattern_15m=["Bull Flag"],
            rsi7_5m=None,
            brand_new_field={"x": 1},
            is_active="true",
        )
    )
    snap = frames.snapshot.row(0, named=True)
    assert (snap["current_price"], snap["market_cap"], snap["market_cap_rank"], snap["is_active"]) == (
        64000.0,
        1000.5,
        3,
        True,
    )
    ind = {(i, n): v for _, i, n, v in frames.indicators.iter_rows()}
    assert ind[("1h", "macd")] == 0.75 and ind[("1h", "rsi14")] == 42.5 and ind[("1h", "ema50")] == 101.5
    assert ind[("5m", "rsi7")] is None
    sig = {(i, n): v for _, i, n, v in frames.signals.iter_rows()}
    assert sig[("4h", "supertrend")] == "up" and ("1h", "macd") not in sig
    assert ("15m", "flag", "Bull Flag") in {(i, f, p) for _, i, f, p in frames.patterns.iter_rows()}
    assert frames.raw[0]["data"]["brand_new_field"] == {"x": 1}


def test_absent_fields_give_no_rows() -> None:
    body = {"data": {"id": "tiny", "rsi14_1h": 50}}
    frames = defilens.parse_token(json.dumps(body))
    assert frames.indicators.height == 1 and frames.signals.height == 0 and frames.patterns.height == 0
    assert frames.snapshot.row(0, named=True)["current_price"] is None
    assert frames.info.height == 1 and frames.info.row(0, named=True)["description"] is None


@pytest.mark.parametrize(
    "body, field, expected, found",
    [
        (b'{"data": {"id": "x", "current_price": "cheap"}}', "data.current_price", "a number", '"cheap"'),
        (b'{"data": {"id": "x", "current_price": "N/A"}}', "data.current_price", "a number", '"N/A"'),
        # Text Rust's float parser reads as NaN or infinity: not a price, never a silent NaN.
        (b'{"data": {"id": "x", "current_price": "NaN"}}', "data.current_price", "a number", '"NaN"'),
        (b'{"data": {"id": "x", "current_price": "inf"}}', "data.current_price", "a number", '"inf"'),
        (b'{"data": {"id": "x", "market_cap": "1e400"}}', "data.market_cap", "a number", '"1e400"'),
        (b'{"data": {"id": "x", "market_cap_rank": "infinity"}}', "data.market_cap_rank", "an integer", '"infinity"'),
        (b'{"data": {"id": "x", "market_cap_rank": 1.5}}', "data.market_cap_rank", "an integer", "1.5"),
        (b'{"data": {"id": "x", "github_commit": 12.5}}', "data.github_commit", "an integer", "12.5"),
        (
            b'{"data": {"id": "x", "last_updated": "yesterday"}}',
            "data.last_updated",
            "a timestamp string",
            '"yesterday" (expected a 4-digit year)',
        ),
        (b'{"data": {"id": "x", "rsi14_1h": {"v": 1}}}', "data.rsi14_1h", "a number", "an object"),
        (b'{"data": {"id": "x", "wedge_pattern_4h": 7}}', "data.wedge_pattern_4h", "an array of pattern names", "7"),
        (
            b'{"data": {"id": "x", "wedge_pattern_4h": ["a", 3]}}',
            "data.wedge_pattern_4h",
            "an array of pattern names",
            "an array with a non-string element",
        ),
        (b'{"data": {"id": "x", "categories": "Layer 1"}}', "data.categories", "an array of strings", '"Layer 1"'),
        (
            b'{"data": {"id": "x", "rsi14_1m": 40}}',
            "data.rsi14_1m",
            "an interval of 5m, 15m, 1h, 4h, 24h or 1w",
            'the interval "1m"',
        ),
        (b'{"data": {"id": "x"}, "generalInfo": {"websites": 3}}', "generalInfo.websites", "an array of strings", "3"),
        (b'{"data": {"id": "x"}, "generalInfo": "none"}', "generalInfo", "the generalInfo object", '"none"'),
    ],
)
def test_values_that_do_not_fit_are_null_cells_and_drift_rows(
    body: bytes, field: str, expected: str, found: str
) -> None:
    frames = defilens.parse_token(body, token_id="x", fetched_at=7)
    assert frames.snapshot.height == 1 and frames.info.height == 1
    assert frames.drift.rows(named=True) == [
        {
            "token": "x",
            "endpoint": "listing",
            "field": field,
            "expected": expected,
            "found": found,
            "fetched_at": dt.datetime(1970, 1, 1, 0, 0, 0, 7000, tzinfo=dt.timezone.utc),
        },
    ]
    column = field.split(".")[-1]
    if column in frames.snapshot.columns:
        assert frames.snapshot[column].to_list() == [None]


@pytest.mark.parametrize(
    "body, field",
    [
        (b'{"data": {"id": "x", "rsi14_1h": "5', "data.rsi14_1h"),
        (b'{"data": {"id": "x", "rsi14_1h": 5', "data"),
        (b'{"data": {"id": "x"}, "generalInfo": {"description": "a"', "generalInfo"),
    ],
)
def test_malformed_bodies_name_field_and_offset(body: bytes, field: str) -> None:
    with pytest.raises(defilens.DecodeError) as info:
        defilens.parse_token(body, token_id="x")
    error = info.value
    assert error.field == field
    assert error.token == "x"
    assert isinstance(error.offset, int) and 0 <= error.offset <= len(body)
    assert '"x"' in str(error) and f'"{field}"' in str(error)


@pytest.mark.parametrize(
    "body", [b"", b"not json", b"[]", b"null", b'{"generalInfo": {}}', b'{"data": []}', '{"data": {"id": "\ud800"}}']
)
def test_wrong_shapes_raise_decode_error(body: object) -> None:
    with pytest.raises(defilens.DecodeError):
        defilens.parse_token(body, token_id="x")  # type: ignore[arg-type]


def test_bad_argument_types() -> None:
    with pytest.raises(TypeError):
        defilens.parse_token(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        defilens.parse_token(b"{}", token_id=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        defilens.parse_token(listing_bytes(), token_id="  ")


def test_parse_tokens_matches_parse_token() -> None:
    bodies = [listing_bytes(id=f"t{i}", rsi14_1h=float(i)) for i in range(300)]
    batch = defilens.parse_tokens(bodies)
    singles = defilens.concat([defilens.parse_token(b) for b in bodies])
    for name, frame in batch.items():
        assert frame.equals(getattr(singles, name)), name
    assert batch.snapshot["token"].to_list() == [f"t{i}" for i in range(300)]
    assert len(batch.raw) == 300


def test_parse_tokens_names_the_bad_body() -> None:
    bodies = [listing_bytes(id="good"), b'{"data": {"id": "bad", "current_price": ']
    with pytest.raises(defilens.DecodeError, match="second") as info:
        defilens.parse_tokens(bodies, ["first", "second"])
    assert info.value.token == "second"
    with pytest.raises(ValueError):
        defilens.parse_tokens(bodies, ["only-one"])


def test_markets_decode_errors_and_drift() -> None:
    with pytest.raises(defilens.DecodeError) as info:
        defilens.parse_markets(b'{"data": [{"id": 1, "price": tru}]}', "eth")
    assert info.value.field == "data[0].price" and info.value.token == "eth"
    with pytest.warns(defilens.DefiLensWarning, match=r"data\[0\]\.price"):
        frame = defilens.parse_markets(b'{"data": [{"id": 1, "price": "x", "liquidity_score": 229.0}]}', "eth")
    assert frame["price"].to_list() == [None] and frame["liquidity_score"].to_list() == [229]
    with pytest.raises(defilens.DecodeError):
        defilens.parse_markets(b'{"total": 3}', "eth")


def test_frames_interval_enum_sorts_by_duration(frames: defilens.Frames) -> None:
    order = frames.indicators.filter(pl.col("indicator") == "rsi14").sort("interval")["interval"].cast(pl.String)
    assert order.to_list() == TA_INTERVALS
    joined = frames.indicators.join(frames.ta_updated, on=["token", "interval"])
    assert joined.height == frames.indicators.height


def test_sandbox_bodies_parse_fully() -> None:
    body = defilens.testing.listing_body("bitcoin", seed=3)
    frames = defilens.parse_token(body)
    assert frames.snapshot["token"].to_list() == ["bitcoin"]
    assert set(frames.indicators["indicator"]) == set(NUMERIC_FAMILIES)
    assert frames.indicators.height == len(NUMERIC_FAMILIES) * len(TA_INTERVALS)
    assert set(frames.signals["indicator"]) == {"macd"}
    assert "4h" in set(frames.patterns["interval"].cast(pl.String)) or frames.patterns.height >= 0
    market_frame = defilens.parse_markets(defilens.testing.markets_body("bitcoin", seed=3), "bitcoin")
    assert market_frame.height >= 3


def test_numbers_are_read_exactly_as_python_reads_them() -> None:
    """Every number is the double nearest its text (what `float()` and `json.loads` give): the
    Sandbox writes full-precision values, 17 significant digits and more, where a parser that
    multiplies digits and powers of ten in floating point is one unit in the last place off."""
    bodies = [defilens.testing.listing_body(f"token-{i}", seed=3, now="2026-11-23T00:00:00Z") for i in range(300)]
    frames = defilens.parse_tokens(bodies)
    expected_indicators, expected_snapshot = [], []
    for body in bodies:
        data = json.loads(body)["data"]
        for key, value in data.items():
            if isinstance(value, float) and key.rsplit("_", 1)[0] in NUMERIC_FAMILIES:
                expected_indicators.append((data["id"], key.rsplit("_", 1)[0], key.rsplit("_", 1)[1], value))
        expected_snapshot.append((data["id"], float(data["current_price"]), data["ath"], data["market_cap"]))
    indicators = {
        (token, name, interval): value
        for token, name, interval, value in frames.indicators.select(
            "token", "indicator", pl.col("interval").cast(pl.String), "value"
        ).iter_rows()
    }
    long_texts = 0
    for token, name, interval, value in expected_indicators:
        assert indicators[(token, name, interval)] == value, (token, name, interval)
        long_texts += len(repr(value).replace("-", "").replace(".", "").lstrip("0")) >= 16
    assert long_texts > 1000, "the corpus should hold many numbers of 16 or more digits"
    snapshot = frames.snapshot.select("token", "current_price", "ath", "market_cap").rows()
    assert snapshot == expected_snapshot


@pytest.mark.slow
def test_big_batches_build_the_same_frames_as_one_body_at_a_time() -> None:
    """The batch path (threads, shared string views, reused row buffers) against single bodies."""
    bodies = [defilens.testing.listing_body(f"t-{i}-a-token-name-past-twelve-bytes", seed=5) for i in range(1200)]
    batch = defilens.parse_tokens(bodies)
    singles = [defilens.parse_token(body) for body in bodies]
    for name in ("snapshot", "indicators", "signals", "patterns", "ta_updated", "info"):
        expected = pl.concat([getattr(single, name) for single in singles])
        assert_frame_equal(getattr(batch, name), expected, check_exact=True)


def test_frame_buffer_bytes_measures_every_frame(frames: defilens.Frames) -> None:
    """The memory benchmark's measure: views counted, never below a byte a cell."""
    from defilens import _core

    for name, frame in frames.items():
        size = _core.frame_buffer_bytes(frame)
        assert size >= frame.height * frame.width, name
