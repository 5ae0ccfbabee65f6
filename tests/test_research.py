"""Research on a collected history: the point-in-time panel, as-of reads, the audit (and its CLI),
indicators as expressions (against TA-Lib), and verify, on the Sandbox's simulated clock."""

from __future__ import annotations

import datetime as dt
import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import defilens
from defilens.testing import Sandbox

UTC = dt.timezone.utc
TOKENS = ["bitcoin", "ethereum", "unknown-x"]
CLI = [sys.executable, "-m", "defilens"]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three hourly rounds, a pause of five hours (a hole), two more, and one candle seen twice."""
    root = tmp_path_factory.mktemp("research") / "h"
    with Sandbox(now="2026-01-05T10:02:00Z", seed=4) as sandbox:
        client = defilens.Client(base_url=sandbox)  # on the Sandbox's clock
        client.collect(TOKENS, "0.01s", count=3, out=root, on_round=lambda n, f: sandbox.advance("1h"))
        sandbox.advance("5h")
        client.collect(
            TOKENS, "0.01s", count=2, out=root, on_round=lambda n, f: sandbox.advance("1h") if n < 2 else None
        )
        client.collect(TOKENS, "0.01s", count=1, out=root)  # the same candles again: seen twice
    return root


def test_panel_is_one_row_per_candle_with_when_it_was_first_seen(history: Path) -> None:
    panel = defilens.panel(history).filter(pl.col("interval") == "1h", pl.col("indicator") == "rsi14").collect()
    assert panel.columns == [
        "token",
        "interval",
        "indicator",
        "candle_close",
        "candle_open",
        "first_seen_at",
        "value",
        "last_value",
        "revisions",
        "lag",
    ]
    assert sorted(panel["token"].unique()) == ["bitcoin", "ethereum"]
    assert panel.group_by("token").len()["len"].to_list() == [5, 5]  # 5 distinct 1h candles seen, one twice
    assert (panel["lag"] == panel["first_seen_at"] - panel["candle_close"]).all()
    assert (panel["candle_close"] - panel["candle_open"] == dt.timedelta(hours=1)).all()
    # On the Sandbox's clock: rounds at 10:02, 11:02, ... see the hourly candle two minutes after its close.
    assert set(panel["lag"].to_list()) == {dt.timedelta(minutes=2)}
    assert (panel["revisions"] == 1).all() and (panel["value"] == panel["last_value"]).all()
    raw = (
        defilens.scan(history, "indicators")
        .filter(pl.col("token") == "bitcoin", pl.col("interval") == "1h", pl.col("indicator") == "rsi14")
        .collect()
    )
    assert raw.height == 6 and panel.filter(pl.col("token") == "bitcoin").height == 5


def test_panel_is_lazy_and_pushes_filters_into_the_scans(history: Path) -> None:
    lazy = defilens.panel(history)
    assert isinstance(lazy, pl.LazyFrame)
    plan = lazy.filter(pl.col("token") == "bitcoin").explain()
    scans = [line for line in plan.splitlines() if "SCAN" in line.upper()]
    assert scans, plan
    # The token filter sits at (or right above) each scan, below the join and the group-by.
    lines = plan.splitlines()
    join = next(i for i, line in enumerate(lines) if "JOIN" in line.upper())
    assert any("bitcoin" in line for line in lines[join:]), plan


def test_panel_names_the_tokens_the_history_lacks_as_asof_does(history: Path) -> None:
    # A mistyped token gave an empty panel without a word.
    with pytest.warns(defilens.DefiLensWarning, match=r"no indicators rows for 1 of the tokens asked for \(etherum\)"):
        rows = defilens.panel(history, tokens=["bitcoin", "etherum"]).collect()
    assert rows["token"].unique().to_list() == ["bitcoin"]
    with pytest.warns(defilens.DefiLensWarning, match=r"has no snapshot rows for etherum in this scope: check the"):
        assert defilens.panel(history, "snapshot", tokens="etherum").collect().is_empty()
    with pytest.warns(defilens.DefiLensWarning, match=r"has no signals rows for etherum, etherium in this scope"):
        defilens.panel(history, "signals", tokens=["etherum", "etherium"])
    # asof, which reads at once, refuses a scope with none of them (as before).
    with pytest.raises(ValueError, match=r"has no indicators rows for etherum in this scope"):
        defilens.asof(history, dt.datetime(2026, 1, 5, 12, tzinfo=UTC), tokens="etherum")


def test_asof_never_gives_a_value_before_it_was_seen(history: Path) -> None:
    panel = defilens.panel(history).collect()
    first = panel["first_seen_at"].min()
    last = panel["first_seen_at"].max()
    with pytest.raises(ValueError, match="before the history's first fetch"):
        defilens.asof(history, first - dt.timedelta(seconds=1))
    moments = [first - dt.timedelta(seconds=1), first, first + (last - first) / 2, last + dt.timedelta(hours=12)]
    rows = defilens.asof(history, moments)
    assert rows.filter(pl.col("at") < first).height == 0  # nothing was knowable yet
    assert rows.columns == [
        "at",
        "token",
        "interval",
        "indicator",
        "candle_close",
        "candle_open",
        "first_seen_at",
        "value",
    ]
    assert (rows["first_seen_at"] <= rows["at"]).all()
    latest = panel.sort("candle_close").group_by("token", "interval", "indicator").last()
    final = rows.filter(pl.col("at") == rows["at"].max()).join(
        latest, on=["token", "interval", "indicator"], suffix="_p"
    )
    assert (final["candle_close"] == final["candle_close_p"]).all() and (final["value"] == final["value_p"]).all()
    naive = defilens.asof(history, last.replace(tzinfo=None))
    assert naive.height == 90 and naive.equals(defilens.asof(history, last))
    with pytest.raises(TypeError):
        defilens.asof(history, "yesterday")  # type: ignore[arg-type]


def test_audit_finds_the_hole_the_failures_and_says_so_on_one_screen(history: Path) -> None:
    report = defilens.audit(history)
    hourly = report.coverage.filter(pl.col("interval") == "1h", pl.col("token") == "bitcoin").row(0, named=True)
    # Closes 10:00, 11:00, 12:00, then a pause of five hours, 18:00, 19:00 (twice): 10 expected, 5 seen.
    assert (hourly["expected"], hourly["seen"], hourly["missing"]) == (10, 5, 5)
    gap = report.gaps.filter(pl.col("interval") == "1h", pl.col("token") == "bitcoin").row(0, named=True)
    assert (gap["gap_start"].hour, gap["gap_end"].hour, gap["missing"]) == (13, 17, 5)
    assert report.failures.filter(pl.col("token") == "unknown-x")["rounds"].sum() == 12  # 6 rounds x 2 endpoints
    text = str(report)
    assert "coverage:" in text and "most missed:" in text and "unknown-x" in text
    assert len(text.splitlines()) <= 8


def test_audit_cli_exit_codes(history: Path) -> None:
    report = defilens.audit(history)
    worst = report.max_missing()
    ok = subprocess.run(CLI + ["audit", str(history), "--max-missing", str(worst)], capture_output=True, text=True)
    assert ok.returncode == 0 and "coverage:" in ok.stdout, ok.stderr
    failed = subprocess.run(
        CLI + ["audit", str(history), "--max-missing", str(worst - 1)], capture_output=True, text=True
    )
    assert failed.returncode == 1 and "more than --max-missing" in failed.stderr
    uncached = subprocess.run(CLI + ["audit", str(history), "--no-cache"], capture_output=True, text=True)
    assert uncached.returncode == 0 and uncached.stdout == ok.stdout, uncached.stderr


def test_repaints_made_by_the_sandbox_are_found_by_panel_and_audit(tmp_path: Path) -> None:
    """Polls 10 s after the 10:00 close (provisional values) and a minute later (final ones)."""
    root = tmp_path / "h"
    ids = [f"coin-{i:02}" for i in range(20)]
    with Sandbox(now="2026-01-05T10:00:10Z", repaint_rate=0.5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        client.collect(ids, "0.01s", count=2, out=root, markets=False, on_round=lambda n, f: sandbox.advance("1m"))
    panel = defilens.panel(root).collect()
    repainted = panel.filter(pl.col("revisions") > 1)
    moved = repainted["token"].unique().sort().to_list()
    assert 3 <= len(moved) <= 17, moved  # about half of the tokens drew a repaint of this close
    # The candles that had just closed at 10:00 repaint (5m, 15m, 1h); the 4h, 24h and 1w did not close.
    assert sorted(repainted["interval"].cast(pl.String).unique()) == ["15m", "1h", "5m"]
    assert (repainted["candle_close"] == dt.datetime(2026, 1, 5, 10, tzinfo=UTC)).all()
    assert (repainted["value"] != repainted["last_value"]).all()
    steady = panel.filter(~pl.col("token").is_in(moved))
    assert steady.height and (steady["revisions"] == 1).all()
    found = defilens.audit(root).revisions
    assert (
        found.select(sorted(found.columns))
        .sort("token", "interval", "indicator")
        .equals(repainted.select(sorted(repainted.columns)).sort("token", "interval", "indicator"))
    )
    # The final values are the ones a Sandbox without repaints serves.
    with Sandbox(now="2026-01-05T10:01:10Z") as plain:
        final = defilens.Client(base_url=plain.url).fetch(moved, markets=False, progress=False).indicators
    joined = repainted.join(final, on=["token", "interval", "indicator"])
    assert joined.height == repainted.height and (joined["last_value"] == joined["value_right"]).all()


def test_no_repaints_without_the_knob_or_after_the_minute(tmp_path: Path) -> None:
    root = tmp_path / "h"
    with Sandbox(now="2026-01-05T10:01:00Z", repaint_rate=1.0) as sandbox:  # a minute after the close
        client = defilens.Client(base_url=sandbox.url)
        client.collect(
            ["bitcoin"], "0.01s", count=2, out=root, markets=False, on_round=lambda n, f: sandbox.advance("1m")
        )
    assert defilens.audit(root).revisions.is_empty()
    with pytest.raises(ValueError, match="repaint_rate must be between 0 and 1"):
        Sandbox(repaint_rate=1.5)


def test_ta_expressions_match_ta_lib_on_random_walks() -> None:
    talib = pytest.importorskip("talib")
    rng = np.random.default_rng(7)
    for trial in range(5):
        closes = 100 * np.exp(np.cumsum(rng.normal(0, 0.02, 400 + trial * 50)))
        frame = pl.DataFrame({"close": closes}).select(
            defilens.ta.rsi(pl.col("close"), 14).alias("rsi"),
            defilens.ta.sma(pl.col("close"), 20).alias("sma"),
            defilens.ta.bbands(pl.col("close"), 20, 2.0).alias("bands"),
            defilens.ta.macd(pl.col("close")).alias("macd"),
        )
        upper, _, lower = talib.BBANDS(closes, 20, 2, 2)
        line, signal, hist = talib.MACD(closes, 12, 26, 9)
        pairs = [
            (frame["rsi"], talib.RSI(closes, 14)),
            (frame["sma"], talib.SMA(closes, 20)),
            (frame["bands"].struct.field("upper"), upper),
            (frame["bands"].struct.field("lower"), lower),
            (frame["macd"].struct.field("macd"), line),
            (frame["macd"].struct.field("signal"), signal),
            (frame["macd"].struct.field("hist"), hist),
        ]
        for ours, theirs in pairs:
            ours_np = ours.to_numpy()
            assert (np.isnan(ours_np) == np.isnan(theirs)).all(), ours.name
            assert np.nanmax(np.abs(ours_np - theirs)) < 1e-8, ours.name
    per_token = pl.DataFrame({"token": ["a"] * 30 + ["b"] * 30, "close": [float(i) for i in range(60)]})
    out = per_token.with_columns(defilens.ta.sma(pl.col("close"), 5).over("token").alias("sma5"))
    assert out.filter(pl.col("token") == "b")["sma5"].to_list()[:5] == [None, None, None, None, 32.0]


def test_ta_takes_a_column_name_as_polars_functions_do() -> None:
    closes = pl.DataFrame({"close": [float(i % 7 + i) for i in range(60)]})
    by_name = closes.select(
        defilens.ta.rsi("close", 14).alias("rsi"),
        defilens.ta.sma("close", 5).alias("sma"),
        defilens.ta.bbands("close").alias("bands"),
        defilens.ta.macd("close").alias("macd"),
    )
    by_expression = closes.select(
        defilens.ta.rsi(pl.col("close"), 14).alias("rsi"),
        defilens.ta.sma(pl.col("close"), 5).alias("sma"),
        defilens.ta.bbands(pl.col("close")).alias("bands"),
        defilens.ta.macd(pl.col("close")).alias("macd"),
    )
    assert by_name.equals(by_expression) and by_name["rsi"].drop_nulls().len() == 46
    with pytest.raises(
        TypeError, match=r"ta\.sma: expr must be a column name \(e\.g\. \"close\"\) or a polars expression, got int"
    ):
        defilens.ta.sma(5, 20)  # type: ignore[arg-type]


def test_a_null_close_gives_nulls_and_the_indicator_starts_again_after_it() -> None:
    # A gap cannot be computed through: every window holding it is null, and the indicator starts
    # again on the closes after it, as it would on a series that began there. Never an error, and
    # never a number that silently used a filled-in close.
    rng = np.random.default_rng(3)
    closes = list(100 * np.exp(np.cumsum(rng.normal(0, 0.02, 120))))
    gap = 50
    with_gap = closes[:gap] + [None] + closes[gap + 1 :]
    expressions = [
        defilens.ta.rsi(pl.col("close"), 14).alias("rsi"),
        defilens.ta.sma(pl.col("close"), 20).alias("sma"),
        defilens.ta.bbands(pl.col("close"), 20).struct.field("upper").alias("upper"),
        defilens.ta.macd(pl.col("close")).struct.field("signal").alias("signal"),
    ]
    out = pl.DataFrame({"close": with_gap}).select(expressions)
    before = pl.DataFrame({"close": closes[:gap]}).select(expressions)
    after = pl.DataFrame({"close": closes[gap + 1 :]}).select(expressions)
    for name in out.columns:
        assert out[name][:gap].equals(before[name], null_equal=True), name
        assert out[name][gap] is None, name
        assert out[name][gap + 1 :].equals(after[name], null_equal=True), name
    # The windows that hold the gap are null, the first full one after it is not.
    sma = out["sma"].to_list()
    assert all(value is None for value in sma[gap : gap + 20]) and sma[gap + 20] is not None
    # Per token, a gap in one token's closes leaves the other token's values alone.
    per_token = pl.DataFrame({"token": ["a"] * 30 + ["b"] * 30, "close": [float(i) for i in range(60)]})
    holed = per_token.with_columns(
        pl.when(pl.int_range(pl.len()) == 10).then(None).otherwise(pl.col("close")).alias("close")
    )
    sma5 = holed.with_columns(defilens.ta.sma(pl.col("close"), 5).over("token").alias("sma5"))
    assert sma5.filter(pl.col("token") == "b")["sma5"].equals(
        per_token.with_columns(defilens.ta.sma(pl.col("close"), 5).over("token").alias("sma5")).filter(
            pl.col("token") == "b"
        )["sma5"]
    )
    assert sma5["sma5"].to_list()[10:19] == [None] * 5 + [13.0, 14.0, 15.0, 16.0]
    # A NaN or infinite close is not a price: a gap too. Before, an RSI folded a NaN change in as
    # "no move" (through max) and gave wrong numbers for ever after, an EMA NaN for ever after.
    for not_a_price in (float("nan"), float("inf")):
        odd = pl.DataFrame({"close": closes[:gap] + [not_a_price] + closes[gap + 1 :]}).select(expressions)
        assert odd.equals(out, null_equal=True), not_a_price
    # All nulls: all null, of the same dtype.
    empty = pl.DataFrame({"close": [None, None]}, schema={"close": pl.Float64}).select(expressions)
    assert empty.null_count().row(0) == (2, 2, 2, 2)


def _candles(sandbox: Sandbox, token: str) -> pl.DataFrame:
    return pl.concat(
        sandbox.candles(token, interval).with_columns(pl.lit(token).alias("token"), pl.lit(interval).alias("interval"))
        for interval in ("5m", "15m", "1h", "24h", "1w")
    )


def test_verify_agrees_with_the_sandbox_and_catches_a_skewed_value() -> None:
    with Sandbox(now="2026-02-01T12:00:00Z", seed=2) as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin", "ethereum"], markets=False, progress=False)
        candles = pl.concat([_candles(sandbox, "bitcoin"), _candles(sandbox, "ethereum")])
    checked = defilens.verify(frames.indicators, candles)
    assert checked.height == 2 * 5 * 9 and checked["ok"].all(), checked.filter(~pl.col("ok"))
    assert {"from_1x", "from_2x", "from_3x"} <= set(checked.columns)
    rsi = checked.filter(pl.col("indicator") == "rsi14")
    assert (rsi["from_1x"] != rsi["recomputed"]).any(), "the RSI depends on its warm-up"
    skewed = frames.indicators.with_columns(
        pl.when((pl.col("token") == "ethereum") & (pl.col("interval") == "1h") & (pl.col("indicator") == "sma20"))
        .then(pl.col("value") * 1.01)
        .otherwise(pl.col("value"))
        .alias("value")
    )
    caught = defilens.verify(skewed, candles).filter(~pl.col("ok"))
    assert caught.select("token", "interval", "indicator").rows() == [("ethereum", "1h", "sma20")]
    # Unsorted candles are sorted; a gap is an error, never a wrong row.
    shuffled = candles.sample(fraction=1.0, shuffle=True, seed=1)
    assert defilens.verify(frames.indicators, shuffled)["ok"].all()
    middle_1h = candles.with_row_index("i").filter(pl.col("token") == "bitcoin", pl.col("interval") == "1h")["i"][150]
    holed = candles.with_row_index("i").filter(pl.col("i") != middle_1h).drop("i")
    with pytest.raises(ValueError, match="not consecutive"):
        defilens.verify(frames.indicators, holed)
    nan = candles.with_columns(
        pl.when(pl.int_range(pl.len()) == 7).then(float("nan")).otherwise("close").alias("close")
    )
    with pytest.raises(ValueError, match=r"1 closes that are not prices \(bitcoin 5m at .*: nan\)"):
        defilens.verify(frames.indicators, nan)


def test_verify_s_hint_makes_one_row_a_series_of_a_panel_and_of_a_history(history: Path) -> None:
    """The fix the error suggests, pasted as it reads, works on what was given: a panel has no
    ``fetched_at``, a history's rows no ``candle_close``."""
    with Sandbox(now="2026-01-05T19:02:00Z", seed=4) as sandbox:  # the history's last round
        candles = sandbox.candles("bitcoin", "1h").with_columns(token=pl.lit("bitcoin"), interval=pl.lit("1h"))
    bitcoin_1h = [pl.col("token") == "bitcoin", pl.col("interval") == "1h"]
    for given in (
        defilens.panel(history, tokens="bitcoin", intervals="1h").collect(),
        defilens.scan(history, "indicators").filter(*bitcoin_1h).collect(),
    ):
        with pytest.raises(ValueError, match="one row a series") as raised:
            defilens.verify(given, candles)
        hint = str(raised.value).rsplit(": ", 1)[1]
        latest = eval(hint, {"indicators": given, "pl": pl})
        checked = defilens.verify(latest, candles)
        assert checked.height == 9 and checked["ok"].all(), (hint, checked)


