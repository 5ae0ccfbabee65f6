"""An honest evaluation of a signal against its labels: events against all, excess over the same
decision's cross-section, rank IC per decision, and t-statistics that know forward returns
overlap (Newey-West), with a verdict that reads on one screen."""

from __future__ import annotations

import datetime as dt
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import polars as pl

from .._duration import format_duration
from .._exceptions import DefiLensWarning
from .._stack import stacklevel_outside
from ._labels import overlap_lags, spacing_of

#: |t| at or above this reads as evidence in the verdict (about 5% two-sided, for one test).
T_THRESHOLD = 2.0


def newey_west_t(values: Sequence[float], lags: int) -> float:
    """The t-statistic of the mean of ``values`` (a time series) with the Newey-West (Bartlett
    kernel) long-run variance over ``lags`` lags: what a mean of overlapping forward returns
    needs, since neighbours share most of their path. NaN for fewer than two values."""
    n = len(values)
    if n < 2:
        return math.nan
    mean = sum(values) / n
    errors = [value - mean for value in values]
    variance = sum(e * e for e in errors) / n
    for lag in range(1, min(lags, n - 1) + 1):
        weight = 1.0 - lag / (lags + 1.0)
        variance += 2.0 * weight * sum(errors[i] * errors[i - lag] for i in range(lag, n)) / n
    if variance <= 0.0:
        return math.nan if mean == 0.0 else math.copysign(math.inf, mean)
    return mean / math.sqrt(variance / n)


@dataclass
class Evaluation:
    """What `evaluate` found. ``print()`` it for the one-screen summary; the tables are frames:

    - ``summary``: one row per horizon (see `evaluate` for the columns);
    - ``ic``: the rank IC of each decision and horizon (scores only);
    - ``quantiles``: mean forward and excess return per score quantile and horizon (scores only);
    - ``events``: per horizon and ``event`` (true/false), count, hit rate, mean return and mean
      excess (events only);
    - ``missing``: labels left out, per horizon and reason.

    ``plot()`` draws the IC (or the events' excess) across horizons with ±2 standard errors, and
    the quantiles' excess returns."""

    signal: str
    kind: str  # "score" or "event"
    summary: pl.DataFrame
    ic: pl.DataFrame
    quantiles: pl.DataFrame
    events: pl.DataFrame
    missing: pl.DataFrame
    decisions: int
    tokens: int
    left_out: int

    @property
    def significant(self) -> bool:
        """Whether any horizon's t-statistic reaches ±2 (one test each: with many horizons or
        signals tried, expect some by chance)."""
        column = "t" if self.kind == "score" else "excess_t"
        values = [v for v in self.summary[column].to_list() if v is not None and not math.isnan(v)]
        return any(abs(v) >= T_THRESHOLD for v in values)

    @property
    def verdict(self) -> str:
        column, what = ("t", "mean IC") if self.kind == "score" else ("excess_t", "events' excess return")
        rows = self.summary.to_dicts()
        strong = [
            r for r in rows if r[column] is not None and not math.isnan(r[column]) and abs(r[column]) >= T_THRESHOLD
        ]
        if not strong:
            return f"no evidence: the {what} is within 2 standard errors of zero at every horizon"
        best = max(strong, key=lambda r: abs(r[column]))
        value = best["mean_ic"] if self.kind == "score" else best["event_excess"]
        sign = "positive" if value > 0 else "negative"
        return (
            f"{sign} {what} at {_horizon(best['horizon'])} (t {best[column]:+.2f}, Newey-West, {best['lags']} lag{'s' if best['lags'] != 1 else ''})"
            f"{' and other horizons' if len(strong) > 1 else ''}: test it on data it was not chosen on"
        )

    def __str__(self) -> str:
        lines = [
            f"evaluation of {self.signal!r} as {'a score' if self.kind == 'score' else 'an event'}: "
            f"{self.decisions:,} decisions, {self.tokens:,} tokens"
            + (f", {self.left_out:,} labels left out (see .missing)" if self.left_out else ""),
            "t: Newey-West over the decisions whose forward returns overlap (lags = horizon / decision spacing)",
            "",
        ]
        if self.kind == "score":
            header = (
                f"{'horizon':>8} {'decisions':>9} {'mean IC':>8} {'IC>0':>5} {'t':>6} {'lags':>4} {'top-bottom':>10}"
            )
            lines.append(header)
            for r in self.summary.to_dicts():
                lines.append(
                    f"{_horizon(r['horizon']):>8} {r['decisions']:>9,} {_num(r['mean_ic'], '+.4f'):>8} "
                    f"{_pct(r['ic_positive']):>5} {_num(r['t'], '+.2f'):>6} {r['lags']:>4} "
                    f"{_pct(r['top_minus_bottom'], 2):>10}"
                )
        else:
            header = (
                f"{'horizon':>8} {'events':>7} {'hit':>5} {'all hit':>7} {'mean':>8} {'all mean':>8} "
                f"{'excess':>8} {'t':>6} {'lags':>4}"
            )
            lines.append(header)
            for r in self.summary.to_dicts():
                lines.append(
                    f"{_horizon(r['horizon']):>8} {r['events']:>7,} {_pct(r['event_hit_rate']):>5} "
                    f"{_pct(r['all_hit_rate']):>7} {_pct(r['event_mean'], 2):>8} {_pct(r['all_mean'], 2):>8} "
                    f"{_pct(r['event_excess'], 2):>8} {_num(r['excess_t'], '+.2f'):>6} {r['lags']:>4}"
                )
        lines += ["", f"verdict: {self.verdict}"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.__str__()

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"

    def plot(self) -> Any:
        """A matplotlib Figure: the IC (or the events' mean excess return) at each horizon with
        ±2 Newey-West standard errors, and, for scores, each quantile's mean excess return."""
        import matplotlib.pyplot as plt

        rows = self.summary.to_dicts()
        labels = [_horizon(r["horizon"]) for r in rows]
        panels = 2 if self.kind == "score" else 1
        figure, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 3.6), squeeze=False)
        left = axes[0][0]
        if self.kind == "score":
            values = [r["mean_ic"] or 0.0 for r in rows]
            title, ylabel = "rank IC by horizon (±2 s.e., Newey-West)", "mean rank IC"
            errors = [_se(r["mean_ic"], r["t"]) for r in rows]
        else:
            values = [(r["event_excess"] or 0.0) * 100 for r in rows]
            title, ylabel = "events' excess return by horizon (±2 s.e.)", "mean excess return (%)"
            errors = [_se(r["event_excess"], r["excess_t"]) * 100 for r in rows]
        left.bar(labels, values, yerr=[2 * e for e in errors], color="#4C72B0", capsize=4)
        left.axhline(0.0, color="black", linewidth=0.8)
        left.set_title(title, fontsize=10)
        left.set_xlabel("horizon")
        left.set_ylabel(ylabel)
        if self.kind == "score":
            right = axes[0][1]
            quantile_count = int(self.quantiles["quantile"].max() or 0)  # type: ignore[arg-type]
            width = 0.8 / max(1, len(rows))
            for position, r in enumerate(rows):
                one = self.quantiles.filter(pl.col("horizon") == r["horizon"]).sort("quantile")
                xs = [q + (position - (len(rows) - 1) / 2) * width for q in one["quantile"].to_list()]
                right.bar(xs, [v * 100 for v in one["mean_excess"].to_list()], width=width, label=labels[position])
            right.axhline(0.0, color="black", linewidth=0.8)
            right.set_xticks(range(1, quantile_count + 1))
            right.set_title("excess return by score quantile (1 = lowest)", fontsize=10)
            right.set_xlabel("quantile")
            right.set_ylabel("mean excess return (%)")
            right.legend(title="horizon", fontsize=8)
        figure.suptitle(f"{self.signal}: {self.verdict.split(':')[0]}", fontsize=10)
        figure.tight_layout()
        return figure


