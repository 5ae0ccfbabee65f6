"""Writes the example notebooks from the cells below (kept here so diffs stay readable).

Run: python notebooks/make_notebooks.py
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

SETUP = '''import os
import polars as pl
import defilens

# Against the real service when a key is set; otherwise against the built-in Sandbox.
if os.environ.get("DEFILENS_API_KEY"):
    client = defilens.Client()
else:
    sandbox = defilens.testing.Sandbox(seed=42)
    client = defilens.Client(base_url=sandbox.url)
client'''

NOTEBOOKS = {
    "01_quickstart.ipynb": [
        new_markdown_cell("# Quickstart: one token, every frame\n\nWhat `defilens` gives you for one token, and what each column means. Runs offline against the Sandbox unless `DEFILENS_API_KEY` is set.\n\nSet up once: `pip install \"defilens[notebook]\"` (tqdm, ipywidgets and matplotlib: progress bars that draw as widgets, and the plots)."),
        new_code_cell(SETUP),
        new_code_cell('frames = client.token("bitcoin")\nframes'),
        new_markdown_cell("## `snapshot`: one row per token\n\nMarket, supply, valuation, change and derivatives figures, typed: `current_price` arrives as text and becomes Float64, timestamps become UTC datetimes, an empty `ohlc_updated_time` becomes null."),
        new_code_cell('frames.snapshot.select("token", "fetched_at", "symbol", "current_price", "market_cap", "market_cap_rank", "price_change_percentage_24h", "funding_rate", "last_updated")'),
        new_code_cell('# every column and its dtype\npl.DataFrame({"column": frames.snapshot.columns, "dtype": [str(d) for d in frames.snapshot.dtypes]})'),
        new_markdown_cell("## `indicators`: numeric indicators in long form\n\nOne row per (token, interval, indicator). `interval` is an Enum ordered by duration, so sorting and joining just work."),
        new_code_cell('frames.indicators.pivot(on="interval", index="indicator", values="value")'),
        new_markdown_cell("## `signals`, `patterns`, `ta_updated`\n\n`signals` holds textual indicators such as the MACD state; `patterns` has one row per detected pattern (the service's `tripple` is spelled `triple`); `ta_updated` says when each interval was last computed."),
        new_code_cell('frames.signals'),
        new_code_cell('frames.patterns.sort("interval", "family")'),
        new_code_cell('frames.ta_updated'),
        new_markdown_cell("## `info` and `markets`"),
        new_code_cell('frames.info.select("token", "description", "websites", "twitter", "categories")'),
        new_code_cell('frames.markets.sort("volume_usd", descending=True).head(5).select("exchange_name", "market_pair", "base", "quote", "price", "volume_usd", "liquidity_score")'),
        new_markdown_cell("## `log` and `errors`\n\nEvery HTTP exchange is logged: attempts, status, elapsed time, the markets `total`. `fetch` never raises for one token; failures land in `errors` with a `kind`."),
        new_code_cell('batch = client.fetch(["bitcoin", "ethereum", "unknown-coin"])\nbatch.log.select("token", "endpoint", "ok", "status", "kind", "attempts", "elapsed_ms")'),
        new_code_cell('batch.errors.select("token", "endpoint", "kind", "message")'),
        new_code_cell('# anything the frames leave out is in the raw JSON\nsorted(batch.raw[0]["data"])[:10]'),
    ],
    "02_screen.ipynb": [
        new_markdown_cell("# Cross-token screen: who is oversold or overbought?\n\nFetch a few dozen tokens and look across intervals: an RSI heat map, where price sits inside its Bollinger bands, and which patterns fire.\n\nSet up once: `pip install \"defilens[notebook]\"` (tqdm, ipywidgets and matplotlib: progress bars that draw as widgets, and the plots)."),
        new_code_cell(SETUP),
        new_code_cell('tokens = ["bitcoin", "ethereum", "solana", "cardano", "ripple", "polkadot", "dogecoin", "avalanche", "chainlink", "litecoin",\n          "uniswap", "stellar", "cosmos", "near", "aptos", "arbitrum", "optimism", "filecoin", "algorand", "tezos",\n          "aave", "maker", "the-graph", "render", "injective", "sui", "sei", "pepe", "bonk", "kaspa"]\nframes = client.fetch(tokens, markets=False)\nprint(f"{frames.snapshot.height} tokens, {frames.errors.height} failures")'),
        new_code_cell('rsi = (\n    frames.indicators.filter(pl.col("indicator") == "rsi14")\n    .pivot(on="interval", index="token", values="value")\n    .sort("token")\n)\nrsi.head()'),
        new_code_cell('import matplotlib.pyplot as plt\n\nintervals = [c for c in rsi.columns if c != "token"]\nfig, ax = plt.subplots(figsize=(6, 9))\nimage = ax.imshow(rsi.select(intervals).to_numpy(), cmap="RdYlGn_r", vmin=0, vmax=100, aspect="auto")\nax.set_xticks(range(len(intervals)), intervals)\nax.set_yticks(range(rsi.height), rsi["token"].to_list())\nax.set_title("RSI(14) by token and interval")\nfig.colorbar(image, label="RSI(14)")\nplt.show()'),
        new_markdown_cell("RSI above 70 is conventionally *overbought*, below 30 *oversold*. Count how many intervals agree:"),
        new_code_cell('extremes = (\n    frames.indicators.filter(pl.col("indicator") == "rsi14")\n    .group_by("token")\n    .agg(\n        (pl.col("value") < 30).sum().alias("oversold_intervals"),\n        (pl.col("value") > 70).sum().alias("overbought_intervals"),\n    )\n    .filter((pl.col("oversold_intervals") >= 2) | (pl.col("overbought_intervals") >= 2))\n    .sort("oversold_intervals", descending=True)\n)\nextremes'),
        new_markdown_cell("## Bollinger position\n\n0 means price at the lower band, 1 at the upper band; outside [0, 1] means price broke out of the bands."),
        new_code_cell('bands = (\n    frames.indicators.filter(pl.col("indicator").is_in(["upper_bband", "lower_bband"]) & (pl.col("interval") == "24h"))\n    .pivot(on="indicator", index="token", values="value")\n    .join(frames.snapshot.select("token", "current_price"), on="token")\n    .with_columns(((pl.col("current_price") - pl.col("lower_bband")) / (pl.col("upper_bband") - pl.col("lower_bband"))).alias("band_position"))\n    .sort("band_position")\n)\n\nfig, ax = plt.subplots(figsize=(9, 3))\nax.bar(bands["token"].to_list(), bands["band_position"].to_list(), color="steelblue")\nax.axhline(0, color="grey", lw=0.8)\nax.axhline(1, color="grey", lw=0.8)\nax.set_ylabel("position in 24h bands")\nax.tick_params(axis="x", rotation=90)\nplt.show()'),
        new_markdown_cell("## Patterns firing now"),
        new_code_cell('frames.patterns.group_by("family", "pattern").agg(pl.len().alias("tokens")).sort("tokens", descending=True).head(10)'),
        new_code_cell('# MACD crosses on the daily chart, joined with the RSI view\nframes.signals.filter((pl.col("indicator") == "macd") & (pl.col("interval") == "24h")).join(rsi.select("token", "24h"), on="token").sort("24h")'),
    ],
    "03_markets_liquidity.ipynb": [
        new_markdown_cell("# Markets and liquidity: where does a token really trade?\n\nVolume share by exchange, liquidity scores, and the asymmetry of ±2% depth, by exchange and quote currency.\n\nSet up once: `pip install \"defilens[notebook]\"` (tqdm, ipywidgets and matplotlib: progress bars that draw as widgets, and the plots)."),
        new_code_cell(SETUP),
        new_code_cell('frames = client.fetch(["bitcoin", "ethereum", "solana", "chainlink"], markets=True)\nmarkets = frames.markets\nmarkets.select("token", "exchange_name", "market_pair", "quote", "volume_usd", "volume_percent", "liquidity_score").head()'),
        new_code_cell('# Is the market list complete? The service reports a `total` that can exceed the list it sends.\nframes.log.filter(pl.col("endpoint") == "markets").select("token", "total", "message")'),
        new_code_cell('share = (\n    markets.filter(pl.col("token") == "bitcoin")\n    .group_by("exchange_name")\n    .agg(pl.col("volume_usd").sum())\n    .with_columns((pl.col("volume_usd") / pl.col("volume_usd").sum() * 100).alias("share_pct"))\n    .sort("share_pct", descending=True)\n)\n\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(8, 3))\nax.bar(share["exchange_name"].to_list(), share["share_pct"].to_list(), color="darkorange")\nax.set_ylabel("% of bitcoin volume")\nax.tick_params(axis="x", rotation=45)\nplt.show()'),
        new_markdown_cell("## Depth asymmetry\n\n`depth_usd_positive_two` is the capital needed to push the price up 2%, `depth_usd_negative_two` down 2%. A ratio above 1 means it is harder to push the price up than down (more resting asks than bids)."),
        new_code_cell('depth = (\n    markets.with_columns((pl.col("depth_usd_positive_two") / pl.col("depth_usd_negative_two")).alias("up_down_depth_ratio"))\n    .group_by("token", "quote")\n    .agg(\n        pl.col("volume_usd").sum(),\n        pl.col("liquidity_score").mean().round(0).alias("mean_liquidity_score"),\n        pl.col("up_down_depth_ratio").median().round(2),\n    )\n    .sort("token", "volume_usd", descending=[False, True])\n)\ndepth'),
        new_code_cell('fig, ax = plt.subplots(figsize=(6, 4))\nfor token, group in markets.group_by("token"):\n    ax.scatter(group["liquidity_score"].to_list(), group["volume_usd"].to_list(), label=token[0], alpha=0.7)\nax.set_yscale("log")\nax.set_xlabel("liquidity score (0-1000)")\nax.set_ylabel("volume (USD)")\nax.legend()\nplt.show()'),
    ],
}


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        notebook = new_notebook(cells=cells)
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        notebook.metadata["language_info"] = {"name": "python"}
        nbformat.write(notebook, HERE / name)


if __name__ == "__main__":
    main()
