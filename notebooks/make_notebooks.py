"""Writes the example notebooks from the cells below (kept here so diffs stay readable) and runs
them, so that the committed notebooks carry their outputs and plots.

Run: python notebooks/make_notebooks.py   (or: make notebooks)
"""

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

SETUP = """import os
import polars as pl
import defilens

# Against the real service when a key is set; otherwise against the built-in Sandbox.
if os.environ.get("DEFILENS_API_KEY"):
    client = defilens.Client()
else:
    # A simulated clock standing at a fixed time, so this notebook shows the same market on
    # every run; without `now=` the Sandbox's market moves with the wall clock.
    sandbox = defilens.testing.Sandbox(seed=42, now="2026-11-20T12:00:00Z")
    client = defilens.Client(base_url=sandbox)  # the Sandbox itself: `fetched_at` is on its clock too
# (The client is not displayed: its URL has a free port, different on every run. The figures and
# tables below are the same on every run.)"""

NOTEBOOKS = {
    "01_quickstart.ipynb": [
        new_markdown_cell(
            '# Quickstart: one token, every frame\n\nWhat `defilens` gives you for one token, and what each column means. Runs offline against the Sandbox unless `DEFILENS_API_KEY` is set.\n\nSet up once (defilens is not on PyPI yet): `pip install tqdm ipywidgets matplotlib`, or `pip install ".[notebook]"` from a clone (tqdm, ipywidgets and matplotlib: progress bars that draw as widgets, and the plots).'
        ),
        new_code_cell(SETUP),
        new_code_cell('frames = client.token("bitcoin")\nframes'),
        new_markdown_cell(
            "## `snapshot`: one row per token\n\nMarket, supply, valuation, change and derivatives figures, typed: `current_price` arrives as text and becomes Float64, timestamps become UTC datetimes, an empty `ohlc_updated_time` becomes null."
        ),
        new_code_cell(
            'frames.snapshot.select("token", "fetched_at", "symbol", "current_price", "market_cap", "market_cap_rank", "price_change_percentage_24h", "funding_rate", "last_updated")'
        ),
        new_code_cell(
            '# every column and its dtype\npl.DataFrame({"column": frames.snapshot.columns, "dtype": [str(d) for d in frames.snapshot.dtypes]})'
        ),
        new_markdown_cell(
            "## `indicators`: numeric indicators in long form\n\nOne row per (token, interval, indicator). `interval` is an Enum ordered by duration, so sorting and joining just work."
        ),
        new_code_cell('frames.indicators.pivot(on="interval", index="indicator", values="value")'),
        new_markdown_cell(
            "## `signals`, `patterns`, `ta_updated`\n\n`signals` holds textual indicators such as the MACD state; `patterns` has one row per detected pattern (the service's `tripple` is spelled `triple`); `ta_updated` says when each interval was last computed."
        ),
        new_code_cell("frames.signals"),
        new_code_cell('frames.patterns.sort("interval", "family")'),
        new_code_cell("frames.ta_updated"),
        new_markdown_cell("## `info` and `markets`"),
        new_code_cell('frames.info.select("token", "description", "websites", "twitter", "categories")'),
        new_code_cell(
            'frames.markets.sort("volume_usd", descending=True).head(5).select("exchange_name", "market_pair", "base", "quote", "price", "volume_usd", "liquidity_score")'
        ),
        new_markdown_cell(
            "## `log` and `errors`\n\nEvery HTTP exchange is logged: attempts, status, the markets `total`, and `elapsed_ms` (how long it took). `fetch` never raises for one token; failures land in `errors` with a `kind`."
        ),
        new_code_cell(
            'batch = client.fetch(["bitcoin", "ethereum", "unknown-coin"])\nbatch.log.select("token", "endpoint", "ok", "status", "kind", "attempts", "total")'
        ),
        new_code_cell('batch.errors.select("token", "endpoint", "kind", "message")'),
        new_code_cell('# anything the frames leave out is in the raw JSON\nsorted(batch.raw[0]["data"])[:10]'),
    ],
    "02_screen.ipynb": [
        new_markdown_cell(
            '# Cross-token screen: who is oversold or overbought?\n\nFetch a few dozen tokens and look across intervals: an RSI heat map, where price sits inside its Bollinger bands, and which patterns fire.\n\nSet up once (defilens is not on PyPI yet): `pip install tqdm ipywidgets matplotlib`, or `pip install ".[notebook]"` from a clone (tqdm, ipywidgets and matplotlib: progress bars that draw as widgets, and the plots).'
        ),
        new_code_cell(SETUP),
        new_code_cell(
            'tokens = ["bitcoin", "ethereum", "solana", "cardano", "ripple", "polkadot", "dogecoin", "avalanche", "chainlink", "litecoin",\n          "uniswap", "stellar", "cosmos", "near", "aptos", "arbitrum", "optimism", "filecoin", "algorand", "tezos",\n          "aave", "maker", "the-graph", "render", "injective", "sui", "sei", "pepe", "bonk", "kaspa"]\nframes = client.fetch(tokens, markets=False)\nprint(f"{frames.snapshot.height} tokens, {frames.errors.height} failures")'
        ),
        new_code_cell(
            'rsi = (\n    frames.indicators.filter(pl.col("indicator") == "rsi14")\n    .pivot(on="interval", index="token", values="value")\n    .sort("token")\n)\nrsi.head()'
        ),
        new_code_cell(
            'import matplotlib.pyplot as plt\n\nintervals = [c for c in rsi.columns if c != "token"]\nfig, ax = plt.subplots(figsize=(6, 9))\nimage = ax.imshow(rsi.select(intervals).to_numpy(), cmap="RdYlGn_r", vmin=0, vmax=100, aspect="auto")\nax.set_xticks(range(len(intervals)), intervals)\nax.set_yticks(range(rsi.height), rsi["token"].to_list())\nax.set_title("RSI(14) by token and interval")\nfig.colorbar(image, label="RSI(14)")\nplt.show()'
        ),
        new_markdown_cell(
            "RSI above 70 is conventionally *overbought*, below 30 *oversold*. Count how many intervals agree:"
        ),
        new_code_cell(
            'extremes = (\n    frames.indicators.filter(pl.col("indicator") == "rsi14")\n    .group_by("token")\n    .agg(\n        (pl.col("value") < 30).sum().alias("oversold_intervals"),\n        (pl.col("value") > 70).sum().alias("overbought_intervals"),\n    )\n    .filter((pl.col("oversold_intervals") >= 2) | (pl.col("overbought_intervals") >= 2))\n    .sort("oversold_intervals", descending=True)\n)\nextremes'
        ),
        new_markdown_cell(
            "## Bollinger position\n\n0 means price at the lower band, 1 at the upper band; outside [0, 1] means price broke out of the bands."
        ),
        new_code_cell(
            'bands = (\n    frames.indicators.filter(pl.col("indicator").is_in(["upper_bband", "lower_bband"]) & (pl.col("interval") == "24h"))\n    .pivot(on="indicator", index="token", values="value")\n    .join(frames.snapshot.select("token", "current_price"), on="token")\n    .with_columns(((pl.col("current_price") - pl.col("lower_bband")) / (pl.col("upper_bband") - pl.col("lower_bband"))).alias("band_position"))\n    .sort("band_position")\n)\n\nfig, ax = plt.subplots(figsize=(9, 3))\nax.bar(bands["token"].to_list(), bands["band_position"].to_list(), color="steelblue")\nax.axhline(0, color="grey", lw=0.8)\nax.axhline(1, color="grey", lw=0.8)\nax.set_ylabel("position in 24h bands")\nax.tick_params(axis="x", rotation=90)\nplt.show()'
        ),
        new_markdown_cell("## Patterns firing now"),
        new_code_cell(
            'frames.patterns.group_by("family", "pattern").agg(pl.len().alias("tokens")).sort("tokens", descending=True).head(10)'
        ),
        new_code_cell(
            '# MACD crosses on the daily chart, joined with the RSI view\nframes.signals.filter((pl.col("indicator") == "macd") & (pl.col("interval") == "24h")).join(rsi.select("token", "24h"), on="token").sort("24h")'
        ),
    ],
    "03_markets_liquidity.ipynb": [
        new_markdown_cell(
            '# Markets and liquidity: where does a token really trade?\n\nVolume share by exchange, liquidity scores, and the asymmetry of ±2% depth, by exchange and quote currency.\n\nSet up once (defilens is not on PyPI yet): `pip install tqdm ipywidgets matplotlib`, or `pip install ".[notebook]"` from a clone (tqdm, ipywidgets and matplotlib: progress bars that draw as widgets, and the plots).'
        ),
        new_code_cell(SETUP),
        new_code_cell(
            'frames = client.fetch(["bitcoin", "ethereum", "solana", "chainlink"], markets=True)\nmarkets = frames.markets\nmarkets.select("token", "exchange_name", "market_pair", "quote", "volume_usd", "volume_percent", "liquidity_score").head()'
        ),
        new_code_cell(
            '# Is the market list complete? The service reports a `total` that can exceed the list it sends.\nframes.log.filter(pl.col("endpoint") == "markets").select("token", "total", "message")'
        ),
        new_code_cell(
            'share = (\n    markets.filter(pl.col("token") == "bitcoin")\n    .group_by("exchange_name")\n    .agg(pl.col("volume_usd").sum())\n    .with_columns((pl.col("volume_usd") / pl.col("volume_usd").sum() * 100).alias("share_pct"))\n    .sort("share_pct", "exchange_name", descending=[True, False])\n)\n\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(8, 3))\nax.bar(share["exchange_name"].to_list(), share["share_pct"].to_list(), color="darkorange")\nax.set_ylabel("% of bitcoin volume (listed pairs)")\nplt.setp(ax.get_xticklabels(), rotation=40, ha="right")\nfig.tight_layout()\nplt.show()'
        ),
        new_markdown_cell(
            "## Depth asymmetry\n\n`depth_usd_positive_two` is the capital needed to push the price up 2%, `depth_usd_negative_two` down 2%. A ratio above 1 means it is harder to push the price up than down (more resting asks than bids)."
        ),
        new_code_cell(
            'depth = (\n    markets.with_columns((pl.col("depth_usd_positive_two") / pl.col("depth_usd_negative_two")).alias("up_down_depth_ratio"))\n    .group_by("token", "quote")\n    .agg(\n        pl.col("volume_usd").sum(),\n        pl.col("liquidity_score").mean().round(0).alias("mean_liquidity_score"),\n        pl.col("up_down_depth_ratio").median().round(2),\n    )\n    .sort("token", "volume_usd", descending=[False, True])\n)\ndepth'
        ),
        new_code_cell(
            'fig, ax = plt.subplots(figsize=(6, 4))\n# In token order, so every run gives each token the same colour.\nfor token, group in markets.sort("token").group_by("token", maintain_order=True):\n    ax.scatter(group["liquidity_score"].to_list(), group["volume_usd"].to_list(), label=token[0], alpha=0.7)\nax.set_yscale("log")\nax.set_xlabel("liquidity score (0-1000)")\nax.set_ylabel("volume (USD)")\nax.legend()\nplt.show()'
        ),
    ],
}


