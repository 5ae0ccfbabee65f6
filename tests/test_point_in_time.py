"""Point in time for every frame: panels with explicit candle times, and as-of reads that equal a
brute-force filter per moment on histories with repaints, missing rounds and a candle seen late;
scopes that reach the scans; bad input that says what is wrong."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Dict, List

import polars as pl
import pytest
from deltalake import write_deltalake

import defilens
from defilens._core import INTERVAL_MS
from defilens.history._tables import to_disk
from defilens.testing import Sandbox

UTC = dt.timezone.utc
START = dt.datetime(2026, 3, 2, 9, 0, 10, tzinfo=UTC)
TOKENS = ["bitcoin", "ethereum", "coin-a", "coin-b"]
VALUE_KEYS = ["token", "interval", "indicator"]


def _collect_irregular(root: Path, seed: int) -> None:
    """Rounds at irregular moments: some seconds after a close (provisional values that repaint),
    some hours apart (missing rounds)."""
    rng = random.Random(seed)
    steps: List[float] = []
    for _ in range(30):
        roll = rng.random()
        steps.append(
            rng.choice([40, 50, 70]) if roll < 0.3 else rng.choice([300, 600, 900]) if roll < 0.9 else 3 * 3600
        )
    with Sandbox(now=START, seed=seed, repaint_rate=0.4) as sandbox:
        client = defilens.Client(base_url=sandbox)
        client.collect(TOKENS, "0.01s", count=len(steps), out=root, on_round=lambda n, f: sandbox.advance(steps[n - 1]))


def _append_odd_fetches(root: Path) -> None:
    """Two more fetches of bitcoin's 1h figures after the last round: one that reports an old
    candle (a service serving a stale answer: it must never become the as-of answer over the
    newer candle), then one that reports a new candle without its rsi14 (the as-of answer for
    rsi14 stays the older candle, found before the new candle was first shown)."""
    last = defilens.scan(root, "snapshot").select(pl.col("fetched_at").max()).collect().item()

    def again(name: str, at: dt.datetime) -> pl.DataFrame:
        rows = (
            defilens.scan(root, name)
            .filter(pl.col("fetched_at") == last, pl.col("token") == "bitcoin", pl.col("interval") == "1h")
            .collect()
        )
        return rows.with_columns(pl.lit(at).cast(pl.Datetime("ms", "UTC")).alias("fetched_at"))

    def append(name: str, frame: pl.DataFrame) -> None:
        write_deltalake(str(root / name), to_disk(frame), mode="append", partition_by=["date"])

    stale = last + dt.timedelta(minutes=3)
    # A close from before the history began: no fetch had shown it.
    append("ta_updated", again("ta_updated", stale).with_columns(pl.col("updated_at") - dt.timedelta(days=3)))
    append("indicators", again("indicators", stale))
    append("patterns", again("patterns", stale))
    partial = last + dt.timedelta(minutes=6)
    append("ta_updated", again("ta_updated", partial).with_columns(pl.col("updated_at") + dt.timedelta(hours=1)))
    append("indicators", again("indicators", partial).filter(pl.col("indicator") != "rsi14"))


@pytest.fixture(scope="module", params=[3, 8])
def history(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(f"pit{request.param}") / "h"
    _collect_irregular(root, request.param)
    _append_odd_fetches(root)
    return root


def _moments(root: Path, seed: int) -> List[dt.datetime]:
    fetched = defilens.scan(root, "snapshot").select("fetched_at").unique().collect()["fetched_at"].sort().to_list()
    rng = random.Random(seed)
    picked = set(rng.sample(fetched, 6))  # exactly on a fetch: that fetch counts
    span = (fetched[-1] - fetched[0]).total_seconds()
    picked |= {fetched[0] + dt.timedelta(seconds=rng.uniform(0, span)) for _ in range(14)}
    picked |= {fetched[0] - dt.timedelta(minutes=1), fetched[-1] + dt.timedelta(hours=2)}
    return sorted(m.replace(microsecond=m.microsecond // 1000 * 1000) for m in picked)


def _brute_values(panel: pl.DataFrame, moments: List[dt.datetime]) -> pl.DataFrame:
    parts = []
    for at in moments:
        known = panel.filter(pl.col("first_seen_at") <= at)
        latest = known.sort("candle_close").group_by(VALUE_KEYS).last()
        parts.append(latest.with_columns(pl.lit(at).cast(pl.Datetime("ms", "UTC")).alias("at")))
    columns = ["at", *VALUE_KEYS, "candle_close", "candle_open", "first_seen_at", "value"]
    return pl.concat(parts).select(columns).sort("at", *VALUE_KEYS)


@pytest.mark.slow
@pytest.mark.parametrize("frame", ["indicators", "signals"])
def test_asof_equals_a_brute_force_filter_per_moment(history: Path, frame: str) -> None:
    moments = _moments(history, 1)
    panel = defilens.panel(history, frame).collect()
    assert panel.height and (panel["revisions"] > 1).any() if frame == "indicators" else panel.height
    found = defilens.asof(history, moments, frame=frame)
    expected = _brute_values(panel, moments)
    assert found.height == expected.height > 0
    assert found.equals(expected), (found, expected)
    assert (found["first_seen_at"] <= found["at"]).all()
    # The lazy plan (one query over every candle) answers what the eager read (the fetches that
    # first showed a current candle) answers.
    planned = defilens.asof(history, moments, frame=frame, lazy=True).collect()
    assert planned.equals(expected), (planned, expected)


def test_asof_of_patterns_equals_a_brute_force_filter_per_moment(history: Path) -> None:
    moments = _moments(history, 2)
    closes = defilens.scan(history, "ta_updated").filter(pl.col("updated_at").is_not_null()).collect()
    candles = closes.group_by("token", "interval", "updated_at").agg(pl.col("fetched_at").min().alias("seen"))
    patterns = defilens.panel(history, "patterns").collect()
    parts = []
    for at in moments:
        current = (
            candles.filter(pl.col("seen") <= at)
            .sort("updated_at")
            .group_by("token", "interval")
            .last()
            .select("token", "interval", pl.col("updated_at").alias("candle_close"))
        )
        shown = patterns.join(current, on=["token", "interval", "candle_close"]).filter(pl.col("first_seen_at") <= at)
        parts.append(shown.with_columns(pl.lit(at).cast(pl.Datetime("ms", "UTC")).alias("at")))
    keys = ["token", "interval", "family", "pattern"]
    expected = pl.concat(parts).select("at", *keys, "candle_close", "candle_open", "first_seen_at").sort("at", *keys)
    found = defilens.asof(history, moments, frame="patterns")
    assert found.height == expected.height > 0
    assert found.equals(expected)


def test_asof_of_the_snapshot_is_the_last_fetch_at_or_before(history: Path) -> None:
    moments = _moments(history, 3)
    snapshot = defilens.scan(history, "snapshot").select("token", "fetched_at", "current_price").collect()
    parts = []
    for at in moments:
        last = snapshot.filter(pl.col("fetched_at") <= at).sort("fetched_at").group_by("token").last()
        parts.append(last.with_columns(pl.lit(at).cast(pl.Datetime("ms", "UTC")).alias("at")))
    expected = pl.concat(parts).select("at", "token", "fetched_at", "current_price").sort("at", "token")
    found = defilens.asof(history, moments, frame="snapshot", columns="current_price")
    assert found.equals(expected)


def test_a_candle_seen_late_never_replaces_a_newer_one(history: Path) -> None:
    panel = defilens.panel(history, tokens="bitcoin", intervals="1h", indicators="rsi14").collect()
    stale = panel.filter(pl.col("lag") > dt.timedelta(days=2))
    assert stale.height == 1  # the old candle, first seen (as far as this history knows) by the stale fetch
    at = stale["first_seen_at"].item()
    rows = defilens.asof(history, at, tokens="bitcoin", intervals="1h", indicators="rsi14")
    assert rows["candle_close"].item() == panel["candle_close"].max() > stale["candle_close"].item()


def test_a_value_left_out_of_the_newest_candle_is_read_from_the_one_before(history: Path) -> None:
    closes = defilens.scan(history, "ta_updated").filter(pl.col("token") == "bitcoin", pl.col("interval") == "1h")
    newest = closes.select(pl.col("updated_at").max(), pl.col("fetched_at").max()).collect().row(0)
    at = newest[1] + dt.timedelta(minutes=1)
    rows = defilens.asof(history, at, tokens="bitcoin", intervals="1h")
    by_name = {name: close for name, close in rows.select("indicator", "candle_close").iter_rows()}
    assert by_name["sma20"] == newest[0]
    assert by_name["rsi14"] < newest[0]  # not in the newest candle's fetch: the candle before
    assert rows.equals(_brute_values(defilens.panel(history, tokens="bitcoin", intervals="1h").collect(), [at]))


def test_candle_times_follow_the_catalogue(history: Path) -> None:
    for frame in ("indicators", "signals", "patterns"):
        panel = defilens.panel(history, frame).collect()
        lengths = panel.select(
            pl.col("interval").cast(pl.String), (pl.col("candle_close") - pl.col("candle_open")).alias("length")
        ).unique()
        assert lengths.height >= 4
        for interval, length in lengths.iter_rows():
            assert length == dt.timedelta(milliseconds=INTERVAL_MS[interval]), (frame, interval)
        assert "updated_at" not in panel.columns


def test_the_scope_reaches_every_scan(history: Path) -> None:
    at = defilens.scan(history, "snapshot").select(pl.col("fetched_at").max()).collect().item()
    cases: Dict[str, Dict[str, object]] = {
        "indicators": {"tokens": "bitcoin", "intervals": "1h", "indicators": "rsi14"},
        "signals": {"tokens": "bitcoin", "intervals": "1h"},
        "patterns": {"tokens": "bitcoin", "families": "candlestick"},
        "snapshot": {"tokens": "bitcoin", "columns": "current_price"},
    }
    for frame, scope in cases.items():
        plan = defilens.asof(history, at, frame=frame, lazy=True, **scope).explain()  # type: ignore[arg-type]
        lines = plan.splitlines()
        scans = [i for i, line in enumerate(lines) if "SCAN" in line]
        assert scans, plan
        for i in scans:
            selection = next(line for line in lines[i : i + 4] if "SELECTION" in line)
            assert 'is_in([["bitcoin"]])' in selection and "fetched_at" in selection, (frame, selection)
        answer = defilens.asof(history, at, frame=frame, **scope)  # type: ignore[arg-type]
        assert isinstance(answer, pl.DataFrame) and answer.height and set(answer["token"]) == {"bitcoin"}


def test_bad_scopes_and_moments_say_what_is_wrong(history: Path) -> None:
    at = defilens.scan(history, "snapshot").select(pl.col("fetched_at").max()).collect().item()
    with pytest.raises(ValueError, match=r"unknown interval '1hr' \(did you mean '1h'\?\)"):
        defilens.asof(history, at, intervals="1hr")
    with pytest.raises(ValueError, match=r"unknown indicator 'RSI14' \(did you mean 'rsi14'\?\).*rsi7"):
        defilens.panel(history, indicators="RSI14")
    with pytest.raises(ValueError, match="rsi14 has no 4h values"):
        defilens.asof(history, at, indicators="rsi14", intervals="4h")
    with pytest.raises(ValueError, match="4h has no candle time"):
        defilens.panel(history, "patterns", intervals="4h")
    with pytest.raises(ValueError, match="patterns are scoped by families="):
        defilens.panel(history, "patterns", indicators="rsi14")
    with pytest.raises(ValueError, match="unknown snapshot column 'price'"):
        defilens.asof(history, at, frame="snapshot", columns="price")
    with pytest.raises(ValueError, match="frame must be one of"):
        defilens.asof(history, at, frame="markets")
    with pytest.raises(ValueError, match="tokens is empty"):
        defilens.asof(history, at, tokens=[])
    with pytest.raises(TypeError, match="a date is a day, not a moment"):
        defilens.asof(history, at.date())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at repeats"):
        defilens.asof(history, [at, at])
    with pytest.raises(ValueError, match="before the history's first fetch"):
        defilens.asof(history, dt.datetime(2020, 1, 1))
    with pytest.warns(defilens.DefiLensWarning, match="after the history's last fetch"):
        # A wall-clock moment against a history on the Sandbox's simulated clock.
        defilens.asof(history, dt.datetime.now(UTC), tokens="bitcoin", indicators="rsi14", intervals="1h")
    unsorted = defilens.asof(history, [at, at - dt.timedelta(hours=1)], tokens="bitcoin", indicators="rsi14")
    assert unsorted["at"].is_sorted()


def test_tokens_the_history_does_not_hold_are_named(history: Path) -> None:
    at = defilens.scan(history, "snapshot").select(pl.col("fetched_at").max()).collect().item()
    with pytest.raises(ValueError, match="no indicators rows for bitcoinn"):
        defilens.asof(history, at, tokens="bitcoinn")
    with pytest.warns(defilens.DefiLensWarning, match=r"no snapshot rows for 1 of the tokens asked for \(etherum\)"):
        rows = defilens.asof(history, at, frame="snapshot", tokens=["bitcoin", "etherum"])
    assert rows["token"].to_list() == ["bitcoin"]


def test_the_duckdb_query_of_the_docs_gives_the_asof_rows(history: Path) -> None:
    import glob
    import os
    import re

    import duckdb
    import duckdb_extension_delta

    page = (Path(__file__).resolve().parent.parent / "docs" / "research.md").read_text()
    query = next(block for block in re.findall(r"```sql\n(.*?)```", page, flags=re.S) if 'moments("at")' in block)
    at = _moments(history, 4)[10]
    query = query.replace("'history/", f"'{history}/").replace("2026-03-01 12:00:00+00", at.isoformat(sep=" "))
    extension = glob.glob(
        os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "**", "*.duckdb_extension"), recursive=True
    )
    con = duckdb.connect()
    con.execute(f"LOAD '{extension[0]}'")
    con.execute("SET TimeZone = 'UTC'")
    theirs = con.execute(query).pl()
    ours = defilens.asof(history, at, intervals="1h", indicators="rsi14")
    assert theirs.height == ours.height > 0
    columns = ["at", "token", "interval", "indicator", "candle_close", "first_seen_at", "value"]
    expected = ours.select(columns).with_columns(pl.col("interval").cast(pl.String))
    found = theirs.select(columns).with_columns(
        pl.col(c).dt.cast_time_unit("ms") for c in ("at", "candle_close", "first_seen_at")
    )
    assert found.sort("token").equals(expected.sort("token")), (found, expected)
