"""A history root may have any name the file system allows: it works end to end (collect, scan,
time travel, compact, audit, reparse), or it is refused before anything is created or fetched,
with a message that names the character."""

from __future__ import annotations

import datetime as dt
import glob
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import polars as pl
import pytest

# The moto server on loopback and a fresh bucket in it, as the object storage tests have them.
import defilens
from defilens.history import versions
from defilens.testing import Sandbox

UTC = dt.timezone.utc
TOKENS = ["bitcoin", "ethereum", "unknown-coin"]
CLI = [sys.executable, "-m", "defilens"]

#: Names that work: delta-rs writes them percent-encoded in its file URIs, which polars' scan_delta
#: opens literally (pola-rs/polars#20944), so defilens hands polars plain paths.
WORKING = ["with space", "#", "é", "\N{ROCKET}", "a #1 (copy) é\N{ROCKET}"]
#: Names a Delta table's path cannot hold (delta-rs decodes %20 and splits at a backslash, object_store
#: refuses control characters, DuckDB cannot open a path with a %), and what the refusal names.
REFUSED = {
    "%20": "a '%'",
    "100%": "a '%'",
    "back\\slash": "backslash",
    "tab\there": "a tab",
    "new\nline": "a newline",
}


def _collect(root: Path, rounds: int = 2) -> int:
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        return client.collect(
            TOKENS, "0.01s", count=rounds, out=root, raw=True, on_round=lambda n, f: sandbox.advance("1h")
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", WORKING)
def test_a_root_with_any_usable_name_works_end_to_end(tmp_path: Path, name: str) -> None:
    root = tmp_path / name
    assert _collect(root, 2) == 2
    snapshot = defilens.scan(root, "snapshot").collect()
    indicators = defilens.scan(root, "indicators").collect()
    assert snapshot.height == 2 * 2 and indicators.height > 0
    assert defilens.scan(root, "errors").collect().get_column("token").unique().to_list() == ["unknown-coin"]

    # time travel, by version and by moment (the moments are the commit timestamps listed)
    listed = versions(root, "snapshot")
    assert listed.get_column("round").drop_nulls().to_list() == [0, 1]
    first_round = listed.filter(pl.col("round") == 0).row(0, named=True)
    assert defilens.scan(root, "snapshot", as_of=first_round["version"]).collect().height == 2
    assert defilens.scan(root, "snapshot", as_of=first_round["committed_at"]).collect().height == 2
    assert defilens.scan(root, "snapshot", as_of=dt.datetime.now(UTC)).collect().height == 4

    # compaction, then everything reads the same rows
    report = defilens.compact(root, retention="1h")
    assert report["files_before"] > report["files_after"]
    assert defilens.scan(root, "indicators").collect().sort(pl.all()).equals(indicators.sort(pl.all()))

    # DuckDB and pandas read the tables directly (polars' own scan_delta cannot yet: pola-rs/polars#20944)
    import duckdb
    import duckdb_extension_delta
    from deltalake import DeltaTable

    extension = glob.glob(
        os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "**", "*.duckdb_extension"), recursive=True
    )
    con = duckdb.connect()
    con.execute(f"LOAD '{extension[0]}'")
    quoted = str(root / "indicators").replace("'", "''")
    assert con.execute(f"select count(*) from delta_scan('{quoted}')").fetchone() == (indicators.height,)
    assert len(DeltaTable(str(root / "snapshot")).to_pandas()) == snapshot.height

    # reparse gives back what collect committed
    reparsed = defilens.reparse(root)
    assert reparsed.snapshot.height == snapshot.height
    assert reparsed.indicators.height == indicators.height

    # the research layer reads through the same tables, twice (the second from its kept summaries)
    for _ in range(2):
        report_ = defilens.audit(root)
        assert report_.coverage.height > 0
        assert report_.failures.get_column("token").unique().to_list() == ["unknown-coin"]
    assert (root / "_audit").is_dir()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_root_name_a_delta_table_cannot_hold_is_refused_before_anything_is_created(tmp_path: Path, name: str) -> None:
    root = tmp_path / "histories" / name
    with Sandbox() as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        with pytest.raises(ValueError, match=REFUSED[name]) as raised:
            client.collect(["bitcoin"], "1s", count=1, out=root)
        assert sandbox.requests == 0
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "histories").exists()
    for call in (
        lambda: defilens.scan(root, "snapshot"),
        lambda: defilens.compact(root),
        lambda: defilens.reparse(root),
        lambda: defilens.audit(root),
    ):
        with pytest.raises(ValueError, match=REFUSED[name]):
            call()
    assert not (tmp_path / "histories").exists()


def test_a_refused_root_name_is_one_line_on_the_command_line(tmp_path: Path) -> None:
    root = tmp_path / "tab\there"
    done = subprocess.run(
        CLI + ["collect", "bitcoin", "--sandbox", "--every", "1s", "--count", "1", "--out", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("defilens: error:") and "a tab" in lines[0], done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_root_in_a_folder_with_a_space_from_the_command_line(tmp_path: Path) -> None:
    root = tmp_path / "with space"
    done = subprocess.run(
        CLI + ["collect", "bitcoin", "--sandbox", "--count", "2", "--every", "0.01s", "--out", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert defilens.scan(root, "snapshot").collect().height == 2
    audited = subprocess.run(CLI + ["audit", str(root)], capture_output=True, text=True, timeout=120)
    assert audited.returncode == 0, audited.stderr


def test_a_file_url_is_decoded(tmp_path: Path) -> None:
    root = tmp_path / "with space"
    _collect(root, 1)
    assert defilens.scan(root.as_uri(), "snapshot").collect().height == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["with space", "é", "a%20b"])
def test_an_object_storage_prefix_with_any_usable_name_works(bucket: str, s3: Dict[str, str], name: str) -> None:
    root = f"{bucket}/{name}"
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        assert client.collect(TOKENS, "0.01s", count=2, out=root, storage_options=s3, raw=True) == 2
    assert defilens.scan(root, "snapshot", storage_options=s3).collect().height == 2 * 2  # unknown-coin has none
    assert versions(root, "snapshot", storage_options=s3).get_column("round").drop_nulls().to_list() == [0, 1]
    defilens.compact(root, retention="1h", storage_options=s3)
    assert defilens.reparse(root, storage_options=s3).snapshot.height == 2 * 2
    assert defilens.audit(root, storage_options=s3).coverage.height > 0


def test_a_hash_in_an_object_storage_url_is_refused(bucket: str, s3: Dict[str, str]) -> None:
    with Sandbox() as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        with pytest.raises(ValueError, match="has a '#', which starts a fragment"):
            client.collect(["bitcoin"], "1s", count=1, out=f"{bucket}/a#b", storage_options=s3)
        assert sandbox.requests == 0


@pytest.mark.parametrize("name", ["with space", "é#"])
def test_a_history_of_earlier_versions_under_an_odd_name_converts(tmp_path: Path, name: str) -> None:
    from history_checks import write_old_round

    root = tmp_path / name
    with Sandbox(now="2026-01-01T20:00:00Z", seed=5) as sandbox:
        client = defilens.Client(base_url=sandbox.url)
        for number in range(2):
            write_old_round(client.fetch(TOKENS, progress=False), root, sandbox.now, number)
            sandbox.advance("1h")
    report = defilens.convert(root)
    assert report["tables"] > 0
    assert defilens.scan(root, "snapshot").collect().height == 2 * 2
    assert versions(root, "snapshot").height >= 1
