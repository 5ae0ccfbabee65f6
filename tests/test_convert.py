"""`defilens convert`: a history in the Hive-Parquet layout of earlier versions becomes the Delta
tables `collect` writes today, readable by every engine, resumable from any kill, its old files
gone; other writers' Hive layouts are converted or refused before anything changes."""

from __future__ import annotations

import datetime as dt
import glob
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import polars as pl
import pytest
from history_checks import assert_whole_rounds, write_old_round
from polars.testing import assert_frame_equal
from s3_server import client as _client
from s3_server import keys as _keys

import defilens
import defilens.history._convert as converting
from defilens.history import TABLES
from defilens.history._collect import commit
from defilens.history._info import changes_only
from defilens.history._root import root_of
from defilens.history._rounds import round_of_fetch
from defilens.history._spool import Spool
from defilens.testing import Sandbox

TOKENS = ["bitcoin", "ethereum", "dogecoin", "unknown-coin"]
CLI = [sys.executable, "-m", "defilens"]
MARKER = Path("_defilens") / "converting"


def _collect(root: Path, rounds: int = 1, **settings) -> int:
    with Sandbox(now="2026-02-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        return client.collect(
            TOKENS, "0.01s", count=rounds, out=root, raw=True, on_round=lambda n, f: sandbox.advance("1h"), **settings
        )


def _old_history(folder: Path, rounds: int = 4) -> Dict[str, int]:
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        for number in range(rounds):
            write_old_round(client.fetch(TOKENS, progress=False), folder, sandbox.now, number)
            sandbox.advance("3h")
    return _old_rows(folder)


def _old_rows(folder: Path) -> Dict[str, int]:
    return {
        name: pl.scan_parquet(str(folder / name / "*" / "*.parquet")).select(pl.len()).collect().item()
        for name in TABLES
        if (folder / name).exists()
    }


def _twins(tmp_path: Path, rounds: int = 4, step: str = "3h") -> Tuple[Path, Path]:
    """The same fetches twice: as an earlier defilens wrote them (``old``), and committed by
    today's collector (``today``, through the commit `collect` makes)."""
    old, today = tmp_path / "old", tmp_path / "today"
    root = root_of(today)
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        for number in range(rounds):
            frames = client.fetch(TOKENS, progress=False)
            started = sandbox.now
            write_old_round(frames, old, started, number)
            round_ = round_of_fetch(frames, "twin", number, started, keep_raw=True)
            spool = Spool(root)
            commit(root, spool, round_, spool.put(round_))  # what collect does with a round
            sandbox.advance(step)
    return old, today


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort([c for c, dtype in frame.schema.items() if not dtype.is_nested()], nulls_last=True)


def _same_rows(name: str, converted: pl.DataFrame, today: pl.DataFrame) -> None:
    if name == "raw":
        # Earlier versions kept only the bodies that were received whole, without an error column.
        today = today.filter(pl.col("error").is_null())
    assert converted.schema == today.schema, name
    assert_frame_equal(_sorted(converted), _sorted(today)), name


def _file_schemas(table: Path) -> List[Dict[str, pl.DataType]]:
    from deltalake import DeltaTable

    return [dict(pl.read_parquet_schema(uri.removeprefix("file://"))) for uri in DeltaTable(str(table)).file_uris()]


def _assert_no_old_files(root: Path, tables=TABLES) -> None:
    """Every Parquet file under a table's folder is one of the table's (no old file, nothing
    left by an interrupted commit), so a glob reads what Delta reads."""
    from deltalake import DeltaTable

    for name in tables:
        if not (root / name / "_delta_log").is_dir():
            continue
        table = DeltaTable(str(root / name))
        ours = {os.path.normpath(uri.removeprefix("file://")) for uri in table.file_uris()}
        on_disk = {os.path.normpath(path) for path in glob.glob(str(root / name / "date=*" / "*.parquet"))}
        assert on_disk == ours, name
        delta_rows = pl.scan_delta(str(root / name)).select(pl.len()).collect().item()
        glob_rows = sum(pl.read_parquet(path).height for path in on_disk)
        assert glob_rows == delta_rows, name


