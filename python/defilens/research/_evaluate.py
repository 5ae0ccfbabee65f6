"""An honest evaluation of a signal against its labels: events against all, excess over the same
decision's cross-section, rank IC per decision, and p-values that know forward returns overlap and
histories are short (`_inference`), corrected for the horizons tested and, when the history keeps
a journal, for the signals tried on it; with a verdict that reads on one screen."""

from __future__ import annotations

import datetime as dt
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import polars as pl

from .._duration import format_duration
from .._exceptions import DefiLensWarning
from .._stack import stacklevel_outside
from .._storage import PathLike
from ._costs import notionals_of
from ._episodes import entered, episode_gap_of, episode_table, episodes_of
from ._inference import ALPHA, MIN_DF, Inference, ewc_test, holm, t_critical
from ._journal import fingerprint, record
from ._net import Net, Series, curve, event_figures, has_costs, notional_grid, score_figures

#: Why a label is left out of the evaluation besides its own ``missing`` reason (counted in ``missing``).
NO_SIGNAL = "no signal"  # the signal is null
NOT_FINITE = "score not finite"  # NaN or infinite
SAME_SCORE = "same score for every token"  # a decision whose scores do not vary: no ranking
SAME_RETURN = "same return for every token"  # a decision whose returns do not vary: no IC
FEW_TOKENS = "too few tokens"  # fewer than min_tokens labelled at the decision

#: How the printed summary and the docs name the test.
METHOD = "t: mean over decisions / its equal-weighted cosine s.e.; p: Student's t, df (LLSW 2018); Holm over horizons"


def spacing_of(times: pl.Series) -> Optional[dt.timedelta]:
    """The median spacing of distinct decision times (None for a single one)."""
    distinct = times.unique().sort()
    if distinct.len() < 2:
        return None
    median = distinct.diff().drop_nulls().median()
    assert isinstance(median, dt.timedelta)
    return median


def independent_windows(decisions: int, spacing: Optional[dt.timedelta], horizon: dt.timedelta) -> float:
    """How many non-overlapping horizons the decisions span: the independent observations a
    mean of overlapping forward returns has."""
    if spacing is None or decisions < 2:
        return float(min(decisions, 1))
    return decisions * spacing.total_seconds() / horizon.total_seconds()


