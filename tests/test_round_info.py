"""A round's commit info: written and read by one typed value (`history._round_info`)."""

from __future__ import annotations

import datetime as dt

import pytest

from defilens.history._round_info import ROUND_ID_KEY, SETTINGS_KEY, RoundInfo

START = dt.datetime(2026, 3, 1, 12, 30, tzinfo=dt.timezone.utc)


def test_what_a_commit_records_reads_back_as_the_same_round():
    written = RoundInfo("c-1", 7, START, settings='{"every": 900}', uid="u-7")
    info = written.commit_info()
    assert info == {
        "defilens.collector": "c-1",
        "defilens.round": "7",
        "defilens.round_start": "2026-03-01T12:30:00+00:00",
        SETTINGS_KEY: '{"every": 900}',
        ROUND_ID_KEY: "u-7",
    }
    # A table's history adds its own keys beside ours, and JSON may give the number as an int.
    assert RoundInfo.of({**info, "operation": "WRITE", "version": 3}) == written
    assert RoundInfo.of({**info, "defilens.round": 7}) == written


def test_rounds_of_earlier_versions_read_without_settings_or_uid():
    info = RoundInfo("c-1", 0, START).commit_info()
    assert SETTINGS_KEY not in info and ROUND_ID_KEY not in info
    assert RoundInfo.of(info) == RoundInfo("c-1", 0, START)


@pytest.mark.parametrize(
    "info",
    [
        {"operation": "OPTIMIZE"},
        {"defilens.collector": "c-1", "defilens.round": "3"},
        {"defilens.round": "three", "defilens.round_start": START.isoformat()},
        {"defilens.round": "3", "defilens.round_start": "yesterday"},
        {"defilens.round": None, "defilens.round_start": START.isoformat()},
    ],
)
def test_a_commit_that_is_not_a_readable_round_is_none(info):
    assert RoundInfo.of(info) is None
