"""An evaluation net of costs: the quantiles' returns, the long-short spread and the events' excess
less what trading them cost (`_costs`: read with the labels, at their notional or another), the
turnover of the top and bottom quantiles between decisions and its cost, and the capacity: the
notional at which the net spread (or the events' net excess) falls to zero, with the interval the
evaluation's own test gives it.

A long trade buys at the entry and sells at the exit; the short leg of the spread sells at the
entry and buys back at the exit, each side priced against the depth it takes. Each trade is
``notional`` at the entry and at the exit."""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import polars as pl

from ._costs import net_long, net_short, one_way
from ._inference import ewc_test, t_critical

#: The columns `forward_returns(notional=)` adds that an evaluation net of costs reads.
NEEDED = ("notional", "entry_cost", "exit_cost", "net_return", "entry_market", "exit_market")
#: The notionals a capacity is searched between (USD a trade): below, every cost is the spread;
#: above, no token's book says anything.
SMALLEST, LARGEST = 1.0, 1e12
#: Halvings of the search (on the logarithm of the notional: 2^-40 of twelve decades).
STEPS = 40
#: Points of the curve of net against notional `Evaluation.plot` draws, per horizon.
CURVE_POINTS = 25

Notional = Union[float, pl.Expr]


def has_costs(labels: pl.DataFrame) -> bool:
    """Whether the labels were priced net of costs (`forward_returns(notional=)` or ``costs=``)."""
    return all(column in labels.columns for column in NEEDED)


def is_fixed(labels: pl.DataFrame) -> bool:
    """Whether the labels' costs are a fixed share (``costs=0.001``): no notional, no book."""
    return labels["notional"].null_count() == labels.height


def _sides(notional: Optional[Notional]) -> Dict[str, pl.Expr]:
    """The one-way costs of each side at ``notional`` (None: the labels' fixed costs): a buy and
    a sale at the entry's book, and at the exit's."""
    if notional is None:
        return {
            "entry_buy": pl.col("entry_cost"),
            "entry_sell": pl.col("entry_cost"),
            "exit_buy": pl.col("exit_cost"),
            "exit_sell": pl.col("exit_cost"),
        }
    entry, exit_ = pl.col("entry_market").struct, pl.col("exit_market").struct
    return {
        "entry_buy": one_way(entry.field("half_spread"), entry.field("depth_usd_positive_two"), notional),
        "entry_sell": one_way(entry.field("half_spread"), entry.field("depth_usd_negative_two"), notional),
        "exit_buy": one_way(exit_.field("half_spread"), exit_.field("depth_usd_positive_two"), notional),
        "exit_sell": one_way(exit_.field("half_spread"), exit_.field("depth_usd_negative_two"), notional),
    }


def drags(notional: Optional[Notional]) -> Tuple[pl.Expr, pl.Expr]:
    """What costs take from a long trade's return and from a short one's (whose gross return is
    minus the forward return), at ``notional``."""
    side = _sides(notional)
    r = pl.col("forward_return")
    long = r - net_long(r, side["entry_buy"], side["exit_sell"])
    short = -r - net_short(r, side["entry_sell"], side["exit_buy"])
    return long, short


class Net:
    """The pricing of one evaluation's labels: at ``notional`` (the labels' own unless given), or
    their fixed costs."""

    def __init__(self, labels: pl.DataFrame, notional: Optional[float]) -> None:
        self.fixed = is_fixed(labels)
        if self.fixed and notional is not None:
            raise ValueError(
                "these labels carry a fixed cost (costs=): there is no book to price another notional with; label "
                "them with forward_returns(..., notional=) to read costs from the markets"
            )
        own = labels["notional"].drop_nulls().unique().to_list()
        self.notional: Optional[float] = notional if notional is not None else (own[0] if len(own) == 1 else None)
        shares = labels["entry_cost"].drop_nulls().unique().to_list() if self.fixed else []
        self.fixed_cost: Optional[float] = shares[0] if len(shares) == 1 else None
        #: The notional the labels are priced at: given, else each label's own.
        self.at: Optional[Notional] = None if self.fixed else (notional if notional is not None else pl.col("notional"))

    def beyond(self, rows: pl.DataFrame) -> int:
        """How many of ``rows`` trade more than the depth within 2% of the side they take (a buy
        at the entry or a sale at the exit), at the notional they are priced at."""
        if self.at is None:
            return 0
        entry, exit_ = pl.col("entry_market").struct, pl.col("exit_market").struct
        thinner = pl.min_horizontal(entry.field("depth_usd_positive_two"), exit_.field("depth_usd_negative_two"))
        return int(rows.select((self.at > thinner).fill_null(False).sum()).item())

    def with_drags(self, rows: pl.DataFrame) -> pl.DataFrame:
        long, short = drags(self.at)
        return rows.with_columns(long.alias("_drag_long"), short.alias("_drag_short"))


