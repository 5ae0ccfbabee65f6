"""The package's one way of holding a moment: UTC, to the millisecond, and a naive datetime means
UTC (as everywhere in defilens: a notebook's `datetime(2026, 3, 1, 12)` is noon UTC)."""

from __future__ import annotations

import datetime as dt

import polars as pl

#: The dtype of every moment column a history or a study holds.
UTC_MS = pl.Datetime("ms", "UTC")


def aware(moment: dt.datetime) -> dt.datetime:
    """``moment`` with a time zone: a naive one is taken as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)