def evaluate(
    labels: pl.DataFrame,
    signal: str = "value",
    *,
    by: str = "at",
    quantiles: int = 5,
    min_tokens: int = 3,
) -> Evaluation:
    """Evaluates a signal against its forward returns (the frame `forward_returns` gives).

    ``signal`` names a column: boolean for an event (is the token in the event at this
    decision?), numeric for a score (higher means a higher expected return). ``by`` is the
    decision time (default ``at``): the cross-section each decision compares.

    For every horizon, ``summary`` has ``decisions`` and ``observations`` and:

    - scores: ``mean_ic`` (the mean over decisions of the Spearman rank correlation of score and
      forward return across tokens), ``ic_std``, ``ic_positive`` (share of decisions with IC > 0),
      ``t`` and ``lags`` (Newey-West, the lags being the decisions a forward return overlaps),
      ``top_minus_bottom`` (the top quantile's mean excess return less the bottom's);
    - events: ``events``, ``event_hit_rate`` and ``all_hit_rate`` (share of positive forward
      returns), ``event_mean`` and ``all_mean``, ``event_excess`` (the events' mean return less
      the same decision's mean over all tokens) and ``excess_t``, ``lags``.

    Labels without a forward return (see ``missing``) are left out and counted. Decisions where a
    score is the same for every token (or fewer than ``min_tokens`` have labels) give no IC:
    they are left out with a warning, and an error if no decision is left.
    """
    if not isinstance(labels, pl.DataFrame):
        if isinstance(labels, pl.LazyFrame):
            labels = labels.collect()
        else:
            raise TypeError(
                f"labels must be a polars DataFrame (forward_returns gives one), got {type(labels).__name__}"
            )
    needed = ["token", by, "horizon", "forward_return", signal]
    missing_columns = [c for c in needed if c not in labels.columns]
    if missing_columns:
        hint = " (label the signals with defilens.forward_returns first)" if "forward_return" in missing_columns else ""
        raise ValueError(
            f"labels has no {', '.join(map(repr, missing_columns))} column{hint}; its columns are {', '.join(labels.columns)}"
        )
    dtype = labels.schema[signal]
    if dtype == pl.Boolean:
        kind = "event"
    elif dtype.is_numeric():
        kind = "score"
    else:
        raise TypeError(f"signal {signal!r} must be boolean (an event) or numeric (a score), got {dtype}")
    if not isinstance(quantiles, int) or isinstance(quantiles, bool) or quantiles < 2:
        raise ValueError(f"quantiles must be an integer of 2 or more, got {quantiles!r}")
    if not isinstance(min_tokens, int) or isinstance(min_tokens, bool) or min_tokens < 2:
        raise ValueError(f"min_tokens must be an integer of 2 or more, got {min_tokens!r}")
    if labels.height == 0:
        raise ValueError("labels is empty: no decision to evaluate (an empty universe?)")

    reason = pl.col("missing") if "missing" in labels.columns else pl.lit(None, pl.String)
    nulls = labels.filter(pl.col("forward_return").is_null() | pl.col(signal).is_null())
    missing = (
        nulls.with_columns(
            pl.when(pl.col("forward_return").is_null())
            .then(reason.fill_null("no forward return"))
            .otherwise(pl.lit("no signal"))
            .alias("reason")
        )
        .group_by("horizon", "reason")
        .agg(pl.len().alias("labels"))
        .sort("horizon", "reason")
    )
    rows = labels.filter(pl.col("forward_return").is_not_null() & pl.col(signal).is_not_null())
    if kind == "score":
        rows = rows.filter(pl.col(signal).cast(pl.Float64).is_finite())
    if rows.height == 0:
        raise ValueError(
            f"no label has both a forward return and a {signal!r}: {missing.height and missing.to_dicts()}"
        )
    rows = rows.with_columns(
        (pl.col("forward_return") - pl.col("forward_return").mean().over("horizon", by)).alias("excess")
    )
    spacing = spacing_of(rows[by])
    horizons = rows["horizon"].unique().sort().to_list()
    if kind == "score":
        summary, ic, quantile_table, left_out = _scores(rows, signal, by, horizons, spacing, quantiles, min_tokens)
        events = pl.DataFrame()
    else:
        summary, events = _events(rows, signal, by, horizons, spacing)
        ic = quantile_table = pl.DataFrame()
        left_out = 0
    return Evaluation(
        signal=signal,
        kind=kind,
        summary=summary,
        ic=ic,
        quantiles=quantile_table,
        events=events,
        missing=missing,
        decisions=rows[by].n_unique(),
        tokens=rows["token"].n_unique(),
        left_out=nulls.height + left_out,
    )


