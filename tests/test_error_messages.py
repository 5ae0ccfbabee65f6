"""Every error a user can cause is one line of the package's exceptions, message first, with no
engine internals (issue 41): each case driven from the public API and from the command line."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple, Type

import polars as pl
import pytest
from deltalake import write_deltalake

import defilens
from defilens._cli import main

#: Text that belongs to an engine or to Python, never to a message of ours.
INTERNALS = (
    "Traceback",
    "_BaseClient",
    "__init__",
    "python_udf",
    "This error occurred",
    "PythonDataset",
    "FAILED HERE",
    "Resolved plan",
    "[Errno",
    "polars.exceptions",
    "ColumnNotFoundError",
    "panicked",
    "\x1b[",
    "datetime.timedelta",
    "1:00:00",
)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A history of one round, a root whose indicators table is another dataset's, and a folder
    of frames written as CSV."""
    base = tmp_path_factory.mktemp("roots")
    history = base / "history"
    with defilens.testing.Sandbox() as sandbox, defilens.Client(base_url=sandbox.url) as client:
        client.collect(["bitcoin"], "1s", count=1, out=history, progress=False)
        frames = client.fetch(["bitcoin"])
    foreign = base / "foreign"
    shutil.copytree(history, foreign)
    shutil.rmtree(foreign / "indicators")
    other = pl.DataFrame({"token": ["a"], "date": [dt.date(2026, 1, 1)], "x": [1.0]})
    write_deltalake(str(foreign / "indicators"), other.to_arrow(), partition_by=["date"])
    frames.write(base / "csv", format="csv")
    return {"history": history, "foreign": foreign, "csv": base / "csv", "base": base}


def _check_message(text: str, words: Sequence[str]) -> None:
    assert "\n" not in text.strip(), text
    for word in words:
        assert word in text, (word, text)
    for internal in INTERNALS:
        assert internal not in text, (internal, text)


def _history_panel(roots: Dict[str, Path]) -> None:
    rows = pl.concat(
        [
            defilens.scan(roots["history"], "indicators").collect().with_columns(pl.col("value") + shift)
            for shift in (0.0, 1.0)
        ]
    )
    with defilens.testing.Sandbox() as sandbox:
        candles = sandbox.candles("bitcoin", "1h").with_columns(token=pl.lit("bitcoin"), interval=pl.lit("1h"))
    defilens.research.verify(rows, candles)


def _sandbox_typo(roots: Dict[str, Path]) -> None:
    with defilens.testing.Sandbox() as sandbox, defilens.Client(base_url=sandbox.url) as client:
        assert client.token("coin-042", markets=False).snapshot.height == 1  # a generated token of its own
        client.token("etherum", markets=False)


def _rsi_zero(roots: Dict[str, Path]) -> None:
    pl.DataFrame({"close": [1.0, 2.0]}).select(defilens.ta.rsi(pl.col("close"), 0))


