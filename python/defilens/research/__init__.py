"""Research on a collected history: point-in-time panels of every frame (`panel`), as-of reads
that never look ahead (`asof`), a coverage audit (`audit`), checking a vendor's indicators
against candles (`verify`), and a study from signal to verdict: decision times and forward
returns (`decision_times`, `forward_returns`), an honest evaluation (`evaluate`) and the evaluations a history remembers (`journal`), a look-ahead
check of a study (`lookahead_check`) and hand-offs to backtesters (`to_alphalens`,
`to_vectorbt`), a point-in-time universe (`universe`, `members`), and what trading cost (`costs`). They read what `collect` writes, through `defilens.scan`."""

from ._asof import asof
from ._audit import Audit, audit
from ._costs import costs
from ._evaluate import Evaluation, evaluate
from ._handoff import to_alphalens, to_vectorbt
from ._journal import journal
from ._labels import decision_times, forward_returns
from ._lookahead import LookaheadReport, lookahead_check
from ._panel import panel
from ._universe import members, universe
from ._verify import verify

__all__ = [
    "panel",
    "asof",
    "audit",
    "Audit",
    "verify",
    "decision_times",
    "forward_returns",
    "evaluate",
    "Evaluation",
    "journal",
    "lookahead_check",
    "LookaheadReport",
    "to_alphalens",
    "to_vectorbt",
    "universe",
    "members",
    "costs",
]

# isort: split
# What the command line (`defilens._cli`) reads beside the user's API (not in __all__).
from ._scope import CANDLE_INTERVALS as CANDLE_INTERVALS