def _assert_converted_like_today(old: Path, today: Path) -> None:
    """Every table of the converted history against the same fetches committed by today's
    collector: the Delta schema, the files' types, and every row, read by defilens.scan,
    pl.scan_delta, pandas, DuckDB and reparse."""
    import duckdb
    import duckdb_extension_delta
    from deltalake import DeltaTable

    extension = glob.glob(
        os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "**", "*.duckdb_extension"), recursive=True
    )
    con = duckdb.connect()
    con.execute(f"LOAD '{extension[0]}'")
    assert not (old / MARKER).exists()
    for name in TABLES:
        ours = defilens.scan(old, name).collect()
        theirs = defilens.scan(today, name).collect()
        _same_rows(name, ours, theirs)
        if not (today / name).exists():
            assert ours.height == 0, name  # a frame without rows: today's collector writes no table
            continue
        converted, collected = DeltaTable(str(old / name)), DeltaTable(str(today / name))
        assert converted.schema().to_json() == collected.schema().to_json(), name
        assert converted.metadata().partition_columns == collected.metadata().partition_columns == ["date"]
        assert {str(s) for s in _file_schemas(old / name)} == {str(s) for s in _file_schemas(today / name)}, name
        _same_rows(name, pl.scan_delta(str(old / name)).collect(), pl.scan_delta(str(today / name)).collect())
        pandas, pandas_today = converted.to_pandas(), collected.to_pandas()
        assert list(pandas.dtypes.astype(str)) == list(pandas_today.dtypes.astype(str)), name
        assert len(pandas) == ours.height, name
        count = con.execute(f"select count(*) from delta_scan('{old / name}')").fetchone()
        assert count is not None and count[0] == ours.height, name
        columns = [column for column, dtype in ours.schema.items() if not isinstance(dtype, pl.List)]
        quoted = ", ".join(f'"{column}"' for column in columns)
        duck = con.execute(f"select {quoted} from delta_scan('{old / name}')").pl()
        assert duck.height == ours.height and duck.columns == columns, name
    rebuilt, rebuilt_today = defilens.reparse(old), defilens.reparse(today)
    for name in ("snapshot", "indicators", "signals", "patterns", "ta_updated", "info", "markets", "drift"):
        assert_frame_equal(_sorted(getattr(rebuilt, name)), _sorted(getattr(rebuilt_today, name))), name
    _assert_no_old_files(old)


# -- F3, F10: what a conversion leaves ---------------------------------------------------------


@pytest.mark.slow
def test_a_converted_history_is_the_history_collect_writes_today(tmp_path: Path) -> None:
    old, today = _twins(tmp_path, rounds=4)
    rows = _old_rows(old)
    report = defilens.convert(old)
    assert report["tables"] == len(rows) and report["rows"] == sum(rows.values())
    assert sorted(report["rewritten"]) == sorted(rows)
    _assert_converted_like_today(old, today)
    assert defilens.convert(old)["tables"] == 0  # idempotent
    _collect(old, 2)  # the converted history takes new rounds, and compaction keeps every row
    defilens.compact(old)
    assert assert_whole_rounds(old) == 4 * 3 + 2 * 3


