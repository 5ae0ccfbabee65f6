"""The look-ahead check holds its own claims: honest studies are never flagged (decisions on the
hour, five minutes after it, at the observed lag; collectors on and off the hour, every 5, 15 and
30 minutes), a one-round look-ahead of the price is flagged on every history, a whole-sample
statistic in a column of its own is flagged by default, and a study that reads the history's files
behind defilens' back is refused, whichever reader it uses."""

from __future__ import annotations

import datetime as dt
from typing import Callable, Dict

import polars as pl
import pytest
from study_histories import random_walk_history

import defilens

TOKENS = [f"coin-{i}" for i in range(8)]
#: name: (first round, minutes between rounds, rounds)
SHAPES: Dict[str, tuple] = {
    "on the hour, 30m": ("2026-01-05T00:00:00Z", 30, 72),
    "off the hour, 30m": ("2026-01-05T00:07:13Z", 30, 72),
    "on the hour, 5m": ("2026-01-05T00:00:00Z", 5, 192),
    "off the hour, 15m": ("2026-01-05T00:11:40Z", 15, 96),
}


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    roots = {}
    for seed, (name, (start, minutes, rounds)) in enumerate(SHAPES.items()):
        root = str(tmp_path_factory.mktemp(name.replace(" ", "_").replace(",", "")))
        random_walk_history(root, 40 + seed, TOKENS, rounds, dt.timedelta(minutes=minutes), start=start)
        roots[name] = root
    return roots


def honest(offset: str) -> Callable[[str], pl.DataFrame]:
    def study(root: str) -> pl.DataFrame:
        grid = defilens.decision_times(root, "1h", offset=offset if offset != "0s" else dt.timedelta(0))
        return defilens.asof(root, grid, intervals="1h", indicators="rsi14")

    return study


def one_round_ahead(root: str) -> pl.DataFrame:
    """Each hour's price taken from the first fetch after the decision: one round of look-ahead."""
    grid = defilens.decision_times(root, "1h").to_frame()
    prices = defilens.scan(root, "snapshot").select("token", "fetched_at", "current_price").collect().sort("fetched_at")
    decisions = grid.join(pl.DataFrame({"token": TOKENS}), how="cross").sort("at")
    return decisions.join_asof(
        prices, left_on="at", right_on="fetched_at", by="token", strategy="forward", allow_exact_matches=False
    ).select("at", "token", pl.col("current_price").alias("value"))


def z_scored(root: str) -> pl.DataFrame:
    """The honest RSI with a whole-sample z-score beside it, in a column of its own."""
    frame = honest("0s")(root)
    return frame.with_columns(((pl.col("value") - pl.col("value").mean()) / pl.col("value").std()).alias("z"))


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_honest_studies_are_never_flagged(histories: Dict[str, str], shape: str) -> None:
    root = histories[shape]
    for offset in ("0s", "5m", "observed"):
        report = defilens.lookahead_check(honest(offset), root)
        assert report.ok, f"{shape}, offset {offset}: {report}"
        assert report.cuts.height >= 10 and report.cuts["checked"].min() > 0
        assert "value" in report.values and "candle_close" in report.values  # every column, not only value


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_one_round_look_ahead_is_flagged_on_every_history(histories: Dict[str, str], shape: str) -> None:
    report = defilens.lookahead_check(one_round_ahead, histories[shape])
    assert not report.ok and "LOOK-AHEAD" in str(report)
    # flagged at the cut just before the round after a claimed moment too, not only at the moment
    assert (report.cuts.filter(pl.col("cut") > pl.col("claimed"))["flagged"] > 0).any()


@pytest.mark.slow
def test_a_whole_sample_statistic_in_its_own_column_is_flagged_by_default(histories: Dict[str, str]) -> None:
    report = defilens.lookahead_check(z_scored, histories["off the hour, 30m"], cuts=2)
    assert not report.ok and "z" in report.values
    assert report.flagged.filter(pl.col("z_whole") != pl.col("z_cut")).height > 0


