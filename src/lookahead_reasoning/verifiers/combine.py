"""Verifiers built from others (a cascade) or from nothing (a seeded coin)."""

from __future__ import annotations

import random
import time
from typing import Sequence

from ..errors import VerifierError, require
from .base import BaseVerifier, Pair, Verdict, Verifier, check_pairs, with_latency
from .likelihood import TokenScores, uses_scores, verify_pairs


class CascadeVerifier(BaseVerifier):
    """``first`` (cheap, usually exact match) decides what it accepts; the rest go to ``then`` in one call.

    A pair accepted by ``first`` never reaches ``then``. A stage that reads the target's scores of the
    drafted tokens (:class:`~.likelihood.LikelihoodVerifier`) gets them with its pairs. ``Verdict.verifier``
    names the stage that decided. Latency: a pair decided by ``first`` carries ``first``'s per-pair share; a pair passed
    on carries ``first``'s share plus ``then``'s. ``failures`` is the sum of the stages' counts.
    """

    def __init__(self, first: Verifier, then: Verifier, name: str | None = None):
        for stage in (first, then):
            require(hasattr(stage, "verify"), f"cascade stages must be verifiers, got {stage!r}", VerifierError)
        self.first, self.then = first, then
        self.name = name or f"cascade:{getattr(first, 'name', 'first')}+{getattr(then, 'name', 'then')}"

    @property
    def failures(self) -> int:
        return int(getattr(self.first, "failures", 0)) + int(getattr(self.then, "failures", 0))

    @property
    def needs_scores(self) -> bool:
        """Whether a stage reads the target's scores of the drafted tokens (a likelihood verifier)."""
        return uses_scores(self.first) or uses_scores(self.then)

    def verify(self, pairs: Sequence[Pair], scores: Sequence[TokenScores | None] | None = None) -> list[Verdict]:
        pairs = check_pairs(pairs)
        verdicts = list(verify_pairs(self.first, pairs, scores))
        rest = [i for i, v in enumerate(verdicts) if not v.accepted]
        if rest:
            later = verify_pairs(self.then, [pairs[i] for i in rest], None if scores is None else [scores[i] for i in rest])
            for i, v in zip(rest, later):
                v.latency_s += verdicts[i].latency_s
                verdicts[i] = v
        return verdicts


class RandomVerifier(BaseVerifier):
    """Accept each pair with probability ``p_accept``, from its own ``random.Random(seed)``.

    The paper's ablation baseline (50% accept). Reproducible: the same seed and the same sequence
    of calls give the same verdicts.
    """

    name = "random"

    def __init__(self, p_accept: float = 0.5, seed: int = 0):
        require(isinstance(p_accept, (int, float)) and 0.0 <= p_accept <= 1.0,
                f"p_accept must be in [0, 1], got {p_accept!r}")
        self.p_accept, self.seed = float(p_accept), seed
        self.rng = random.Random(seed)

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        draws = [self.rng.random() for _ in check_pairs(pairs)]
        return with_latency([Verdict(u < self.p_accept, None, f"draw {u:.3f} {'<' if u < self.p_accept else '>='} "
                                     f"p_accept {self.p_accept:g}", 0.0, self.name) for u in draws], start)


__all__ = ["CascadeVerifier", "RandomVerifier"]
