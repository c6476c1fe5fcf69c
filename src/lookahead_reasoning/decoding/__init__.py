"""Hand-written decoding loops: one loop for every mode (:func:`generate_cycles`, cycles of a policy's plans), and the
plain loops it is tested against: autoregressive (``generate``), token-level speculative (``generate_sd``)
and the paper's Algorithm 1 (``generate_lr_reference``)."""

from .autoregressive import decode_rows, generate
from .driver import CyclePolicy, FixedPolicy, drive, generate_cycles, mode_plan
from .lookahead import run_cycle
from .reference import generate_lr_reference
from .results import GenerationResult, SDStats
from .speculative import decode_rows_sd, generate_sd

__all__ = ["CyclePolicy", "FixedPolicy", "GenerationResult", "SDStats", "decode_rows", "decode_rows_sd",
           "drive", "generate", "generate_cycles", "generate_lr_reference", "generate_sd", "mode_plan", "run_cycle"]
