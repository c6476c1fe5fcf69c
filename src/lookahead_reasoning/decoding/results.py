"""Typed results of every decoding loop and the statistics each loop keeps. Stats live in the result,
never in globals.

* :class:`GenerationResult`: what any loop produced (tokens, text, stop reason, wall time) and its stats;
* :class:`SDStats`: token-level speculative decoding (alpha, the accept histogram, the cost ratio c);
* :class:`CycleTrace` / :class:`CycleStats`: Lookahead Reasoning, one trace per cycle (alpha1, c1), and,
  for the adaptive mode, the plan each cycle ran with its predicted and realised speed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..runtime.lm import ForwardTiming
from ..steps import Step

from ..verifiers.base import Verdict


def _rounded(x: float, digits: int = 4) -> float | None:
    """``x`` rounded for a summary; None for NaN."""
    return None if x != x else round(x, digits)


@dataclass
class SDStats:
    """Token-level speculative decoding counters, and the two acceptance estimators read from them.

    ``alpha`` is the theory's: the probability that the target accepts a drafted token it judges,
    estimated as accepted / judged (:attr:`alpha`). ``acceptance_rate`` is what engines report:
    accepted / drafted, which also counts the drafted tokens after a rejection, never judged, and so
    sits below alpha. c is the mean draft forward time over the mean target forward time. A run's
    summary (and a results record) stores the two as ``alpha_judged`` and ``accepted_per_drafted``.
    """

    gamma: int = 0
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0  # iterations that ended on a drafted token the target judged and rejected
    iterations: int = 0
    accept_histogram: list[int] = field(default_factory=list)  # index n: iterations that accepted n drafts
    target_forwards: int = 0
    target_seconds: float = 0.0
    draft_forwards: int = 0
    draft_seconds: float = 0.0
    # every iteration, in order: (sureness of each drafted token or None, drafted, accepted, the draft's
    # top probability of each drafted token or None); what a learner reads after a cycle
    log: list[tuple[list[bool] | None, int, int, list[float] | None]] = field(default_factory=list, repr=False)

    def record(self, drafted: int, accepted: int, sure: list[bool] | None = None,
               confidence: list[float] | None = None) -> None:
        self.log.append((sure, drafted, accepted, confidence))
        self.drafted += drafted
        self.accepted += accepted
        self.rejected += accepted < drafted
        self.iterations += 1
        while len(self.accept_histogram) <= accepted:
            self.accept_histogram.append(0)
        self.accept_histogram[accepted] += 1

    @property
    def alpha(self) -> float:
        """The theory's alpha, accepted / (accepted + rejected). The target judges a drafted token only
        while every token before it was accepted: an iteration judges its accepted tokens and, unless it
        kept all it drafted (a whole draft, or a draft that stopped early), one rejected token; the
        tokens after that are never judged. Each judged token is one Bernoulli(alpha) trial, so this
        is their maximum-likelihood estimate (theory/README.md, "Two estimators of alpha")."""
        judged = self.accepted + self.rejected
        return self.accepted / judged if judged else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted: the share of drafted tokens kept, as engines report it. Below
        :attr:`alpha` whenever a rejection leaves drafted tokens unjudged; not the theory's alpha."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.iterations if self.iterations else float("nan")

    @property
    def c(self) -> float:
        if not (self.draft_forwards and self.target_forwards and self.target_seconds):
            return float("nan")
        return (self.draft_seconds / self.draft_forwards) / (self.target_seconds / self.target_forwards)

    def summary(self) -> dict[str, Any]:
        return {
            "gamma": self.gamma,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "alpha_judged": _rounded(self.alpha),  # accepted / judged: the theory's alpha
            "accepted_per_drafted": _rounded(self.acceptance_rate),  # the share of drafted tokens kept
            "rejected": self.rejected,
            "mean_accepted": _rounded(self.mean_accepted, 3),
            "accept_histogram": list(self.accept_histogram),
            "c": _rounded(self.c),
            "draft_forwards": self.draft_forwards,
        }


@dataclass(frozen=True)
class PlanNote:
    """What the adaptive mode decided for one cycle: the plan, and the speed it expected of it."""

    plan: str  # e.g. "ar", "sd@g12s0.4", "lr-sd@k1g8s0.3" (see lookahead_reasoning.settings.CyclePlan.label)
    predicted_tok_s: float
    rows: int = 1  # target rows the cycle ran, after the step gate (at most k + 1)
    load: int = 0  # over engines: requests of other runs in flight at the target that the plan was priced with


@dataclass
class CycleTrace:
    """Everything one LR cycle did: the steps, the verdicts, what was kept and what it cost."""

    drafted: list[Step]
    target: list[Step]
    verdicts: list[Verdict]  # one per judged pair, rows 0, 1, ... up to the first not judged
    accepted: int  # drafted steps kept
    appended_target_step: bool
    draft_s: float
    target_s: float
    verify_s: float
    target_rows: int
    alternatives: list[list[Step]] = field(default_factory=list)  # width > 1: extra drafts per position
    alt_verdicts: list[Verdict] = field(default_factory=list)
    tokens: int = 0  # tokens this cycle added to the answer
    wall_s: float = 0.0  # the cycle's whole time (draft + target + verify + bookkeeping)
    agreements: list[float] = field(default_factory=list)  # per drafted step with a row: share the target accepted
    plan: PlanNote | None = None  # adaptive mode only
    forward_s: float = 0.0  # seconds both models spent in forward passes (this process's runtime)
    sd_iterations: int = 0  # token-level SD iterations in the target's rows (this process's runtime)
    # what this process's runtime measured during the cycle, for a policy to learn from: every SD
    # iteration of a target row, as SDStats.log holds them (sure, drafted, accepted, confidence), and
    # every timed forward of each model (one LM in both roles: the target's list only)
    token_outcomes: list[tuple[Any, int, int, Any]] = field(default_factory=list, repr=False)
    target_forwards: list[ForwardTiming] = field(default_factory=list, repr=False)
    draft_forwards: list[ForwardTiming] = field(default_factory=list, repr=False)

    @property
    def kept_steps(self) -> list[Step]:
        """The steps this cycle added to the answer, in order (accepted drafts, then the target's step)."""
        kept = list(self.drafted[:self.accepted])
        if self.appended_target_step:
            kept.append(self.target[self.accepted])
        return kept


@dataclass
class CycleStats:
    """Step-level statistics over a generation; alpha1 and c1 in the paper's sense."""

    k: int = 0
    cycles: list[CycleTrace] = field(default_factory=list)
    target_sd: SDStats | None = None
    draft_sd: SDStats | None = None

    @property
    def judged(self) -> int:
        return sum(len(c.verdicts) for c in self.cycles)

    @property
    def accepted_steps(self) -> int:
        return sum(c.accepted for c in self.cycles)

    @property
    def alpha1(self) -> float:
        """Step acceptance: accepted drafted steps / judged pairs, counting each cycle up to its first reject."""
        looked = sum(min(len(c.verdicts), c.accepted + 1) for c in self.cycles)
        return self.accepted_steps / looked if looked else float("nan")

    @property
    def raw_accept_rate(self) -> float:
        """Share of all judged pairs the verifier accepted (also those after a reject)."""
        yes = sum(v.accepted for c in self.cycles for v in c.verdicts)
        return yes / self.judged if self.judged else float("nan")

    @property
    def c1(self) -> float:
        """Draft time per drafted step over target time per (batched) target step generation."""
        d_steps = sum(len(c.drafted) for c in self.cycles)
        t_runs = sum(1 for c in self.cycles if c.target_rows)
        d_time = sum(c.draft_s for c in self.cycles)
        t_time = sum(c.target_s for c in self.cycles)
        if not d_steps or not t_runs or t_time == 0:
            return float("nan")
        return (d_time / d_steps) / (t_time / t_runs)

    @property
    def steps_per_cycle(self) -> float:
        n = len(self.cycles)
        return sum(c.accepted + c.appended_target_step for c in self.cycles) / n if n else float("nan")

    def plan_counts(self) -> dict[str, int]:
        """How many cycles ran each plan (adaptive mode; empty otherwise)."""
        return dict(Counter(c.plan.plan for c in self.cycles if c.plan is not None))

    def predicted_tok_s(self) -> float:
        """The planner's speed for the whole run: tokens over the time its per-cycle predictions imply.

        Each cycle's tokens divided by the speed predicted for its plan gives the time the planner
        expected that cycle to take; the sum is the run's predicted time. NaN without plans.
        """
        planned = [c for c in self.cycles if c.plan is not None and c.plan.predicted_tok_s > 0]
        tokens = sum(c.tokens for c in planned)
        seconds = sum(c.tokens / c.plan.predicted_tok_s for c in planned)
        return tokens / seconds if seconds > 0 else float("nan")

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "k": self.k,
            "cycles": len(self.cycles),
            "judged_pairs": self.judged,
            "accepted_steps": self.accepted_steps,
            "alpha1": _rounded(self.alpha1),
            "raw_accept_rate": _rounded(self.raw_accept_rate),
            "steps_per_cycle": _rounded(self.steps_per_cycle),
            "target_rows": sum(c.target_rows for c in self.cycles),  # over engines: requests to the target
            "c1": _rounded(self.c1),
            "draft_s": _rounded(sum(c.draft_s for c in self.cycles)),
            "target_s": _rounded(sum(c.target_s for c in self.cycles)),
            "verify_s": _rounded(sum(c.verify_s for c in self.cycles)),
        }
        if self.target_sd is not None and self.target_sd.drafted:
            out["alpha_judged"] = _rounded(self.target_sd.alpha)
            out["accepted_per_drafted"] = _rounded(self.target_sd.acceptance_rate)
            out["gamma"] = self.target_sd.gamma
            out["target_sd_mean_accepted"] = _rounded(self.target_sd.mean_accepted)
            out["c"] = _rounded(self.target_sd.c)
        if self.draft_sd is not None and self.draft_sd.drafted:  # prompt lookup inside the draft's steps
            out["draft_sd_alpha_judged"] = _rounded(self.draft_sd.alpha)
            out["draft_sd_mean_accepted"] = _rounded(self.draft_sd.mean_accepted)
        plans = self.plan_counts()
        if plans:
            out["plans"] = plans
            out["predicted_tok_s"] = _rounded(self.predicted_tok_s(), 3)
            loads = [c.plan.load for c in self.cycles if c.plan is not None]
            if any(loads):
                out["mean_load"] = _rounded(sum(loads) / len(loads))
        return out


@dataclass
class GenerationResult:
    """What a decoding loop produced and what it cost.

    ``token_ids`` are the new tokens only (an EOS that ended generation included); ``text`` is their
    decoded text without special tokens. ``target_forwards`` counts forward passes of the target
    model (prefill included), the number speculative decoding tries to make small.
    """

    token_ids: list[int]
    text: str
    prompt_ids: list[int]
    stop_reason: str
    target_forwards: int
    wall_time_s: float
    mode: str = "ar"
    stats: SDStats | CycleStats | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.num_tokens / self.wall_time_s if self.wall_time_s > 0 else float("nan")

    def summary(self) -> dict[str, Any]:
        """A flat dict for logs and JSONL: counts, speed and the loop's own stats."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "new_tokens": self.num_tokens,
            "stop_reason": self.stop_reason,
            "target_forwards": self.target_forwards,
            "wall_time_s": round(self.wall_time_s, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
        }
        if self.stats is not None:
            out.update(self.stats.summary())
        return out
