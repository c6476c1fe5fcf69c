"""Hand-written decoding loops: autoregressive, token-level speculative, and Lookahead Reasoning."""

from .autoregressive import decode_rows, generate
from .reference import generate_lr_reference
from .results import GenerationResult, SDStats
from .session import Session

__all__ = ["GenerationResult", "SDStats", "Session", "decode_rows", "generate", "generate_lr_reference"]