def test_convert_turns_the_old_layout_into_tables_in_place(tmp_path: Path) -> None:
    root = tmp_path / "old"
    rows = _old_history(root)
    (root / "indicators" / "date=2026-01-01" / ".leftover.parquet.123.tmp").write_bytes(b"half")
    with pytest.raises(defilens.HistoryError, match="defilens convert"):
        _collect(root, 1)
    with pytest.raises(defilens.HistoryError, match="defilens convert"):
        defilens.scan(root, "snapshot")
    report = defilens.convert(root)
    assert report["tables"] == len(rows) and set(report["rewritten"]) == set(rows)
    for name, count in rows.items():
        got = defilens.scan(root, name).select(pl.len()).collect().item()
        if name == "info":  # kept only where a token's info changes (history/_info.py)
            stored = defilens.scan(root, "info").drop("date").collect()
            assert 0 < got <= count and changes_only(stored).height == got, (got, count)
        else:
            assert got == count, name
    assert defilens.scan(root, "indicators").collect_schema()["interval"] == defilens.INTERVAL
    assert pl.scan_delta(str(root / "indicators")).select(pl.len()).collect().item() == rows["indicators"]
    assert defilens.convert(root)["tables"] == 0  # idempotent
    _collect(root, 2)  # the converted history takes new rounds
    assert defilens.scan(root, "snapshot").select(pl.len()).collect().item() == rows["snapshot"] + 6
    assert "error" in defilens.scan(root, "raw").collect_schema()


def test_convert_refuses_files_that_are_not_a_history_and_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "old"
    _old_history(root, 2)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    (root / "snapshot" / "date=2026-01-01" / "notes.csv").write_text("mine")
    (root / "indicators" / "date=2026-01-01" / "empty.parquet").write_bytes(b"")
    (root / "log" / "date=2026-01-01" / "broken.parquet").write_bytes(b"PAR1 not really PAR1")
    with pytest.raises(defilens.HistoryError, match=r"notes\.csv.*nothing was changed") as error:
        defilens.convert(root)
    assert "3 file(s)" in str(error.value) and "broken.parquet" in str(error.value)
    assert "\n" not in str(error.value)
    for path in ("snapshot/date=2026-01-01/notes.csv", "indicators/date=2026-01-01/empty.parquet"):
        (root / path).unlink()
    (root / "log" / "date=2026-01-01" / "broken.parquet").unlink()
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