def _scores(
    rows: pl.DataFrame,
    signal: str,
    by: str,
    horizons: List[dt.timedelta],
    spacing: Optional[dt.timedelta],
    quantiles: int,
    min_tokens: int,
) -> Tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, int]:
    score = pl.col(signal).cast(pl.Float64)
    per_decision = rows.group_by("horizon", by).agg(
        pl.len().alias("tokens"),
        (score.max() > score.min()).alias("varies"),
        (pl.col("forward_return").max() > pl.col("forward_return").min()).alias("returns_vary"),
        pl.corr(score.rank("average"), pl.col("forward_return").rank("average")).alias("ic"),
    )
    usable = (pl.col("tokens") >= min_tokens) & pl.col("varies") & pl.col("returns_vary")
    dropped = per_decision.filter(~usable)
    ic = per_decision.filter(usable).select("horizon", by, "tokens", "ic").sort("horizon", by)
    if ic.height == 0:
        constant_scores = per_decision.filter(~pl.col("varies")).height
        which = f"{signal!r} is" if constant_scores == per_decision.height else "the forward returns are"
        raise ValueError(
            f"no decision has an IC: {which} the same for every token at every decision, or fewer than {min_tokens} "
            "tokens are labelled at each (an empty or tiny universe)"
        )
    if dropped.height:
        constant = dropped.filter(pl.col("tokens") >= min_tokens).height
        warnings.warn(
            f"{dropped.height:,} of {per_decision.height:,} decision-horizons give no IC: "
            f"{constant:,} with {signal!r} (or the returns) the same for every token, "
            f"{dropped.height - constant:,} with fewer than {min_tokens} tokens labelled",
            DefiLensWarning,
            stacklevel=stacklevel_outside(),
        )
    bucket = ((score.rank("ordinal").over("horizon", by) - 1) * quantiles // pl.len().over("horizon", by) + 1).alias(
        "quantile"
    )
    quantile_table = (
        rows.with_columns(bucket)
        .group_by("horizon", "quantile")
        .agg(
            pl.len().alias("labels"),
            pl.col("forward_return").mean().alias("mean_return"),
            pl.col("excess").mean().alias("mean_excess"),
        )
        .sort("horizon", "quantile")
    )

    def ranked(horizon: dt.timedelta, lags: int) -> Dict[str, Any]:
        values = ic.filter(pl.col("horizon") == horizon)["ic"].to_list()
        spread = quantile_table.filter(pl.col("horizon") == horizon)
        top = spread.filter(pl.col("quantile") == quantiles)["mean_excess"]
        bottom = spread.filter(pl.col("quantile") == 1)["mean_excess"]
        return {
            "decisions": len(values),
            "observations": int(rows.filter(pl.col("horizon") == horizon).height),
            "mean_ic": sum(values) / len(values) if values else None,
            "ic_std": float(pl.Series(values).std()) if len(values) > 1 else None,  # type: ignore[arg-type]
            "ic_positive": sum(v > 0 for v in values) / len(values) if values else None,
            "t": newey_west_t(values, lags) if values else None,
            "lags": lags,
            "top_minus_bottom": (top[0] - bottom[0]) if top.len() and bottom.len() else None,
        }

    summary = _by_horizon(horizons, spacing, ranked)
    return summary, ic, quantile_table, int(dropped.select(pl.col("tokens").sum()).item() or 0)


