"""The ``defilens`` command line: fetch, collect, compact, audit, convert, versions, sandbox.

One module a command (`_fetch`, `_collect`, ...: its parser and its run), put together by
`_main`; the Client's and the Sandbox's settings as flags from one table each (`_options`)."""

from ._main import main
from ._summary import failures, summary

__all__ = ["main", "summary", "failures"]
