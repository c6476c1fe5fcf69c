"""Errors the library raises on bad input.

Every check on user input raises a subclass of :class:`LookaheadError` whose message names the
problem and, where there is one, the fix. Nothing here depends on torch, so the checks run before
any model is touched.
"""

from __future__ import annotations


class LookaheadError(Exception):
    """Base class of every error raised on purpose by lookahead_reasoning."""


class ConfigError(LookaheadError, ValueError):
    """A number or option is out of range (gamma < 1, top_p outside (0, 1], ...)."""


class ModelLoadError(LookaheadError):
    """A model could not be found, verified or loaded (unknown name, missing file, bad sha256...)."""


class TokenizerMismatchError(LookaheadError):
    """Two models that must share a vocabulary do not (token-level speculation needs one)."""


class PromptError(LookaheadError, ValueError):
    """The prompt is empty, holds token ids outside the model's vocabulary, or needs a chat template that
    the tokenizer does not have."""


class VerifierError(LookaheadError):
    """A verifier could not be built (unknown name, unreachable endpoint at construction)."""


class DatasetError(LookaheadError):
    """A dataset file is missing or holds a malformed line."""


def require(condition: bool, message: str, error: type[LookaheadError] = ConfigError) -> None:
    """Raise ``error(message)`` unless ``condition`` holds: the one-line input check used everywhere."""
    if not condition:
        raise error(message)


def whole(value: object, least: int = 0) -> bool:
    """Whether ``value`` is an integer (a bool is not one) of at least ``least``: the rule of every count."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


class EngineError(LookaheadError):
    """A serving engine could not be built, started or reached, or answered something unusable."""