def _events(
    rows: pl.DataFrame, signal: str, by: str, horizons: List[dt.timedelta], spacing: Optional[dt.timedelta]
) -> Tuple[pl.DataFrame, pl.DataFrame]:
    events = (
        rows.group_by("horizon", pl.col(signal).alias("event"))
        .agg(
            pl.len().alias("labels"),
            (pl.col("forward_return") > 0).mean().alias("hit_rate"),
            pl.col("forward_return").mean().alias("mean_return"),
            pl.col("excess").mean().alias("mean_excess"),
        )
        .sort("horizon", "event")
    )

    def evented(horizon: dt.timedelta, lags: int) -> Dict[str, Any]:
        one = rows.filter(pl.col("horizon") == horizon)
        chosen = one.filter(pl.col(signal))
        series = chosen.group_by(by).agg(pl.col("excess").mean()).sort(by)["excess"].to_list()
        return {
            "decisions": one[by].n_unique(),
            "observations": one.height,
            "events": chosen.height,
            "event_hit_rate": float((chosen["forward_return"] > 0).mean()) if chosen.height else None,  # type: ignore[arg-type]
            "all_hit_rate": float((one["forward_return"] > 0).mean()),  # type: ignore[arg-type]
            "event_mean": float(chosen["forward_return"].mean()) if chosen.height else None,  # type: ignore[arg-type]
            "all_mean": float(one["forward_return"].mean()),  # type: ignore[arg-type]
            "event_excess": float(chosen["excess"].mean()) if chosen.height else None,  # type: ignore[arg-type]
            "excess_t": newey_west_t(series, lags) if len(series) > 1 else None,
            "lags": lags,
        }

    summary = _by_horizon(horizons, spacing, evented)
    if not summary["events"].sum():
        raise ValueError(f"{signal!r} is never true among the labelled decisions: there is no event to evaluate")
    return summary, events


def _by_horizon(
    horizons: List[dt.timedelta],
    spacing: Optional[dt.timedelta],
    summarize: Callable[[dt.timedelta, int], Dict[str, Any]],
) -> pl.DataFrame:
    """One summary row per horizon: ``summarize(horizon, lags)``, where ``lags`` is how many
    neighbouring decisions' labels overlap at that horizon (Newey-West's lag)."""
    rows = [{"horizon": horizon, **summarize(horizon, overlap_lags(horizon, spacing))} for horizon in horizons]
    return pl.DataFrame(rows, schema_overrides={"horizon": pl.Duration("us")})


def _horizon(value: Optional[dt.timedelta]) -> str:
    return "-" if value is None else format_duration(value)


def _num(value: Optional[float], spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _pct(value: Optional[float], digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * 100:+.{digits}f}%" if digits else f"{value * 100:.0f}%"


def _se(mean: Optional[float], t: Optional[float]) -> float:
    if mean is None or t is None or math.isnan(t) or t == 0 or math.isinf(t):
        return 0.0
    return abs(mean / t)
