"""Refused before written (issue 36, item 5): every check of every table a round touches (a foreign
table, a foreign schema with our column names, a defilens table of another frame, an unwritable
table, foreign files) happens before the round's first commit, for collect, recovery and convert;
and a spool entry that cannot be read is set aside with one warning, never a traceback."""

from __future__ import annotations

import datetime as dt
import io
import os
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import polars as pl
import pytest
from deltalake import DeltaTable, write_deltalake
from history_checks import assert_whole_rounds, write_old_round
from s3_server import client as _client
from s3_server import keys as _keys

import defilens
from defilens.history import TABLES
from defilens.history._collect import new_collector_id
from defilens.history._defaults import TABLE_PROPERTIES
from defilens.history._root import root_of
from defilens.history._rounds import Round, empty_table, round_of_fetch
from defilens.history._spool import Spool
from defilens.history._tables import PARTITION, create, to_disk
from defilens.testing import Sandbox

UTC = dt.timezone.utc
TOKENS = ["bitcoin", "ethereum", "unknown-coin"]
CLI = [sys.executable, "-m", "defilens"]


def _collect(root: "Path | str", rounds: int = 1, *, on_round=None, **settings) -> Tuple[int, int]:
    """(rounds committed, requests the Sandbox answered); a round the Sandbox's hour apart."""
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:

        def advance(number: int, frames) -> None:
            sandbox.advance("1h")
            if on_round is not None:
                on_round(number, frames)

        client = defilens.Client(base_url=sandbox.url)
        try:
            done = client.collect(TOKENS, "0.01s", count=rounds, out=root, raw=True, on_round=advance, **settings)
        finally:
            requests = sandbox.requests
    return done, requests


def _files(root: Path) -> Dict[str, Tuple[int, int]]:
    """Every file under ``root`` with its size and modification time: what "untouched" compares."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            stat = path.stat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def _versions(root: Path) -> Dict[str, int]:
    return {name: DeltaTable(str(root / name)).version() for name in TABLES if (root / name / "_delta_log").is_dir()}


def _spooled(root: Path) -> List[Path]:
    return sorted(p for p in (root / "_spool").rglob("*.round") if "set_aside" not in p.parts)


def _foreign_with_our_names(path: Path, name: str) -> None:
    """A Delta table of somebody else's with every column name of the frame, partitioned by date,
    but every other column's type changed (text where we have numbers, numbers where we have text)."""
    frame = to_disk(empty_table(name))
    columns = {}
    for column, dtype in frame.schema.items():
        if column in ("token", PARTITION):
            columns[column] = pl.Series(column, [], dtype=dtype)
        else:
            columns[column] = pl.Series(column, [], dtype=pl.Int32 if dtype == pl.String else pl.String)
    write_deltalake(str(path), pl.DataFrame(columns), partition_by=[PARTITION])


def _foreign_token_date(path: Path) -> None:
    """The red team's table: `token` and `date` columns, partitioned by `date`, and a column of its own."""
    write_deltalake(
        str(path),
        pl.DataFrame({"token": ["bitcoin"], "date": [dt.date(2026, 1, 1)], "price": [1.0]}),
        partition_by=["date"],
    )


# -- F6: a foreign table at a frame's path ---------------------------------------------------------