def _mean(values: pl.Series) -> Optional[float]:
    mean = values.mean()
    return None if mean is None else float(mean)  # type: ignore[arg-type]


# -- scores ----------------------------------------------------------------------------------------


Series = Callable[[float], List[float]]


def score_figures(
    net: Net, ranked: pl.DataFrame, by: str, quantiles: int, windows: float
) -> Tuple[Dict[str, Optional[float]], Series]:
    """For one horizon's ranked rows (with ``quantile``, ``excess`` and the drags): the spread
    net of costs, the turnover of the top and bottom and its cost, and the capacity; and the
    per-decision net spread at any notional (the capacity's series)."""
    top, bottom = ranked.filter(pl.col("quantile") == quantiles), ranked.filter(pl.col("quantile") == 1)
    drag_top, drag_bottom = _mean(top["_drag_long"]), _mean(bottom["_drag_short"])
    gross = _mean(top["excess"]), _mean(bottom["excess"])
    figures: Dict[str, Optional[float]] = {
        "net_top_minus_bottom": (
            gross[0] - gross[1] - drag_top - drag_bottom if None not in (*gross, drag_top, drag_bottom) else None  # type: ignore[operator]
        ),
        **_turnover(net, ranked, by, quantiles),
    }
    legs = ranked.filter(pl.col("quantile").is_in([1, quantiles])).with_columns(
        (pl.col("quantile") == quantiles).alias("_long")
    )

    def series(notional: float) -> List[float]:
        long, short = drags(notional)
        value = pl.when(pl.col("_long")).then(pl.col("excess") - long).otherwise(-pl.col("excess") - short)
        return (
            legs.with_columns(value.alias("_net"))
            .group_by(by, "_long")
            .agg(pl.col("_net").mean())
            .group_by(by)
            .agg(pl.col("_net").sum())
            .sort(by)["_net"]
            .to_list()
        )

    figures.update(_capacity(net, series, windows))
    return figures, series


def _turnover(net: Net, ranked: pl.DataFrame, by: str, quantiles: int) -> Dict[str, Optional[float]]:
    """Between consecutive decisions, the share of the top (and of the bottom) quantile's names
    that are new, and what rebalancing both legs cost per name held: each name entering or
    leaving a leg trades once, at its entry's book at the decision (or, gone from it, at the
    decision before)."""
    side = _sides(net.at)
    decisions = ranked.select(pl.col(by).unique().sort()).with_row_index("_k")
    held = (
        ranked.filter(pl.col("quantile").is_in([1, quantiles]))
        .join(decisions, on=by)
        .select("_k", "token", (pl.col("quantile") == quantiles).alias("_long"))
    )
    books = ranked.join(decisions, on=by).select(
        "_k", "token", side["entry_buy"].alias("_buy"), side["entry_sell"].alias("_sell")
    )
    previous = held.with_columns(pl.col("_k") + 1)
    entering = held.join(previous, on=["_k", "token", "_long"], how="anti").filter(pl.col("_k") > 0)
    leaving = previous.join(held, on=["_k", "token", "_long"], how="anti").filter(pl.col("_k") < decisions.height)
    prior = books.with_columns(pl.col("_k") + 1).rename({"_buy": "_buy_before", "_sell": "_sell_before"})
    # Entering the long leg or leaving the short one buys; the others sell.
    trades = pl.concat(
        [
            entering.with_columns(pl.col("_long").alias("_buys")),
            leaving.with_columns((~pl.col("_long")).alias("_buys")),
        ]
    )
    priced = (
        trades.join(books, on=["_k", "token"], how="left")
        .join(prior, on=["_k", "token"], how="left")
        .with_columns(
            pl.when(pl.col("_buys"))
            .then(pl.coalesce("_buy", "_buy_before"))
            .otherwise(pl.coalesce("_sell", "_sell_before"))
            .alias("_cost")
        )
    )
    sizes = held.group_by("_k", "_long").len()
    new = entering.group_by("_k", "_long").len().rename({"len": "_new"})
    shares = (
        sizes.filter(pl.col("_k") > 0)
        .join(new, on=["_k", "_long"], how="left")
        .with_columns((pl.col("_new").fill_null(0) / pl.col("len")).alias("_share"))
    )
    spent = priced.group_by("_k").agg(pl.col("_cost").sum())
    per_name = (
        sizes.filter(pl.col("_k") > 0)
        .group_by("_k")
        .agg(pl.col("len").sum())
        .join(spent, on="_k", how="left")
        .select((pl.col("_cost").fill_null(0.0) / pl.col("len")).alias("_per_name"))
    )
    return {
        "top_turnover": _mean(shares.filter(pl.col("_long"))["_share"]),
        "bottom_turnover": _mean(shares.filter(~pl.col("_long"))["_share"]),
        "turnover_cost": _mean(per_name["_per_name"]),
    }


