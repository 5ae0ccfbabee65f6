"""Research on a collected history: point-in-time panels of every frame (`panel`), as-of reads
that never look ahead (`asof`), a coverage audit (`audit`), and checking a vendor's indicators
against candles (`verify`). They read what `collect` writes, through `defilens.scan`."""

from ._asof import asof
from ._audit import Audit, audit
from ._panel import panel
from ._verify import verify

__all__ = ["panel", "asof", "audit", "Audit", "verify"]