HISTORY_SETUP = """import datetime as dt
import polars as pl
import matplotlib.pyplot as plt
import defilens

# The Sandbox's clock is simulated: it stands at `now` until `advance` moves it.
sandbox = defilens.testing.Sandbox(seed=42, now="2026-11-01T00:00:00Z")
client = defilens.Client(base_url=sandbox.url)
sandbox.now"""

HISTORY_COLLECT = """tokens = ["bitcoin", "solana", "dogecoin"]
rounds = []
for _ in range(14 * 24):                      # two weeks of hourly rounds, in a few seconds
    frames = client.fetch(tokens, markets=False, progress=False)
    at = frames.snapshot.select("token", pl.col("last_updated").alias("market_time"), "current_price")
    hourly = (
        frames.indicators.filter(pl.col("interval") == "1h", pl.col("indicator").is_in(["rsi14", "upper_bband", "middle_bband", "lower_bband"]))
        .pivot(on="indicator", index="token", values="value")
    )
    rounds.append(at.join(hourly, on="token"))
    sandbox.advance("1h")
history = pl.concat(rounds).sort("token", "market_time")
print(f"{history.height} rows: {history['market_time'].min()} to {history['market_time'].max()}")
history.head()"""

HISTORY_PLOT = """import matplotlib.dates as mdates

fig, axes = plt.subplots(2, len(tokens), figsize=(13, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
for column, token in enumerate(tokens):
    one = history.filter(pl.col("token") == token)
    time = one["market_time"].to_list()
    price_axis, rsi_axis = axes[0, column], axes[1, column]
    price_axis.fill_between(time, one["lower_bband"].to_list(), one["upper_bband"].to_list(), color="tab:blue", alpha=0.15, label="Bollinger bands (1h, 20, 2)")
    price_axis.plot(time, one["middle_bband"].to_list(), color="tab:blue", lw=0.8, label="SMA(20), middle band")
    price_axis.plot(time, one["current_price"].to_list(), color="black", lw=1.0, label="price")
    price_axis.set_title(token)
    price_axis.set_ylabel("USD")
    rsi_axis.plot(time, one["rsi14"].to_list(), color="tab:purple", lw=0.9)
    rsi_axis.axhline(70, color="tab:red", lw=0.7, ls="--")
    rsi_axis.axhline(30, color="tab:green", lw=0.7, ls="--")
    rsi_axis.set_ylim(0, 100)
    rsi_axis.set_ylabel("RSI(14), 1h")
    rsi_axis.xaxis.set_major_locator(mdates.DayLocator(interval=3))
    rsi_axis.xaxis.set_major_formatter(mdates.DateFormatter("%b %d"))
    rsi_axis.set_xlabel("market time (UTC)")
handles, labels = axes[0, 0].get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
fig.suptitle("Two weeks of simulated market, one round per hour")
fig.tight_layout(rect=(0, 0.05, 1, 1))
plt.show()"""