def test_every_indicator_family_is_known_served_computed_and_verified() -> None:
    """One recipe table (`_core.INDICATOR_RECIPES`, `model::indicators` in the core): a family
    the catalogue knows is served by the Sandbox, computed by `defilens.ta` and checked by
    `verify`, or this fails."""
    from defilens._core import FAMILY_INTERVALS, INDICATOR_KINDS, INDICATOR_RECIPES

    catalogue = {frame: {name for f, name, _ in FAMILY_INTERVALS if f == frame} for frame in ("indicators", "signals")}
    assert set(INDICATOR_RECIPES) == catalogue["indicators"] | catalogue["signals"]
    numeric = {family for family, recipe in INDICATOR_RECIPES.items() if recipe["text"] is None}
    assert numeric == catalogue["indicators"]
    assert set(defilens.ta.__all__) == set(INDICATOR_KINDS) == {r["kind"] for r in INDICATOR_RECIPES.values()}
    for family, recipe in INDICATOR_RECIPES.items():
        accepted = inspect.signature(getattr(defilens.ta, recipe["kind"])).parameters
        assert set(recipe["params"]) <= set(accepted), family
    with Sandbox(now="2026-03-01T08:00:00Z", seed=4) as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin"], markets=False, progress=False)
        candles = _candles(sandbox, "bitcoin")
    assert set(frames.indicators["indicator"]) == catalogue["indicators"]
    assert set(frames.signals["indicator"]) == catalogue["signals"]
    checked = defilens.verify(frames.indicators, candles)
    assert set(checked["indicator"]) == catalogue["indicators"], "verify skips a family the Sandbox serves"
    assert checked.height == frames.indicators.height and checked["ok"].all()
    # A text family is the recipe's column by its sign (MACD: the line above its signal line),
    # and verify checks it when given the signals frame.
    texts = defilens.verify(frames.signals, candles)
    assert set(texts["indicator"]) == catalogue["signals"], "verify skips a text family the Sandbox serves"
    assert texts.height == frames.signals.height and texts["ok"].all(), texts.filter(~pl.col("ok"))
    for interval, family, text, margin in texts.select(
        pl.col("interval").cast(pl.String), "indicator", "vendor", "margin"
    ).rows():
        recipe = INDICATOR_RECIPES[family]
        closes = candles.filter(pl.col("interval") == interval)["close"]
        value = defilens._core.ta_series(recipe["kind"], closes, **recipe["params"])[recipe["column"]][-1]
        above, below = recipe["text"]
        assert text == (above if value > 0 else below) and margin == value, (interval, family)


