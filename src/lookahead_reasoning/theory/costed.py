"""Speeds with measured costs: the formulas of :mod:`.formulas` with the time of a forward pass as a
function ``T(R, n)`` of the rows R it runs and the new tokens n each row feeds, instead of the
constants 1 (a target pass), ``c`` (a draft pass) and ``beta`` (a batched step).

Why. The paper's formulas price a target pass at 1 whatever it holds (free parallelism, a GPU with
room to spare). On a CPU, scoring 13 tokens can cost 1.7 single-token passes and a 2-row batch 1.35,
and the best plan moves with those numbers. Given a table of measured times (``planning.CostTable``)
these functions return expected tokens per second of each plan, so the planner compares plans in
seconds, not in formulas' units. ``sd_rate`` with ``T(1, n) = 1``, ``T_d = c`` and no stop is
Leviathan's ``S(alpha, gamma, c)``; ``lr_cycle`` prices two passes the paper leaves out (the draft's
catch-up and the scoring pass that gives the rows their head start), and reduces to
``f_sync_batched`` when the scoring pass is priced as the rows' first batched step and the catch-up
is free (theory/README.md, section 8; tests/test_costed.py).

Symbols as in :mod:`.formulas`, with ``k`` drafted steps per LR cycle (``k1 = k + 1`` target rows). New here:

- ``TokenRates``: the draft stops after a token it is unsure of (``draft_stop_below``). Each drafted
  token is *sure* with probability ``sigma`` (drafting goes on after it) and accepted with probability
  ``alpha_sure`` or ``alpha_unsure``; positions are i.i.d. Without a stop, ``sigma = 1``.
- ``StepRates``: ``alpha1``, the tokens of a target step ``L_t`` and of a drafted step ``L_d``, the
  head start ``H`` (tokens of a drafted step the target accepts token by token before its row starts),
  and the verifier's seconds per judged pair.

All functions are pure; a cost function is any callable ``(R, n) -> seconds``.

Over an engine (:func:`request_cycle`, :func:`chunk_cycle`) the unit is a request, not a forward:
``T(R, n)`` is the time of R concurrent requests that each write n tokens after a shared, cached
prefix, and ``load`` is the requests of other runs the engine batches with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import require
from .formulas import check_count, check_rate, f_sync_batched

CostFn = Callable[[int, int], float]

__all__ = ["CostFn", "CycleEstimate", "ScoredChain", "StepRates", "TokenRates", "chunk_cycle", "drafted_pmf",
           "expected_accepted", "f_sync_costed", "gated_cycle", "iteration_seconds", "kept_pmf", "lr_cycle", "max_pmf",
           "request_cycle", "sd_rate", "step_cycle", "tokens_per_iteration"]


@dataclass(frozen=True)
class TokenRates:
    """Per-token acceptance with the draft's confidence stop, i.i.d. over positions (see module doc)."""

    sigma: float
    alpha_sure: float
    alpha_unsure: float

    def __post_init__(self) -> None:
        require(0.0 <= self.sigma <= 1.0, f"sigma (share of sure draft tokens) must be in [0, 1], got {self.sigma!r}")
        check_rate(self.alpha_sure, "alpha_sure")
        check_rate(self.alpha_unsure, "alpha_unsure")

    @classmethod
    def plain(cls, alpha: float) -> "TokenRates":
        """No confidence stop: every position is drafted, accepted with probability ``alpha``."""
        return cls(1.0, alpha, alpha)

    @property
    def alpha(self) -> float:
        """The acceptance of a drafted token whose own sureness is not yet known."""
        return self.sigma * self.alpha_sure + (1 - self.sigma) * self.alpha_unsure


@dataclass(frozen=True)
class StepRates:
    """Step-level rates of a pair: see the module docstring."""

    alpha1: float
    target_tokens: float
    draft_tokens: float
    head_tokens: float = 0.0
    verify_s: float = 0.0

    def __post_init__(self) -> None:
        check_rate(self.alpha1, "alpha1")
        require(self.target_tokens >= 1 and self.draft_tokens >= 1,
                f"steps must hold at least one token, got L_t={self.target_tokens!r}, L_d={self.draft_tokens!r}")
        require(0 <= self.head_tokens <= self.draft_tokens, f"head start must be in [0, L_d], got {self.head_tokens!r}")
        require(self.verify_s >= 0, f"verify_s must be >= 0, got {self.verify_s!r}")


