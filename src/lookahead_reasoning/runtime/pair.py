"""A target and a draft set up to run together: :func:`model_pair`.

Both become :class:`~.lm.LM` objects with counters of their own (a draft that is the target gets a
second LM over the same model, so the two roles are timed apart), and the pair knows whether the two
tokenizers map the same strings to the same ids (:func:`check_same_vocabulary`): token-level SD needs
that, step-level speculation does not (steps cross as text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import TokenizerMismatchError
from .lm import LM


@dataclass(frozen=True)
class ModelPair:
    """The target p, the draft q, and whether they share one vocabulary."""

    target: LM
    draft: LM
    same_vocab: bool


def check_same_vocabulary(draft: LM, target: LM) -> None:
    """Raise TokenizerMismatchError unless the two tokenizers map the same strings to the same ids."""
    d_vocab, t_vocab = draft.tokenizer.get_vocab(), target.tokenizer.get_vocab()
    if d_vocab != t_vocab:
        only_d = len(set(d_vocab.items()) - set(t_vocab.items()))
        only_t = len(set(t_vocab.items()) - set(d_vocab.items()))
        raise TokenizerMismatchError(
            f"draft {draft.name!r} and target {target.name!r} use different tokenizers "
            f"(vocab sizes {len(d_vocab)} vs {len(t_vocab)}; {only_d} and {only_t} entries differ). "
            "Token-level speculative decoding needs one shared vocabulary. Step-level speculation "
            "(LookaheadGenerator without token SD inside steps) works across tokenizers, since steps are text."
        )


def model_pair(target: Any, draft: Any = None) -> ModelPair:
    """The pair of ``target`` and ``draft`` (LMs or anything :meth:`LM.from_loaded` takes; ``draft``
    None or the target itself: the target again, in an LM of its own)."""
    target = LM.from_loaded(target)
    draft = target if draft is None else LM.from_loaded(draft)
    if draft is target:  # separate counters for the two roles
        draft = LM(target.model, target.tokenizer, target.name)
    try:
        check_same_vocabulary(draft, target)
        same = True
    except TokenizerMismatchError:
        same = False
    return ModelPair(target, draft, same)


__all__ = ["ModelPair", "check_same_vocabulary", "model_pair"]