HISTORY_CHECK = """candles = sandbox.candles("bitcoin", "1h")
ours = candles.select("open_time", "close", pl.col("close").rolling_mean(20).alias("sma20"))
listing = client.fetch(["bitcoin"], markets=False, progress=False).indicators
served = listing.filter(pl.col("interval") == "1h", pl.col("indicator") == "sma20")["value"].item()
print(f"SMA(20) of the last 20 hourly closes: {ours['sma20'][-1]:.4f}; the listing says {served:.4f}")
candles.tail(3)"""

NOTEBOOKS["04_history.ipynb"] = [
    new_markdown_cell(
        '# History over simulated time\n\nThe service answers only "now"; history comes from polling it. The Sandbox\'s clock can be simulated, so two weeks of hourly rounds take a few seconds here: each token follows a seeded price path, and every indicator is computed from its candles by the standard definitions.\n\nSet up once (defilens is not on PyPI yet): `pip install tqdm ipywidgets matplotlib`, or `pip install ".[notebook]"` from a clone (tqdm, ipywidgets and matplotlib). Against the real service, `defilens collect TOKEN... --every 1h --out DIR` builds the same history on disk, and `defilens.scan(DIR, "indicators")` reads it back.'
    ),
    new_code_cell(HISTORY_SETUP),
    new_markdown_cell(
        "## Collect: fetch, then move the clock an hour\n\n`last_updated` is the close of the last 5-minute candle: the market's time, not the wall clock's."
    ),
    new_code_cell(HISTORY_COLLECT),
    new_markdown_cell(
        "## Price inside its Bollinger bands, and RSI\n\nThe bands are 20 hourly closes at 2 standard deviations; the middle band is the SMA(20). RSI above 70 is conventionally overbought, below 30 oversold."
    ),
    new_code_cell(HISTORY_PLOT),
    new_markdown_cell(
        "## Check an indicator yourself\n\n`sandbox.candles(token, interval)` returns the candles behind the listing's indicators, so any of them can be recomputed."
    ),
    new_code_cell(HISTORY_CHECK),
    new_code_cell("sandbox.stop()"),
]


