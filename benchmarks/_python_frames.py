"""The same frames as ``defilens.parse_tokens``, built in Python: the peers it is measured against.

Two implementations, written the way people write them:

* ``idiomatic``: ``json.loads``, a regular expression per key, one dict per row, Python
  conversions (``float``, ``datetime.fromisoformat``), then ``pl.DataFrame(rows)``.
* ``tuned``: ``orjson.loads``, a memoised key -> route table, one Python list per column,
  conversions done by polars on whole columns, one constructor per frame.

Both follow the contract's rule (and ``src/model/fields.rs``): the documented scalar fields go to
``snapshot``; ``<family>_<interval>`` keys for 5m..1w go by JSON type (numbers -> indicators,
strings -> signals, string arrays -> patterns, one row per element); ``ta_<i>_updated_at`` ->
``ta_updated``; ``generalInfo`` -> ``info``. ``check_equal`` asserts they produce exactly the
frames defilens produces, so the timings compare like with like.

``indicators_frame`` is the smaller job the HTTP peers of the fetch benchmark do per body.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Dict, List, Optional, Tuple

import orjson
import polars as pl

INTERVALS = ("5m", "15m", "1h", "4h", "24h", "1w")
INTERVAL = pl.Enum(list(INTERVALS))
UTC_MS = pl.Datetime("ms", "UTC")
TA_FORMAT = "%Y-%m-%d %H:%M:%S%#z"  # the service's "2026-11-21 23:55:00+00"

# The documented scalar fields of a listing, in the snapshot's column order, with their types.
S, F, I, B, T, L = "str", "f64", "i64", "bool", "datetime", "list"  # noqa: E741 - a column of one-letter types
SNAPSHOT_FIELDS: Tuple[Tuple[str, str], ...] = (
    ("id", S),
    ("symbol_id", S),
    ("name", S),
    ("symbol", S),
    ("image", S),
    ("categories", L),
    ("tags", L),
    ("exchanges", L),
    ("is_active", B),
    ("infinite_supply", B),
    ("last_updated", T),
    ("updated_at", T),
    ("ohlc_updated_time", T),
    ("current_price", F),
    ("circulating_supply", F),
    ("total_supply", F),
    ("max_supply", F),
    ("fully_diluted_valuation", F),
    ("market_cap", F),
    ("market_cap_rank", I),
    ("market_cap_dominance", F),
    ("total_volume", F),
    ("ath", F),
    ("atl", F),
    ("apy", F),
    ("tvl", F),
    ("day_volatility", F),
    ("github_commit", I),
    ("number_of_holders", F),
    ("holders_change_percentage_24h", F),
    ("market_cap_change_percentage_24h", F),
    ("market_cap_change_percentage_1w", F),
    ("market_cap_percentage_change_7d", F),
    ("price_change_percentage_24h", F),
    ("price_percent_change_1h", F),
    ("price_percent_change_24h", F),
    ("price_percent_change_7d", F),
    ("price_percent_change_30d", F),
    ("price_percent_change_60d", F),
    ("price_percent_change_90d", F),
    ("price_percent_change_1w", F),
    ("volume_change_24h", F),
    ("volume_change_1w", F),
    ("volume_percentage_change_7d", F),
    ("supply_percentage_change_24h", F),
    ("open_interest", F),
    ("open_interest_change_1h", F),
    ("open_interest_change_4h", F),
    ("open_interest_change_24h", F),
    ("funding_rate", F),
    ("long_short_ratio_1h", F),
    ("long_short_ratio_4h", F),
    ("long_short_ratio_24h", F),
    ("long_liquidation_1h", F),
    ("long_liquidation_4h", F),
    ("long_liquidation_24h", F),
    ("short_liquidation_1h", F),
    ("short_liquidation_4h", F),
    ("short_liquidation_24h", F),
)
SNAPSHOT_TYPES = dict(SNAPSHOT_FIELDS)
POLARS_TYPES = {S: pl.String, F: pl.Float64, I: pl.Int64, B: pl.Boolean, T: UTC_MS, L: pl.List(pl.String)}
SNAPSHOT_SCHEMA = {"token": pl.String, "fetched_at": UTC_MS, **{k: POLARS_TYPES[t] for k, t in SNAPSHOT_FIELDS}}

# Wire prefix -> family name in `patterns` (the service spells "triple" as "tripple").
PATTERN_FAMILIES = {
    "single_pattern": "single",
    "double_pattern": "double",
    "tripple_pattern": "triple",
    "triple_pattern": "triple",
    "chartpattern": "chart",
    "candlestick_pattern": "candlestick",
    "triangle_pattern": "triangle",
    "head_shoulder_pattern": "head_shoulder",
    "multiple_top_bottom_pattern": "multiple_top_bottom",
    "double_top_bottom_pattern": "double_top_bottom",
    "wedge_pattern": "wedge",
    "channel_pattern": "channel",
}
COMMUNITY = ("twitter", "reddit", "facebook", "github", "telegram")
INFO_SCHEMA = {
    "token": pl.String,
    "description": pl.String,
    "websites": pl.List(pl.String),
    "explorers": pl.List(pl.String),
    **{name: pl.String for name in COMMUNITY},
    "chains": pl.List(pl.String),
    "categories": pl.List(pl.String),
}
LONG_SCHEMAS = {
    "indicators": {"token": pl.String, "interval": INTERVAL, "indicator": pl.String, "value": pl.Float64},
    "signals": {"token": pl.String, "interval": INTERVAL, "indicator": pl.String, "value": pl.String},
    "patterns": {"token": pl.String, "interval": INTERVAL, "family": pl.String, "pattern": pl.String},
    "ta_updated": {"token": pl.String, "interval": INTERVAL, "updated_at": UTC_MS},
}
FRAMES = ("snapshot", "indicators", "signals", "patterns", "ta_updated", "info")

SUFFIXED = re.compile(r"^(?P<family>.+)_(?P<interval>5m|15m|1h|4h|24h|1w)$")
TA_UPDATED = re.compile(r"^ta_(?P<interval>5m|15m|1h|4h|24h|1w)_updated_at$")


def pattern_family(prefix: str) -> str:
    """``tripple_pattern`` -> ``triple``; an unknown ``flag_pattern`` -> ``flag``."""
    if prefix in PATTERN_FAMILIES:
        return PATTERN_FAMILIES[prefix]
    return prefix[: -len("_pattern")] if prefix.endswith("_pattern") and prefix != "_pattern" else prefix


# --------------------------------------------------------------------------- idiomatic


def idiomatic(bodies: List[bytes]) -> Dict[str, pl.DataFrame]:
    """json + row dicts + pl.DataFrame(rows): how most client code turns responses into frames."""
    rows: Dict[str, List[dict]] = {name: [] for name in FRAMES}
    for body in bodies:
        document = json.loads(body)
        data, token = document["data"], document["data"]["id"]
        snapshot = {"token": token, "fetched_at": None}
        for key, value in data.items():
            if key in SNAPSHOT_TYPES:
                snapshot[key] = idiomatic_scalar(value, SNAPSHOT_TYPES[key])
            elif TA_UPDATED.match(key):
                when = dt.datetime.fromisoformat(value) if value else None  # "...+00" needs Python >= 3.11
                rows["ta_updated"].append(
                    {"token": token, "interval": TA_UPDATED.match(key)["interval"], "updated_at": when}
                )
            elif SUFFIXED.match(key):
                idiomatic_long(rows, token, SUFFIXED.match(key), value)
        rows["snapshot"].append(snapshot)
        rows["info"].append(idiomatic_info(token, document.get("generalInfo") or {}))
    frames = {name: pl.DataFrame(rows[name], schema=schema) for name, schema in LONG_SCHEMAS.items()}
    frames["snapshot"] = pl.DataFrame(rows["snapshot"], schema=SNAPSHOT_SCHEMA)
    frames["info"] = pl.DataFrame(rows["info"], schema=INFO_SCHEMA)
    return frames


def idiomatic_scalar(value: object, kind: str) -> object:
    if kind == F and isinstance(value, str):
        return float(value) if value.strip() else None
    if kind == T:
        return dt.datetime.fromisoformat(value) if value else None  # "...Z" needs Python >= 3.11
    return value


def idiomatic_long(rows: Dict[str, List[dict]], token: str, match: "re.Match[str]", value: object) -> None:
    family, interval = match["family"], match["interval"]
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        rows["indicators"].append({"token": token, "interval": interval, "indicator": family, "value": float(value)})
    elif isinstance(value, str):
        rows["signals"].append({"token": token, "interval": interval, "indicator": family, "value": value})
    elif isinstance(value, list):
        for name in value:
            if name is not None:
                rows["patterns"].append(
                    {"token": token, "interval": interval, "family": pattern_family(family), "pattern": name}
                )


def idiomatic_info(token: str, info: dict) -> dict:
    community = info.get("community") or {}
    return {
        "token": token,
        "description": info.get("description"),
        "websites": info.get("websites"),
        "explorers": info.get("explorers"),
        **{name: community.get(name) for name in COMMUNITY},
        # Compact JSON text of each chain object, keys sorted as defilens (serde_json) writes them.
        "chains": [json.dumps(c, separators=(",", ":"), ensure_ascii=False) for c in info.get("chains") or []],
        "categories": info.get("categories"),
    }


# --------------------------------------------------------------------------- tuned

# Route of a key: ("s",) snapshot, ("t", interval) ta_updated, ("l", interval, family, pattern
# family) a long field, ("x",) ignored. Computed once per distinct key: keys repeat in every body.
_ROUTES: Dict[str, tuple] = {}


def route(key: str) -> tuple:
    found = _ROUTES.get(key)
    if found is None:
        found = _ROUTES[key] = _classify(key)
    return found


def _classify(key: str) -> tuple:
    if key in SNAPSHOT_TYPES:
        return ("s",)
    match = TA_UPDATED.match(key)
    if match:
        return ("t", match["interval"])
    match = SUFFIXED.match(key)
    if match:
        return ("l", match["interval"], match["family"], pattern_family(match["family"]))
    return ("x",)


class LongColumns:
    """The four columns of a long frame as Python lists (appending is the cheap part)."""

    __slots__ = ("token", "interval", "name", "value")

    def __init__(self) -> None:
        self.token: list = []
        self.interval: list = []
        self.name: list = []
        self.value: list = []

    def add(self, token: str, interval: str, name: str, value: object) -> None:
        self.token.append(token)
        self.interval.append(interval)
        self.name.append(name)
        self.value.append(value)

    def frame(self, kind: str) -> pl.DataFrame:
        names = list(LONG_SCHEMAS[kind])
        schema = LONG_SCHEMAS[kind]
        return pl.DataFrame(
            {names[0]: self.token, names[1]: self.interval, names[2]: self.name, names[3]: self.value},
            schema=schema,
        )


def tuned(bodies: List[bytes], token_ids: Optional[List[str]] = None) -> Dict[str, pl.DataFrame]:
    """orjson + column lists + polars: about as fast as this gets in Python."""
    loads = orjson.loads
    indicators, signals, patterns = LongColumns(), LongColumns(), LongColumns()
    ta_token: list = []
    ta_interval: list = []
    ta_value: list = []
    datas, infos, tokens = [], [], []
    for index, body in enumerate(bodies):
        document = loads(body)
        data = document["data"]
        token = data["id"] if token_ids is None else token_ids[index]
        datas.append(data)
        infos.append(document.get("generalInfo") or {})
        tokens.append(token)
        for key, value in data.items():
            r = _ROUTES.get(key) or route(key)
            kind = r[0]
            if kind == "l":
                cls = value.__class__
                if cls is float or cls is int:
                    indicators.add(token, r[1], r[2], float(value))
                elif cls is str:
                    signals.add(token, r[1], r[2], value)
                elif cls is list:
                    for name in value:
                        if name is not None:
                            patterns.add(token, r[1], r[3], name)
            elif kind == "t":
                ta_token.append(token)
                ta_interval.append(r[1])
                ta_value.append(value or None)
    ta = pl.DataFrame(
        {"token": ta_token, "interval": ta_interval, "updated_at": ta_value},
        schema={"token": pl.String, "interval": INTERVAL, "updated_at": pl.String},
    )
    return {
        "snapshot": tuned_snapshot(tokens, datas),
        "indicators": indicators.frame("indicators"),
        "signals": signals.frame("signals"),
        "patterns": patterns.frame("patterns"),
        "ta_updated": ta.with_columns(pl.col("updated_at").str.to_datetime(TA_FORMAT, time_unit="ms")),
        "info": tuned_info(tokens, infos),
    }


def tuned_snapshot(tokens: List[str], datas: List[dict]) -> pl.DataFrame:
    """One list per field, then each column converted by polars in one go."""
    columns = {
        "token": pl.Series("token", tokens, dtype=pl.String),
        "fetched_at": pl.Series("fetched_at", [None] * len(tokens), dtype=UTC_MS),
    }
    for field, kind in SNAPSHOT_FIELDS:
        values = [data.get(field) for data in datas]
        if kind == T:
            text = pl.Series(field, values, dtype=pl.String).replace("", None)
            columns[field] = text.str.to_datetime(time_unit="ms", time_zone="UTC")
        elif kind == F:
            # Decimal strings ("84.94") and JSON integers both become Float64.
            columns[field] = pl.Series(field, values, dtype=pl.Float64, strict=False)
        else:
            columns[field] = pl.Series(field, values, dtype=POLARS_TYPES[kind])
    return pl.DataFrame(columns)


def tuned_info(tokens: List[str], infos: List[dict]) -> pl.DataFrame:
    dumps = orjson.dumps
    communities = [info.get("community") or {} for info in infos]
    columns = {
        "token": tokens,
        "description": [info.get("description") for info in infos],
        "websites": [info.get("websites") for info in infos],
        "explorers": [info.get("explorers") for info in infos],
        **{name: [c.get(name) for c in communities] for name in COMMUNITY},
        "chains": [[dumps(c).decode() for c in info.get("chains") or ()] for info in infos],
        "categories": [info.get("categories") for info in infos],
    }
    return pl.DataFrame(columns, schema=INFO_SCHEMA)


# --------------------------------------------------------------------------- the fetch peers' job


class IndicatorsBuilder:
    """What each HTTP peer does with a body: orjson, numeric TA fields -> rows, polars at the end."""

    def __init__(self) -> None:
        self.columns = LongColumns()

    def add(self, token: str, body: bytes) -> None:
        columns = self.columns
        for key, value in orjson.loads(body)["data"].items():
            r = _ROUTES.get(key) or route(key)
            if r[0] == "l":
                cls = value.__class__
                if cls is float or cls is int:
                    columns.add(token, r[1], r[2], float(value))

    def frame(self) -> pl.DataFrame:
        return self.columns.frame("indicators")


# --------------------------------------------------------------------------- equality


def check_equal(ours: Dict[str, pl.DataFrame], reference: object, label: str) -> None:
    """Raises unless every frame equals defilens' frame of the same name (values, order, types)."""
    from polars.testing import assert_frame_equal

    for name in FRAMES:
        try:
            assert_frame_equal(ours[name], getattr(reference, name))
        except AssertionError as error:
            raise AssertionError(f"{label}: frame {name!r} differs from defilens: {error}") from None
