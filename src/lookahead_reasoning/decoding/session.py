"""Kept so that ``from lookahead_reasoning.decoding.session import Session`` goes on working: :mod:`..runtime.session`."""

from ..runtime.session import Session  # noqa: F401

__all__ = ["Session"]