def test_verify_checks_the_text_signals_and_catches_a_flipped_one() -> None:
    with Sandbox(now="2026-02-01T12:00:00Z", seed=2) as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin", "ethereum"], markets=False, progress=False)
        candles = pl.concat([_candles(sandbox, "bitcoin"), _candles(sandbox, "ethereum")])
    checked = defilens.verify(frames.signals, candles)
    assert checked.columns == [
        "token", "interval", "indicator", "vendor", "recomputed", "margin", "ok", "from_1x", "from_2x", "from_3x"
    ]  # fmt: skip
    assert checked.schema["vendor"] == pl.String and checked.schema["margin"] == pl.Float64
    assert checked.height == 2 * 5 and checked["ok"].all(), checked.filter(~pl.col("ok"))
    assert set(checked["vendor"]) <= {"Cross Above", "Cross Below"}
    assert (checked["vendor"] == checked["recomputed"]).all()
    # Every warm-up gives a text: the first from the 34 closes a MACD(12, 26, 9) signal needs.
    assert checked.select("from_1x", "from_2x", "from_3x").null_count().row(0) == (0, 0, 0)
    flip = {"Cross Above": "Cross Below", "Cross Below": "Cross Above"}
    flipped = frames.signals.with_columns(
        pl.when((pl.col("token") == "bitcoin") & (pl.col("interval") == "15m"))
        .then(pl.col("value").replace_strict(flip))
        .otherwise(pl.col("value"))
        .alias("value")
    )
    caught = defilens.verify(flipped, candles).filter(~pl.col("ok"))
    assert caught.select("token", "interval", "indicator").rows() == [("bitcoin", "15m", "macd")]
    # A signal the recipes do not know (the service added one) is left out, as a number's is.
    extra = pl.concat(
        [frames.signals, frames.signals.head(1).with_columns(pl.lit("supertrend").alias("indicator"))],
        how="vertical_relaxed",
    )
    assert defilens.verify(extra, candles).height == checked.height