RESEARCH_SETUP = """import datetime as dt
import tempfile
import polars as pl
import matplotlib.pyplot as plt
import defilens

# A history on a simulated clock: hourly rounds for six tokens, with a deliberate hole (the
# collector paused for six hours), so the audit has something to find. The client is bound to the
# Sandbox's clock (base_url=sandbox), so the whole history is stamped in simulated time.
tokens = ["bitcoin", "ethereum", "solana", "dogecoin", "cardano", "chainlink"]
root = tempfile.mkdtemp() + "/history"
sandbox = defilens.testing.Sandbox(seed=3, now="2026-03-01T00:02:00Z")
client = defilens.Client(base_url=sandbox)
client.collect(tokens, "1h", count=12, out=root)        # the collector moves the still clock an hour a round
sandbox.advance("7h")                                   # the hole: six hourly rounds not made
client.collect(tokens, "1h", count=12, out=root)
print(defilens.scan(root, "snapshot").select(pl.len()).collect().item(), "listing fetches collected")"""

RESEARCH_AUDIT = """report = defilens.audit(root)
print(report)
# Colour: the observable closes missed (a round fell, or should have fallen, in the close's window and
# did not see it). The closes an hourly round cannot see (11 in 12 of the 5m ones) are `unobservable`,
# not missed: they are in the table below, not in the colour.
coverage = report.coverage.with_columns(pl.col("interval").cast(pl.String))
missed = coverage.pivot(on="interval", index="token", values="missed").sort("token")
observable = coverage.pivot(on="interval", index="token", values="observable").sort("token")
intervals = [c for c in ["5m", "15m", "1h", "24h", "1w"] if c in missed.columns]
fig, ax = plt.subplots(figsize=(6, 3))
counts = missed.select(intervals).to_numpy()
image = ax.imshow(counts, cmap="Reds", aspect="auto", vmin=0)
for row, token in enumerate(missed["token"]):
    for column, interval in enumerate(intervals):
        dark = counts[row, column] > counts.max() / 2
        ax.text(column, row, f"{missed[interval][row]}/{observable[interval][row]}", ha="center", va="center", fontsize=7, color="white" if dark else "black")
ax.set_xticks(range(len(intervals)), intervals)
ax.set_yticks(range(missed.height), missed["token"].to_list())
ax.set_title("observable candle closes missed (missed/observable)")
fig.colorbar(image, label="closes missed")
plt.show()
coverage.filter(pl.col("token") == "bitcoin").select("interval", "expected", "seen", "observable", "missed", "unobservable")"""

