"""Kept only for the compiled ``Sandbox.replay``, which calls ``read_recording`` from here; the
history is `defilens.history`."""

from .history import read_recording

__all__ = ["read_recording"]
