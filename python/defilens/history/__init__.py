"""A history of polls kept as Delta Lake tables: `collect` writes it (every round exactly once in
every table, several collectors at once), `scan` reads it (now or as it was; `versions` lists
what time travel reaches; `settings` what collected it), `compact` keeps it fast, `convert` brings a history of earlier versions over, `reparse` rebuilds the frames from the
raw bodies, here or on an engine such as Spark (`reparse_batch`, `reparse_arrow`).

Needs the history extra (``pip install deltalake obstore``); importing this
package does not import them, so `import defilens` stays light.
"""

from ._collect import DEFAULT_MAX_FAILED_ROUNDS, collect
from ._compact import DEFAULT_RETENTION, compact
from ._convert import convert
from ._recording import read_recording
from ._reparse import reparse, reparse_arrow, reparse_batch, spark_schema
from ._scan import scan, versions
from ._settings import settings
from ._tables import RAW, TABLES

__all__ = [
    "collect",
    "scan",
    "versions",
    "settings",
    "compact",
    "convert",
    "reparse",
    "reparse_batch",
    "reparse_arrow",
    "spark_schema",
    "read_recording",
    "TABLES",
    "RAW",
    "DEFAULT_MAX_FAILED_ROUNDS",
    "DEFAULT_RETENTION",
]