# -- events ----------------------------------------------------------------------------------------


def event_figures(
    net: Net, one: pl.DataFrame, signal: str, by: str, windows: float
) -> Tuple[Dict[str, Optional[float]], Series]:
    """For one horizon's labelled rows (with ``excess`` and the drags): the events' excess net
    of costs and the capacity; and the capacity's series (the test's: each decision's summed net
    excess of its events) at any notional."""
    chosen = one.filter(pl.col(signal))
    excess, drag = _mean(chosen["excess"]), _mean(chosen["_drag_long"])
    decisions = one.select(pl.col(by).unique().sort())

    def series(notional: float) -> List[float]:
        long, _ = drags(notional)
        summed = chosen.group_by(by).agg((pl.col("excess") - long).sum().alias("_net"))
        return decisions.join(summed, on=by, how="left")["_net"].fill_null(0.0).to_list()

    figures = {
        "event_net_excess": excess - drag if excess is not None and drag is not None else None,
        **_capacity(net, series, windows),
    }
    return figures, series


# -- capacity --------------------------------------------------------------------------------------


def _capacity(net: Net, series: Series, windows: float) -> Dict[str, Optional[float]]:
    """The notional at which the mean of ``series`` (a per-decision net figure) falls to zero,
    and the 95% interval of the evaluation's test: the notionals at which the mean is no longer
    significantly above zero (``capacity_low``) and becomes significantly below it
    (``capacity_high``). 0 when even the smallest trade is all cost, inf when the largest is not;
    none for fixed costs (they do not grow with the trade)."""
    if net.fixed:
        return {"capacity": None, "capacity_low": None, "capacity_high": None}
    memo: Dict[float, Tuple[float, Optional[float], Optional[int]]] = {}

    def at(notional: float) -> Tuple[float, Optional[float], Optional[int]]:
        if notional not in memo:
            test = ewc_test(series(notional), windows)
            memo[notional] = (test.mean or 0.0, test.se, test.df)
        return memo[notional]

    def crossing(level: Callable[[float], Optional[float]]) -> Optional[float]:
        low, high = SMALLEST, LARGEST
        first, last = level(low), level(high)
        if first is None or last is None:
            return None
        if first <= 0:
            return 0.0
        if last > 0:
            return math.inf
        low_log, high_log = math.log10(low), math.log10(high)
        for _ in range(STEPS):
            middle = (low_log + high_log) / 2
            value = level(10**middle)
            if value is None:
                return None
            if value > 0:
                low_log = middle
            else:
                high_log = middle
        return 10 ** ((low_log + high_log) / 2)

    def bound(sign: float) -> Callable[[float], Optional[float]]:
        def level(notional: float) -> Optional[float]:
            mean, se, df = at(notional)
            return None if se is None or df is None else mean + sign * t_critical(df) * se

        return level

    return {
        "capacity": crossing(lambda notional: at(notional)[0]),
        "capacity_low": crossing(bound(-1.0)),
        "capacity_high": crossing(bound(+1.0)),
    }


def notional_grid(net: Net, capacities: Sequence[Optional[float]]) -> List[float]:
    """Where to draw net against notional: from two decades below the labels' notional and every
    finite capacity to one above, `CURVE_POINTS` apart on a log scale."""
    marks = [c for c in capacities if c is not None and 0 < c < math.inf]
    if net.notional is not None:
        marks.append(net.notional)
    if not marks:
        marks = [1e4]
    low = max(SMALLEST, 10 ** math.floor(math.log10(min(marks)) - 2))
    high = min(LARGEST, 10 ** math.ceil(math.log10(max(marks)) + 1))
    step = (math.log10(high) - math.log10(low)) / (CURVE_POINTS - 1)
    return [10 ** (math.log10(low) + i * step) for i in range(CURVE_POINTS)]


def curve(series: Series, windows: float, notionals: Sequence[float]) -> List[Dict[str, Optional[float]]]:
    """The mean of ``series`` at each notional, with its 95% interval (none where not judged)."""
    points = []
    for notional in notionals:
        test = ewc_test(series(notional), windows)
        half = t_critical(test.df) * test.se if test.df is not None and test.se is not None else None
        mean = test.mean
        points.append(
            {
                "notional": notional,
                "net": mean,
                "low": mean - half if mean is not None and half is not None else None,
                "high": mean + half if mean is not None and half is not None else None,
            }
        )
    return points
