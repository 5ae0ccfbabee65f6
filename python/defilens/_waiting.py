"""Waiting in the main thread without missing a Ctrl-C.

A process-directed SIGINT is taken by whichever thread the kernel picks, and this process has
many (tokio's, polars'). Python's handler then only sets a flag, and a main thread inside one
long ``time.sleep`` does not see it until the sleep ends: minutes between two rounds of a
``collect``, an hour in ``defilens sandbox``. Sleeping in short slices lets the interpreter run
the handler within a slice."""

from __future__ import annotations

import time

#: The longest a Ctrl-C waits to be noticed.
SLICE_SECONDS = 0.1


def sleep(seconds: float) -> None:
    """``time.sleep(seconds)``, interrupted by Ctrl-C within `SLICE_SECONDS` whichever thread
    received it."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, SLICE_SECONDS))
