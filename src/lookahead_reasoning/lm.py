"""Kept so that ``from lookahead_reasoning.lm import LM`` goes on working: :mod:`.runtime.lm`."""

from .deprecation import renamed_globals
from .runtime.lm import ForwardListener, ForwardStats, ForwardTiming, LM, PadPolicy  # noqa: F401

__getattr__ = renamed_globals(__name__, WidthPolicy="PadPolicy")

__all__ = ["ForwardListener", "ForwardStats", "ForwardTiming", "LM", "PadPolicy"]