#: (name, call with the roots, exception type, key words of its message).
API_CASES: List[Tuple[str, Callable[[Dict[str, Path]], Any], Type[BaseException], Tuple[str, ...]]] = [
    (
        "scan of a foreign table",
        lambda r: defilens.scan(r["foreign"], "indicators"),
        defilens.HistoryError,
        ("another dataset", "not a defilens 'indicators' table"),
    ),
    (
        "panel of a foreign table",
        lambda r: defilens.research.panel(r["foreign"], indicators="rsi14").collect(),
        defilens.HistoryError,
        ("not a defilens 'indicators' table",),
    ),
    (
        "asof of a foreign table",
        lambda r: defilens.research.asof(r["foreign"], dt.datetime.now(dt.timezone.utc)),
        defilens.HistoryError,
        ("not a defilens 'indicators' table",),
    ),
    (
        "audit of a foreign table",
        lambda r: defilens.research.audit(r["foreign"], cache=False),
        defilens.HistoryError,
        ("not a defilens 'indicators' table",),
    ),
    (
        "versions of a foreign table",
        lambda r: defilens.history.versions(r["foreign"], "indicators"),
        defilens.HistoryError,
        ("not a defilens 'indicators' table",),
    ),
    (
        "compact of a foreign table",
        lambda r: defilens.compact(r["foreign"]),
        defilens.HistoryError,
        ("not a defilens 'indicators' table", "compact only a defilens history"),
    ),
    (
        "asof at a date",
        lambda r: defilens.research.asof(r["history"], dt.date(2026, 1, 5)),
        TypeError,
        ("a date is a day", "datetime"),
    ),
    (
        "Client with a mistyped argument",
        lambda r: defilens.Client(apikey="x"),
        TypeError,
        ("Client()", "'apikey'", "did you mean 'api_key'"),
    ),
    (
        "AsyncClient with a positional argument",
        lambda r: defilens.AsyncClient("x"),
        TypeError,
        ("AsyncClient()", "too many positional arguments", "api_key"),
    ),
    (
        "fetch with a mistyped argument",
        lambda r: defilens.Client(base_url="http://127.0.0.1:9").fetch(["bitcoin"], market=False),
        TypeError,
        ("Client.fetch()", "did you mean 'markets'"),
    ),
    (
        "scan of a mistyped frame",
        lambda r: defilens.scan(r["history"], "indicatorz"),
        ValueError,
        ("did you mean 'indicators'",),
    ),
    (
        "scan as of a date",
        lambda r: defilens.scan(r["history"], "indicators", as_of=dt.date(2026, 1, 5)),
        TypeError,
        ("a date is a day",),
    ),
    (
        "read of a history",
        lambda r: defilens.read(r["history"]),
        ValueError,
        ("is a history", "defilens.scan("),
    ),
    ("a typo of a Sandbox token", _sandbox_typo, defilens.NotFoundError, ("etherum", "did you mean ethereum")),
    ("rsi of 0 closes", _rsi_zero, ValueError, ("ta.rsi", "n must be", "got 0")),
    (
        "macd fast not shorter than slow",
        lambda r: defilens.ta.macd(pl.col("close"), fast=30, slow=26),
        ValueError,
        ("ta.macd", "shorter than slow"),
    ),
    (
        "panel interval 1hr",
        lambda r: defilens.research.panel(r["history"], intervals="1hr"),
        ValueError,
        ("unknown interval '1hr'", "did you mean '1h'", "24h"),
    ),
    (
        "panel interval 1d",
        lambda r: defilens.research.panel(r["history"], intervals="1d"),
        ValueError,
        ("unknown interval '1d'", "did you mean '24h'"),
    ),
    (
        "panel 4h of rsi14",
        lambda r: defilens.research.panel(r["history"], indicators="rsi14", intervals="4h"),
        ValueError,
        ("rsi14 has no 4h values", "1h"),
    ),
    (
        "asof indicator RSI14",
        lambda r: defilens.research.asof(r["history"], dt.datetime.now(dt.timezone.utc), indicators="RSI14"),
        ValueError,
        ("unknown indicator 'RSI14'", "did you mean 'rsi14'"),
    ),
    (
        "Sandbox candles of 1d",
        lambda r: defilens.testing.Sandbox().candles("bitcoin", "1d"),
        ValueError,
        ("unknown interval '1d'", "did you mean '24h'"),
    ),
    ("verify given a history's rows", _history_panel, ValueError, ("values of bitcoin", "one row a series")),
    (
        "read of a CSV folder",
        lambda r: defilens.read(r["csv"]),
        ValueError,
        ("written as csv", "cannot read back", "format='parquet'"),
    ),
    (
        "compact with too short a retention",
        lambda r: defilens.compact(r["history"], retention="30m"),
        ValueError,
        ("at least 1h", "'30m'"),
    ),
]


@pytest.mark.parametrize("name, call, kind, words", API_CASES, ids=[case[0] for case in API_CASES])
def test_api_errors_are_one_line(
    roots: Dict[str, Path],
    name: str,
    call: Callable[[Dict[str, Path]], Any],
    kind: Type[BaseException],
    words: Tuple[str, ...],
) -> None:
    with pytest.raises(kind) as raised:
        call(roots)
    assert type(raised.value).__module__.startswith(("defilens", "builtins")), type(raised.value)
    _check_message(str(raised.value), words)
    # message first: no chained engine exception a traceback would print above it
    assert raised.value.__cause__ is None


