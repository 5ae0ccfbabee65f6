"""What a history's tables keep on disk beside their live files: the files that compaction
replaced and that time travel may still read until the retention passes (vacuum deletes them
then). A compaction therefore grows disk use at first; these numbers say by how much."""

from __future__ import annotations

from typing import Dict

import polars as pl

from .._storage import Root, require
from ._layout import DELTA_LOG
from ._tables import TABLES, load


def kept_for_time_travel(root: Root) -> Dict[str, int]:
    """``files_live``/``bytes_live`` (what the newest versions read) and
    ``files_kept``/``bytes_kept`` (data files no newest version reads, kept for time travel)."""
    obstore = require("obstore")
    counts = {"files_live": 0, "bytes_live": 0, "files_kept": 0, "bytes_kept": 0}
    store = root.store()
    for name in TABLES:
        table = load(root, name)
        if table is None:
            continue
        live = pl.DataFrame(table.get_add_actions(flatten=False).select(["path", "size_bytes"]))
        paths = {f"{name}/{path}" for path in live["path"].to_list()}
        counts["files_live"] += live.height
        counts["bytes_live"] += int(live["size_bytes"].sum() or 0)
        for batch in obstore.list(store, prefix=f"{name}/"):
            for meta in batch:
                path = meta["path"]
                if path.endswith(".parquet") and f"/{DELTA_LOG}/" not in path and path not in paths:
                    counts["files_kept"] += 1
                    counts["bytes_kept"] += int(meta["size"])
    return counts


def megabytes(size: int) -> str:
    """``12.3 MB`` (decimal megabytes, as disk tools count)."""
    return f"{size / 1e6:,.1f} MB"
