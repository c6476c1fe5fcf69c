"""lookahead_reasoning: step-level (Lookahead Reasoning) and token-level speculative decoding.

The front door is :class:`LookaheadGenerator`; the decoding loops live in
:mod:`lookahead_reasoning.decoding`, the KV-cache operations in :mod:`lookahead_reasoning.cache`,
the speedup formulas in :mod:`lookahead_reasoning.theory`.
"""

from .decoding.results import GenerationResult, CycleStats, SDStats
from .errors import (
    ConfigError,
    LookaheadError,
    ModelLoadError,
    PromptError,
    TokenizerMismatchError,
    VerifierError,
)
from .generator import LookaheadGenerator
from .runtime.lm import LM
from .sampling import SamplingConfig
from .settings import Settings, TokenSD
from .steps import StepConfig

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "GenerationResult", "LM", "CycleStats", "LookaheadError", "LookaheadGenerator",
    "ModelLoadError", "PromptError", "SDStats", "SamplingConfig", "Settings", "StepConfig", "TokenSD",
    "TokenizerMismatchError", "VerifierError", "__version__",
]