def test_the_row_check_compares_contents_not_counts(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "old"
    rows = _old_history(root, 2)
    real_commit = converting.commit

    def commit_a_changed_value(root_, name, frame, *args):
        if name == "snapshot":
            frame = frame.with_columns(pl.col("token").str.replace("bitcoin", "bitcoin2"))
        return real_commit(root_, name, frame, *args)

    monkeypatch.setattr(converting, "commit", commit_a_changed_value)
    with pytest.raises(defilens.HistoryError, match=r"snapshot.*rows that differ from the old files'"):
        defilens.convert(root)
    monkeypatch.undo()
    # Stopped before the old files were touched; the marker keeps collect and scan away.
    assert _old_rows_of_table(root, "snapshot") == rows["snapshot"]
    assert (root / MARKER).exists()
    with pytest.raises(defilens.HistoryError, match="defilens convert"):
        defilens.scan(root, "snapshot")


def _old_rows_of_table(root: Path, name: str) -> int:
    files = [p for p in (root / name).glob("date=*/*.parquet") if not p.name.startswith("part-0000")]
    return sum(pl.read_parquet(p).height for p in files)


def test_cli_convert_collect_compact(tmp_path: Path) -> None:
    root = tmp_path / "old"
    _old_history(root, 2)
    run = subprocess.run(
        CLI + ["collect", "bitcoin", "--sandbox", "--every", "1s", "--count", "1", "--out", str(root)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and run.stderr.startswith("defilens: error:") and "convert" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    run = subprocess.run(CLI + ["convert", str(root)], capture_output=True, text=True)
    assert run.returncode == 0 and "converted" in run.stdout and "deleted" in run.stdout, run.stderr
    run = subprocess.run(
        CLI + ["collect", "bitcoin", "--sandbox", "--every", "0.1s", "--count", "2", "--raw", "--out", str(root)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    run = subprocess.run(CLI + ["compact", str(root), "--retention", "2h"], capture_output=True, text=True)
    assert run.returncode == 0 and "compacted" in run.stdout, run.stderr
    assert_whole_rounds(root)


# -- F2: resumable from any kill ----------------------------------------------------------------


class Killed(BaseException):
    """What a kill looks like to the code it stops: nothing after it runs."""


def _kill_after_first_commit(monkeypatch) -> None:
    real = converting.commit

    def commit_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed

    monkeypatch.setattr(converting, "commit", commit_then_die)


def _kill_after_check(monkeypatch) -> None:
    def die(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(converting, "_delete_old", die)


def _kill_half_way_through_deleting(monkeypatch) -> None:
    real = converting._delete_old

    def delete_half_then_die(root, name, batches):
        real(root, name, batches[: len(batches) // 2 or 1])
        raise Killed

    monkeypatch.setattr(converting, "_delete_old", delete_half_then_die)


def _kill_before_the_marker_goes(monkeypatch) -> None:
    real = converting._delete_old

    def delete_then_die_at_the_last(root, name, batches):
        real(root, name, batches)
        if name == "raw":
            raise Killed

    monkeypatch.setattr(converting, "_delete_old", delete_then_die_at_the_last)


def _kill_after_info_kept_before_its_vacuum(monkeypatch) -> None:
    # The kill -9 test met this once: info rewritten as its changes, then killed before the
    # vacuum, and the rerun found nothing to do, leaving the replaced files beside the table.
    real = converting.keep_changes_only

    def keep_then_die(root):
        if real(root):
            raise Killed
        return 0

    monkeypatch.setattr(converting, "keep_changes_only", keep_then_die)


@pytest.mark.parametrize(
    "kill",
    [
        _kill_after_first_commit,
        _kill_after_check,
        _kill_half_way_through_deleting,
        _kill_before_the_marker_goes,
        _kill_after_info_kept_before_its_vacuum,
    ],
)
@pytest.mark.slow
def test_a_conversion_killed_anywhere_finishes_when_run_again(tmp_path: Path, monkeypatch, kill) -> None:
    old, today = _twins(tmp_path, rounds=4, step="5h")  # three days: version 0 is not the last
    rows = _old_rows(old)
    kill(monkeypatch)
    with pytest.raises(Killed):
        defilens.convert(old)
    monkeypatch.undo()
    assert (old / MARKER).exists()
    with pytest.raises(defilens.HistoryError, match="defilens convert"):
        _collect(old, 1)
    with pytest.raises(defilens.HistoryError, match="defilens convert"):
        defilens.scan(old, "snapshot")
    report = defilens.convert(old)
    assert report["tables"] == len(rows) and report["rows"] == sum(rows.values())
    # The info rows written every round by the old version, less its changes, whichever run dropped them.
    kept = defilens.scan(old, "info").select(pl.len()).collect().item()
    assert report["info_rows_dropped"] == rows["info"] - kept > 0
    _assert_converted_like_today(old, today)


@pytest.mark.slow
def test_kill_9_of_the_cli_at_any_moment_then_convert_finishes(tmp_path: Path) -> None:
    old, today = _twins(tmp_path, rounds=6, step="5h")
    rows = _old_rows(old)
    outcomes = []
    # The red team's kill right after the first commit, then kills further on.
    for delay in (0.0, 0.2, 0.5, 1.0):
        commits = len(list(old.glob("*/_delta_log/*.json")))
        child = subprocess.Popen(CLI + ["convert", str(old)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while child.poll() is None and len(list(old.glob("*/_delta_log/*.json"))) <= commits:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        outcomes.append(child.returncode)
        if child.returncode == 0:
            break
    assert outcomes[0] == -signal.SIGKILL and outcomes.count(-signal.SIGKILL) >= 2, outcomes
    run = subprocess.run(CLI + ["convert", str(old)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    # The last kill may have landed after the marker was deleted: then there is nothing left to do.
    assert f"{sum(rows.values()):,} rows" in run.stdout or "nothing to convert" in run.stdout, run.stdout
    _assert_converted_like_today(old, today)


def test_a_marker_of_another_version_is_named(tmp_path: Path) -> None:
    root = tmp_path / "old"
    _old_history(root, 1)
    (root / MARKER).parent.mkdir()
    (root / MARKER).write_bytes(b"")
    with pytest.raises(defilens.HistoryError, match="another version of defilens"):
        defilens.convert(root)
    (root / MARKER).write_bytes(gzip.compress(json.dumps({"format": 99}).encode()))
    with pytest.raises(defilens.HistoryError, match="another version of defilens"):
        defilens.convert(root)


# -- F9: other writers' Hive layouts --------------------------------------------------------------


def _hive_by_other_writers(old: Path, target: Path, *, spark: bool) -> None:
    """``old`` rewritten the way pyarrow (``part-{i}.parquet``) or Spark (``part-00000-<uuid>-c000
    .snappy.parquet``, ``_SUCCESS``, ``.crc`` files) lay out a Hive-partitioned dataset."""
    import pyarrow.dataset as ds

    for name in TABLES:
        if not (old / name).exists():
            continue
        frame = pl.read_parquet(str(old / name / "*" / "*.parquet"), hive_partitioning=True)
        if frame.height == 0:
            continue  # pyarrow and Spark write no file for no rows
        ds.write_dataset(
            frame.to_arrow(),
            str(target / name),
            format="parquet",
            partitioning=["date"],
            partitioning_flavor="hive",
            existing_data_behavior="overwrite_or_ignore",
        )
        if spark:
            for index, path in enumerate(sorted((target / name).rglob("part-*.parquet"))):
                renamed = path.with_name(
                    f"part-{index:05d}-6f1c2d3e-0000-4000-8000-00000000000{index % 10}-c000.snappy.parquet"
                )
                path.rename(renamed)
                (renamed.parent / f".{renamed.name}.crc").write_bytes(b"crc")
            (target / name / "_SUCCESS").write_bytes(b"")


@pytest.mark.slow
@pytest.mark.parametrize("spark", [False, True])
def test_hive_folders_of_pyarrow_and_spark_are_converted(tmp_path: Path, spark: bool) -> None:
    old, today = _twins(tmp_path, rounds=3, step="5h")
    other = tmp_path / "other"
    _hive_by_other_writers(old, other, spark=spark)
    assert glob.glob(str(other / "snapshot" / "date=*" / "part-*.parquet"))
    with pytest.raises(defilens.HistoryError, match="defilens convert"):
        _collect(other, 1)
    report = defilens.convert(other)
    rows = {name: count for name, count in _old_rows(old).items() if count}
    assert report["tables"] == len(rows) and report["rows"] == sum(rows.values())
    shutil.rmtree(old)
    other.rename(old)
    _assert_converted_like_today(old, today)
    _collect(old, 1)


def test_files_that_carry_the_partition_column_are_converted_or_refused(tmp_path: Path) -> None:
    old, today = _twins(tmp_path, rounds=3, step="5h")
    # Every other file carries its day as a date column, as some writers leave it (a day's
    # files then differ in their columns, and are read one by one).
    for path in sorted(old.rglob("date=*/*.parquet"))[1::2]:
        day = path.parent.name.split("=", 1)[1]
        pl.read_parquet(path).with_columns(pl.lit(day).str.to_date().alias("date")).write_parquet(path)
    wrong = next(
        path for path in sorted((old / "indicators").rglob("*.parquet")) if "date" in pl.read_parquet_schema(path)
    )
    right = pl.read_parquet(wrong)
    right.with_columns(pl.lit(dt.date(2025, 12, 31)).alias("date")).write_parquet(wrong)
    with pytest.raises(defilens.HistoryError, match=rf"{wrong.name} \(its date column holds 2025-12-31") as error:
        defilens.convert(old)
    assert "nothing was changed" in str(error.value)
    assert not (old / MARKER).exists() and not list(old.glob("*/_delta_log"))
    right.write_parquet(wrong)  # the way forward: the file put right (or moved to its day's folder)
    defilens.convert(old)
    _assert_converted_like_today(old, today)


# -- object storage -----------------------------------------------------------------------------


@pytest.mark.slow
def test_convert_in_s3_killed_after_its_first_commit_then_finished(
    tmp_path: Path,
    bucket: str,
    s3: Dict[str, str],
    monkeypatch,
) -> None:
    from deltalake import DeltaTable

    old, today = _twins(tmp_path, rounds=4, step="5h")
    rows = _old_rows(old)
    client = _client(s3)
    for path in old.rglob("*.parquet"):
        client.upload_file(str(path), bucket.split("://")[1], f"history/{path.relative_to(old)}")
    root = f"{bucket}/history"
    with pytest.raises(defilens.HistoryError, match="defilens convert"):
        defilens.scan(root, "snapshot", storage_options=s3)
    _kill_after_first_commit(monkeypatch)
    with pytest.raises(Killed):
        defilens.convert(root, storage_options=s3)
    monkeypatch.undo()
    assert "history/_defilens/converting" in _keys(bucket, s3)
    report = defilens.convert(root, storage_options=s3)
    assert report["tables"] == len(rows) and report["rows"] == sum(rows.values())
    keys = _keys(bucket, s3)
    assert "history/_defilens/converting" not in keys
    for name in TABLES:
        _same_rows(name, defilens.scan(root, name, storage_options=s3).collect(), defilens.scan(today, name).collect())
        if not (today / name).exists():
            continue
        _same_rows(
            name,
            pl.scan_delta(f"{root}/{name}", storage_options=s3).collect(),
            pl.scan_delta(str(today / name)).collect(),
        )
        files = {uri.split("/history/", 1)[1] for uri in DeltaTable(f"{root}/{name}", storage_options=s3).file_uris()}
        data = {key.split("history/", 1)[1] for key in keys if key.startswith(f"history/{name}/date=")}
        assert data == files, name  # the old files are gone, and nothing an interrupted commit left


@pytest.mark.slow
def test_a_column_of_another_type_is_refused_before_anything_changes(tmp_path: Path) -> None:
    root = tmp_path / "old"
    _old_history(root, 2)
    path = sorted((root / "indicators").rglob("*.parquet"))[-1]
    frame = pl.read_parquet(path)
    frame.with_columns(pl.col("value").cast(pl.String)).write_parquet(path)
    with pytest.raises(
        defilens.HistoryError, match=r"column value is String, a defilens indicators table holds Float64"
    ):
        defilens.convert(root)
    assert not (root / MARKER).exists() and not list(root.glob("*/_delta_log"))
    frame.write_parquet(path)
    assert defilens.convert(root)["tables"] == len(TABLES)


@pytest.mark.slow
def test_a_column_defilens_no_longer_writes_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "old"
    rows = _old_history(root, 2)
    path = sorted((root / "snapshot").rglob("*.parquet"))[-1]
    frame = pl.read_parquet(path).with_columns(pl.lit(7).alias("old_field"))
    frame.write_parquet(path)
    defilens.convert(root)
    kept = defilens.scan(root, "snapshot").collect()
    assert kept.height == rows["snapshot"] and kept["old_field"].drop_nulls().to_list() == [7] * frame.height
    assert kept.columns[: len(frame.columns) - 1] == [c for c in frame.columns if c != "old_field"]


def test_convert_and_compaction_never_run_at_once(tmp_path: Path) -> None:
    from defilens.history._lock import compaction_lock

    root = tmp_path / "old"
    rows = _old_history(root, 2)
    running = pytest.raises(defilens.HistoryError, match=r"a compaction of .* is running: run convert again")
    with compaction_lock(root_of(root)), running:
        defilens.convert(root)
    assert not (root / MARKER).exists() and not list(root.glob("*/_delta_log"))
    assert defilens.convert(root)["rows"] == sum(rows.values())