def test_columns_that_describe_later_fetches_are_named_not_compared(histories: Dict[str, str]) -> None:
    def with_last_value(path: str) -> pl.DataFrame:
        return defilens.panel(path, intervals="1h", indicators="rsi14").collect()

    report = defilens.lookahead_check(with_last_value, histories["on the hour, 30m"], cuts=2)
    assert report.ok and set(report.not_compared) == {"last_value", "revisions"}
    assert "not compared (later fetches by design): last_value, revisions" in str(report)
    assert "lag" in report.values


def _readers(root: str) -> Dict[str, Callable[[], object]]:
    import deltalake
    import duckdb
    import pyarrow.dataset

    return {
        "pl.scan_delta": lambda: pl.scan_delta(f"{root}/snapshot").collect(),
        "pl.read_delta": lambda: pl.read_delta(f"{root}/snapshot"),
        "pl.scan_parquet": lambda: pl.scan_parquet(f"{root}/snapshot/**/*.parquet").collect(),
        "deltalake": lambda: deltalake.DeltaTable(f"{root}/snapshot").to_pyarrow_table(),
        "pyarrow": lambda: pyarrow.dataset.dataset(f"{root}/snapshot", format="parquet").to_table(),
        "duckdb": lambda: duckdb.sql(f"select * from read_parquet('{root}/snapshot/**/*.parquet')").fetchall(),
        "duckdb connection": lambda: (
            duckdb.connect().sql(f"select count(*) from parquet_scan('{root}/snapshot/*/*.parquet')").fetchall()
        ),
        "open": lambda: _read_text(f"{root}/snapshot/_delta_log/00000000000000000000.json"),
    }


def _read_text(path: str) -> str:
    with open(path) as file:
        return file.read()


@pytest.mark.parametrize(
    "reader",
    [
        "pl.scan_delta",
        "pl.read_delta",
        "pl.scan_parquet",
        "deltalake",
        "pyarrow",
        "duckdb",
        "duckdb connection",
        "open",
    ],
)
def test_a_study_reading_the_files_behind_defilens_back_is_refused(histories: Dict[str, str], reader: str) -> None:
    root = histories["on the hour, 30m"]
    read = _readers(root)[reader]

    def prices_behind_the_back(path: str) -> pl.DataFrame:
        decisions = honest("0s")(path)  # the grid from defilens, the prices from the files
        read()
        return decisions

    with pytest.raises(defilens.HistoryError, match="while it was checked") as refused:
        defilens.lookahead_check(prices_behind_the_back, root, cuts=1)
    assert "\n" not in str(refused.value)

    def swallowed(path: str) -> pl.DataFrame:
        try:
            read()
        except defilens.HistoryError:
            pass
        return honest("0s")(path)

    with pytest.raises(defilens.HistoryError, match="while it was checked"):
        defilens.lookahead_check(swallowed, root, cuts=1)
    read()  # after the check, every reader works again


@pytest.mark.slow
def test_in_object_storage_a_study_reading_behind_defilens_back_is_refused(bucket: str, s3: Dict[str, str]) -> None:
    root = f"{bucket}/study"
    with defilens.testing.Sandbox(now="2026-01-05T00:00:00Z", seed=3, speed=0) as sandbox:
        defilens.Client(base_url=sandbox).collect(
            TOKENS[:3], "30m", count=8, out=root, markets=False, storage_options=s3
        )

    def honest_s3(path: str) -> pl.DataFrame:
        grid = defilens.decision_times(path, "1h", storage_options=s3)
        return defilens.asof(path, grid, intervals="1h", indicators="rsi14", storage_options=s3)

    assert defilens.lookahead_check(honest_s3, root, cuts=2, storage_options=s3).ok

    def behind_the_back(path: str) -> pl.DataFrame:
        pl.scan_delta(f"{path}/snapshot", storage_options=s3).collect()
        return honest_s3(path)

    with pytest.raises(defilens.HistoryError, match=r"read 's3://.*/study/snapshot' with polars\.scan_delta"):
        defilens.lookahead_check(behind_the_back, root, cuts=1, storage_options=s3)
