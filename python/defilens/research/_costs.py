"""What a trade costs at a moment, from what the history's markets fetches knew then: the cost
model of a study net of costs.

One way, as a share of the notional N traded on one side:

    cost = half_spread + (BAND / 2) * N / depth

- ``half_spread``: the markets endpoint gives no quotes, so the spread is proxied by how far apart
  the venues' prices are: the volume-weighted mean absolute deviation of each pair's price from
  their volume-weighted mean. Arbitrage keeps a token's venues within about a spread of each
  other, and the dispersion widens where liquidity is thin (Makarov and Schoar 2020, "Trading and
  arbitrage in cryptocurrency markets", JFE 135(2)); one venue gives 0, a limit of the proxy.
- the impact: ``depth`` is the USD resting within 2% of the price on the side the trade takes
  (``depth_usd_positive_two`` for a buy, ``depth_usd_negative_two`` for a sale), summed over the
  token's pairs. A book filled evenly to 2% moves the price linearly as it is eaten (Kyle 1985's
  linear impact; Almgren and Chriss 2000's linear temporary impact), so a market order of N pays
  on average half the move it causes: 1% of N / depth. Split over venues to cost least, a trade
  takes from each in proportion to its depth (each venue's marginal cost is then the same), and
  the venues act as one book of their summed depth. Beyond the 2% the book is not known: the same
  density is assumed (``beyond_depth`` says so). A square-root law (Tóth et al. 2011) describes
  orders worked over hours and needs a daily volatility and volume; a market order against a
  known book within it is the linear case.

Every figure is read from the token's latest markets fetch at or before the moment, never a later
one."""

from __future__ import annotations

import math
import numbers
from typing import Any, List, Mapping, Optional, Sequence, Union

import polars as pl

from .._exceptions import HistoryError
from .._storage import PathLike, Root
from .._time import UTC_MS
from ..history import open_for_reading
from ._asof import Moments, moments_of
from ._markets import markets_fetches

#: The band the markets endpoint reports depth within: 2% either side of the price.
BAND = 0.02
#: The fields of a label's ``entry_market`` and ``exit_market``: what the cost was read from.
BOOK_FIELDS = ("fetched_at", "half_spread", "depth_usd_positive_two", "depth_usd_negative_two")
#: ``costs=`` for costs read from the markets history (the default with a ``notional``).
MARKETS = "markets"
#: The columns of `costs`, in order.
COST_COLUMNS = [
    "at",
    "token",
    "notional",
    "markets_at",
    "venues",
    "half_spread",
    "depth_usd_positive_two",
    "depth_usd_negative_two",
    "buy_cost",
    "sell_cost",
    "round_trip",
    "beyond_depth",
]


def one_way(half_spread: pl.Expr, depth: pl.Expr, notional: Union[float, pl.Expr]) -> pl.Expr:
    """The cost of trading ``notional`` against ``depth`` (USD within 2% on the side taken), as a
    share of the notional: the model's one formula. Null without a depth."""
    usable = pl.when(depth > 0).then(depth)
    return half_spread + (BAND / 2) * notional / usable


def net_long(gross: pl.Expr, entry_cost: pl.Expr, exit_cost: pl.Expr) -> pl.Expr:
    """A long trade's return net of its costs: bought at the entry price plus ``entry_cost``,
    sold at the exit price less ``exit_cost`` (both shares of the trade)."""
    return (1 + gross) * (1 - exit_cost) / (1 + entry_cost) - 1


def net_short(gross: pl.Expr, entry_cost: pl.Expr, exit_cost: pl.Expr) -> pl.Expr:
    """A short trade's return on its notional net of its costs (its gross return is ``-gross``):
    sold at the entry price less ``entry_cost``, bought back at the exit price plus ``exit_cost``."""
    return (1 - entry_cost) - (1 + gross) * (1 + exit_cost)


def notionals_of(value: Any, what: str = "notional") -> List[float]:
    """A positive, finite number of USD (or several), checked."""
    values = list(value) if isinstance(value, (list, tuple, pl.Series)) else [value]
    if not values:
        raise ValueError(f"{what} is empty: give a trade's size in USD, such as 10_000")
    for one in values:
        if isinstance(one, bool) or not isinstance(one, numbers.Real):
            raise TypeError(
                f"{what} must be a trade's size in USD (a number such as 10_000), got {type(one).__name__}: {one!r}"
            )
        if not math.isfinite(one) or float(one) <= 0:
            raise ValueError(f"{what} must be a positive, finite size in USD, got {one!r}")
    return [float(one) for one in values]