@dataclass(frozen=True)
class CycleEstimate:
    """Expected tokens and seconds of one cycle of a plan; ``rate`` is their ratio (renewal-reward)."""

    tokens: float
    seconds: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


# ---------------------------------------------------------------------------------------- token level

def drafted_pmf(gamma: int, sigma: float) -> np.ndarray:
    """``P(D = d)`` for d = 0..gamma: the draft writes token 1, then goes on after each sure token.

    ``P(D = d) = sigma^(d-1) (1 - sigma)`` for ``1 <= d < gamma``, ``sigma^(gamma-1)`` for ``d = gamma``.
    """
    gamma = int(check_count(gamma, "gamma", 0))
    if gamma == 0:
        return np.ones(1)
    pmf = np.zeros(gamma + 1)
    d = np.arange(1, gamma)
    pmf[1:gamma] = sigma ** (d - 1) * (1 - sigma)
    pmf[gamma] = sigma ** (gamma - 1)
    return pmf


def max_pmf(pmf: np.ndarray, rows: int) -> np.ndarray:
    """The law of the largest of ``rows`` independent draws from ``pmf``: ``P(max <= d) = F(d)^rows``."""
    cdf = np.cumsum(pmf) ** int(check_count(rows, "rows"))
    return np.diff(np.concatenate([[0.0], cdf]))


def expected_accepted(gamma: int, model: TokenRates) -> float:
    """``E[A] = sum_{j=1..gamma} (sigma alpha_sure)^(j-1) alpha``: drafted tokens accepted per iteration.

    Token j is accepted when tokens 1..j-1 were sure (so j was drafted) and accepted, and j itself is
    accepted (its own sureness unknown: ``alpha``). With ``sigma = 1`` this is Leviathan's
    ``E = (1 - alpha^(gamma+1)) / (1 - alpha) - 1``.
    """
    gamma = int(check_count(gamma, "gamma", 0))
    j = np.arange(1, gamma + 1)
    return float(np.sum((model.sigma * model.alpha_sure) ** (j - 1) * model.alpha))


def tokens_per_iteration(gamma: int, model: TokenRates) -> float:
    """Tokens one SD iteration adds: the accepted drafts plus the target's own (correction or bonus)."""
    return expected_accepted(gamma, model) + 1.0


def iteration_seconds(gamma: int, model: TokenRates, target: CostFn, draft: CostFn, rows: int = 1,
                      overhead: float = 0.0) -> float:
    """Expected seconds of one SD iteration over ``rows`` rows (gamma 0: one plain decoding step).

    The draft runs ``max_r D_r`` batched one-token forwards (each ``draft(rows, 1)``); the target one
    forward of n = ``1 + max_r D_r`` new tokens per row (``target(rows, 1 + D)``): the uncached token plus the drafts.
    """
    if gamma == 0:
        return target(rows, 1) + overhead
    law = max_pmf(drafted_pmf(gamma, model.sigma), rows)
    d = np.arange(law.size)
    verify = sum(p * target(rows, int(1 + n)) for p, n in zip(law, d) if p > 0)
    return float(verify + float(law @ d) * draft(rows, 1) + overhead)


def sd_rate(gamma: int, model: TokenRates, target: CostFn, draft: CostFn, overhead: float = 0.0) -> float:
    """Tokens per second of token SD with ``gamma`` (renewal-reward: tokens per iteration / its seconds)."""
    return tokens_per_iteration(gamma, model) / iteration_seconds(gamma, model, target, draft, 1, overhead)


# ---------------------------------------------------------------------------------------- step level