RESEARCH_SETTINGS = """# What collected the history: one row a run, from the Delta commit info of its rounds.
defilens.history.settings(root).select("first_start", "last_start", "rounds", "every", "source", "ids_count", "clock")"""

RESEARCH_PANEL = """panel = defilens.panel(root, intervals="1h", indicators="rsi14")
panel.select("token", "candle_open", "candle_close", "first_seen_at", "lag", "value", "revisions").sort("token", "candle_close").collect().head(8)"""

RESEARCH_REPAINTS = """# A service that repaints: the Sandbox's repaint_rate=0.3 gives three in ten (token, close) pairs
# provisional values for a minute after the close. Two polls, 20 s and 80 s after 13:00, see both.
repainting = defilens.testing.Sandbox(seed=3, now="2026-03-01T13:00:20Z", repaint_rate=0.3)
repaint_root = tempfile.mkdtemp() + "/history"
defilens.Client(base_url=repainting).collect(
    tokens, "0.01s", count=2, out=repaint_root, markets=False, on_round=lambda n, f: repainting.advance("1m")
)
repainting.stop()
revised = defilens.panel(repaint_root).filter(pl.col("revisions") > 1, pl.col("indicator") == "rsi14")
revised.select("token", "interval", "candle_close", "value", "last_value", "revisions").sort("token", "interval").collect()"""

RESEARCH_ASOF = """first = defilens.panel(root).select(pl.col("first_seen_at").min()).collect().item()
moments = [first + dt.timedelta(hours=h) for h in (0, 11, 19)]    # before, at the end of, and after the hole
screen = defilens.asof(root, moments, intervals="1h", indicators="rsi14").pivot(on="at", index="token", values="value")
screen"""

RESEARCH_VERIFY = """frames = client.fetch(tokens, markets=False)
candles = pl.concat(
    sandbox.candles(token, interval).with_columns(token=pl.lit(token), interval=pl.lit(interval))
    for token in tokens
    for interval in ["5m", "15m", "1h", "24h", "1w"]
)
checked = defilens.verify(frames.indicators, candles)
print(f"{checked['ok'].sum()} of {checked.height} values agree with the candles")
skewed = frames.indicators.with_columns(
    pl.when((pl.col("token") == "solana") & (pl.col("interval") == "24h") & (pl.col("indicator") == "rsi14"))
    .then(pl.col("value") + 0.5)
    .otherwise(pl.col("value"))
    .alias("value")
)
defilens.verify(skewed, candles).filter(~pl.col("ok"))"""

STUDY_SETUP = """import datetime as dt
import warnings

import polars as pl

import defilens

# Four simulated days of 30-minute rounds for 30 tokens, collected on the Sandbox's clock (it
# stands still, and the collector moves it from round to round: this takes seconds, not days).
# The Sandbox's prices are random walks: no signal can work here, so a study that finds one has
# a bug. That makes it the place to try a pipeline before trusting it on real data.
sandbox = defilens.testing.Sandbox(seed=0, now="2026-01-05T00:00:00Z")
client = defilens.Client(base_url=sandbox)
root = "study-history"
import shutil; shutil.rmtree(root, ignore_errors=True)
client.collect([f"coin-{i}" for i in range(30)], "30m", count=192, out=root, markets=False, progress=False)
defilens.scan(root, "snapshot").select(pl.len().alias("fetches"), pl.col("fetched_at").min().alias("first"), pl.col("fetched_at").max().alias("last")).collect()"""

