"""The target rates the drafted step: a 0-9 score read from its next-token distribution.

The paper's ablation "target scores draft 0-9, accept >= 9": no second model, the target itself is
asked how well the drafted step can stand in for its own step, and answers with one digit.
"""

from __future__ import annotations

from typing import Any

from ..errors import VerifierError, require
from ..runtime.lm import LM
from .base import Pair, Verdict
from .judge import BatchedLocalJudge, first_token_ids, judge_question, next_token_probs, question_prompt

SCORE_QUESTION = (
    "Below are a proposed reasoning step and a reference step, written at the same point of the solution "
    "of one problem.\n\n"
    "Proposed step:\n{draft}\n\n"
    "Reference step:\n{target}\n\n"
    "How well can the proposed step replace the reference step? It should carry the same idea, the same "
    "logic and the same numbers. Rate it from 0 (unrelated or wrong) to 9 (equivalent). "
    "Answer with a single digit."
)
DIGITS = tuple(str(d) for d in range(10))


class TargetScoreVerifier(BatchedLocalJudge):
    """Ask the target model for a 0-9 score of the drafted step; accept when score >= ``threshold``.

    The score is the most likely of the ten digits as the first answer token (P(d) is the largest
    probability over the first tokens of "d" and " d"); the reason also gives the expected digit under
    the digits' renormalised probabilities. When the ten digits together hold less than ``min_mass``
    of the probability the target is answering something else: rejected as "unclear" (a failure).

    Args:
        target: the target's :class:`~lookahead_reasoning.runtime.lm.LM` (or a LoadedModel). The verifier
            wraps the same weights in an LM of its own, so its forwards do not count as the target's
            decoding forwards in the generation statistics.
        threshold: the lowest accepted score, an integer in 0..9 (the paper: 9).
        batch_size: pairs per forward pass.
        question: the question template, with fields {draft} and {target}.
    """

    name = "target-score"

    def __init__(self, target: Any, threshold: int = 9, min_mass: float = 1e-4, batch_size: int = 8,
                 question: str = SCORE_QUESTION, system: str | None = None):
        require(target is not None, "the target-score verifier needs the target's LM (target=...)", VerifierError)
        require(isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
                and float(threshold).is_integer() and 0 <= threshold <= 9,
                f"target-score threshold must be an integer score in [0, 9], got {threshold!r}")
        require(isinstance(min_mass, (int, float)) and 0.0 <= min_mass < 1.0,
                f"min_mass must be in [0, 1), got {min_mass!r}")
        require(isinstance(batch_size, int) and batch_size >= 1, f"batch_size must be >= 1, got {batch_size!r}")
        require(isinstance(question, str) and "{draft}" in question and "{target}" in question,
                "a scoring question must contain the fields {draft} and {target}")
        base = target if isinstance(target, LM) else LM.from_loaded(target)
        self.judge = LM(base.model, base.tokenizer, name=f"{base.name} (scorer)")
        self.threshold, self.min_mass, self.batch_size = int(threshold), float(min_mass), batch_size
        self.question, self.system = question, system
        self.digit_ids = [sorted(first_token_ids(self.judge, d)) for d in DIGITS]
        flat = [i for ids in self.digit_ids for i in ids]
        require(all(self.digit_ids) and len(flat) == len(set(flat)),
                "the target's tokenizer does not give each digit 0-9 a first token of its own")

    def prompt(self, draft: str, target: str) -> str:
        """The full text the target continues; its next token is the digit."""
        return question_prompt(self.judge, judge_question(draft, target, template=self.question), self.system,
                               "", "\nScore:")

    def judge_batch(self, pairs: list[Pair]) -> list[Verdict]:
        probs = next_token_probs(self.judge, [self.prompt(d, t) for d, t in pairs])  # (B, V), one left-padded forward
        per_digit = [probs[:, ids].max(dim=-1).values.tolist() for ids in self.digit_ids]  # 10 x B
        verdicts = []
        for p in zip(*per_digit):  # P(d) for d = 0..9 of one pair, not renormalised
            mass = sum(p)
            if not mass >= max(self.min_mass, 1e-30):
                verdicts.append(self.failed("unclear", f"unclear: digit probability {mass:.2g} < {self.min_mass:g}"))
                continue
            score = max(range(10), key=lambda d: p[d])
            expected = sum(d * p[d] for d in range(10)) / mass
            ok = score >= self.threshold
            verdicts.append(Verdict(ok, float(score), f"score {score} (expected {expected:.2f}) "
                                    f"{'>=' if ok else '<'} {self.threshold}", 0.0, self.name))
        return verdicts


__all__ = ["SCORE_QUESTION", "TargetScoreVerifier"]
