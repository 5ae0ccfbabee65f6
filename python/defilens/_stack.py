"""Where a warning should point: at the user's line, however deep in defilens it was raised."""

from __future__ import annotations

import os
import sys

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def stacklevel_outside() -> int:
    """The ``stacklevel`` for ``warnings.warn`` called by the caller of this function that names
    the first frame outside the package (3.12's ``skip_file_prefixes``, by hand): a wrapper such
    as the keyword check of `_names` or a helper in between cannot make it point at defilens."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level
