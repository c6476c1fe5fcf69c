"""Verifiers: does a drafted reasoning step say the same thing as the target's own step?

Step 3 of a Lookahead Reasoning cycle hands a verifier the pairs (draft step s^_j, target step s_j)
and keeps drafted steps up to the first pair it rejects. A verifier judges *meaning*, not tokens:

=========================  ============================================================  ==========
verifier                   accepts when                                                  score
=========================  ============================================================  ==========
ExactMatchVerifier         the steps are equal after lower-casing and removing           1.0 / 0.0
                           whitespace
EmbeddingVerifier          cosine similarity of sentence embeddings >= threshold         cosine
                           (``same_numbers=True``, name "embedding-numbers": and the
                           two steps contain the same set of numbers)
LLMJudgeVerifier           a local chat model answers "yes" (P(yes) share >= t, or its   P(yes) share
                           most likely token is "yes")
OpenAIJudgeVerifier        the same question to an OpenAI-compatible completions server  P(yes) share
paper_judge (preset)       exact match, else a judge answers "[aligned" (one token)      the judge's
TargetScoreVerifier        the target rates the draft 0-9 and the score >= t (9)        the digit
LikelihoodVerifier         the target's probabilities of the drafted tokens pass a       min p, ...
                           rule (min p >= 0.3; mean log p; tokens below p; rank)
CascadeVerifier            ``first`` accepts, else ``then`` accepts                      theirs
RandomVerifier             a seeded coin with P(accept) = p_accept (the paper's          None
                           ablation)
=========================  ============================================================  ==========

The contract every verifier keeps:

* ``verify(pairs)`` takes a sequence of ``(draft_step, target_step)`` strings and returns one
  :class:`Verdict` per pair, in order, judging them in one batched call where the method allows.
  A verifier with ``needs_scores`` (the likelihood verifier, a cascade with one) also takes
  ``scores=``, the target's :class:`~.likelihood.TokenScores` of each drafted step, which the
  decoding loops supply (:func:`~.likelihood.verify_pairs` calls either kind).
* ``verify`` never raises because a judgement failed: a judge that errors, times out or answers
  something unparsable or unclear gives ``accepted=False``, the cause in ``Verdict.reason``, its
  kind in ``Verdict.error``, a log line, and one more in the verifier's ``failures`` counter.
  Rejecting is always safe: the target's own step is used instead.
* Configuration problems (unknown name, missing package, bad threshold, unreachable endpoint when
  asked to check) raise :class:`~lookahead_reasoning.errors.VerifierError` or
  :class:`~lookahead_reasoning.errors.ConfigError` when the verifier is built.
* Each call is timed with ``time.perf_counter``; ``Verdict.latency_s`` is the call's time divided by
  the number of pairs it judged (a judge sits on the critical path, so its cost is reported).

Modules: :mod:`.base` (the contract, no heavy imports), :mod:`.text` (exact match, numbers),
:mod:`.embedding`, :mod:`.judge` (local LLM judge), :mod:`.score` (target-score), :mod:`.likelihood`, :mod:`.openai`
(HTTP judge), :mod:`.combine` (cascade, random), :mod:`.registry` (names, :func:`make_verifier`),
:mod:`.options` (command-line options, :func:`build_verifier`). Names other than the base types
are imported on first use, so ``from lookahead_reasoning.verifiers import Verdict`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import FAILURE_KINDS, BaseVerifier, Pair, Verdict, Verifier

_LAZY = {name: module for module, names in {
    "text": ("normalize_step", "step_numbers", "numbers_mismatch", "ExactMatchVerifier"),
    "embedding": ("EmbeddingVerifier", "NumbersEmbeddingVerifier", "DEFAULT_EMBEDDING_PACKAGE"),
    "judge": ("JUDGE_QUESTION", "ALIGNED_QUESTION", "LLMJudgeVerifier", "judge_question", "JudgeOptions"),
    "score": ("SCORE_QUESTION", "TargetScoreVerifier"),
    "openai": ("OpenAIJudgeVerifier",),
    "likelihood": ("LikelihoodVerifier", "TokenScores", "verify_pairs"),
    "combine": ("CascadeVerifier", "RandomVerifier"),
    "registry": ("KNOWN_VERIFIERS", "make_verifier", "check_verifier_spec", "paper_judge"),
    "options": ("VerifierSettings", "add_verifier_args", "add_judge_args", "build_verifier", "check_verifier_settings",
                "verifier_settings_from_args"),
}.items() for name in names}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(["BaseVerifier", "FAILURE_KINDS", "Pair", "Verdict", "Verifier", *_LAZY])