def fixed_cost_of(costs: Any, notional: Optional[float]) -> Optional[float]:
    """``costs=`` checked: None or `MARKETS` (read from the markets; needs a notional) give None,
    a number is a fixed one-way cost as a share of each trade."""
    if costs is None or (isinstance(costs, str) and costs == MARKETS):
        if costs == MARKETS and notional is None:
            raise ValueError(
                "costs='markets' needs notional=: the size in USD of each trade (the impact grows with it)"
            )
        return None
    if isinstance(costs, bool) or not isinstance(costs, numbers.Real):
        raise ValueError(
            f"costs must be 'markets' (read from the history's markets fetches) or a fixed one-way cost as a share "
            f"(0.001 for 10 basis points), got {costs!r}"
        )
    share = float(costs)
    if not math.isfinite(share) or not 0 <= share < 1:
        raise ValueError(
            f"costs must be a share of each trade from 0 to below 1 (0.001 for 10 basis points), got {costs!r}"
        )
    return share


def fetches_of(root: Root, tokens: Optional[Sequence[str]] = None) -> pl.DataFrame:
    """The history's markets fetches (`markets_fetches`), or a `HistoryError` that says how to
    get them when it has none."""
    fetches = markets_fetches(root, tokens)
    if fetches.height == 0:
        raise HistoryError(
            f"the history at {root.url!r} has no markets rows{' for those tokens' if tokens else ''}: costs are read "
            "from the markets endpoint; collect with markets=True (the default of collect and of defilens collect)"
        )
    return fetches


def books_at(fetches: pl.DataFrame, rows: pl.DataFrame, time: str) -> pl.Series:
    """Per row of ``rows`` (``token`` and ``time``), the token's latest markets fetch at or
    before it, as a struct of `BOOK_FIELDS` (null where there was none), in the rows' order."""
    keyed = rows.select("token", pl.col(time).cast(UTC_MS).alias("_time")).with_row_index("_row")
    found = (
        keyed.filter(pl.col("_time").is_not_null())
        .sort("_time")
        .join_asof(
            fetches.select("token", pl.col("fetched_at").alias("_fetch"), *BOOK_FIELDS[1:]),
            left_on="_time",
            right_on="_fetch",
            by="token",
            strategy="backward",
            check_sortedness=False,  # each token's fetches are sorted by time
        )
    )
    book = pl.when(pl.col("_fetch").is_not_null()).then(
        pl.struct(pl.col("_fetch").alias("fetched_at"), *BOOK_FIELDS[1:])
    )
    return keyed.join(found.select("_row", book.alias("book")), on="_row", how="left").sort("_row")["book"]


def costs(
    source: PathLike,
    at: Moments,
    notional: Union[float, Sequence[float]],
    *,
    tokens: Optional[Sequence[str]] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> pl.DataFrame:
    """What trading ``notional`` USD of each token cost at each moment in ``at``, from what was
    knowable then: the token's latest markets fetch at or before the moment, never a later one.

    One row per (``at``, ``token``, ``notional``) for the tokens with a markets fetch by then:
    ``markets_at`` (the fetch used), ``venues``, ``half_spread``, ``depth_usd_positive_two`` and
    ``depth_usd_negative_two`` (summed over the token's pairs), and the costs as shares of the
    notional: ``buy_cost``, ``sell_cost`` (one way), ``round_trip`` (their sum: bought and sold at
    that moment); ``beyond_depth`` when the notional exceeds a side's depth within 2% (the model
    then assumes the book goes on as densely). The model: a half-spread proxied by the dispersion
    of the venues' prices, plus a linear impact of 1% of the notional over the side's depth within
    2% (docs/research.md, "Net of costs", says why and where it stops holding).
    """
    moments = moments_of(at)
    sizes = notionals_of(notional)
    root = open_for_reading(source, storage_options)
    fetches = fetches_of(root, tokens)
    grid = moments.join(fetches.select("token").unique(), how="cross").sort("at")
    found = grid.join_asof(
        fetches.rename({"fetched_at": "markets_at"}),
        left_on="at",
        right_on="markets_at",
        by="token",
        strategy="backward",
        check_sortedness=False,  # each token's fetches are sorted by time
    ).filter(pl.col("markets_at").is_not_null())
    buy = one_way(pl.col("half_spread"), pl.col("depth_usd_positive_two"), pl.col("notional"))
    sell = one_way(pl.col("half_spread"), pl.col("depth_usd_negative_two"), pl.col("notional"))
    thinner = pl.min_horizontal(
        pl.col("depth_usd_positive_two").fill_null(0.0), pl.col("depth_usd_negative_two").fill_null(0.0)
    )
    return (
        found.join(pl.DataFrame({"notional": sizes}), how="cross")
        .with_columns(buy.alias("buy_cost"), sell.alias("sell_cost"))
        .with_columns(
            (pl.col("buy_cost") + pl.col("sell_cost")).alias("round_trip"),
            (pl.col("notional") > thinner).alias("beyond_depth"),
        )
        .select(COST_COLUMNS)
        .sort("at", "token", "notional")
    )