STUDY_SIGNAL = """def rsi_signal(root):
    # rsi14 on 1h candles, as it was knowable at each hour
    return defilens.asof(root, defilens.decision_times(root, "1h"), intervals="1h", indicators="rsi14")

signal = rsi_signal(root)
labels = defilens.forward_returns(root, signal, ["30m", "1h", "4h"])
labels.select("at", "token", "value", "horizon", "entry_at", "exit_at", "forward_return", "missing").head(6)"""

STUDY_EVALUATE = """verdict = defilens.evaluate(labels, "value", history=root)  # recorded in the history's journal
verdict"""

STUDY_PLOT = """verdict.plot();"""

STUDY_LEAK = """def leaky_rsi(root):
    # the same RSI, each candle's value stamped at its open: a candle's close read as its open
    grid = defilens.decision_times(root, "1h")
    candles = defilens.panel(root, intervals="1h", indicators="rsi14").select("token", "candle_open", "value").collect().sort("candle_open")
    decisions = grid.to_frame().join(candles.select("token").unique(), how="cross").sort("at")
    return decisions.join_asof(candles, left_on="at", right_on="candle_open", by="token", check_sortedness=False).drop_nulls("value")

leaked = defilens.evaluate(defilens.forward_returns(root, leaky_rsi(root), ["30m", "1h", "4h"]), "value", history=root)
leaked"""

STUDY_JOURNAL = """# every signal evaluated on this history, known by its values: re-running a cell is not another try
defilens.journal(root).select("signal", "fingerprint", "horizons", "decisions", "p_value")"""

STUDY_CHECK = """defilens.lookahead_check(leaky_rsi, root)"""

STUDY_CHECK_HONEST = """defilens.lookahead_check(rsi_signal, root)"""

STUDY_ALPHALENS = """import alphalens

factor, prices = defilens.to_alphalens(root, signal)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    data = alphalens.utils.get_clean_factor_and_forward_returns(factor, prices, periods=(2, 8), quantiles=5, max_loss=1.0)
    theirs = alphalens.performance.factor_information_coefficient(data)
# alphalens counts rounds (30 minutes here): 2 rounds is our 1h, 8 rounds our 4h (it names them so).
ours = verdict.ic.with_columns((pl.col("at") + pl.duration(minutes=30)).alias("date"))
compare = ours.filter(pl.col("horizon") == pl.duration(hours=1)).join(
    pl.from_pandas(theirs.reset_index()).select(pl.col("date").cast(pl.Datetime("ms", "UTC")), pl.col("1h").alias("alphalens_ic")), on="date")
compare.select("date", "ic", "alphalens_ic", (pl.col("ic") - pl.col("alphalens_ic")).abs().max().alias("largest difference")).head(3)"""

STUDY_NET_SETUP = """# Costs are read from the markets endpoint, which collect fetches by default. The well-known ids
# trade on many venues with deep books; the generic ids are small caps, most too thin for $10k.
net_root = "study-net"
shutil.rmtree(net_root, ignore_errors=True)
tokens = [*defilens.testing.Sandbox.known_ids, *[f"coin-{i}" for i in range(10)]]
with defilens.testing.Sandbox(seed=0, now="2026-01-05T00:00:00Z") as net_sandbox:
    defilens.Client(base_url=net_sandbox).collect(tokens, "30m", count=96, out=net_root, progress=False)
last_hour = defilens.decision_times(net_root, "1h")[-1]
defilens.costs(net_root, last_hour, [10_000, 250_000], tokens=["bitcoin", "solana", "coin-3"]).select(
    "token", "notional", "venues", "half_spread", "depth_usd_positive_two", "buy_cost", "round_trip")"""

STUDY_NET_GROSS = """net_signal = rsi_signal(net_root)
# the tokens with more than $250k of bids within 2% at each moment: those that could take the larger trade
deep = defilens.universe(net_root, None, "market_cap", where=pl.col("depth_usd_negative_two") > 250_000)
defilens.evaluate(defilens.forward_returns(net_root, net_signal, ["1h", "4h"], universe=deep), "value")"""

STUDY_NET_SMALL = """defilens.evaluate(defilens.forward_returns(net_root, net_signal, ["1h", "4h"], notional=10_000, universe=deep), "value")"""

STUDY_NET_LARGE = """large = defilens.evaluate(defilens.forward_returns(net_root, net_signal, ["1h", "4h"], notional=250_000, universe=deep), "value")
large"""