def step_cycle(gamma: int, step: StepRates, token: TokenRates, target: CostFn, draft: CostFn,
               overhead: float = 0.0) -> CycleEstimate:
    """k = 0: the target writes one step of ``L_t`` tokens alone, with SD at ``gamma`` (0: plainly)."""
    iterations = step.target_tokens / tokens_per_iteration(gamma, token)
    return CycleEstimate(step.target_tokens, iterations * iteration_seconds(gamma, token, target, draft, 1, overhead))


def lr_cycle(k: int, gamma: int, step: StepRates, token: TokenRates, target: CostFn, draft: CostFn,
             overhead: float = 0.0) -> CycleEstimate:
    """One synchronous LR cycle with ``k`` drafted steps and SD at ``gamma`` inside the target's rows.

    Time: the draft catches up on the last target step (``draft(1, L_t)``) and writes k steps
    (``k L_d draft(1, 1)``); one target pass scores the drafted chain (``target(1, k L_d + 1)``);
    then R = k + 1 rows run together. Rows 0..k-1 start with the head start H and need
    ``N_h = (L_t - H - 1) / t`` iterations (t tokens per iteration), row k needs ``N_f = (L_t - 1) / t``.
    A rejection at row j < k cancels the later rows when row j finishes, so the batch runs ``N_h``
    iterations unless all k drafts pass (probability ``alpha1^k``), then ``N_f``; each iteration costs
    ``iteration_seconds(gamma, rows=R)``. The verifier judges row j when rows 0..j-1 passed:
    ``sum_{j<k} alpha1^j`` pairs. Output: ``L_d sum_{j=1..k} alpha1^j`` drafted tokens plus one target
    step of ``L_t``. Rows' iteration counts are taken at their means (the batch's wait for its slowest
    row is what ``simulate_costed_lr`` adds).
    """
    k = int(check_count(k, "k"))
    a1, lt, ld = step.alpha1, step.target_tokens, step.draft_tokens
    per_iteration = tokens_per_iteration(gamma, token)
    n_head = max(0.0, lt - step.head_tokens - 1) / per_iteration
    n_full = max(0.0, lt - 1) / per_iteration
    all_pass = a1 ** k
    iterations = (1 - all_pass) * n_head + all_pass * n_full
    seconds = (draft(1, max(1, round(lt))) + k * ld * draft(1, 1) + target(1, max(1, round(k * ld)) + 1)
               + iterations * iteration_seconds(gamma, token, target, draft, k + 1)
               + step.verify_s * sum(a1 ** j for j in range(k)) + overhead)
    tokens = ld * sum(a1 ** j for j in range(1, k + 1)) + lt
    return CycleEstimate(tokens, seconds)


@dataclass(frozen=True)
class ScoredChain:
    """What a cycle's scoring pass showed of its drafted steps, one entry per drafted step with a row:
    ``accept`` its acceptance probability p_j, ``drafted_tokens`` its length, ``need`` the tokens its row
    still has to write after the head start (0: the target would write the drafted step exactly)."""

    accept: tuple[float, ...]
    drafted_tokens: tuple[int, ...]
    need: tuple[float, ...]


def gated_cycle(rows: int, gamma: int, step: StepRates, token: TokenRates, scored: ScoredChain, target: CostFn,
                draft: CostFn) -> CycleEstimate:
    """The rest of a scored cycle when only its first ``rows`` target rows run (rows - 1 judged rows,
    then a bonus row), with SD at ``gamma`` inside them.

    Tokens: one target step ``L_t``, plus drafted step j's tokens when steps 1..j all pass
    (``prod p``). Seconds: the batch runs until its first rejected row j is done (probability
    ``reach_j (1 - p_j)``), else until its longest row is; an iteration costs
    ``iteration_seconds(gamma, rows=R)``; the verifier judges row j when every row before it passed.
    """
    per_iteration = tokens_per_iteration(gamma, token)
    judged = rows - 1
    last = scored.need[judged] if judged < len(scored.need) else step.target_tokens
    iters = [n / per_iteration for n in scored.need[:judged]] + [last / per_iteration]
    reach, tokens, phase, verify = 1.0, step.target_tokens, 0.0, 0.0
    for j in range(judged):  # the batch stops at row j's end when row j is the first rejection
        verify += reach * step.verify_s
        phase += reach * (1 - scored.accept[j]) * max(iters[:j + 1])
        reach *= scored.accept[j]
        tokens += reach * scored.drafted_tokens[j]
    phase += reach * max(iters)
    return CycleEstimate(tokens, phase * iteration_seconds(gamma, token, target, draft, rows) + verify)


