"""A history of polls kept as Delta Lake tables: `collect` writes it (every round exactly once in
every table, several collectors at once), `scan` reads it (now or as it was; `versions` lists
what time travel reaches; `settings` what collected it), `compact` keeps it fast, `convert` brings a history of earlier versions over, `reparse` rebuilds the frames from the
raw bodies, here or on an engine such as Spark (`reparse_batch`, `reparse_arrow`).

Needs the history extra (``pip install deltalake obstore``); importing this
package does not import them, so `import defilens` stays light.
"""

from ._collect import collect
from ._compact import compact
from ._convert import convert
from ._defaults import DEFAULT_MAX_FAILED_ROUNDS, DEFAULT_RETENTION
from ._recording import read_recording
from ._reparse import reparse, reparse_arrow, reparse_batch, spark_schema
from ._scan import scan, versions
from ._settings import settings
from ._tables import RAW, TABLES

# isort: split
# What `defilens.research` reads a history by (and keeps its audit's day summaries with): the
# history's names for the research layer, not part of the user's API (not in __all__).
from ._layout import AUDIT_CACHE as AUDIT_CACHE
from ._layout import JOURNAL as JOURNAL
from ._layout import State as State
from ._layout import state as state
from ._scan import history_cut as history_cut
from ._scan import history_cut_at as history_cut_at
from ._scan import load_ours as load_ours
from ._scan import open_for_reading as open_for_reading
from ._scan import scan_table as scan_table
from ._settings import rounds as rounds
from ._settings import runs as runs
from ._tables import PARTITION as PARTITION
from ._tables import append_table as append_table
from ._tables import read_table as read_table
from ._tables import restore as restore

# isort: split
# What the command line (`defilens._cli`) asks of the history, beside the user's API: a root
# checked before any request, a collector id checked, the second Ctrl-C of a commit and the
# commits it left in flight, and the figures its help and reports show. Not in __all__.
from ._collect import InterruptedCommit as InterruptedCommit
from ._collect import prepare as prepare
from ._compact import format_bytes as format_bytes
from ._defaults import COMPACT_EVERY as COMPACT_EVERY
from ._defaults import DEFAULT_MEMORY_BUDGET as DEFAULT_MEMORY_BUDGET
from ._defaults import MIN_RETENTION as MIN_RETENTION
from ._liveness import check_collector_id as check_collector_id
from ._retained import megabytes as megabytes
from ._tables import commits_in_flight as commits_in_flight

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