def test_a_foreign_table_with_token_and_date_partitioned_by_date_is_refused_before_anything(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _foreign_token_date(root / "indicators")
    before = _files(root)
    with Sandbox() as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        with pytest.raises(defilens.HistoryError, match=r"indicators.*not a defilens 'indicators' table"):
            client.collect(TOKENS, "0.01s", count=1, out=root, raw=True)
        assert sandbox.requests == 0
    assert _files(root) == before  # no table created, no spool entry, the foreign table as it was
    assert sorted(p.name for p in root.iterdir()) == ["indicators"]
    foreign = DeltaTable(str(root / "indicators"))
    assert foreign.version() == 0 and [f.name for f in foreign.schema().fields] == ["token", "date", "price"]
    # The fixed root takes rounds.
    shutil.rmtree(root / "indicators")
    assert _collect(root, 2)[0] == 2
    assert assert_whole_rounds(root) == 2 * 2


def test_our_column_names_with_other_types_are_a_foreign_table(tmp_path: Path) -> None:
    """The F6 history: eight tables written, then one foreign table; nothing of the next round lands
    anywhere, no spool entry is left, and once the table is back the next collect goes on."""
    root = tmp_path / "h"
    _collect(root, 1)
    versions = _versions(root)
    (root / "log").rename(tmp_path / "log-kept")
    _foreign_with_our_names(root / "log", "log")
    before = _files(root)
    with pytest.raises(defilens.HistoryError, match=r"not a defilens 'log' table"):
        _collect(root, 1)
    assert _files(root) == before and _spooled(root) == []
    shutil.rmtree(root / "log")
    (tmp_path / "log-kept").rename(root / "log")
    assert _versions(root) == versions
    assert _collect(root, 1)[0] == 1
    assert assert_whole_rounds(root) == 2 * 2


def test_a_table_replaced_between_rounds_is_caught_before_the_rounds_first_commit(tmp_path: Path) -> None:
    root = tmp_path / "h"
    versions: Dict[str, int] = {}

    def replace_snapshot(number: int, frames) -> None:
        if number == 1:
            versions.update(_versions(root))
            (root / "snapshot").rename(tmp_path / "snapshot-kept")
            _foreign_with_our_names(root / "snapshot", "snapshot")

    with pytest.raises(defilens.HistoryError, match=r"not a defilens 'snapshot' table"):
        _collect(root, 3, on_round=replace_snapshot)
    # Round 1 is in no table (the foreign snapshot untouched), and waits in the spool.
    assert {name: v for name, v in _versions(root).items() if name != "snapshot"} == {
        name: v for name, v in versions.items() if name != "snapshot"
    }
    assert DeltaTable(str(root / "snapshot")).version() == 0
    assert len(_spooled(root)) == 1
    # The next collect on the unfixed root says the same, before recovery writes anything.
    with pytest.raises(defilens.HistoryError, match=r"not a defilens 'snapshot' table"):
        _collect(root, 1)
    assert len(_spooled(root)) == 1
    # On the fixed root the round left in the spool is finished first.
    shutil.rmtree(root / "snapshot")
    (tmp_path / "snapshot-kept").rename(root / "snapshot")
    with pytest.warns(defilens.DefiLensWarning, match="finished 1 round"):
        _collect(root, 1)
    assert _spooled(root) == []
    assert assert_whole_rounds(root) == 3 * 2


def test_a_table_created_between_rounds_at_a_path_still_empty_is_caught(tmp_path: Path) -> None:
    """The raw table only appears with --raw: a foreign table that appears there between rounds."""
    root = tmp_path / "h"
    versions: Dict[str, int] = {}

    def foreign_files_at_raw(number: int, frames) -> None:
        if number == 1:
            shutil.rmtree(root / "raw")
            versions.update(_versions(root))
            (root / "raw").mkdir()
            (root / "raw" / "mine.csv").write_text("a,b\n")

    with pytest.raises(defilens.HistoryError, match=r"raw"):
        _collect(root, 2, on_round=foreign_files_at_raw)
    assert _versions(root) == versions
    assert (root / "raw" / "mine.csv").read_text() == "a,b\n" and not (root / "raw" / "_delta_log").exists()
    assert len(_spooled(root)) == 1


def test_a_defilens_table_of_another_frame_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "h"
    create(root_of(root), "snapshot", to_disk(empty_table("snapshot")))
    (root / "snapshot").rename(root / "ta_updated")
    with pytest.raises(defilens.HistoryError, match=r"defilens 'snapshot' table.*not.*'ta_updated'"):
        _collect(root, 1)
    assert sorted(p.name for p in root.iterdir()) == ["ta_updated"]


def test_every_table_created_carries_the_defilens_marker(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 1)
    for name in _versions(root):
        metadata = DeltaTable(str(root / name)).metadata()
        assert metadata.name == f"defilens.{name}" and "defilens" in (metadata.description or ""), name


def test_tables_of_the_landed_version_without_the_marker_are_taken_when_their_schema_is_exact(
    tmp_path: Path,
) -> None:
    root = tmp_path / "h"
    for name in TABLES:
        # As the landed version created them: the table properties and nothing else; its convert
        # left the raw table of the old layout without an `error` column.
        frame = to_disk(empty_table(name))
        write_deltalake(
            str(root / name),
            frame.drop("error") if name == "raw" else frame,
            mode="append",
            partition_by=[PARTITION],
            configuration=TABLE_PROPERTIES,
        )
    assert _collect(root, 2)[0] == 2
    assert assert_whole_rounds(root) == 2 * 2
    assert "error" in defilens.scan(root, "raw").collect_schema()
    # One column more (of somebody else's) and it is not ours any more.
    other = tmp_path / "other"
    write_deltalake(
        str(other / "markets"),
        to_disk(empty_table("markets")).with_columns(pl.lit(None, pl.String).alias("theirs")),
        mode="append",
        partition_by=[PARTITION],
        configuration=TABLE_PROPERTIES,
    )
    with pytest.raises(defilens.HistoryError, match=r"not a defilens 'markets' table"):
        _collect(other, 1)


@pytest.fixture
def unwritable():
    """Makes a folder unwritable, for root too (an immutable folder), and writable again after."""
    made: List[Path] = []

    def make(folder: Path) -> None:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "+i", str(folder)], check=True)
        else:
            folder.chmod(0o555)
        made.append(folder)

    yield make
    for folder in made:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def test_an_unwritable_table_is_refused_before_the_first_commit(tmp_path: Path, unwritable) -> None:
    root = tmp_path / "h"
    _collect(root, 1)
    versions = _versions(root)
    unwritable(root / "ta_updated" / "_delta_log")
    before = _files(root)
    with Sandbox() as sandbox:
        with pytest.raises(defilens.HistoryError, match=r"ta_updated.*cannot be written"):
            defilens.Client(base_url=sandbox.url).collect(TOKENS, "0.01s", count=1, out=root, raw=True)
        assert sandbox.requests == 0
    assert _files(root) == before and _versions(root) == versions