STUDY_VECTORBT = """import vectorbt as vbt  # compiles with numba once per environment (to_vectorbt keeps it in numba's cache)

# Decisions four hours apart, so that 1h trades never overlap: then each vectorbt trade is one label.
sparse = defilens.asof(root, defilens.decision_times(root, "1h").gather_every(4), intervals="1h", indicators="rsi14")
oversold = defilens.forward_returns(root, sparse.with_columns((pl.col("value") < 40).alias("oversold")), "1h")
close, entries, exits = defilens.to_vectorbt(root, oversold, "1h", signal="oversold")
portfolio = vbt.Portfolio.from_signals(close, entries, exits, fees=0.0)
trades = portfolio.trades.records_readable
labelled = oversold.filter(pl.col("oversold") & pl.col("forward_return").is_not_null())
pl.DataFrame({
    "trades": [len(trades)], "labels": [labelled.height],
    "mean trade return (vectorbt)": [trades["Return"].mean()], "mean forward return (labels)": [labelled["forward_return"].mean()],
})"""

NOTEBOOKS["05_research.ipynb"] = [
    new_markdown_cell(
        "# Research on a history\n\nA collected history, then the three steps every study on it needs: what is missing (the audit), one row per candle with the moment it became knowable (the panel, and as-of reads that never look ahead), and whether the vendor's indicators agree with the candles (verify). Everything runs offline against the Sandbox."
    ),
    new_code_cell(RESEARCH_SETUP),
    new_markdown_cell(
        "## The audit: coverage, gaps, failures\n\nEvery round's commits record the collector's settings, so the audit knows the cadence: rounds an hour apart can see one 5m close in twelve and one 15m close in four, and the others are `unobservable`, not missed. The six-hour pause is what was missed: the 6 closes of each of 5m, 15m and 1h that the six hourly rounds not made would have seen, for every token. The whole history is on the Sandbox's simulated clock, so no fetch is stale."
    ),
    new_code_cell(RESEARCH_AUDIT),
    new_markdown_cell(
        "The settings the audit read its cadence from: two runs (the collector was started twice), both every hour. A history collected by an earlier version records none; the audit then infers the cadence from the rounds and says so."
    ),
    new_code_cell(RESEARCH_SETTINGS),
    new_markdown_cell(
        "## The point-in-time panel\n\nOne row per candle: when it was first seen (`first_seen_at`), the candle it belongs to (`candle_close`, `candle_open`: the service's time), how late it was seen (`lag`: two minutes here, the rounds poll two minutes after each close), and how many values the service gave for it (`revisions`)."
    ),
    new_code_cell(RESEARCH_PANEL),
    new_markdown_cell(
        "A candle can change after it was first seen: a service that computes indicators before the candle's last trades have settled corrects them later (it *repaints*). The panel keeps the value first seen (what a backtest could have used) and the last one, and `revisions` counts the values; the audit lists such candles in `revisions`."
    ),
    new_code_cell(RESEARCH_REPAINTS),
    new_markdown_cell(
        "## As-of reads\n\nThe RSI(14) on 1h a backtest may use at three decision times, on the history's (simulated) clock: the first round, the last round before the hole, and a round after it. Each is the value of the latest candle seen by then, never one seen later."
    ),
    new_code_cell(RESEARCH_ASOF),
    new_markdown_cell(
        "## Verify the vendor's indicators against candles\n\nThe Sandbox's values all agree; a value skewed by half a point is caught, and nothing else is flagged. `from_1x`, `from_2x`, `from_3x` show how much an RSI depends on its warm-up."
    ),
    new_code_cell(RESEARCH_VERIFY),
    new_code_cell("sandbox.stop()"),
]


