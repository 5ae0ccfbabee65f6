"""Kept only for the compiled Sandbox's ``advance``, which calls ``parse_every`` from here; the
collector is `defilens.history`."""

from ._duration import parse_every

__all__ = ["parse_every"]
