"""Kept so that ``from lookahead_reasoning.lm import LM`` goes on working: :mod:`.runtime.lm`."""

from .runtime.lm import ForwardListener, ForwardStats, ForwardTiming, LM, WidthPolicy  # noqa: F401

__all__ = ["ForwardListener", "ForwardStats", "ForwardTiming", "LM", "WidthPolicy"]