NOTEBOOKS["06_study.ipynb"] = [
    new_markdown_cell(
        '# A study without look-ahead: from a signal to a verdict\n\nOn a history collected from the Sandbox: a signal as it was knowable at each decision time, forward returns entered a round after it, an evaluation whose p-values know that forward returns overlap and histories are short, the same study with a one-candle leak (the look-ahead check flags it, and the verdict flips), and the hand-offs to alphalens and vectorbt. Everything runs offline. Extras: `pip install "defilens[history,alphalens,vectorbt]"` and matplotlib.'
    ),
    new_code_cell(STUDY_SETUP),
    new_markdown_cell(
        "## The signal and its labels\n\nDecisions at each hour's close; the RSI each token showed by then (`asof` never returns a candle seen later). Each decision is entered at the token's fetch in the next round (strictly after `at`) and exited in the round the horizon ends in. A token missing from its exit round gets a null return and a reason, never the price of another round."
    ),
    new_code_cell(STUDY_SIGNAL),
    new_markdown_cell(
        "## The evaluation\n\nRank IC per decision, its mean, and a p-value that knows forward returns overlap and the history is short: the mean over decisions against its equal-weighted cosine standard error, Student's t with as many degrees of freedom as cosines (at most half the independent windows the decisions span), then Holm's correction over the horizons. On a random walk the verdict should be: nothing (a 5% test still says \"significant\" on one random walk in twenty, which is why a verdict asks for data the signal was not chosen on). `history=root` records the evaluation in the history's journal, so that the verdict can count the signals tried on this history."
    ),
    new_code_cell(STUDY_EVALUATE),
    new_code_cell(STUDY_PLOT),
    new_markdown_cell(
        "## The same study, with a candle's close read as its open\n\nLibraries that stamp candles at their open (ccxt, freqtrade) invite this: the value of the candle that opened at the decision time is used, though it is only known when that candle closes. With rounds every 30 minutes the entry comes before that close, so the signal sees part of the return it is judged on, and a random walk suddenly looks predictable."
    ),
    new_code_cell(STUDY_LEAK),
    new_code_cell("leaked.plot();"),
    new_markdown_cell(
        "The leaky signal is the second one evaluated on this history, and the verdict counts it: its p-value is doubled (Bonferroni over the signals tried). The journal lists both."
    ),
    new_code_cell(STUDY_JOURNAL),
    new_markdown_cell(
        "The look-ahead check re-runs the study on the history cut where it makes claims (at a sample of the moments it stamps, and just before the round after each), and flags every value stamped before a cut that changes when the rows after it are removed; every column is compared. The leaky study fails; the honest one passes."
    ),
    new_code_cell(STUDY_CHECK),
    new_code_cell(STUDY_CHECK_HONEST),
    new_markdown_cell(
        "## Net of costs\n\nThe verdict so far is gross: every trade at the listed price, in any size. The markets endpoint gives, per exchange pair and fetch, its price and the book's depth within 2% of it on each side; `defilens.costs` reads what a trade of a given size cost at a moment from the token's latest markets fetch at or before it: a half-spread proxied by how far apart the venues' prices are, plus a linear impact of 1% of the notional over the depth of the side taken (docs/research.md, \"Net of costs\", gives the model, its references and its limits). On a second history, with markets:"
    ),
    new_code_cell(STUDY_NET_SETUP),
    new_markdown_cell(
        "The same RSI study, gross, then net of costs at $10k and at $250k a trade (`forward_returns(..., notional=)`: each trade bought at the entry price plus its cost and sold at the exit price less its), on the tokens deep enough for the larger trade at each moment (a universe with a rule over the markets). Net, the evaluation adds each quantile's net return, the top-minus-bottom spread with the top bought and the bottom sold short, the turnover of both legs and its cost, and the capacity: the notional a trade at which the net spread falls to zero, with its 95% interval."
    ),
    new_code_cell(STUDY_NET_GROSS),
    new_code_cell(STUDY_NET_SMALL),
    new_code_cell(STUDY_NET_LARGE),
    new_code_cell("large.plot();"),
    new_markdown_cell(
        "## Hand-offs\n\n`to_alphalens` gives alphalens its factor (dated at the round each signal can first be traded in) and prices on the history's rounds; its IC is ours, decision by decision."
    ),
    new_code_cell(STUDY_ALPHALENS),
    new_markdown_cell(
        "`to_vectorbt` gives `close`, `entries` and `exits` on one tz-aware index: for trades that do not overlap, vectorbt's trade returns are the labels' forward returns."
    ),
    new_code_cell(STUDY_VECTORBT),
    new_code_cell(
        "sandbox.stop()\nshutil.rmtree(root, ignore_errors=True)\nshutil.rmtree(net_root, ignore_errors=True)"
    ),
]


def main(names: "list[str]") -> None:
    """Runs and writes the notebooks named (all of them when none is)."""
    os.environ.pop("DEFILENS_API_KEY", None)
    unknown = set(names) - set(NOTEBOOKS)
    if unknown:
        raise SystemExit(f"no notebook {', '.join(sorted(unknown))}; the notebooks are {', '.join(NOTEBOOKS)}")
    for name, cells in NOTEBOOKS.items():
        if names and name not in names:
            continue
        notebook = new_notebook(cells=cells)
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        notebook.metadata["language_info"] = {"name": "python"}
        # Run in a clean kernel without a key, so the outputs come from the Sandbox; small
        # figures keep the committed PNGs small.
        NotebookClient(
            notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
        ).execute()
        for cell in notebook.cells:
            cell.metadata.pop("execution", None)
        nbformat.write(notebook, HERE / name)
        print(f"wrote {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
