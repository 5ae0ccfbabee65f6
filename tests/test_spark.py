"""Reparsing on an engine past one machine: Spark's mapInArrow over the raw table's files, with
pyspark in local mode (its own jars; delta-spark's cannot be fetched offline, so the raw table's
current files come from deltalake). pyspark is the `spark` extra, not the `test` one (a 456 MB
wheel built from its sdist): without it these tests are skipped, saying so; .ci/run installs it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import defilens
from defilens.history import reparse_arrow, spark_schema
from defilens.testing import Sandbox

pytest.importorskip(
    "pyspark", reason="pyspark is not installed: pip install -e '.[test,spark]' runs these (.ci/run does)"
)

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),  # pyspark on pandas 3
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.mark.slow
def test_spark_map_in_arrow_reparses_the_raw_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

    root = tmp_path / "h"
    with Sandbox(now="2026-01-01T00:00:00Z") as sandbox:
        defilens.Client(base_url=sandbox.url).collect(
            ["bitcoin", "ethereum", "unknown-x"],
            "0.01s",
            count=3,
            out=root,
            raw=True,
            on_round=lambda n, f: sandbox.advance("1h"),
        )
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={tmp_path}")
        .getOrCreate()
    )
    try:
        raw = spark.read.parquet(*DeltaTable(str(root / "raw")).file_uris()).repartition(2)
        for frame in ("indicators", "snapshot", "markets"):
            out = raw.mapInArrow(lambda batches, f=frame: reparse_arrow(batches, f), spark_schema(frame))
            theirs = pl.from_arrow(out.toArrow())
            ours = defilens.scan(root, frame).collect()
            assert isinstance(theirs, pl.DataFrame) and theirs.height == ours.height > 0, frame
            keys = ["token", "fetched_at"] + [c for c in ("interval", "indicator", "id") if c in ours.columns]
            assert_frame_equal(
                theirs.select(keys).sort(keys),
                ours.select(keys).with_columns(pl.col(pl.Enum).cast(pl.String)).sort(keys),
                check_dtypes=False,
            )
    finally:
        spark.stop()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
