"""What a point-in-time read covers: one frame, and optionally some tokens, intervals and names,
checked against the field catalogue and turned into filters that reach the Delta scans."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple, Union

import polars as pl

from .._core import FAMILY_INTERVALS, INTERVAL_MS, INTERVALS, empty_frames
from .._names import check_interval, did_you_mean, unknown_name

#: The frames whose rows belong to a candle, and the column that names a series in each.
CANDLE_FRAMES: Dict[str, str] = {"indicators": "indicator", "signals": "indicator", "patterns": "family"}
#: Every frame the point-in-time reads cover: the candle frames, and the snapshot per fetch.
FRAMES: Tuple[str, ...] = (*CANDLE_FRAMES, "snapshot")
#: The snapshot columns an as-of read gives unless told which.
DEFAULT_SNAPSHOT_COLUMNS: Tuple[str, ...] = ("current_price", "market_cap", "market_cap_rank", "total_volume")
#: The snapshot columns that are about the fetch, not a figure to read as of a moment.
_SNAPSHOT_KEYS = ("token", "fetched_at")

Names = Union[str, Iterable[str], None]


def _catalogue() -> Dict[str, Dict[str, List[str]]]:
    """frame -> name -> the intervals the service's reference gives it (`FAMILY_INTERVALS`),
    with the candle time (`ta_updated`) as it is: 4h has no candle time."""
    known: Dict[str, Dict[str, List[str]]] = {}
    for frame, name, intervals in FAMILY_INTERVALS:
        known.setdefault(frame, {})[name] = list(intervals)
    return known


CATALOGUE = _catalogue()
#: The intervals whose candles have a close time in `ta_updated`: the only ones a candle frame
#: can be read per candle in.
CANDLE_INTERVALS: Tuple[str, ...] = tuple(
    interval for interval in INTERVALS if interval in CATALOGUE["ta_updated"]["updated_at"]
)


def _texts(what: str, values: Names) -> Optional[Tuple[str, ...]]:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    try:
        texts = tuple(values)
    except TypeError:
        raise TypeError(f"{what} must be a str or a list of str, got {type(values).__name__}") from None
    for value in texts:
        if not isinstance(value, str):
            raise TypeError(f"{what} must be str, got {type(value).__name__}: {value!r}")
    if not texts:
        raise ValueError(f"{what} is empty: give at least one, or None for all")
    return tuple(dict.fromkeys(texts))


@dataclass(frozen=True)
class Scope:
    """A checked scope: ``None`` means every one."""

    frame: str
    tokens: Optional[Tuple[str, ...]] = None
    intervals: Optional[Tuple[str, ...]] = None
    names: Optional[Tuple[str, ...]] = None
    columns: Tuple[str, ...] = ()

    @property
    def name_column(self) -> str:
        return CANDLE_FRAMES[self.frame]

    @property
    def keys(self) -> List[str]:
        """What one series of the frame is keyed by (a candle adds its close)."""
        if self.frame == "snapshot":
            return ["token"]
        return ["token", "interval", self.name_column, *(["pattern"] if self.frame == "patterns" else [])]

    def filters(self, table: str) -> List[pl.Expr]:
        """The filters of this scope that apply to ``table``'s columns, for `scan_table(where=)`."""
        filters = []
        if self.tokens is not None:
            filters.append(pl.col("token").is_in(list(self.tokens)))
        if self.intervals is not None and table != "snapshot":
            filters.append(pl.col("interval").cast(pl.String).is_in(list(self.intervals)))
        if self.names is not None and table == self.frame:
            filters.append(pl.col(self.name_column).is_in(list(self.names)))
        return filters


def scope_of(
    frame: str,
    *,
    tokens: Names = None,
    intervals: Names = None,
    indicators: Names = None,
    families: Names = None,
    columns: Names = None,
) -> Scope:
    """Checks what a point-in-time read should cover; a name the catalogue does not know is a
    `ValueError` that names the known ones (and the closest)."""
    if not isinstance(frame, str) or frame not in FRAMES:
        hint = did_you_mean(frame, FRAMES) if isinstance(frame, str) else ""
        raise ValueError(f"frame must be one of {', '.join(FRAMES)}, got {frame!r}{hint}")
    token_ids = _texts("tokens", tokens)
    interval_names = _texts("intervals", intervals)
    if frame == "snapshot":
        for what, given in (("intervals", intervals), ("indicators", indicators), ("families", families)):
            if given is not None:
                raise ValueError(f"{what} do not apply to the snapshot (one row a fetch): choose its columns=")
        chosen = _texts("columns", columns) or DEFAULT_SNAPSHOT_COLUMNS
        known_columns = [name for name in empty_frames()["snapshot"].columns if name not in _SNAPSHOT_KEYS]
        for column in chosen:
            if column not in known_columns:
                raise unknown_name("snapshot column", column, known_columns)
        return Scope(frame, token_ids, None, None, chosen)
    if columns is not None:
        raise ValueError(f"columns= is for the snapshot; {frame} has its values in value")
    wrong = {"indicators": families, "signals": families, "patterns": indicators}[frame]
    if wrong is not None:
        right = "families=" if frame == "patterns" else "indicators="
        raise ValueError(f"{frame} are scoped by {right}, not {'indicators=' if frame == 'patterns' else 'families='}")
    names = _texts("families" if frame == "patterns" else "indicators", families if frame == "patterns" else indicators)
    known = CATALOGUE[frame]
    for name in names or ():
        if name not in known:
            raise unknown_name("indicator" if frame != "patterns" else "pattern family", name, list(known))
    offered = [interval for interval in INTERVALS if any(interval in known[name] for name in names or known)]
    for interval in interval_names or ():
        check_interval(interval)
        if interval not in offered:
            which = ", ".join(names) if names else frame
            raise ValueError(f"{which} has no {interval} values: the service gives it {', '.join(offered)}")
        if interval not in CANDLE_INTERVALS:
            raise ValueError(
                f"{interval} has no candle time (the service's ta_updated has none for {interval}), so {frame} cannot "
                f"be read per candle in it: read them with defilens.scan(root, {frame!r}); the candle intervals are "
                f"{', '.join(CANDLE_INTERVALS)}"
            )
    return Scope(frame, token_ids, interval_names, names)


def candle_times(interval: str = "interval", close: str = "candle_close") -> List[pl.Expr]:
    """``candle_open`` from ``candle_close`` and the interval's length in the catalogue."""
    length = pl.col(interval).cast(pl.String).replace_strict(INTERVAL_MS, return_dtype=pl.Int64)
    return [(pl.col(close) - pl.duration(milliseconds=length)).alias("candle_open")]
