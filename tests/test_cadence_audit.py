"""The collector's settings recorded in the history, and an audit that knows the cadence: a close
the rounds could not see is `unobservable`, not missing; one they could see and did not is
`missed`. Every history here is collected from a Sandbox on a still simulated clock."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import polars as pl
import pytest
from deltalake import DeltaTable

import defilens
from defilens.history import settings
from defilens.testing import Sandbox

UTC = dt.timezone.utc
START = dt.datetime(2026, 1, 5, 0, 5, tzinfo=UTC)  # a Monday; rounds at :05, :20, :35, :50
TOKENS = ["bitcoin", "ethereum"]


def _collect(sandbox: Sandbox, root: Path, every: str, count: int, **options: Any) -> None:
    client = defilens.Client(base_url=sandbox)
    assert client.collect(TOKENS, every, count=count, out=root, markets=False, **options) == count


def _by_interval(report: defilens.Audit, token: str = "bitcoin") -> Dict[str, Dict[str, Any]]:
    rows = report.coverage.filter(pl.col("token") == token).with_columns(pl.col("interval").cast(pl.String))
    return {row["interval"]: row for row in rows.iter_rows(named=True)}


@pytest.fixture(scope="module")
def quarter_hourly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two simulated days of 15-minute rounds."""
    root = tmp_path_factory.mktemp("cadence") / "h"
    with Sandbox(now=START) as sandbox:
        _collect(sandbox, root, "15m", 2 * 96, universe="the two largest by market cap, chosen by hand")
    return root


def test_every_commit_records_the_collectors_settings(quarter_hourly: Path) -> None:
    for table in ("log", "snapshot", "indicators", "ta_updated"):
        rounds = [entry for entry in DeltaTable(str(quarter_hourly / table)).history() if "defilens.round" in entry]
        assert len(rounds) == 2 * 96, table
        recorded = [json.loads(entry["defilens.settings"]) for entry in rounds]
        assert all(found == recorded[0] for found in recorded)
    found = recorded[0]
    assert found["every_seconds"] == 900
    assert found["ids"] == TOKENS and found["ids_count"] == 2 and len(found["ids_hash"]) == 64
    assert found["markets"] is False and found["raw"] is False and found["clock"] == "simulated"
    assert found["version"] == defilens.__version__
    assert found["collector"] == rounds[0]["defilens.collector"]
    assert found["universe"] == "the two largest by market cap, chosen by hand"


def test_settings_gives_one_row_a_run(quarter_hourly: Path) -> None:
    runs = settings(quarter_hourly)
    assert runs.height == 1
    run = runs.row(0, named=True)
    assert run["every"] == dt.timedelta(minutes=15) and run["source"] == "recorded"
    assert (run["first_round"], run["last_round"], run["rounds"]) == (0, 191, 192)
    assert run["first_start"] == START and run["last_start"] == START + dt.timedelta(minutes=15 * 191)
    assert run["ids"] == TOKENS and run["ids_count"] == 2 and run["clock"] == "simulated"
    assert run["universe"] == "the two largest by market cap, chosen by hand"
    assert defilens.history.settings is settings


def test_fifteen_minute_rounds_miss_no_hourly_close_and_cannot_see_two_thirds_of_5m(quarter_hourly: Path) -> None:
    report = defilens.audit(quarter_hourly, cache=False)
    for token in TOKENS:
        rows = _by_interval(report, token)
        for interval, row in rows.items():
            assert row["missed"] == 0, (interval, row)
            assert row["observable"] == row["seen"]
            assert row["expected"] == row["observable"] + row["unobservable"]
            assert row["missing"] == row["missed"] + row["unobservable"]
        five = rows["5m"]
        assert five["seen"] == 192
        assert five["unobservable"] == five["expected"] - 192 == 382  # two of every three closes
        assert rows["15m"]["unobservable"] == 0 and rows["1h"]["unobservable"] == 0
    assert report.gaps.height == 0
    assert report.max_missing() == 0
    text = str(report)
    assert "every 15m (recorded)" in text
    assert "unobservable" in text