def test_convert_refuses_a_foreign_table_before_converting_anything(tmp_path: Path) -> None:
    root = tmp_path / "old"
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        write_old_round(client.fetch(TOKENS, progress=False), root, sandbox.now, 0)
    shutil.rmtree(root / "markets")
    _foreign_token_date(root / "markets")
    before = _files(root)
    with pytest.raises(defilens.HistoryError, match=r"not a defilens 'markets' table"):
        defilens.convert(root)
    assert _files(root) == before
    shutil.rmtree(root / "markets")
    report = defilens.convert(root)
    assert report["tables"] > 0
    for name in _versions(root):
        assert DeltaTable(str(root / name)).metadata().name == f"defilens.{name}", name
    assert _collect(root, 1)[0] == 1


def test_cli_refuses_a_foreign_table_in_one_line_and_touches_nothing(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _collect(root, 1)
    shutil.rmtree(root / "ta_updated")
    _foreign_token_date(root / "ta_updated")
    before = _files(root)
    run = subprocess.run(
        CLI + ["collect", "bitcoin", "--sandbox", "--every", "0.1s", "--count", "1", "--out", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("defilens: error: ") and "ta_updated" in lines[0], run.stderr
    assert "not a defilens 'ta_updated' table" in lines[0]
    assert run.stdout == ""
    assert _files(root) == before


# -- F8: a spool entry that cannot be read ----------------------------------------------------------


def _round(number: int, app_id: str) -> Round:
    with Sandbox(now="2026-01-01T08:00:00Z", seed=5) as sandbox:
        frames = defilens.Client(base_url=sandbox.url).fetch(TOKENS, progress=False)
    return round_of_fetch(frames, app_id, number, dt.datetime(2026, 1, 1, 8, tzinfo=UTC), keep_raw=True)


def _with_parts(round_: Round, **replaced: pl.DataFrame) -> bytes:
    """A spooled round whose bodies or log are replaced (another version's columns)."""
    source = zipfile.ZipFile(io.BytesIO(round_.to_bytes()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for item in source.namelist():
            stem = item.split(".")[0]
            if stem in replaced:
                part = io.BytesIO()
                replaced[stem].write_parquet(part)
                archive.writestr(item, part.getvalue())
            else:
                archive.writestr(item, source.read(item))
    return out.getvalue()


@pytest.fixture
def bad_spool(tmp_path: Path) -> Iterator[Tuple[Path, Dict[str, bytes]]]:
    """A history with one good round waiting in the spool and four entries that cannot be read."""
    root = tmp_path / "h"
    _collect(root, 1)
    app = new_collector_id()
    good = _round(0, app)
    Spool(root_of(root)).put(good)
    whole = _round(1, app).to_bytes()
    other = _round(2, app)
    bad = {
        "junk": b"not a round at all",
        "truncated": whole[: len(whole) // 2],
        "more_columns": _with_parts(other, bodies=other.bodies.with_columns(pl.lit(1).alias("version_2_column"))),
        "fewer_columns": _with_parts(other, log=other.log.drop(other.log.columns[-1])),
    }
    folder = root / "_spool" / app
    for number, data in enumerate(bad.values(), start=1):
        (folder / f"{number:012d}.round").write_bytes(data)
    yield root, bad


def test_unreadable_spool_entries_are_set_aside_with_one_warning_each(bad_spool) -> None:
    root, bad = bad_spool
    names = sorted(str(p.relative_to(root / "_spool")) for p in _spooled(root))[1:]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _collect(root, 1)[0] == 1
    messages = [str(w.message) for w in caught if issubclass(w.category, defilens.DefiLensWarning)]
    set_aside = [m for m in messages if "set aside" in m]
    assert len(set_aside) == len(bad), messages
    for name in names:
        target = root / "_spool" / "set_aside" / name
        assert target.is_file(), name
        assert sum(str(target) in m for m in set_aside) == 1, (name, set_aside)
    # Each entry kept byte for byte under its own name; the good round finished; no entry left.
    assert sorted(p.read_bytes() for p in (root / "_spool" / "set_aside").rglob("*.round")) == sorted(bad.values())
    assert any("finished 1 round" in m for m in messages)
    assert _spooled(root) == []
    assert assert_whole_rounds(root) == 2 * 2 + 2
    # The next collect says nothing more about them.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _collect(root, 1)
    assert [str(w.message) for w in caught if issubclass(w.category, defilens.DefiLensWarning)] == []


def test_cli_sets_an_unreadable_spool_entry_aside_without_a_traceback(bad_spool) -> None:
    root, bad = bad_spool
    run = subprocess.run(
        CLI + ["collect", "bitcoin", "--sandbox", "--every", "0.1s", "--count", "1", "--out", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "defilens: error" not in run.stderr, run.stderr
    assert run.stderr.count("set aside") == len(bad), run.stderr
    assert str(root / "_spool" / "set_aside") in run.stderr
    assert _spooled(root) == []


# -- the same in object storage (moto's S3 on loopback, the fixtures of test_object_storage) --------


@pytest.mark.slow
def test_in_s3_a_foreign_table_is_refused_and_a_bad_spool_entry_set_aside(
    bucket: str,
    s3: Dict[str, str],
) -> None:
    root = f"{bucket}/history"
    write_deltalake(
        f"{root}/indicators",
        pl.DataFrame({"token": ["bitcoin"], "date": [dt.date(2026, 1, 1)], "price": [1.0]}),
        partition_by=["date"],
        storage_options=s3,
    )
    keys = _keys(bucket, s3)
    with Sandbox() as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        with pytest.raises(defilens.HistoryError, match=r"not a defilens 'indicators' table"):
            client.collect(TOKENS, "0.01s", count=1, out=root, raw=True, storage_options=s3)
        assert sandbox.requests == 0
    assert _keys(bucket, s3) == keys
    bucket_client = _client(s3)
    for key in keys:
        bucket_client.delete_object(Bucket=bucket.split("://")[1], Key=key)
    # A spool entry of another version: set aside in the bucket, its name kept; the collect goes on.
    bucket_client.put_object(
        Bucket=bucket.split("://")[1], Key="history/_spool/defilens-old/000000000003.round", Body=b"v0"
    )
    with pytest.warns(
        defilens.DefiLensWarning, match=r"set aside as s3://.*/_spool/set_aside/defilens-old/000000000003"
    ):
        _collect(root, 1, storage_options=s3)
    keys = _keys(bucket, s3)
    assert "history/_spool/set_aside/defilens-old/000000000003.round" in keys
    assert not [key for key in keys if key.startswith("history/_spool/") and "set_aside" not in key]
    assert assert_whole_rounds(root, s3) == 2