def test_verify_says_why_when_nothing_could_be_checked() -> None:
    with Sandbox(now="2026-02-01T12:00:00Z", seed=2) as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(["bitcoin"], markets=False, progress=False)
        candles = _candles(sandbox, "bitcoin")
    # Candles named another way than the frames name the token: before, an empty frame and no word.
    renamed = candles.with_columns(pl.lit("BTC").alias("token"))
    with pytest.warns(defilens.DefiLensWarning, match=r"none of the 45 values.*no candles.*'BTC'"):
        assert defilens.verify(frames.indicators, renamed).is_empty()
    # Too few candles to fill a window: say how many are needed.
    short = candles.group_by("token", "interval").tail(10)
    with pytest.warns(defilens.DefiLensWarning, match=r"too few candles.*sma100: 10 candles, it needs 100"):
        defilens.verify(frames.indicators.filter(pl.col("indicator") == "sma100"), short)
    # Only some rows without candles (candles of one interval, as the guide does): no warning.
    hourly = candles.filter(pl.col("interval") == "1h")
    assert defilens.verify(frames.indicators, hourly).height == 9


def test_an_empty_history_and_one_without_ta_updated(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        defilens.audit(tmp_path / "nothing")
    root = tmp_path / "failed"
    with Sandbox() as sandbox:
        defilens.Client(base_url=sandbox.url).collect(["unknown-a"], "0.01s", count=1, out=root, max_failed_rounds=5)
    report = defilens.audit(root)
    assert report.coverage.height == 0 and report.failures.height == 2
    assert "0 of 0 observable candle closes" in str(report)
    assert defilens.panel(root).collect().height == 0
    with pytest.raises(defilens.HistoryError, match="has no indicators or ta_updated table"):
        defilens.asof(root, dt.datetime.now(UTC))
