"""The command line's settings of the Client and the Sandbox come from one table each (issue 48,
item 3): every row is a keyword the Client or the Sandbox takes, a flag not given fills nothing
(the default stays the library's own), and the help's figures are the library's constants."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import List

import pytest

import defilens
from defilens._cli._main import parser
from defilens._cli._options import CLIENT_OPTIONS, CLOCK_OPTIONS, SANDBOX_OPTIONS, keywords
from defilens._client import DEFAULTS
from defilens._duration import format_duration
from defilens.history import COMPACT_EVERY, DEFAULT_MEMORY_BUDGET, DEFAULT_RETENTION, MIN_RETENTION, format_bytes
from defilens.testing import Sandbox


def _flags(table: "tuple[object, ...]", values: "dict[str, str]") -> List[str]:
    given: List[str] = []
    for option in table:
        name = option.flag_name  # type: ignore[attr-defined]
        given += [name] if option.switch_off else [name, values[option.keyword]]  # type: ignore[attr-defined]
    return given


def test_every_client_flag_fills_its_keyword_and_a_client_takes_them_all(tmp_path: Path) -> None:
    values = {
        "api_key": "secret-3141",
        "base_url": "http://127.0.0.1:9",
        "timeout": "2.5",
        "max_retries": "1",
        "concurrency": "3",
        "rate_limit": "auto",
        "cache_dir": str(tmp_path / "cache"),
        "cache_ttl": "60",
    }
    assert {option.keyword for option in CLIENT_OPTIONS} == set(values)
    args = parser().parse_args(["fetch", "bitcoin", *_flags(CLIENT_OPTIONS, values)])
    given = keywords(args, CLIENT_OPTIONS)
    assert given == {
        "api_key": "secret-3141",
        "base_url": "http://127.0.0.1:9",
        "timeout": 2.5,
        "max_retries": 1,
        "concurrency": 3,
        "rate_limit": "auto",
        "cache_dir": str(tmp_path / "cache"),
        "cache_ttl": 60.0,
    }
    with defilens.Client(**given) as client:
        assert "timeout=2.5" in repr(client) and "secret-3141" not in repr(client)


def test_a_flag_not_given_leaves_the_library_default() -> None:
    for command in (["fetch", "bitcoin"], ["collect", "bitcoin", "--every", "1m", "--out", "h"], ["sandbox"]):
        args = parser().parse_args(command)
        assert keywords(args, CLIENT_OPTIONS if command[0] != "sandbox" else SANDBOX_OPTIONS) == {}, command
        if command[0] != "sandbox":
            assert keywords(args, CLOCK_OPTIONS) == {}


def test_every_sandbox_flag_fills_its_keyword_and_a_sandbox_takes_them_all() -> None:
    values = {
        "port": "0",
        "now": "2026-01-01T00:00:00Z",
        "speed": "60",
        "seed": "3",
        "latency": "0",
        "api_key": "k",
        "max_rps": "100",
        "repaint_rate": "0.1",
        "error_rate": "0",
        "rate_limit_rate": "0",
        "drop_rate": "0",
        "truncate_rate": "0",
        "invalid_json_rate": "0",
    }
    args = parser().parse_args(["sandbox", *_flags(SANDBOX_OPTIONS, values)])
    given = keywords(args, SANDBOX_OPTIONS)
    assert set(given) == set(values) | {"rate_headers"} and given["rate_headers"] is False
    with Sandbox(**given) as sandbox:
        assert sandbox.now >= dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) and sandbox.speed == 60


def _help(command: List[str], capsys: pytest.CaptureFixture) -> str:
    with pytest.raises(SystemExit):
        parser().parse_args([*command, "--help"])
    return re.sub(r"\s+", " ", capsys.readouterr().out)


def test_the_help_shows_the_library_defaults(capsys: pytest.CaptureFixture) -> None:
    fetch = _help(["fetch"], capsys)
    assert f"seconds per request attempt (default {DEFAULTS['timeout']:g})" in fetch
    assert f"retries per request (default {DEFAULTS['max_retries']})" in fetch
    assert f"requests in flight (default {DEFAULTS['concurrency']})" in fetch
    compact = _help(["compact"], capsys)
    assert f"(default {format_duration(DEFAULT_RETENTION)}; at least {format_duration(MIN_RETENTION)})" in compact
    assert f"(default {format_bytes(DEFAULT_MEMORY_BUDGET)})" in compact
    assert f"every {format_duration(COMPACT_EVERY)} as it goes" in _help(["collect"], capsys)


def test_the_docstrings_show_the_history_defaults() -> None:
    from defilens.history import collect, compact
    from defilens.history._defaults import CHECKPOINT_INTERVAL, DEFAULT_TARGET_SIZE

    compact_doc = re.sub(r"\s+", " ", compact.__doc__ or "")
    assert f"(default {format_duration(DEFAULT_RETENTION)}, at least {format_duration(MIN_RETENTION)})" in compact_doc
    assert f"(default {format_bytes(DEFAULT_MEMORY_BUDGET)};" in compact_doc
    assert f"(default {format_bytes(DEFAULT_TARGET_SIZE)})" in compact_doc
    collect_doc = re.sub(r"\s+", " ", collect.__doc__ or "")
    assert f"every {CHECKPOINT_INTERVAL} rounds (a checkpoint interval)" in collect_doc
    assert f"every {format_duration(COMPACT_EVERY)} instead" in collect_doc


@pytest.mark.parametrize(("size", "shown"), [(1 << 30, "1GB"), (512 << 20, "512MB"), (3 << 40, "3TB"), (1500, "1500B")])
def test_a_size_is_shown_as_it_is_read(size: int, shown: str) -> None:
    from defilens.history._compact import parse_bytes

    assert format_bytes(size) == shown
    if size >= 1 << 20:
        assert parse_bytes(shown, "size") == size
