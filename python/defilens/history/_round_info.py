"""What a round's commit records in each table's commit info, as one typed value: the keys and
their formats are written here only, by the commit and by every reader of a table's log."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

#: The key of a round's commit info that holds the collector's settings, as JSON (read back by
#: `defilens.history.settings`).
SETTINGS_KEY = "defilens.settings"
#: The key of a round's commit info that holds what tells the round from any other (`Round.uid`).
ROUND_ID_KEY = "defilens.round_id"
_COLLECTOR_KEY = "defilens.collector"
_NUMBER_KEY = "defilens.round"
_START_KEY = "defilens.round_start"


@dataclass(frozen=True)
class RoundInfo:
    """What a round's commit records in each table's commit info (every engine's ``DESCRIBE
    HISTORY`` shows it): written by `commit_info`, read back by `of`, so the keys and their
    formats live here only. ``settings`` is the collector's settings as JSON; ``uid`` and
    ``settings`` are None for rounds of versions that did not record them."""

    collector: Optional[str]
    number: int
    start: dt.datetime
    settings: Optional[str] = None
    uid: Optional[str] = None

    def commit_info(self) -> Dict[str, str]:
        info = {_NUMBER_KEY: str(self.number), _START_KEY: self.start.isoformat()}
        if self.collector is not None:
            info[_COLLECTOR_KEY] = self.collector
        if self.settings is not None:
            info[SETTINGS_KEY] = self.settings
        if self.uid is not None:
            info[ROUND_ID_KEY] = self.uid
        return info

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> "Optional[RoundInfo]":
        """The round a commit's info (``DeltaTable.history``) records, or None for a commit that is
        not a round's (compaction, conversion) or whose round keys cannot be read."""
        number, start = info.get(_NUMBER_KEY), info.get(_START_KEY)
        if number is None or not start:
            return None
        try:
            return cls(
                collector=None if info.get(_COLLECTOR_KEY) is None else str(info[_COLLECTOR_KEY]),
                number=int(str(number)),
                start=dt.datetime.fromisoformat(str(start)),
                settings=info.get(SETTINGS_KEY),
                uid=info.get(ROUND_ID_KEY),
            )
        except (TypeError, ValueError):
            return None
