"""What `fetch` prints: a summary of the frames on stdout, the failures on stderr."""

from __future__ import annotations

import math

import polars as pl

from .._frames import Frames
from ._arguments import plural


def _format_number(value: object, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _format_price(value: object) -> str:
    """Prices keep four significant digits however small: 64,123.52, 0.5123, 0.00004012."""
    if not isinstance(value, float) or value == 0 or not math.isfinite(value):
        return _format_number(value)
    if abs(value) >= 1:
        return f"{value:,.2f}"
    decimals = 3 - math.floor(math.log10(abs(value)))
    return f"{value:,.{decimals}f}"


#: Up to this many tokens are listed one per line; beyond, the largest by market cap and totals.
MAX_LISTED_TOKENS = 20


def summary(frames: Frames, elapsed: float) -> str:
    """A compact, readable summary of a fetch: a line of counts and a table of tokens (the
    largest 20 by market cap, then totals, for bigger batches). Failures are in `failures`."""
    log = frames.log
    lines = []
    requested = log.get_column("token").n_unique() if log.height else 0
    failures = frames.errors
    lines.append(
        f"fetched {frames.snapshot.height} of {plural(requested, 'token')} "
        f"({plural(log.height, 'request')}, {failures.height} failed) in {elapsed:.2f}s"
    )
    if frames.snapshot.height:
        rsi = (
            frames.indicators.filter(pl.col("indicator") == "rsi14")
            .with_columns(pl.col("interval").cast(pl.String))
            .pivot(on="interval", index="token", values="value")
        )
        macd = frames.signals.filter((pl.col("indicator") == "macd") & (pl.col("interval") == "24h")).select(
            "token", pl.col("value").alias("macd_24h")
        )
        pattern_counts = frames.patterns.group_by("token").agg(pl.len().alias("patterns"))
        market_counts = frames.markets.group_by("token").agg(pl.len().alias("markets"))
        table = (
            frames.snapshot.select(
                "token", "symbol", "current_price", "price_change_percentage_24h", "market_cap_rank", "market_cap"
            )
            .join(rsi.select("token", *[c for c in ("1h", "24h") if c in rsi.columns]), on="token", how="left")
            .join(macd, on="token", how="left")
            .join(pattern_counts, on="token", how="left")
            .join(market_counts, on="token", how="left")
        )
        shown = table
        if table.height > MAX_LISTED_TOKENS:
            shown = table.sort("market_cap", descending=True, nulls_last=True).head(MAX_LISTED_TOKENS)
        headers = [
            "token",
            "symbol",
            "price",
            "24h %",
            "rank",
            "rsi14 1h",
            "rsi14 24h",
            "macd 24h",
            "patterns",
            "markets",
        ]
        rows = []
        for row in shown.iter_rows(named=True):
            rows.append(
                [
                    str(row["token"]),
                    str(row["symbol"] or "-"),
                    _format_price(row["current_price"]),
                    _format_number(row["price_change_percentage_24h"]),
                    _format_number(row["market_cap_rank"]),
                    _format_number(row.get("1h"), 1),
                    _format_number(row.get("24h"), 1),
                    str(row["macd_24h"] or "-"),
                    _format_number(row["patterns"] or 0),
                    _format_number(row["markets"]) if frames.markets.height else "-",
                ]
            )
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
        for r in rows:
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
        if table.height > shown.height:
            total_cap = table.get_column("market_cap").sum()
            lines.append(
                f"... and {table.height - shown.height} more tokens (the {shown.height} largest by market cap shown; "
                f"all {table.height}: market cap {_format_number(float(total_cap or 0), 0)}, "
                f"{frames.patterns.height} patterns, {frames.markets.height} markets)"
            )
    if frames.drift.height:
        lines.append(f"{frames.drift.height} values did not fit their type; see drift")
    return "\n".join(lines)


def failures(frames: Frames) -> str:
    """The failed requests, by kind and the first few, for stderr ("" when none failed)."""
    errors = frames.errors
    lines = []
    if errors.height:
        by_kind = errors.group_by("kind").agg(pl.len().alias("n")).sort("kind")
        kinds = ", ".join(f"{k} {n}" for k, n in by_kind.iter_rows())
        lines.append(f"failures by kind: {kinds}")
        said = _said_once(errors)
        lines.extend(f"  {message}" for message in said[:5])
        if len(said) > 5:
            lines.append(f"  ... {len(said) - 5} more in frames.errors (errors.parquet with --out)")
    # Notes from the data, not from the log's wording: a markets list shorter than its `total`,
    # and a body that named another token than the one asked for.
    sent = frames.markets.group_by("token").agg(pl.len().alias("sent"))
    incomplete = (
        frames.log.filter(pl.col("ok") & (pl.col("endpoint") == "markets") & pl.col("total").is_not_null())
        .join(sent, on="token", how="left")
        .filter(pl.col("total") > pl.col("sent").fill_null(0))
    )
    for row in incomplete.head(3).iter_rows(named=True):
        lines.append(
            f"note: {row['token']} markets: the service reports {row['total']} markets but sent {row['sent'] or 0}"
        )
    for row in frames.drift.filter(pl.col("field") == "data.id").head(3).iter_rows(named=True):
        lines.append(
            f"note: {row['token']}: the listing body is for {row['found']}; kept under {row['token']!r} (see drift)"
        )
    return "\n".join(lines)


def _said_once(errors: pl.DataFrame) -> "list[str]":
    """The failures' messages (each names its token and endpoint), a token's endpoints that failed
    alike said once: ``not found ... for token "x" (listing, markets): HTTP 404``."""
    said: "dict[tuple[str, str], list[str]]" = {}
    for row in errors.iter_rows(named=True):
        endpoint = f"({row['endpoint']})"
        # The message as it would read for any endpoint, to tell failures alike.
        alike = (row["token"], str(row["message"]).replace(endpoint, "(\x00)", 1))
        said.setdefault(alike, []).append(row["endpoint"])
    return [message.replace("\x00", ", ".join(endpoints), 1) for (_, message), endpoints in said.items()]
