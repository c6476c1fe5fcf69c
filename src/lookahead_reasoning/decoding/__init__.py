"""Hand-written decoding loops: autoregressive, token-level speculative, and Lookahead Reasoning."""

from .autoregressive import decode_rows, generate
from .driver import CyclePolicy, FixedK, generate_lr, run_lr
from .lookahead import run_cycle
from .reference import generate_lr_reference
from .results import GenerationResult, SDStats
from .speculative import decode_rows_sd, generate_sd

__all__ = ["CyclePolicy", "FixedK", "GenerationResult", "SDStats", "decode_rows",
           "decode_rows_sd", "generate", "generate_lr", "generate_lr_reference", "generate_sd", "run_cycle", "run_lr"]