def f_sync_costed(k1: int, alpha1: float, c1: float, target: CostFn, n: int = 1) -> float:
    """Synchronous LR over the target alone with a measured batched step: ``f_sync_batched`` with
    ``beta = target(k1, n) / target(1, n)``. ``n`` is the new tokens per row of the rows' forwards (1: token by
    token; ``gamma + 1`` with SD inside the rows). ``k1 = 1`` is the target alone: 1."""
    k1 = int(check_count(k1, "k1"))
    beta = target(k1, n) / target(1, n) if k1 > 1 else 1.0
    return float(f_sync_batched(k1, alpha1, c1, beta))


# ---------------------------------------------------------------------------------------- over an engine

def kept_pmf(k: int, alpha1: float) -> np.ndarray:
    """``P(m drafted steps kept)``, m = 0..k: ``alpha1^m (1 - alpha1)`` below k, ``alpha1^k`` at k."""
    m = np.arange(int(check_count(k, "k", 0)) + 1)
    pmf = alpha1 ** m * (1 - alpha1)
    pmf[-1] = alpha1 ** k
    return pmf


def chunk_cycle(n: float, target: CostFn, load: int = 0) -> CycleEstimate:
    """The target writes ``n`` tokens in one request (a plain step, or a chunk past step ends) while
    ``load`` requests of other runs are in flight: ``T(1 + load, n)``."""
    return CycleEstimate(n, target(1 + load, n))


def request_cycle(k: int, schedule: str, step: StepRates, target: CostFn, draft: CostFn | None, load: int = 0,
                  overlap: float = 1.0) -> CycleEstimate:
    """One LR cycle over an engine: k drafted steps, each a draft request of ``L_d`` tokens
    (``T_d = draft(1, L_d)``; 0 without a draft's costs), and target rows, each a request of ``L_t``.

    It keeps m ~ :func:`kept_pmf` drafted steps and one target step: ``E[tokens] = E[m] L_d + L_t``.

    * sync: ``k T_d + T(k + 1 + load, L_t)``: every step drafted, then all rows at once. With other
      runs in flight the drafts run beside their rows and pay ``overlap`` (what a draft and a target
      request cost run at once, over the dearer one alone).
    * async: row j starts once drafted step j exists (``j T_d``); the cycle ends when the row that
      decides it (row m) ends: ``(E[m] T_d + T(R + load, L_t)) overlap``, R the rows in flight
      together (a row lasts ``T(1, L_t)``, so about ``1 + T / T_d`` of them, at most k + 1).

    The verifier judges the rows up to the first rejection: ``E[min(m + 1, k)]`` pairs of ``verify_s``.
    """
    k = int(check_count(k, "k"))
    require(schedule in ("sync", "async"), f"schedule must be sync or async, got {schedule!r}")
    pmf, m = kept_pmf(k, step.alpha1), np.arange(k + 1)
    lt, ld = step.target_tokens, step.draft_tokens
    tokens = float(pmf @ (m * ld)) + lt
    td = draft(1, ld) if draft is not None else 0.0
    if schedule == "sync":
        seconds = k * td * (overlap if load > 0 else 1.0) + target(k + 1 + load, lt)
    else:
        row = target(1 + load, lt)
        in_flight = min(k + 1, 1 + (int(np.ceil(row / td)) if td > 0 else k))
        seconds = (float(pmf @ (m * td)) + target(in_flight + load, lt)) * overlap
    judged = float(pmf @ np.minimum(m + 1, k))
    return CycleEstimate(tokens, seconds + judged * step.verify_s)
