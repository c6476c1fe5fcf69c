"""Whether two models cut text into the same token ids: :func:`check_same_tokenizer`.

Token-level SD passes draft token ids to the target, Lookahead Reasoning over engines passes one prefix
of ids to both endpoints, a likelihood scorer reads the target's ids: each needs one vocabulary. Where
both sides hold their tokenizer (models of this process) the whole vocabularies are compared; where one
side is an engine, which lends no vocabulary, both cut a probe sentence and the ids are compared.
"""

from __future__ import annotations

from typing import Any

from ..errors import TokenizerMismatchError

PROBE = "Natalia sold clips to 48 of her friends.\n\nThen she sold half as many in May: 48 / 2 = 24.\n\n"

TOKEN_SD_NEEDS = ("Token-level speculative decoding needs one shared vocabulary. Step-level speculation "
                  "(LookaheadGenerator without token SD inside steps) works across tokenizers, since steps are text.")
ENGINE_LR_NEEDS = "Lookahead Reasoning over engines needs a draft and a target with one tokenizer."
SCORER_NEEDS = "A scorer must be the target's model."


def vocabulary(side: Any) -> dict[str, int] | None:
    """The whole vocabulary of a side that holds its tokenizer (an LM of this process), else None."""
    tokenizer = getattr(side, "tokenizer", None)
    return tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else None


def check_same_tokenizer(draft: Any, target: Any, need: str = TOKEN_SD_NEEDS, probe: str = PROBE,
                         roles: tuple[str, str] = ("the draft", "the target")) -> None:
    """TokenizerMismatchError unless ``draft`` and ``target`` map text to the same ids; ``need`` (one
    sentence) says what needs that, ``roles`` what the error calls the two. Each side has ``name`` and ``encode(text) -> ids`` (an
    :class:`~.lm.LM`, an engine's step writer, a scorer); the whole vocabularies are compared where both
    sides have one (:func:`vocabulary`), else the ids of ``probe``."""
    d_vocab, t_vocab = vocabulary(draft), vocabulary(target)
    if d_vocab is not None and t_vocab is not None:
        if d_vocab == t_vocab:
            return
        only_d = len(set(d_vocab.items()) - set(t_vocab.items()))
        only_t = len(set(t_vocab.items()) - set(d_vocab.items()))
        how = f"vocab sizes {len(d_vocab)} vs {len(t_vocab)}; {only_d} and {only_t} entries differ"
    else:
        mine, theirs = draft.encode(probe), target.encode(probe)
        if mine == theirs:
            return
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        how = f"{len(mine)} vs {len(theirs)} ids for a probe sentence; first difference at id {first}"
    raise TokenizerMismatchError(f"{roles[0]} {draft.name!r} and {roles[1]} {target.name!r} tokenize text "
                                 f"differently ({how}). {need}")


__all__ = ["ENGINE_LR_NEEDS", "PROBE", "SCORER_NEEDS", "TOKEN_SD_NEEDS", "check_same_tokenizer", "vocabulary"]