def test_expect_every_close_counts_the_unobservable_as_missed(quarter_hourly: Path) -> None:
    report = defilens.audit(quarter_hourly, cache=False, expect="every")
    five = _by_interval(report)["5m"]
    assert five["missed"] == 382 and five["unobservable"] == 0
    assert report.max_missing() == 382
    assert "every close expected" in str(report)
    # 5m not expected at all; the others by the recorded cadence.
    report = defilens.audit(quarter_hourly, cache=False, expect={"5m": False})
    rows = _by_interval(report)
    assert rows["5m"]["missed"] == 0 and rows["5m"]["observable"] == rows["5m"]["seen"]
    # A cadence given: as if rounds had been hourly, the 15m closes seen are still counted seen.
    rows = _by_interval(defilens.audit(quarter_hourly, cache=False, expect="1h"))
    assert rows["1h"]["missed"] == 0 and rows["15m"]["missed"] == 0


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ({"1hr": "every"}, r"unknown interval '1hr' \(did you mean '1h'\?\)"),
        ({"4h": "every"}, "4h has no candle time"),
        ("0s", "expect"),
        ("-5m", "expect"),
        ("soon", "expect"),
        ({"5m": "sometimes"}, "expect"),
        (["5m"], "expect"),
    ],
)
def test_bad_expectations_are_refused(quarter_hourly: Path, expect: Any, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        defilens.audit(quarter_hourly, cache=False, expect=expect)


def _pause(root: Path, every: str, before: int, gap: str, after: int, **options: Any) -> None:
    with Sandbox(now=dt.datetime(2026, 3, 1, 0, 2, tzinfo=UTC)) as sandbox:
        _collect(sandbox, root, every, before, **options)
        sandbox.advance(gap)
        _collect(sandbox, root, every, after, **options)


def test_a_six_hour_pause_is_six_missed_hourly_closes(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _pause(root, "1h", 12, "7h", 12)  # 11:02, then 18:02: the rounds of 12:02 ... 17:02 not made
    report = defilens.audit(root, cache=False)
    for token in TOKENS:
        rows = _by_interval(report, token)
        assert rows["1h"]["missed"] == 6 and rows["1h"]["unobservable"] == 0
        hole = report.gaps.filter(pl.col("token") == token, pl.col("interval") == "1h").row(0, named=True)
        assert hole["gap_start"] == dt.datetime(2026, 3, 1, 12, tzinfo=UTC)
        assert hole["gap_end"] == dt.datetime(2026, 3, 1, 17, tzinfo=UTC)
        assert hole["missing"] == 6
        # An hourly round sees one 5m close in twelve; in the hole it missed six of them.
        assert rows["5m"]["missed"] == 6 and rows["5m"]["seen"] == 24
        assert rows["24h"]["missed"] == 0
    assert report.max_missing() == 6
    runs = settings(root)
    assert runs.height == 2 and runs["every"].to_list() == [dt.timedelta(hours=1)] * 2


def test_a_killed_round_is_exactly_that_round_missed(tmp_path: Path) -> None:
    root = tmp_path / "h"
    # Rounds at 00:02 ... 00:47, then the 01:02 round never made, then 01:17 onwards.
    _pause(root, "15m", 4, "30m", 4, collector_id="steady")
    report = defilens.audit(root, cache=False)
    for token in TOKENS:
        rows = _by_interval(report, token)
        assert rows["5m"]["missed"] == 1 and rows["15m"]["missed"] == 1, rows
        assert rows["1h"]["missed"] == 0  # the 01:00 close was seen at 01:17
        missed = report.gaps.filter(pl.col("token") == token).sort("interval")
        assert missed.select("interval", "gap_start", "gap_end", "missing").rows() == [
            ("5m", dt.datetime(2026, 3, 1, 1, 0, tzinfo=UTC), dt.datetime(2026, 3, 1, 1, 0, tzinfo=UTC), 1),
            ("15m", dt.datetime(2026, 3, 1, 1, 0, tzinfo=UTC), dt.datetime(2026, 3, 1, 1, 0, tzinfo=UTC), 1),
        ]
    runs = settings(root)
    assert runs.height == 1 and runs.row(0, named=True)["rounds"] == 8  # one collector, one setting


def test_two_runs_with_different_cadences_are_each_audited_by_their_own(tmp_path: Path) -> None:
    root = tmp_path / "h"
    with Sandbox(now=START) as sandbox:
        _collect(sandbox, root, "15m", 8)  # 00:05 ... 01:50
        sandbox.advance("15m")
        _collect(sandbox, root, "1h", 6)  # 02:05 ... 07:05
    report = defilens.audit(root, cache=False)
    rows = _by_interval(report)
    assert {interval: row["missed"] for interval, row in rows.items()} == dict.fromkeys(rows, 0)
    assert rows["15m"]["seen"] == 14 and rows["15m"]["unobservable"] == 29 - 14
    assert rows["5m"]["seen"] == 14 and rows["5m"]["unobservable"] == 85 - 14
    assert report.gaps.height == 0
    assert report.cadence.select("every", "source").rows() == [
        (dt.timedelta(minutes=15), "recorded"),
        (dt.timedelta(hours=1), "recorded"),
    ]
    text = str(report)
    assert "2 runs" in text and "every 15m" in text and "every 1h" in text


def test_a_history_without_recorded_settings_gets_an_inferred_cadence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "h"
    import defilens.history._collect as collecting

    # What earlier versions wrote: rounds without settings.
    monkeypatch.setattr(collecting, "collector_settings", lambda *args, **kwargs: None)
    with Sandbox(now=START) as sandbox:
        _collect(sandbox, root, "15m", 12)
    assert not [entry for entry in DeltaTable(str(root / "log")).history() if "defilens.settings" in entry]
    runs = settings(root)
    assert runs.height == 1
    run = runs.row(0, named=True)
    assert run["source"] == "inferred" and run["every"] == dt.timedelta(minutes=15) and run["ids"] is None
    report = defilens.audit(root, cache=False)
    assert report.cadence.select("every", "source").rows() == [(dt.timedelta(minutes=15), "inferred")]
    assert "every 15m (inferred from the rounds" in str(report)
    assert _by_interval(report)["5m"]["missed"] == 0


def test_a_universe_must_be_text(tmp_path: Path) -> None:
    with Sandbox(now=START) as sandbox, pytest.raises(TypeError, match="universe must be a str"):
        defilens.Client(base_url=sandbox).collect(TOKENS, "15m", count=1, out=tmp_path / "h", universe=100)  # type: ignore[arg-type]
    assert not (tmp_path / "h").exists()


def test_the_command_line_records_a_universe_and_counts_missed_closes(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _pause(root, "1h", 3, "3h", 3, universe="top 2 by rank")  # two hourly rounds not made
    assert settings(root)["universe"].to_list() == ["top 2 by rank"] * 2

    def audit(*args: str) -> "subprocess.CompletedProcess[str]":
        command = [sys.executable, "-m", "defilens", "audit", str(root), "--no-cache", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    assert audit("--max-missing", "2").returncode == 0
    failed = audit("--max-missing", "1")
    assert failed.returncode == 1
    assert "misses 2 observable candle closes" in failed.stderr
    assert "every 1h (recorded)" in failed.stdout
    assert audit("--max-missing", "2", "--expect", "every").returncode == 1
    bad = audit("--expect", "1hr=every")
    assert bad.returncode != 0 and "did you mean '1h'" in bad.stderr and "Traceback" not in bad.stderr


def test_the_collect_command_takes_a_universe(tmp_path: Path) -> None:
    root = tmp_path / "h"
    command = [
        sys.executable,
        "-m",
        "defilens",
        "collect",
        "bitcoin",
        "--every",
        "1s",
        "--count",
        "1",
        "--out",
        str(root),
        "--sandbox",
        "--no-markets",
        "--universe",
        "whatever I typed, verbatim: top-100 @ 2026",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    run = settings(root).row(0, named=True)
    assert run["universe"] == "whatever I typed, verbatim: top-100 @ 2026"
    assert run["clock"] == "wall" and run["every"] == dt.timedelta(seconds=1)


def test_a_spooled_round_keeps_its_settings_and_one_of_earlier_versions_has_none() -> None:
    import io
    import zipfile

    from defilens.history._round_info import SETTINGS_KEY
    from defilens.history._rounds import Round

    empty = pl.DataFrame({"token": ["bitcoin"]})
    recorded = {"every_seconds": 900.0, "universe": "top 2", "ids": TOKENS}
    round_ = Round("c", 3, START, empty, empty, False, recorded)
    back = Round.from_bytes(round_.to_bytes())
    assert back.settings == recorded
    assert json.loads(back.metadata[SETTINGS_KEY]) == recorded
    # A round spooled by an earlier version: no settings in its round.json.
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(round_.to_bytes())) as old, zipfile.ZipFile(buffer, "w") as new:
        for name in old.namelist():
            data = old.read(name)
            if name == "round.json":
                meta = json.loads(data)
                del meta["settings"]
                data = json.dumps(meta).encode()
            new.writestr(name, data)
    earlier = Round.from_bytes(buffer.getvalue())
    assert earlier.settings is None and SETTINGS_KEY not in earlier.metadata


@pytest.mark.parametrize(
    ("spacing", "every", "source"),
    [
        (dt.timedelta(milliseconds=2003), dt.timedelta(seconds=2), "recorded"),  # a wall clock's late starts
        (dt.timedelta(hours=1), dt.timedelta(hours=1), "inferred"),  # 10 ms recorded, the clock moved by on_round
    ],
)
def test_a_run_keeps_the_spacing_of_its_rounds_only_when_far_from_what_it_recorded(
    monkeypatch: pytest.MonkeyPatch, spacing: dt.timedelta, every: dt.timedelta, source: str
) -> None:
    import defilens.research._cadence as cadence
    import defilens.research._rounds as rounds
    from defilens.history._settings import runs_of

    recorded = 2.0 if source == "recorded" else 0.01
    info = [
        {
            "defilens.collector": "c",
            "defilens.round": str(k),
            "defilens.round_start": (START + k * spacing).isoformat(),
            "defilens.settings": json.dumps({"every_seconds": recorded}),
        }
        for k in range(5)
    ]
    monkeypatch.setattr(rounds, "runs", lambda root, spacing: runs_of(info, spacing))
    none = pl.DataFrame(schema={"token": pl.String, "interval": pl.String, "fetched_at": pl.Datetime("ms", "UTC")})
    found = cadence.cadence_of(None, none.drop("interval"), none).runs  # type: ignore[arg-type]
    assert found.select("every", "source").rows() == [(every, source)]
