"""Hand-written response bodies with every field family of the service reference."""

from __future__ import annotations

import copy
import json
from typing import Any, Dict

NUMERIC_FAMILIES = ["rsi7", "rsi14", "rsi25", "sma5", "sma20", "sma100", "upper_bband", "middle_bband", "lower_bband"]
TA_INTERVALS = ["5m", "15m", "1h", "24h", "1w"]
GROUPED_INTERVALS = ["5m", "15m", "1h", "24h", "4h"]
CANDLE_FAMILIES = {
    "single_pattern": "single",
    "double_pattern": "double",
    "tripple_pattern": "triple",
    "chartpattern": "chart",
    "candlestick_pattern": "candlestick",
}
GROUPED_FAMILIES = {
    "triangle_pattern": "triangle",
    "head_shoulder_pattern": "head_shoulder",
    "multiple_top_bottom_pattern": "multiple_top_bottom",
    "double_top_bottom_pattern": "double_top_bottom",
    "wedge_pattern": "wedge",
    "channel_pattern": "channel",
}
CHANGE_FIELDS = [
    "market_cap_change_percentage_24h",
    "market_cap_change_percentage_1w",
    "market_cap_percentage_change_7d",
    "price_change_percentage_24h",
    "price_percent_change_1h",
    "price_percent_change_24h",
    "price_percent_change_7d",
    "price_percent_change_30d",
    "price_percent_change_60d",
    "price_percent_change_90d",
    "price_percent_change_1w",
    "volume_change_24h",
    "volume_change_1w",
    "volume_percentage_change_7d",
    "supply_percentage_change_24h",
]
DERIVATIVE_FIELDS = [
    "open_interest",
    "open_interest_change_1h",
    "open_interest_change_4h",
    "open_interest_change_24h",
    "funding_rate",
    "long_short_ratio_1h",
    "long_short_ratio_4h",
    "long_short_ratio_24h",
    "long_liquidation_1h",
    "long_liquidation_4h",
    "long_liquidation_24h",
    "short_liquidation_1h",
    "short_liquidation_4h",
    "short_liquidation_24h",
]


def listing() -> Dict[str, Any]:
    """A complete listing response; values are chosen so each can be checked exactly."""
    data: Dict[str, Any] = {
        "id": "bitcoin",
        "symbol_id": "bitcoin",
        "name": "Bitcoin",
        "symbol": "BTC",
        "image": "https://img.example/btc.png",
        "categories": ["Layer 1", "Proof of Work"],
        "tags": ["layer-1", "proof-of-work"],
        "exchanges": ["Binance", "Kraken"],
        "is_active": True,
        "infinite_supply": False,
        "last_updated": "2024-05-01T12:34:56.789Z",
        "updated_at": "2024-05-01T12:35:00.000Z",
        "ohlc_updated_time": "",
        "current_price": "64123.52",
        "circulating_supply": 19690000.0,
        "total_supply": 19690000.0,
        "max_supply": 21000000,
        "fully_diluted_valuation": 1346593920000.5,
        "market_cap": 1262591108800.25,
        "market_cap_rank": 1,
        "market_cap_dominance": 52.1,
        "total_volume": 28000000000.0,
        "ath": 73750.07,
        "atl": 67.81,
        "apy": 0.0,
        "tvl": 0,
        "day_volatility": 2.5,
        "github_commit": 41234,
        "number_of_holders": None,
        "holders_change_percentage_24h": None,
    }
    for i, name in enumerate(CHANGE_FIELDS):
        data[name] = round(0.5 + i, 2)
    for i, name in enumerate(DERIVATIVE_FIELDS):
        data[name] = round(100.25 + i, 2)
    for fi, family in enumerate(NUMERIC_FAMILIES):
        for ii, interval in enumerate(TA_INTERVALS):
            data[f"{family}_{interval}"] = float(fi * 10 + ii) + 0.5
    for ii, interval in enumerate(TA_INTERVALS):
        data[f"macd_{interval}"] = "Cross Above" if ii % 2 == 0 else "Cross Below"
        data[f"ta_{interval}_updated_at"] = f"2024-05-01 1{ii}:00:00+00"
        data[f"single_pattern_{interval}"] = ["bullish_hammer"] if interval == "1h" else []
        data[f"double_pattern_{interval}"] = []
        data[f"tripple_pattern_{interval}"] = ["three_white_soldiers"] if interval == "24h" else []
        data[f"chartpattern_{interval}"] = ["Ascending Triangle", "Wedge Up"] if interval == "1w" else []
        data[f"candlestick_pattern_{interval}"] = ["bullish_inverted_hammer", "basic_doji"] if interval == "5m" else []
    for interval in GROUPED_INTERVALS:
        for wire in GROUPED_FAMILIES:
            data[f"{wire}_{interval}"] = []
    data["double_top_bottom_pattern_4h"] = ["double_bottom"]
    data["channel_pattern_1h"] = ["Channel Up"]
    return {
        "data": data,
        "generalInfo": {
            "description": "The first cryptocurrency.",
            "websites": ["https://bitcoin.org"],
            "explorers": ["https://mempool.space", "https://blockchair.com"],
            "community": {
                "twitter": "https://twitter.com/bitcoin",
                "reddit": "https://reddit.com/r/bitcoin",
                "facebook": None,
                "github": "https://github.com/bitcoin/bitcoin",
                "telegram": None,
            },
            "chains": [],
            "categories": ["Layer 1"],
        },
    }


def listing_bytes(**overrides: Any) -> bytes:
    body = listing()
    body["data"].update(overrides)
    return json.dumps(body).encode()


def markets() -> Dict[str, Any]:
    return {
        "data": [
            {
                "id": "m1",
                "exchangeName": "Binance",
                "exchangeImage": "https://img.example/binance.png",
                "marketPair": "BTC/USDT",
                "marketUrl": "https://binance.com/trade/BTC_USDT",
                "price": 64120.5,
                "volumeUsd": 1500000000.0,
                "liquidity_score": 987,
                "depthUsdPositiveTwo": 25000000.0,
                "depthUsdNegativeTwo": 27000000.0,
                "volumePercent": 12.5,
                "marketReputation": 1,
            },
            {
                "id": "m2",
                "exchangeName": "Kraken",
                "exchangeImage": "https://img.example/kraken.png",
                "marketPair": "BTC/EUR",
                "marketUrl": "https://kraken.com",
                "price": 59000,
                "volumeUsd": 300000000,
                "liquidity_score": 812,
                "depthUsdPositiveTwo": 5000000,
                "depthUsdNegativeTwo": 4000000,
                "volumePercent": 3.25,
                "marketReputation": 0.9,
            },
        ],
        "total": 2,
    }


def deep_copy(value: Any) -> Any:
    return copy.deepcopy(value)
