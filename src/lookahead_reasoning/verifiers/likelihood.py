"""The target judges a drafted step by how likely it finds the step's own tokens.

Every other verifier compares two texts. This one reads what the target already computed: when the
target checks a cycle, it runs a forward over x + s^_1 .. s^_k, and the logits at the drafted
positions hold p_target(t_i | x, s^_<j, t_<i) for every drafted token t_i. A drafted step the target
finds likely everywhere is one it could have written itself, token for token or nearly; a step with
one token the target would almost never have chosen (a different number, a dropped condition) has
one very small probability there, however similar the two texts read.

The scores (:class:`TokenScores`) come with the pair: in the PyTorch loops from the checking forward
(free), over an engine from one scoring request per step (vLLM's ``prompt_logprobs``; llama.cpp's
server returns probabilities of generated tokens only, so it cannot score a given step).

Rules (``rule=``), each accepting a complete step whose tokens all have scores:

=============  ==========================================================  ===================
rule           accepts when                                                score reported
=============  ==========================================================  ===================
``min-prob``   every drafted token has p >= threshold                      min p
``mean-logp``  the mean of log p over the step >= threshold (<= 0)        mean log p
``low-count``  at most ``allowed`` tokens have p < threshold               tokens below
``max-rank``   every token is among the target's top ``threshold`` + 1     max rank (0 = top)
=============  ==========================================================  ===================

``same_numbers=True`` also asks that the two steps carry the same numbers (as ``embedding-numbers``).
"""

from __future__ import annotations

import math
import time
from typing import Sequence

from ..errors import VerifierError, require
from ..steps import TokenScores
from .base import BaseVerifier, Pair, Verdict, check_pairs, with_latency
from .text import numbers_mismatch

RULES = ("min-prob", "mean-logp", "low-count", "max-rank")
DEFAULT_THRESHOLDS = {"min-prob": 0.3, "mean-logp": -0.3, "low-count": 0.1, "max-rank": 1}


def uses_scores(verifier) -> bool:
    """Whether ``verifier`` (or a stage of it) reads the target's scores of the drafted tokens."""
    return bool(getattr(verifier, "needs_scores", False))


def verify_pairs(verifier, pairs: Sequence[Pair], scores: Sequence[TokenScores | None] | None = None) -> list[Verdict]:
    """``verifier.verify(pairs)``, with the drafted steps' scores where the verifier reads them."""
    if uses_scores(verifier):
        return verifier.verify(pairs, scores=scores)
    return verifier.verify(pairs)


class LikelihoodVerifier(BaseVerifier):
    """Accept a drafted step by the target's probabilities of its tokens (module docstring).

    Args:
        rule: one of :data:`RULES`.
        threshold: the rule's bound (default per rule, :data:`DEFAULT_THRESHOLDS`, chosen on the step-pair
            bank): a probability for ``min-prob`` and ``low-count``, a mean log-probability (<= 0) for
            ``mean-logp``, a rank for ``max-rank``.
        allowed: ``low-count`` only: how many tokens may fall below ``threshold``.
        same_numbers: also require the same numbers in both steps.
    """

    needs_scores = True

    def __init__(self, rule: str = "min-prob", threshold: float | None = None, allowed: int = 1,
                 same_numbers: bool = False):
        require(rule in RULES, f"likelihood rule must be one of {', '.join(RULES)}, got {rule!r}", VerifierError)
        threshold = DEFAULT_THRESHOLDS[rule] if threshold is None else threshold
        require(isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and not math.isnan(threshold),
                f"likelihood threshold must be a number, got {threshold!r}", VerifierError)
        if rule in ("min-prob", "low-count"):
            require(0.0 <= threshold <= 1.0, f"{rule} threshold is a probability in [0, 1], got {threshold!r}",
                    VerifierError)
        elif rule == "mean-logp":
            require(threshold <= 0.0, f"mean-logp threshold is a log-probability (<= 0), got {threshold!r}",
                    VerifierError)
        else:
            require(float(threshold).is_integer() and threshold >= 0,
                    f"max-rank threshold is a rank (an integer >= 0), got {threshold!r}", VerifierError)
        require(isinstance(allowed, int) and not isinstance(allowed, bool) and allowed >= 0,
                f"low-count allowed must be an integer >= 0, got {allowed!r}", VerifierError)
        self.rule, self.threshold, self.allowed, self.same_numbers = rule, float(threshold), allowed, same_numbers
        self.name = f"likelihood:{rule}" + ("+numbers" if same_numbers else "")

    def measure(self, scores: TokenScores) -> tuple[bool, float, str]:
        """(accepted, score, reason) of one step's scores under the rule."""
        p, t = scores.probs, self.threshold
        if not p:
            return False, float("nan"), "an empty step"
        if self.rule == "min-prob":
            low = min(p)
            return low >= t, low, f"min p {low:.3f} {'>=' if low >= t else '<'} {t:g}"
        if self.rule == "mean-logp":
            mean = sum(math.log(max(q, 1e-45)) for q in p) / len(p)
            return mean >= t, mean, f"mean log p {mean:.3f} {'>=' if mean >= t else '<'} {t:g}"
        if self.rule == "low-count":
            below = sum(q < t for q in p)
            ok = below <= self.allowed
            return ok, float(below), f"{below} token(s) with p < {t:g} ({'<=' if ok else '>'} {self.allowed})"
        if scores.ranks is None:
            return False, float("nan"), "no ranks from this runtime (max-rank needs them)"
        top = max(scores.ranks)
        return top <= t, float(top), f"max rank {top} {'<=' if top <= t else '>'} {int(t)}"

    def verify(self, pairs: Sequence[Pair], scores: Sequence[TokenScores | None] | None = None) -> list[Verdict]:
        start = time.perf_counter()
        pairs = check_pairs(pairs)
        require(scores is not None and len(scores) == len(pairs),
                f"the {self.name} verifier judges a drafted step by the target's probabilities of its tokens: "
                f"give one TokenScores per pair (got {'none' if scores is None else len(scores)} for "
                f"{len(pairs)} pairs)", VerifierError)
        verdicts = []
        for (draft, target), s in zip(pairs, scores):
            if s is None:
                verdicts.append(self.failed("unclear", "no scores for this step"))
                continue
            ok, score, reason = self.measure(s)
            if ok and self.same_numbers:
                other = numbers_mismatch(draft, target)
                if other:
                    ok, reason = False, f"{reason}, but {other}"
            verdicts.append(Verdict(ok, score, reason, 0.0, self.name))
        return with_latency(verdicts, start)


__all__ = ["DEFAULT_THRESHOLDS", "LikelihoodVerifier", "RULES", "TokenScores", "uses_scores", "verify_pairs"]
