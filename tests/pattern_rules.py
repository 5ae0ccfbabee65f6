"""A second implementation of the Sandbox's pattern rules, written from the rules as
`src/sandbox/market/patterns.rs` states them in its module documentation, to check the Rust
implementation on the same candles (tests/test_sandbox_market.py)."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

Candle = Tuple[float, float, float, float]  # open, high, low, close

SUMMARY = [
    "bullish_hammer",
    "bullish_inverted_hammer",
    "basic_doji",
    "bearish_engulfing",
    "bullish_engulfing",
    "morning_star",
    "evening_star",
    "three_white_soldiers",
]


def body(c: Candle) -> float:
    return abs(c[3] - c[0])


def rng(c: Candle) -> float:
    return c[1] - c[2]


def upper(c: Candle) -> float:
    return c[1] - max(c[0], c[3])


def lower(c: Candle) -> float:
    return min(c[0], c[3]) - c[2]


def white(c: Candle) -> bool:
    return c[3] >= c[0]


def averages(cs: Sequence[Candle], i: int) -> Optional[Tuple[float, float]]:
    if i < 10:
        return None
    before = cs[i - 10 : i]
    return sum(rng(c) for c in before) / 10, sum(body(c) for c in before) / 10


def trend(cs: Sequence[Candle], i: int) -> str:
    if i < 11:
        return ""
    mean = sum(c[3] for c in cs[i - 11 : i - 1]) / 10
    previous = cs[i - 1][3]
    return "up" if previous > mean else "down" if previous < mean else ""


def doji(cs: Sequence[Candle], i: int) -> bool:
    a = averages(cs, i)
    return a is not None and body(cs[i]) <= 0.1 * a[0]


def single(cs: Sequence[Candle], i: int) -> List[str]:
    a = averages(cs, i)
    if a is None:
        return []
    c, found = cs[i], []
    b, r = body(c), rng(c)
    t = trend(cs, i)
    if doji(cs, i):
        if r > 0 and upper(c) <= 0.1 * r and lower(c) >= 0.6 * r:
            found.append("dragonfly_doji")
        elif r > 0 and lower(c) <= 0.1 * r and upper(c) >= 0.6 * r:
            found.append("gravestone_doji")
        else:
            found.append("basic_doji")
    else:
        if lower(c) >= 2 * b and upper(c) <= b and t:
            found.append("bullish_hammer" if t == "down" else "bearish_hanging_man")
        if upper(c) >= 2 * b and lower(c) <= b and t:
            found.append("bullish_inverted_hammer" if t == "down" else "bearish_shooting_star")
    if r > 0 and b >= 0.9 * r and b >= a[1]:
        found.append("bullish_marubozu" if white(c) else "bearish_marubozu")
    return found


def engulfing(p: Candle, c: Candle) -> int:
    o1, c1, o, cl = p[0], p[3], c[0], c[3]
    if white(c) and not white(p) and ((cl >= o1 and o < c1) or (cl > o1 and o <= c1)):
        return 1
    if not white(c) and white(p) and ((o >= c1 and cl < o1) or (o > c1 and cl <= o1)):
        return -1
    return 0


def harami(cs: Sequence[Candle], i: int) -> int:
    a = averages(cs, i - 1)
    if a is None:
        return 0
    first, second = cs[i - 1], cs[i]
    top, bottom = max(first[0], first[3]), min(first[0], first[3])
    inside = max(second[0], second[3]) <= top and min(second[0], second[3]) >= bottom
    if body(first) < a[1] or body(second) > 0.5 * body(first) or not inside or body(second) == 0:
        return 0
    if not white(first) and white(second):
        return 1
    if white(first) and not white(second):
        return -1
    return 0


def double(cs: Sequence[Candle], i: int) -> List[str]:
    if i < 1:
        return []
    p, c, found = cs[i - 1], cs[i], []
    e = engulfing(p, c)
    if e:
        found.append("bullish_engulfing" if e > 0 else "bearish_engulfing")
    a = averages(cs, i - 1)
    if a is None:
        return found
    h = harami(cs, i)
    if h:
        found.append("bullish_harami" if h > 0 else "bearish_harami")
    t = trend(cs, i - 1)
    if t == "up" and white(p) and not white(c) and abs(c[1] - p[1]) <= 0.1 * a[0]:
        found.append("tweezer_top")
    if t == "down" and not white(p) and white(c) and abs(c[2] - p[2]) <= 0.1 * a[0]:
        found.append("tweezer_bottom")
    middle = (p[0] + p[3]) / 2
    if body(p) >= a[1]:
        if not white(p) and white(c) and c[0] <= p[3] and middle < c[3] < p[0]:
            found.append("piercing_line")
        if white(p) and not white(c) and c[0] >= p[3] and p[0] < c[3] < middle:
            found.append("dark_cloud_cover")
    return found


def triple(cs: Sequence[Candle], i: int) -> List[str]:
    if i < 2:
        return []
    a = averages(cs, i - 2)
    if a is None:
        return []
    first, second, third = cs[i - 2], cs[i - 1], cs[i]
    found = []
    middle = (first[0] + first[3]) / 2
    long_first, small_second = body(first) >= a[1], body(second) <= 0.3 * body(first)
    if long_first and small_second and not white(first) and white(third) and third[3] > middle:
        found.append("morning_star")
    if long_first and small_second and white(first) and not white(third) and third[3] < middle:
        found.append("evening_star")

    def soldier(c: Candle) -> bool:
        return white(c) and body(c) >= 0.5 * a[1] and upper(c) <= 0.3 * body(c)

    def crow(c: Candle) -> bool:
        return not white(c) and body(c) >= 0.5 * a[1] and lower(c) <= 0.3 * body(c)

    if all(map(soldier, (first, second, third))) and first[3] < second[3] < third[3]:
        found.append("three_white_soldiers")
    if all(map(crow, (first, second, third))) and first[3] > second[3] > third[3]:
        found.append("three_black_crows")
    h = harami(cs, i - 1)
    if h == 1 and white(third) and third[3] > first[0]:
        found.append("three_inside_up")
    if h == -1 and not white(third) and third[3] < first[0]:
        found.append("three_inside_down")
    return found


def slope(values: Sequence[float], at: Sequence[int]) -> float:
    n = len(at)
    mean_x = sum(at) / n
    mean_y = sum(values[j] for j in at) / n
    cov = var = 0.0
    for j in at:
        dx = j - mean_x
        cov += dx * (values[j] - mean_y)
        var += dx * dx
    return 0.0 if var == 0 else cov / var


def pivots(values: Sequence[float], beyond) -> List[int]:
    return [
        j
        for j in range(3, len(values) - 3)
        if all(beyond(values[j], values[k]) for k in range(j - 3, j))
        and all(not beyond(values[k], values[j]) for k in range(j + 1, j + 4))
    ]


def tops(values, opposite, piv, average_range, sign, out) -> None:
    top = sign > 0

    def height(j: int) -> float:
        return sign * values[j]

    n = len(piv)
    if n >= 2:
        a, b = piv[-2], piv[-1]
        lowest = min(height(a), height(b))
        valley = min(sign * v for v in opposite[a : b + 1])
        if b - a >= 5 and abs(values[a] - values[b]) <= average_range and lowest - valley >= 3 * average_range:
            out["double_top_bottom"].append("double_top" if top else "double_bottom")
            out["chart"].append("Double Top" if top else "Double Bottom")
    if n >= 3:
        three = piv[-3:]
        mean = sum(values[j] for j in three) / 3
        if three[2] - three[0] >= 10 and all(abs(values[j] - mean) <= 0.25 * average_range for j in three):
            out["multiple_top_bottom"].append("triple_top" if top else "triple_bottom")
        left, head, right = (height(j) for j in three)
        if head - max(left, right) >= 3 * average_range and abs(left - right) <= 1.5 * average_range:
            out["head_shoulder"].append("head_and_shoulders" if top else "inverse_head_and_shoulders")
            if top:
                out["chart"].append("Head and Shoulders")
    if n >= 4:
        extreme = max(height(j) for j in piv)
        if sum(1 for j in piv if extreme - height(j) <= 0.25 * average_range) >= 4:
            out["multiple_top_bottom"].append("multiple_top" if top else "multiple_bottom")


def chart(cs: Sequence[Candle], out: Dict[str, List[str]]) -> None:
    if len(cs) < 60:
        return
    w = cs[-60:]
    mean_close = sum(c[3] for c in w) / 60
    highs, lows = [c[1] for c in w], [c[2] for c in w]
    average_range = sum(rng(c) for c in w) / 60
    peaks = pivots(highs, lambda a, b: a > b)
    troughs = pivots(lows, lambda a, b: a < b)
    tops(highs, lows, peaks, average_range, 1.0, out)
    tops(lows, highs, troughs, average_range, -1.0, out)
    if len(peaks) < 2 or len(troughs) < 2:
        return
    v = sum(rng(c) / c[3] for c in w) / 60
    hs, ls = slope(highs, peaks) / mean_close, slope(lows, troughs) / mean_close
    th = v / 20

    def rising(s: float) -> bool:
        return s > th

    def falling(s: float) -> bool:
        return s < -th

    def flat(s: float) -> bool:
        return not rising(s) and not falling(s)

    if abs(hs - ls) <= th / 2:
        if rising(hs) and rising(ls):
            out["channel"].append("ascending_channel")
            out["chart"].append("Channel Up")
        elif falling(hs) and falling(ls):
            out["channel"].append("descending_channel")
            out["chart"].append("Channel Down")
        elif flat(hs) and flat(ls):
            out["channel"].append("horizontal_channel")
    if flat(hs) and rising(ls):
        out["triangle"].append("ascending_triangle")
        out["chart"].append("Ascending Triangle")
    elif falling(hs) and flat(ls):
        out["triangle"].append("descending_triangle")
        out["chart"].append("Descending Triangle")
    elif falling(hs) and rising(ls):
        out["triangle"].append("symmetrical_triangle")
        out["chart"].append("Symmetrical Triangle")
    if rising(hs) and rising(ls) and ls - hs > th / 2:
        out["wedge"].append("rising_wedge")
        out["chart"].append("Wedge Up")
    elif falling(hs) and falling(ls) and ls - hs > th / 2:
        out["wedge"].append("falling_wedge")
        out["chart"].append("Wedge Down")


def detect(cs: Sequence[Candle]) -> Dict[str, List[str]]:
    """The pattern lists of one series, keyed by the listing's field prefixes."""
    last = len(cs) - 1
    out: Dict[str, List[str]] = {
        key: []
        for key in (
            "chart",
            "triangle",
            "head_shoulder",
            "multiple_top_bottom",
            "double_top_bottom",
            "wedge",
            "channel",
        )
    }
    out["single"], out["double"], out["triple"] = single(cs, last), double(cs, last), triple(cs, last)
    summary: List[str] = []
    for end in range(max(0, last - 29), last + 1):
        for name in single(cs, end) + double(cs, end) + triple(cs, end):
            if name in SUMMARY and name not in summary:
                summary.append(name)
    out["summary"] = summary
    chart(cs, out)
    return out
