"""Progress bars for long batches: tqdm when installed, else one line on stderr."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, Iterator, Optional

ProgressCallback = Callable[[int, int], None]

#: Batches with at least this many requests get a bar when ``progress=None``.
AUTO_THRESHOLD = 100


def _interactive() -> bool:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]

        shell = get_ipython()
        if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
            return True
    except ImportError:
        pass
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


class _PlainBar:
    """A single self-overwriting line on stderr, redrawn at most ten times a second."""

    def __init__(self, total: int, description: str, unit: str) -> None:
        self.total = total
        self.description = description
        self.unit = unit
        self.started = time.monotonic()
        self.drawn_at = 0.0

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.drawn_at < 0.1:
            return
        self.drawn_at = now
        rate = done / max(now - self.started, 1e-9)
        if not total:  # no end known (a collect until Ctrl-C): a counter
            sys.stderr.write(f"\r{self.description}: {done:,} {self.unit}")
        else:
            sys.stderr.write(f"\r{self.description}: {done}/{total} {self.unit} ({rate:,.0f}/s)")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


class _TqdmBar:
    def __init__(self, total: int, description: str, unit: str) -> None:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]

        self.bar = tqdm(total=total or None, desc=description, unit=unit, leave=False)

    def update(self, done: int, total: int) -> None:
        if self.bar.total != (total or None):
            self.bar.total = total or None
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def progress_callback(
    progress: Optional[bool],
    requests: int,
    description: str = "defilens",
    unit: str = "requests",
    threshold: int = AUTO_THRESHOLD,
) -> Iterator[Optional[ProgressCallback]]:
    """Yields a ``callback(done, total)`` drawing a bar (a counter when ``total`` is 0), or None
    when no bar is wanted; ``progress=None`` draws one on a terminal or in a notebook for at least
    ``threshold`` steps."""
    wanted = progress if progress is not None else (requests >= threshold and _interactive())
    if not wanted:
        yield None
        return
    try:
        bar = _TqdmBar(requests, description, unit)
    except ImportError:
        bar = _PlainBar(requests, description, unit)  # type: ignore[assignment]
    try:
        yield bar.update
    finally:
        bar.close()