#: (name, arguments with {history}/{foreign}/{new} filled in, exit code, key words on stderr).
CLI_CASES: List[Tuple[str, List[str], int, Tuple[str, ...]]] = [
    ("audit of a foreign table", ["audit", "{foreign}", "--no-cache"], 1, ("not a defilens 'indicators' table",)),
    ("versions of a foreign table", ["versions", "{foreign}"], 1, ("not a defilens 'indicators' table",)),
    ("compact of a foreign table", ["compact", "{foreign}"], 1, ("compact only a defilens history",)),
    ("fetch --out /proc", ["fetch", "bitcoin", "--sandbox", "--out", "/proc/nope"], 1, ("--out '/proc/nope'",)),
    (
        "fetch --out file:///proc",
        ["fetch", "bitcoin", "--sandbox", "--out", "file:///proc/nope"],
        1,
        ("--out 'file:///proc/nope'", "cannot be written"),
    ),
    (
        "fetch --out under a file",
        ["fetch", "bitcoin", "--sandbox", "--out", "{history}/indicators/_delta_log/00000000000000000000.json/x"],
        1,
        ("is a file", "give a folder"),
    ),
    ("a mistyped option", ["fetch", "bitcoin", "--sandox"], 2, ("did you mean '--sandbox'",)),
    ("a mistyped command", ["fecth", "bitcoin"], 2, ("did you mean 'fetch'",)),
    ("collect --count 0", ["collect", "bitcoin", "--every", "5m", "--count", "0", "--out", "{new}"], 2, ("1 or more",)),
    (
        "collect --max-failed-rounds 0",
        ["collect", "bitcoin", "--every", "5m", "--max-failed-rounds", "0", "--out", "{new}"],
        2,
        ("--max-failed-rounds must be 1 or more",),
    ),
    ("collect --every 5", ["collect", "bitcoin", "--every", "5", "--out", "{new}"], 2, ("unit", "5s", "5m")),
    ("collect --every 5x", ["collect", "bitcoin", "--every", "5x", "--out", "{new}"], 2, ("--every must look like",)),
    ("compact --retention 7", ["compact", "{history}", "--retention", "7"], 2, ("unit", "7d")),
    ("compact --retention 30m", ["compact", "{history}", "--retention", "30m"], 1, ("at least 1h",)),
    ("collect without a key", ["collect", "bitcoin", "--every", "5m", "--out", "{new}"], 1, ("no API key",)),
]