@dataclass
class Evaluation:
    """What `evaluate` found. ``print()`` it for the one-screen summary; the tables are frames:

    - ``summary``: one row per horizon (see `evaluate` for the columns);
    - ``ic``: the rank IC of each decision and horizon (scores only);
    - ``quantiles``: mean forward and excess return per score quantile and horizon (scores only);
    - ``events``: per horizon and ``event`` (true/false), count, hit rate, mean return and mean
      excess (events only);
    - ``episodes``: per episode (a token's events within ``episode_gap`` of each other), its
      ``episode`` number, ``token``, ``start``, ``end`` and ``events`` (events only);
    - ``net``: labels priced net of costs, the net spread (scores) or the events' net excess per
      horizon at each of a range of notionals, with its 95% interval (``horizon``,
      ``notional``, ``net``, ``low``, ``high``): the curve ``plot()`` draws;
    - ``missing``: labels left out, per horizon and reason.

    ``p_value`` is the smallest p over the horizons after Holm's correction; ``tries`` the
    signals evaluated on the history so far (with ``history=``), and ``p_tries`` that p after
    Bonferroni's correction over them; ``significant`` compares the last of these with 5%.
    ``plot()`` draws the IC (or the events' excess) across horizons with 95% intervals, and the
    quantiles' excess returns."""

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
    tries: Optional[int] = None
    episodes: pl.DataFrame = field(default_factory=pl.DataFrame)
    episode_gap: Optional[dt.timedelta] = None
    #: The USD a trade the net figures are priced at (None: gross only, or fixed costs).
    notional: Optional[float] = None
    #: How the labels were priced: None (gross), "markets" or "fixed".
    costs: Optional[str] = None
    net: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: Trades (labels evaluated, priced from the markets) larger than their token's depth within
    #: 2% on a side they take: their cost extrapolates the book.
    beyond_depth: int = 0
    #: The one-way cost a trade of labels priced with a fixed cost (``costs=0.001``).
    fixed_cost: Optional[float] = None

    @property
    def p_value(self) -> Optional[float]:
        """The family's p-value: the smallest Holm-adjusted p over the horizons judged (None when
        none could be)."""
        judged = [p for p in self.summary["p_holm"].to_list() if p is not None]
        return min(judged) if judged else None

    @property
    def p_tries(self) -> Optional[float]:
        """`p_value` corrected for the signals tried on the history (Bonferroni), when known."""
        if self.p_value is None or not self.tries:
            return None
        return min(1.0, self.p_value * self.tries)

    @property
    def significant(self) -> bool:
        """Whether the family's p-value, corrected for the signals tried when the history's
        journal counts them, is below 5%."""
        p = self.p_tries if self.p_tries is not None else self.p_value
        return p is not None and p < ALPHA

    @property
    def verdict(self) -> str:
        what = "mean IC" if self.kind == "score" else "events' excess return"
        rows = self.summary.to_dicts()
        unjudged = [r for r in rows if r["p_value"] is None]
        too_few = ", ".join(f"{_horizon(r['horizon'])} has {_windows(r['windows'])}" for r in unjudged)
        if self.decisions < 2:
            return "nothing to judge: one decision (a verdict needs decisions over several independent windows)"
        if len(unjudged) == len(rows):
            return (
                f"nothing to judge: too few independent windows at every horizon ({too_few}; a test needs "
                f"{2 * MIN_DF} or more): a longer history, or shorter horizons"
            )
        judged = [r for r in rows if r["p_value"] is not None]
        best = min(judged, key=lambda r: (r["p_holm"], r["p_value"]))
        horizons = f"Holm over {len(judged)} horizon{'s' if len(judged) != 1 else ''}"
        note = f"; not judged, too few independent windows: {too_few}" if unjudged else ""
        tries = (
            f"; {self.tries} signal{'s' if self.tries != 1 else ''} tried on this history: "
            f"{_p(self.p_tries)} after Bonferroni over them"
            if self.tries and self.tries > 1
            else ""
        )
        value = best["mean_ic"] if self.kind == "score" else best["event_excess"]
        sign = "positive" if value is not None and value > 0 else "negative"
        episodes = (
            f"; over its {best['episodes']:,} episodes t {_num(best['episode_t'], '+.2f')}, p {_p(best['episode_p'])}"
            if self.kind == "event"
            else ""
        )
        finding = (
            f"{sign} {what} at {_horizon(best['horizon'])} (t {best['t']:+.2f}, {best['df']} df, p {_p(best['p_value'])}; "
            f"{_p(best['p_holm'])} after {horizons}{tries}{episodes})"
        )
        if self.significant:
            return f"{finding}: test it on data it was not chosen on{note}"
        if best["p_holm"] < ALPHA:
            return f"no evidence once the signals tried are counted: {finding}{note}"
        return (
            f"no evidence: the smallest p is {_p(best['p_value'])} ({_horizon(best['horizon'])}), "
            f"{_p(best['p_holm'])} after {horizons}{tries}{note}"
        )

    def _headline(self) -> str:
        """The verdict in a few words (a plot's title): its finding and the p it rests on."""
        finding = self.verdict.split(":")[0].split(" (")[0]
        p = self.p_tries if self.p_tries is not None else self.p_value
        if p is None:
            return finding
        after = f"after Holm and {self.tries} signals tried" if self.tries and self.tries > 1 else "after Holm"
        return f"{finding} (p {_p(p)} {after})"

    def __str__(self) -> str:
        lines = [
            f"evaluation of {self.signal!r} as {'a score' if self.kind == 'score' else 'an event'}: "
            f"{self.decisions:,} decisions, {self.tokens:,} tokens"
            + (f", {self.left_out:,} labels left out (see .missing)" if self.left_out else ""),
            METHOD,
            "",
        ]
        if self.kind == "score":
            lines.append(
                f"{'horizon':>8} {'decisions':>9} {'windows':>7} {'mean IC':>8} {'IC>0':>5} {'t':>6} {'df':>3} "
                f"{'p':>6} {'p Holm':>6} {'top-bottom':>10}"
            )
            for r in self.summary.to_dicts():
                lines.append(
                    f"{_horizon(r['horizon']):>8} {r['decisions']:>9,} {_windows(r['windows']):>7} "
                    f"{_num(r['mean_ic'], '+.4f'):>8} {_pct(r['ic_positive']):>5} {_num(r['t'], '+.2f'):>6} "
                    f"{r['df'] if r['df'] is not None else '-':>3} {_p(r['p_value']):>6} {_p(r['p_holm']):>6} "
                    f"{_pct(r['top_minus_bottom'], 2):>10}"
                )
        else:
            lines.append(
                f"{'horizon':>8} {'events':>7} {'episodes':>8} {'windows':>7} {'hit':>5} {'all hit':>7} {'mean':>8} "
                f"{'all mean':>8} {'excess':>8} {'t':>6} {'df':>3} {'p':>6} {'p Holm':>6} {'ep. t':>6} {'ep. p':>6}"
            )
            for r in self.summary.to_dicts():
                lines.append(
                    f"{_horizon(r['horizon']):>8} {r['events']:>7,} {r['episodes']:>8,} {_windows(r['windows']):>7} "
                    f"{_pct(r['event_hit_rate']):>5} {_pct(r['all_hit_rate']):>7} {_pct(r['event_mean'], 2):>8} "
                    f"{_pct(r['all_mean'], 2):>8} {_pct(r['event_excess'], 2):>8} {_num(r['t'], '+.2f'):>6} "
                    f"{r['df'] if r['df'] is not None else '-':>3} {_p(r['p_value']):>6} {_p(r['p_holm']):>6} "
                    f"{_num(r['episode_t'], '+.2f'):>6} {_p(r['episode_p']):>6}"
                )
            gap = _horizon(self.episode_gap) if self.episode_gap else "the same decision"
            lines.append(
                f"episodes of one token's events within {gap} of each other, each entered at its first priced event "
                f"and tested once: {self.episodes.height:,} in all"
            )
        lines += self._net_lines()
        lines += ["", f"verdict: {self.verdict}"]
        return "\n".join(lines)

    def _plot_net(self, axis: Any, rows: List[Dict[str, Any]], labels: List[str]) -> None:
        """Net against notional, per horizon, with its 95% band and the capacity marked."""
        for r, label in zip(rows, labels, strict=True):
            one = self.net.filter(pl.col("horizon") == r["horizon"]).sort("notional")
            if one.is_empty():
                continue
            x = one["notional"].to_list()
            (line,) = axis.plot(x, [v * 100 if v is not None else None for v in one["net"].to_list()], label=label)
            if one["low"].null_count() == 0:
                axis.fill_between(
                    x,
                    [v * 100 for v in one["low"].to_list()],
                    [v * 100 for v in one["high"].to_list()],
                    color=line.get_color(),
                    alpha=0.15,
                    linewidth=0,
                )
            capacity = r.get("capacity")
            if capacity is not None and 0 < capacity < math.inf:
                axis.plot([capacity], [0.0], marker="o", color=line.get_color())
        axis.axhline(0.0, color="black", linewidth=0.8)
        # Far beyond the capacity costs grow without bound: show the range around zero.
        best = max((v for v in self.net["net"].to_list() if v is not None), default=0.0) * 100
        if best > 0:
            axis.set_ylim(-1.5 * best, 1.3 * best)
        axis.set_xscale("log")
        what = "top-minus-bottom" if self.kind == "score" else "events' excess"
        axis.set_title(f"net {what} by trade size (95% interval; o: capacity)", fontsize=10)
        axis.set_xlabel("notional a trade (USD)")
        axis.set_ylabel("net return (%)")
        axis.legend(title="horizon", fontsize=8)

    def _net_lines(self) -> List[str]:
        """The block net of costs, when the labels were priced."""
        if self.costs is None:
            return []
        if self.costs == "fixed":
            head = (
                f"net of a fixed cost of {_pct(self.fixed_cost, 2)} a trade each way (costs=): no capacity, a fixed "
                "cost does not grow with the trade"
            )
        else:
            head = (
                f"net of costs at {_usd(self.notional)} a trade (read from the markets history: half-spread from the "
                "venues' price dispersion, impact within their depth at 2%); capacity: the notional a trade at which "
                "the net falls to zero"
            )
        lines = ["", head]
        score = self.kind == "score"
        if score:
            lines.append(
                f"{'horizon':>8} {'top-bottom':>10} {'net':>8} {'top turn.':>9} {'bot. turn.':>10} {'turn. cost':>10} "
                f"{'capacity (95% interval)':>32}"
            )
        else:
            lines.append(f"{'horizon':>8} {'excess':>8} {'net':>8} {'capacity (95% interval)':>32}")
        for r in self.summary.to_dicts():
            capacity = (
                "-" if self.costs == "fixed" else _capacity_text(r["capacity"], r["capacity_low"], r["capacity_high"])
            )
            if score:
                lines.append(
                    f"{_horizon(r['horizon']):>8} {_pct(r['top_minus_bottom'], 2):>10} {_pct(r['net_top_minus_bottom'], 2):>8} "
                    f"{_pct(r['top_turnover']):>9} {_pct(r['bottom_turnover']):>10} {_pct(r['turnover_cost'], 2):>10} "
                    f"{capacity:>32}"
                )
            else:
                lines.append(
                    f"{_horizon(r['horizon']):>8} {_pct(r['event_excess'], 2):>8} {_pct(r['event_net_excess'], 2):>8} "
                    f"{capacity:>32}"
                )
        if self.beyond_depth:
            lines.append(
                f"{self.beyond_depth:,} trades exceed their token's depth within 2% at this size (their cost extrapolates "
                "the book): a universe with where=pl.col('depth_usd_negative_two') > ... keeps tokens that can take them"
            )
        return lines

    def __repr__(self) -> str:
        return self.__str__()

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"

    def plot(self) -> Any:
        """A matplotlib Figure: the IC (or the events' mean excess return) at each horizon with its
        95% interval (Student's t with the test's degrees of freedom; none where too few
        independent windows), and, for scores, each quantile's mean excess return. Needs
        matplotlib (``pip install "defilens[notebook]"``)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError('Evaluation.plot() needs matplotlib: pip install "defilens[notebook]"') from None

        rows = self.summary.to_dicts()
        labels = [_horizon(r["horizon"]) for r in rows]
        curves = self.net.height > 0
        panels = (2 if self.kind == "score" else 1) + curves
        figure, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 3.6), squeeze=False)
        left = axes[0][0]
        scale = 1.0 if self.kind == "score" else 100.0
        values = [(r["mean_ic" if self.kind == "score" else "event_excess"] or 0.0) * scale for r in rows]
        errors = [_half_width(r) * scale for r in rows]
        if self.kind == "score":
            title, ylabel = "rank IC by horizon (95% interval)", "mean rank IC"
        else:
            title, ylabel = "events' excess return by horizon (95% interval)", "mean excess return (%)"
        left.bar(labels, values, yerr=errors, color="#4C72B0", capsize=4)
        for position, r in enumerate(rows):
            if r["p_value"] is None:
                left.annotate("too few\nwindows", (position, 0.0), ha="center", va="bottom", fontsize=7, color="gray")
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
        if curves:
            self._plot_net(axes[0][panels - 1], rows, labels)
        figure.suptitle(f"{self.signal}: {self._headline()}", fontsize=10)
        figure.tight_layout()
        return figure


def evaluate(
    labels: pl.DataFrame,
    signal: str = "value",
    *,
    by: str = "at",
    quantiles: int = 5,
    min_tokens: int = 3,
    episode_gap: Optional[Any] = None,
    notional: Optional[float] = None,
    history: Optional[PathLike] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> Evaluation:
    """Evaluates a signal against its forward returns (the frame `forward_returns` gives).

    ``signal`` names a column: boolean for an event (is the token in the event at this
    decision?), numeric for a score (higher means a higher expected return). ``by`` is the
    decision time (default ``at``): the cross-section each decision compares.

    For every horizon, ``summary`` has ``decisions``, ``observations``, ``windows`` (how many
    non-overlapping horizons the decisions span: the independent observations) and:

    - scores: ``mean_ic`` (the mean over decisions of the Spearman rank correlation of score and
      forward return across tokens), ``ic_std``, ``ic_positive`` (share of decisions with IC > 0),
      ``top_minus_bottom`` (the top quantile's mean excess return less the bottom's);
    - events: ``events``, ``event_hit_rate`` and ``all_hit_rate`` (share of positive forward
      returns), ``event_mean`` and ``all_mean``, ``event_excess`` (the events' mean return less
      the same decision's mean over all tokens);
    - both: ``t``, ``df`` and ``p_value``, the test of the mean over decisions (of the IC, or of
      the events' excess) against zero with an equal-weighted cosine standard error and Student's
      t with ``df`` degrees of freedom, calibrated for overlapping returns on short histories
      (docs/research.md gives its measured false-positive rate); none where the horizon has too
      few independent windows to judge (under four); ``p_holm`` that p after Holm's correction
      over the horizons judged.

    Events are also grouped in episodes: the events of one token that follow each other within
    ``episode_gap`` (a duration; default the decisions' spacing, so that events at consecutive
    decisions are one episode) count as one, entered at its first event with a forward return.
    ``summary`` adds ``episodes`` (those entered at the horizon), ``episode_excess`` (their mean
    excess return), and ``episode_t`` and ``episode_p``: the same test over each decision's summed
    excess of the episodes entered at it; ``episodes`` lists them.

    Labels priced net of costs (`forward_returns(..., notional=)`) are evaluated net too, at their
    notional or at ``notional`` (USD a trade; costs read again from the books the labels carry):
    ``quantiles`` adds ``mean_net_return`` (each quantile bought and sold, net); scores' summary
    adds ``net_top_minus_bottom`` (the top bought, the bottom sold short, each side against the
    depth it takes), ``top_turnover`` and ``bottom_turnover`` (the share of a leg's names new at
    each decision) and ``turnover_cost`` (rebalancing both legs at each decision, per name held:
    each name entering or leaving trades once); events' adds ``event_net_excess``; both add
    ``capacity``, the notional a trade at which the net spread (or the events' net excess) falls
    to zero, and ``capacity_low`` and ``capacity_high``, where the test above stops finding it
    above zero and starts finding it below (0 when even a $1 trade is all cost, inf when
    $10^12 is not; none for fixed costs or a horizon not judged).

    ``history`` (the history's path) records the evaluation in the history's journal (a small
    Delta table under the root; `journal` reads it) and counts the distinct signals evaluated
    there: the verdict then corrects its p-value for them too (Bonferroni).

    Labels without a forward return, or whose signal is null, NaN or infinite, are left out and
    counted in ``missing``, and so are decisions where the score is the same for every token (no
    ranking: left out of the IC and the quantiles) or fewer than ``min_tokens`` are labelled; a
    warning counts the decisions left out, an error if none is left. Ties share a quantile
    (average ranks), so nothing depends on the rows' order.
    """
    labels = _collected(labels)
    kind = _kind_of(labels, signal, by)
    _check_sizes(labels, quantiles, min_tokens)
    net = _net_of(labels, notional)
    if kind == "score" and episode_gap is not None:
        raise ValueError(f"episodes group events: {signal!r} is a score (give a boolean signal, or no episode_gap)")
    gap = episode_gap_of(episode_gap, spacing_of(labels[by])) if kind == "event" else None
    rows, left = _usable(labels, signal, by, kind, net)
    horizons = rows["horizon"].unique().sort().to_list()
    evaluation = _evaluation(labels, rows, left, signal, kind, by, horizons, quantiles, min_tokens, gap, net)
    if history is not None:
        evaluation.tries = _recorded(history, storage_options, evaluation, labels, rows, by, horizons)
    return evaluation


def _collected(labels: Any) -> pl.DataFrame:
    """``labels`` as a DataFrame (a LazyFrame collected)."""
    if not isinstance(labels, pl.DataFrame):
        if isinstance(labels, pl.LazyFrame):
            labels = labels.collect()
        else:
            raise TypeError(
                f"labels must be a polars DataFrame (forward_returns gives one), got {type(labels).__name__}"
            )
    return labels


def _kind_of(labels: pl.DataFrame, signal: str, by: str) -> str:
    """``"event"`` for a boolean ``signal``, ``"score"`` for a numeric one, once the columns an
    evaluation reads are there."""
    needed = ["token", by, "horizon", "forward_return", signal]
    missing_columns = [c for c in needed if c not in labels.columns]
    if missing_columns:
        hint = " (label the signals with defilens.forward_returns first)" if "forward_return" in missing_columns else ""
        raise ValueError(
            f"labels has no {', '.join(map(repr, missing_columns))} column{hint}; its columns are {', '.join(labels.columns)}"
        )
    dtype = labels.schema[signal]
    if dtype == pl.Boolean:
        return "event"
    if dtype.is_numeric():
        return "score"
    raise TypeError(f"signal {signal!r} must be boolean (an event) or numeric (a score), got {dtype}")


def _check_sizes(labels: pl.DataFrame, quantiles: int, min_tokens: int) -> None:
    if not isinstance(quantiles, int) or isinstance(quantiles, bool) or quantiles < 2:
        raise ValueError(f"quantiles must be an integer of 2 or more, got {quantiles!r}")
    if not isinstance(min_tokens, int) or isinstance(min_tokens, bool) or min_tokens < 2:
        raise ValueError(f"min_tokens must be an integer of 2 or more, got {min_tokens!r}")
    if labels.height == 0:
        raise ValueError("labels is empty: no decision to evaluate (an empty universe?)")


def _net_of(labels: pl.DataFrame, notional: Optional[float]) -> Optional[Net]:
    """The labels' trades priced at ``notional`` (or the labels' own), None for gross labels."""
    priced = has_costs(labels)
    if notional is not None and not priced:
        raise ValueError(
            "notional= prices the labels' trades net of costs: label them with forward_returns(..., notional=) first, "
            "which reads the costs from the history's markets"
        )
    if notional is not None:
        notional = notionals_of(notional)[0]
    return Net(labels, notional) if priced else None


def _usable(
    labels: pl.DataFrame, signal: str, by: str, kind: str, net: Optional[Net]
) -> Tuple[pl.DataFrame, pl.DataFrame]:
    """The labels evaluated, with their ``excess`` over the decision's mean (and the costs' drags
    when priced), and the ones left out (``horizon``, ``reason``)."""
    value = pl.col(signal) if kind == "event" else pl.col(signal).cast(pl.Float64)
    reason = pl.col("missing") if "missing" in labels.columns else pl.lit(None, pl.String)
    why = (
        pl.when(pl.col("forward_return").is_null())
        .then(reason.fill_null("no forward return"))
        .when(value.is_null())
        .then(pl.lit(NO_SIGNAL))
    )
    if kind == "score":
        why = why.when(~value.is_finite()).then(pl.lit(NOT_FINITE))
    marked = labels.with_columns(why.alias("_why"))
    rows = marked.filter(pl.col("_why").is_null()).drop("_why")
    left = marked.filter(pl.col("_why").is_not_null()).select("horizon", pl.col("_why").alias("reason"))
    if rows.height == 0:
        raise ValueError(f"no label has both a forward return and a usable {signal!r}: {_counts(left).to_dicts()}")
    rows = rows.with_columns(
        (pl.col("forward_return") - pl.col("forward_return").mean().over("horizon", by)).alias("excess")
    )
    if net is not None:
        rows = net.with_drags(rows)
    return rows, left


def _evaluation(
    labels: pl.DataFrame,
    rows: pl.DataFrame,
    left: pl.DataFrame,
    signal: str,
    kind: str,
    by: str,
    horizons: List[dt.timedelta],
    quantiles: int,
    min_tokens: int,
    gap: Optional[dt.timedelta],
    net: Optional[Net],
) -> Evaluation:
    """The tests of the signal's kind on the usable ``rows``, with what was ``left`` out."""
    series: Dict[dt.timedelta, Tuple[Series, float]] = {}
    spacing = spacing_of(rows[by])
    if kind == "score":
        summary, ic, quantile_table, dropped = _scores(
            rows, signal, by, horizons, spacing, quantiles, min_tokens, net, series
        )
        events = pl.DataFrame()
    else:
        grouped = episodes_of(labels, signal, by, gap)  # type: ignore[arg-type]
        summary, events = _events(rows, signal, by, horizons, spacing, grouped, net, series)
        ic = quantile_table = pl.DataFrame()
        dropped = pl.DataFrame(schema={"horizon": labels.schema["horizon"], "reason": pl.String})
    missing = _counts(pl.concat([left, dropped.cast(left.schema)]))  # type: ignore[arg-type]
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
        left_out=int(missing["labels"].sum() or 0),
        episodes=episode_table(grouped, by) if kind == "event" else pl.DataFrame(),
        episode_gap=gap,
        notional=net.notional if net is not None else None,
        beyond_depth=net.beyond(rows) if net is not None else 0,
        fixed_cost=net.fixed_cost if net is not None else None,
        costs=None if net is None else "fixed" if net.fixed else "markets",
        net=_curves(net, summary, series),
    )


def _recorded(
    history: PathLike,
    storage_options: Optional[Mapping[str, Any]],
    evaluation: Evaluation,
    labels: pl.DataFrame,
    rows: pl.DataFrame,
    by: str,
    horizons: List[dt.timedelta],
) -> Optional[int]:
    """Records the evaluation in the history's journal; the signals tried on it so far (None on a
    history cut by the look-ahead check)."""
    first = rows.filter(pl.col("horizon") == horizons[0])
    return record(
        history,
        storage_options,
        {
            "signal": evaluation.signal,
            "kind": evaluation.kind,
            "fingerprint": fingerprint(first, evaluation.signal, by),
            "horizons": ",".join(_horizon(h) for h in horizons),
            "decisions": evaluation.decisions,
            "tokens": evaluation.tokens,
            "p_value": evaluation.p_value,
            "universe": universe_of(labels),
        },
    )


def _curves(
    net: Optional[Net], summary: pl.DataFrame, series: Dict[dt.timedelta, Tuple[Series, float]]
) -> pl.DataFrame:
    """`Evaluation.net`: per horizon, net against notional over a range around the labels'
    notional and the capacities (none for gross labels or fixed costs)."""
    schema: Dict[str, pl.DataType] = {
        "horizon": pl.Duration("us"),
        "notional": pl.Float64(),
        "net": pl.Float64(),
        "low": pl.Float64(),
        "high": pl.Float64(),
    }
    if net is None or net.fixed or not series:
        return pl.DataFrame(schema=schema)
    grid = notional_grid(net, summary["capacity"].to_list())
    points = [
        {"horizon": horizon, **point}
        for horizon, (one, windows) in series.items()
        for point in curve(one, windows, grid)
    ]
    return pl.DataFrame(points, schema=schema).sort("horizon", "notional")


def universe_of(labels: pl.DataFrame) -> Optional[str]:
    """How the labels' tokens were chosen, as `forward_returns(universe=)` said (None: not said)."""
    if "universe" not in labels.columns or labels.schema["universe"] != pl.String:
        return None
    texts = sorted(text for text in labels["universe"].unique().to_list() if text)
    return " | ".join(texts) if texts else None


def _counts(left: pl.DataFrame) -> pl.DataFrame:
    return left.group_by("horizon", "reason").agg(pl.len().alias("labels")).sort("horizon", "reason")


def _scores(
    rows: pl.DataFrame,
    signal: str,
    by: str,
    horizons: List[dt.timedelta],
    spacing: Optional[dt.timedelta],
    quantiles: int,
    min_tokens: int,
    net: Optional[Net] = None,
    net_series: Optional[Dict[dt.timedelta, Tuple[Series, float]]] = None,
) -> Tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    score = pl.col(signal).cast(pl.Float64)
    per_decision = _per_decision(rows, score, by, min_tokens)
    ic, dropped = _ics(per_decision, signal, by, min_tokens)
    ranked_rows = rows.join(ic.select("horizon", by), on=["horizon", by], how="semi")
    bucketed, quantile_table = _quantiled(ranked_rows, score, by, quantiles, net)

    def ranked(horizon: dt.timedelta) -> Dict[str, Any]:
        values = ic.filter(pl.col("horizon") == horizon)["ic"].to_list()
        spread = quantile_table.filter(pl.col("horizon") == horizon)
        top = spread.filter(pl.col("quantile") == quantiles)["mean_excess"]
        bottom = spread.filter(pl.col("quantile") == 1)["mean_excess"]
        test = ewc_test(values, independent_windows(len(values), spacing, horizon))
        costs: Dict[str, Any] = {}
        if net is not None and net_series is not None:
            one = bucketed.filter(pl.col("horizon") == horizon)
            costs, series_of = score_figures(net, one, by, quantiles, test.windows)
            net_series[horizon] = (series_of, test.windows)
        return {
            "decisions": len(values),
            "observations": int(ranked_rows.filter(pl.col("horizon") == horizon).height),
            "windows": test.windows,
            "mean_ic": test.mean,
            "ic_std": float(pl.Series(values).std()) if len(values) > 1 else None,  # type: ignore[arg-type]
            "ic_positive": sum(v > 0 for v in values) / len(values) if values else None,
            "top_minus_bottom": (top[0] - bottom[0]) if top.len() and bottom.len() else None,
            **_tested(test),
            **costs,
        }

    summary = _by_horizon(horizons, ranked)
    lost = rows.join(dropped.select("horizon", by, "reason"), on=["horizon", by]).select("horizon", "reason")
    return summary, ic, quantile_table, lost


def _per_decision(rows: pl.DataFrame, score: pl.Expr, by: str, min_tokens: int) -> pl.DataFrame:
    """Per decision and horizon, its tokens, its rank IC, and the ``reason`` it has none (null
    when it has)."""
    per_decision = rows.group_by("horizon", by).agg(
        pl.len().alias("tokens"),
        (score.max() > score.min()).alias("varies"),
        (pl.col("forward_return").max() > pl.col("forward_return").min()).alias("returns_vary"),
        pl.corr(score.rank("average"), pl.col("forward_return").rank("average")).alias("ic"),
    )
    why = (
        pl.when(pl.col("tokens") < min_tokens)
        .then(pl.lit(FEW_TOKENS))
        .when(~pl.col("varies"))
        .then(pl.lit(SAME_SCORE))
        .when(~pl.col("returns_vary"))
        .then(pl.lit(SAME_RETURN))
    )
    return per_decision.with_columns(why.alias("reason"))


def _ics(per_decision: pl.DataFrame, signal: str, by: str, min_tokens: int) -> Tuple[pl.DataFrame, pl.DataFrame]:
    """The decisions with an IC (``horizon``, ``by``, ``tokens``, ``ic``) and those without; an
    error when none has one, a warning counting those left out."""
    dropped = per_decision.filter(pl.col("reason").is_not_null())
    ic = per_decision.filter(pl.col("reason").is_null()).select("horizon", by, "tokens", "ic").sort("horizon", by)
    if ic.height == 0:
        constant_scores = per_decision.filter(~pl.col("varies")).height
        which = f"{signal!r} is" if constant_scores == per_decision.height else "the forward returns are"
        raise ValueError(
            f"no decision has an IC: {which} the same for every token at every decision, or fewer than {min_tokens} "
            "tokens are labelled at each (an empty or tiny universe)"
        )
    if dropped.height:
        constant = dropped.filter(pl.col("reason") != FEW_TOKENS).height
        warnings.warn(
            f"{dropped.height:,} of {per_decision.height:,} decision-horizons give no IC and are left out (see "
            f".missing): {constant:,} with {signal!r} (or the returns) the same for every token, "
            f"{dropped.height - constant:,} with fewer than {min_tokens} tokens labelled",
            DefiLensWarning,
            stacklevel=stacklevel_outside(),
        )
    return ic, dropped


def _quantiled(
    ranked_rows: pl.DataFrame, score: pl.Expr, by: str, quantiles: int, net: Optional[Net]
) -> Tuple[pl.DataFrame, pl.DataFrame]:
    """The rows with their score's ``quantile`` at their decision, and the mean returns per
    horizon and quantile."""
    # Average ranks: tied scores share a quantile, whatever the rows' order.
    rank = score.rank("average").over("horizon", by)
    bucket = (((rank - 0.5) * quantiles / pl.len().over("horizon", by)).floor().cast(pl.Int64) + 1).alias("quantile")
    bucketed = ranked_rows.with_columns(bucket)
    quantile_table = (
        bucketed.group_by("horizon", "quantile")
        .agg(
            pl.len().alias("labels"),
            pl.col("forward_return").mean().alias("mean_return"),
            pl.col("excess").mean().alias("mean_excess"),
            *([(pl.col("forward_return") - pl.col("_drag_long")).mean().alias("mean_net_return")] if net else []),
        )
        .sort("horizon", "quantile")
    )
    return bucketed, quantile_table


def _events(
    rows: pl.DataFrame,
    signal: str,
    by: str,
    horizons: List[dt.timedelta],
    spacing: Optional[dt.timedelta],
    grouped: pl.DataFrame,
    net: Optional[Net] = None,
    net_series: Optional[Dict[dt.timedelta, Tuple[Series, float]]] = None,
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

    def evented(horizon: dt.timedelta) -> Dict[str, Any]:
        one = rows.filter(pl.col("horizon") == horizon)
        chosen = one.filter(pl.col(signal))
        # The test's series: each decision's summed excess over its events (0 without one), whose
        # mean is zero under the null; its sign is the events' mean excess's.
        series = (
            one.group_by(by)
            .agg(pl.when(pl.col(signal)).then(pl.col("excess")).otherwise(0.0).sum().alias("excess"))
            .sort(by)["excess"]
            .to_list()
        )
        windows = independent_windows(len(series), spacing, horizon)
        test = ewc_test(series, windows)
        # The same test with each episode once: at the decision it is entered at.
        firsts = entered(one, grouped, by)
        per_decision = dict(firsts.group_by(by).agg(pl.col("excess").sum()).iter_rows())
        decisions = one.select(pl.col(by).unique().sort())[by].to_list()
        episode_test = ewc_test([per_decision.get(at, 0.0) for at in decisions], windows)
        costs: Dict[str, Any] = {}
        if net is not None and net_series is not None:
            costs, series_of = event_figures(net, one, signal, by, windows)
            net_series[horizon] = (series_of, windows)
        return {
            "decisions": one[by].n_unique(),
            "observations": one.height,
            "windows": test.windows,
            "events": chosen.height,
            "event_hit_rate": float((chosen["forward_return"] > 0).mean()) if chosen.height else None,  # type: ignore[arg-type]
            "all_hit_rate": float((one["forward_return"] > 0).mean()),  # type: ignore[arg-type]
            "event_mean": float(chosen["forward_return"].mean()) if chosen.height else None,  # type: ignore[arg-type]
            "all_mean": float(one["forward_return"].mean()),  # type: ignore[arg-type]
            "event_excess": float(chosen["excess"].mean()) if chosen.height else None,  # type: ignore[arg-type]
            "episodes": firsts.height,
            "episode_excess": float(firsts["excess"].mean()) if firsts.height else None,  # type: ignore[arg-type]
            "episode_t": episode_test.t,
            "episode_p": episode_test.p_value,
            **_tested(test),
            **costs,
        }

    summary = _by_horizon(horizons, evented)
    if not summary["events"].sum():
        raise ValueError(f"{signal!r} is never true among the labelled decisions: there is no event to evaluate")
    return summary, events


#: The summary's columns net of costs (those of the signal's kind, for labels priced net).
NET_COLUMNS = (
    "net_top_minus_bottom",
    "top_turnover",
    "bottom_turnover",
    "turnover_cost",
    "event_net_excess",
    "capacity",
    "capacity_low",
    "capacity_high",
)


def _tested(test: Inference) -> Dict[str, Any]:
    return {"t": test.t, "df": test.df, "se": test.se, "p_value": test.p_value}


def _by_horizon(horizons: List[dt.timedelta], summarize: Callable[[dt.timedelta], Dict[str, Any]]) -> pl.DataFrame:
    """One summary row per horizon, with ``p_holm`` over the horizons judged."""
    rows = [{"horizon": horizon, **summarize(horizon)} for horizon in horizons]
    for row, adjusted in zip(rows, holm([row["p_value"] for row in rows]), strict=True):
        row["p_holm"] = adjusted
    frame = pl.DataFrame(
        rows,
        schema_overrides={
            "horizon": pl.Duration("us"),
            "windows": pl.Float64,
            "t": pl.Float64,
            "df": pl.Int64,
            "p_value": pl.Float64,
            "p_holm": pl.Float64,
            "se": pl.Float64,
            **({"episode_t": pl.Float64, "episode_p": pl.Float64} if "episodes" in rows[0] else {}),
            **{name: pl.Float64 for name in NET_COLUMNS if name in rows[0]},
        },
    )
    return frame


def _half_width(row: Mapping[str, Any]) -> float:
    if row["df"] is None or row["se"] is None:
        return 0.0
    return t_critical(row["df"]) * row["se"]


def _horizon(value: Optional[dt.timedelta]) -> str:
    return "-" if value is None else format_duration(value)


def _windows(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _num(value: Optional[float], spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _p(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _usd(value: Optional[float]) -> str:
    """A notional in USD, short: $840, $12.3k, $4.56M, $1.2B."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "over $1T"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"${value / scale:.3g}{suffix}"
    return f"${value:,.0f}"


def _capacity_text(point: Optional[float], low: Optional[float], high: Optional[float]) -> str:
    if point is None:
        return "-"
    if point == 0.0:
        return "$0 (all cost)"
    interval = f" ({_usd(low)} to {_usd(high)})" if low is not None and high is not None else " (not judged)"
    return f"{_usd(point)}{interval}"


def _pct(value: Optional[float], digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * 100:+.{digits}f}%" if digits else f"{value * 100:.0f}%"
