"""A target and a draft set up to run together: :func:`model_pair` (and :func:`as_lm`, one model as an
:class:`~.lm.LM`).

Both become :class:`~.lm.LM` objects with counters of their own (a draft that is the target gets a
second LM over the same model, so the two roles are timed apart), and the pair knows whether the two
tokenizers map the same strings to the same ids (:func:`~.vocab.check_same_tokenizer`): token-level SD needs
that, step-level speculation does not (steps cross as text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, TokenizerMismatchError
from ..models import load_model
from .lm import LM
from .vocab import check_same_tokenizer


@dataclass(frozen=True)
class ModelPair:
    """The target p, the draft q, and whether they share one vocabulary."""

    target: LM
    draft: LM
    same_vocab: bool


def as_lm(model: Any, **load_kwargs: Any) -> LM:
    """An LM from a name/path (loaded with :func:`lookahead_reasoning.models.load_model`), a
    LoadedModel, an LM, or a ``(model, tokenizer)`` pair."""
    if isinstance(model, str):
        return LM.from_loaded(load_model(model, **load_kwargs))
    if isinstance(model, tuple) and len(model) == 2:
        return LM(model[0], model[1])
    if hasattr(model, "model") and hasattr(model, "tokenizer"):  # an LM comes back as it is
        return LM.from_loaded(model)
    raise ConfigError(f"cannot use {type(model).__name__} as a model: give a name, a path, a LoadedModel, "
                      "an LM or a (model, tokenizer) pair")


def model_pair(target: Any, draft: Any = None) -> ModelPair:
    """The pair of ``target`` and ``draft`` (LMs or anything :meth:`LM.from_loaded` takes; ``draft``
    None or the target itself: the target again, in an LM of its own)."""
    target = LM.from_loaded(target)
    draft = target if draft is None else LM.from_loaded(draft)
    if draft is target:  # separate counters for the two roles
        draft = LM(target.model, target.tokenizer, target.name)
    try:
        check_same_tokenizer(draft, target)
        same = True
    except TokenizerMismatchError:
        same = False
    return ModelPair(target, draft, same)


__all__ = ["ModelPair", "as_lm", "model_pair"]