@pytest.mark.parametrize("name, argv, code, words", CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_cli_errors_are_one_line(
    roots: Dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    argv: List[str],
    code: int,
    words: Tuple[str, ...],
) -> None:
    monkeypatch.delenv("DEFILENS_API_KEY", raising=False)
    monkeypatch.delenv("DEFILENS_BASE_URL", raising=False)
    new = tmp_path / "new" / "history"
    filled = [part.format(history=roots["history"], foreign=roots["foreign"], new=new) for part in argv]
    try:
        got = main(filled)
    except SystemExit as exited:  # argparse's usage errors
        got = exited.code
    err = capsys.readouterr().err
    assert got == code, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("defilens") and ": error: " in last, err
    _check_message(last, words)
    assert "None" not in last
    if code == 1:
        assert err.count("\n") == 1, err  # nothing but the one line
    assert not (tmp_path / "new").exists(), "a failing command left a folder behind"


def test_a_file_url_for_out_is_checked_as_its_path_is(capsys: pytest.CaptureFixture) -> None:
    """``--out file:///x`` is the folder /x: the same check before any request, the same line."""
    lines = []
    for out in ("/proc/nope", "file:///proc/nope"):
        assert main(["fetch", "bitcoin", "--sandbox", "--out", out]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        lines.append(err.replace(repr(out), "OUT"))
    assert lines[0] == lines[1], lines
    assert "cannot be written" in lines[0]


def test_a_failing_command_leaves_no_folder_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEFILENS_API_KEY", raising=False)
    monkeypatch.delenv("DEFILENS_BASE_URL", raising=False)
    for argv in (
        ["collect", "bitcoin", "--every", "5m", "--out", str(tmp_path / "a" / "b")],
        ["fetch", "bitcoin", "--out", str(tmp_path / "c" / "d")],
    ):
        assert main(argv) == 1
    assert sorted(os.listdir(tmp_path)) == []


def test_a_fetch_that_got_nothing_leaves_no_folder_and_says_404_once(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """docs/cli.md: a failed command leaves no folder. A 404 is one line a token, not the raw body
    once per endpoint."""
    out = tmp_path / "newdir"
    assert main(["fetch", "unknown-x", "--sandbox", "--out", str(out)]) == 1
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    err = capsys.readouterr().err
    assert err.count("unknown-x") == 1 and "404" in err, err
    assert '{"error"' not in err and "body:" not in err, err
    # A fetch that got something still writes everything, the failures included.
    assert main(["fetch", "bitcoin", "unknown-x", "--sandbox", "--out", str(out)]) == 0
    assert (out / "errors.parquet").exists() and pl.read_parquet(out / "errors.parquet").height == 2


def test_a_bad_setting_is_named_before_a_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEFILENS_API_KEY", raising=False)
    monkeypatch.delenv("DEFILENS_BASE_URL", raising=False)
    with pytest.raises(TypeError, match="timeout"):
        defilens.Client(timeout="30")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency"):
        defilens.AsyncClient(concurrency=0)
    with pytest.raises(defilens.DefiLensError, match="no API key"):
        defilens.Client()


def test_the_command_line_prints_no_traceback_end_to_end(roots: Dict[str, Path]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "defilens", "audit", str(roots["foreign"]), "--no-cache"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert run.returncode == 1
    assert run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
    _check_message(run.stderr, ("defilens: error:", "not a defilens 'indicators' table"))


def test_a_foreign_table_is_refused_before_its_rows_are_read(roots: Dict[str, Path]) -> None:
    # scan used to return the other dataset's rows without a word
    with pytest.raises(defilens.HistoryError, match="read it with polars or deltalake directly"):
        defilens.scan(roots["foreign"], "indicators")
    # the frames of the root that are ours still read
    assert defilens.scan(roots["foreign"], "snapshot").collect().height == 1


def test_compact_says_what_time_travel_keeps_on_disk(
    roots: Dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    history = tmp_path / "history"
    shutil.copytree(roots["history"], history)
    with defilens.testing.Sandbox() as sandbox, defilens.Client(base_url=sandbox.url) as client:
        client.collect(["bitcoin"], "0.2s", count=2, out=history, progress=False)
    assert main(["compact", str(history), "--retention", "2h"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("compacted: ") and " packed into " in out[0]
    assert out[1].startswith("kept for time travel: ") and "retention of 2h" in out[1] and " MB" in out[1], out
    report = defilens.compact(history, retention="2h")
    on_disk = sum(path.stat().st_size for path in history.rglob("*.parquet") if "_delta_log" not in path.parts)
    assert report["files_kept"] > 0 and report["bytes_kept"] + report["bytes_live"] == on_disk


def test_collect_draws_one_bar_over_rounds(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with defilens.testing.Sandbox() as sandbox, defilens.Client(base_url=sandbox.url) as client:
        assert client.collect(["bitcoin", "ethereum"], "0.2s", count=2, out=tmp_path / "h", progress=True) == 2
    err = capsys.readouterr().err
    assert "collect" in err and "2/2" in err and "round" in err, err
    assert "request" not in err  # no request bar per round


def test_counts_are_singular_and_plural(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["collect", "bitcoin", "--every", "1s", "--count", "1", "--out", str(tmp_path / "h"), "--sandbox"]) == 0
    out = capsys.readouterr().out
    assert "round 1: 1 token\n" in out and "committed 1 round to" in out, out


def test_every_sandbox_option_has_help(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["sandbox", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--seed SEED the", "--error-rate SHARE", "--drop-rate SHARE", "--invalid-json-rate SHARE"):
        assert option in text, option


def test_summaries_write_every_count_with_separators() -> None:
    from defilens._text import with_separators

    line = "coverage: 12345 of 1,440 seen (99.5%) across 1200 tokens; coin1000 2026-01-05 20:00:00 0.12345 x-10000 7"
    assert with_separators(line) == (
        "coverage: 12,345 of 1,440 seen (99.5%) across 1,200 tokens; coin1000 2026-01-05 20:00:00 0.12345 x-10000 7"
    )


def test_warnings_point_at_the_callers_line() -> None:
    """A warning raised deep in defilens (through the keyword check's wrapper, a helper or two)
    names the user's line, not the package's."""
    client = defilens.Client(base_url="http://127.0.0.1:9", max_retries=0, timeout=2.0)  # nothing listens
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.fetch(["bitcoin"], markets=False)
    ours = [w for w in caught if issubclass(w.category, defilens.DefiLensWarning)]
    assert ours, [str(w.message) for w in caught]
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]


def test_a_failed_convert_leaves_no_folder_behind(tmp_path) -> None:
    import subprocess
    import sys

    target = tmp_path / "nothing" / "here"
    run = subprocess.run(
        [sys.executable, "-m", "defilens", "convert", str(target)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "no history" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "nothing").exists()
