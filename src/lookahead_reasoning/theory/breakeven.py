"""When does the step layer pay? The step acceptance alpha1 above which drafting k steps a cycle beats
the best plan that drafts none, on a machine's measured costs.

The question, in seconds. Without drafted steps the target writes each step alone, plainly or with
token SD at some gamma: the best of those plans writes ``R0`` tokens a second
(:func:`~.costed.step_cycle`, maximised over gamma). With k drafted steps a cycle
(:func:`~.costed.lr_cycle`) writes, on average,

    tokens(a1)  = L_d (a1 + a1^2 + ... + a1^k) + L_t
    seconds(a1) = A + B [ (1 - a1^k) N_h + a1^k N_f ] + v (1 + a1 + ... + a1^(k-1))

where ``A`` is what every cycle pays whatever is accepted (the draft catching up on the last step,
``draft(1, L_t)``, writing k steps, ``k L_d draft(1, 1)``, and the target's scoring pass,
``target(1, k L_d + 1)``), ``B`` one iteration of the k + 1 rows (``iteration_seconds(gamma, rows=k+1)``),
``N_h`` and ``N_f`` the iterations of a row that starts with the head start and of the last row, and
``v`` the verifier's seconds per judged pair. The step layer pays where tokens(a1) / seconds(a1) > R0.

For k = 1 both sides are linear in a1, so the break-even point is one line of algebra:

    L_d a1 + L_t = R0 (A + v + B N_h + a1 B (N_f - N_h))
    a1* = (R0 (A + v + B N_h) - L_t) / (L_d - R0 B (N_f - N_h))

(:func:`break_even_k1`). For k >= 2 the equation is a polynomial; :func:`break_even` finds its root by
bisection over the best gamma of each side, and agrees with the closed form at k = 1. A value above 1
(or at 1: no acceptance below 1 makes the plan pay on this machine) is returned as None; 0 means it pays whatever
is accepted.

Nothing here is specific to a CPU or a GPU: the machine enters only through ``target(R, n)`` and
``draft(R, n)``, the measured seconds of a forward of R rows and n new tokens per row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import require
from .costed import (
    CostFn, StepRates, TokenRates, chunk_cycle, iteration_seconds, lr_cycle, request_cycle, step_cycle,
    tokens_per_iteration,
)

GAMMAS = (0, 4, 6, 8, 12)  # token SD plans priced beside plain decoding (0), on both sides


@dataclass(frozen=True)
class Machine:
    """What a machine costs: ``target(R, n)`` and ``draft(R, n)``, the seconds of a forward of R rows and n
    new tokens per row, and the host's seconds beside the forwards, ``per_iteration`` of a plan without
    drafted steps (per token of plain decoding) and ``per_cycle`` of an LR cycle (the planner's
    ``iteration_overhead`` and ``cycle_overhead``; where a forward takes milliseconds, as on a GPU, they
    move the answer)."""

    target: CostFn
    draft: CostFn
    per_iteration: float = 0.0
    per_cycle: float = 0.0


@dataclass(frozen=True)
class BreakEven:
    """Per k, the step acceptance above which k drafted steps a cycle beat the best plan without drafted
    steps (None: never)."""

    alpha1: dict[int, float | None]


def best_alone(step: StepRates, token: TokenRates, machine: Machine,
               gammas: tuple[int, ...] = GAMMAS) -> tuple[int, float]:
    """The fastest plan that drafts no step on ``machine``: (gamma, tokens per second), gamma 0 being plain decoding."""
    rates = {g: step_cycle(g, step, token, machine.target, machine.draft, machine.per_iteration).rate for g in gammas}
    gamma = max(rates, key=rates.get)
    return gamma, rates[gamma]


def lr_rate(k: int, alpha1: float, step: StepRates, token: TokenRates, machine: Machine,
            gammas: tuple[int, ...] = GAMMAS) -> float:
    """Tokens per second of the best LR plan with k drafted steps (over ``gammas`` inside the rows) at ``alpha1``."""
    at = replace(step, alpha1=alpha1)
    return max(lr_cycle(k, g, at, token, machine.target, machine.draft, machine.per_cycle).rate for g in gammas)


def break_even_k1(rate_alone: float, gamma: int, step: StepRates, token: TokenRates, machine: Machine) -> float:
    """The closed form of the module docstring for one drafted step and SD at ``gamma`` in the rows (the
    raw root: it may fall outside [0, 1], or be infinite where the plan's speed does not depend on a1)."""
    target, draft = machine.target, machine.draft
    per_iteration = tokens_per_iteration(gamma, token)
    lt, ld = step.target_tokens, step.draft_tokens
    n_head = max(0.0, lt - step.head_tokens - 1) / per_iteration
    n_full = max(0.0, lt - 1) / per_iteration
    fixed = (draft(1, max(1, round(lt))) + ld * draft(1, 1) + target(1, max(1, round(ld)) + 1) + step.verify_s
             + machine.per_cycle)
    batch = iteration_seconds(gamma, token, target, draft, 2)
    denominator = ld - rate_alone * batch * (n_full - n_head)
    if denominator == 0:
        return float("inf")
    return (rate_alone * (fixed + batch * n_head) - lt) / denominator


def break_even(step: StepRates, token: TokenRates, machine: Machine, ks: tuple[int, ...] = (1, 2),
               gammas: tuple[int, ...] = GAMMAS, tolerance: float = 1e-4) -> BreakEven:
    """Per k in ``ks``, the smallest alpha1 at which the best LR plan with k drafted steps writes more
    tokens a second on ``machine`` than the best plan with none (``step.alpha1`` is not read). Found on
    a grid of 0.01 and refined by bisection to ``tolerance``."""
    require(all(isinstance(k, int) and k >= 1 for k in ks), f"ks must be integers >= 1, got {ks!r}")
    _, alone = best_alone(step, token, machine, gammas)
    return BreakEven({k: _search(lambda a1, k=k: lr_rate(k, a1, step, token, machine, gammas) - alone, tolerance)
                      for k in ks})  # alpha1 < 1: at 1 a cycle would never end


def _search(gain, tolerance: float) -> float | None:
    """The smallest alpha1 in [0, 0.99] where ``gain`` turns positive: a grid of 0.01, then bisection."""
    if gain(0.0) > 0:
        return 0.0
    above = next((a for a in (i / 100 for i in range(1, 100)) if gain(a) > 0), None)
    if above is None:
        return None
    low, high = above - 0.01, above
    while high - low > tolerance:
        middle = (low + high) / 2
        low, high = (low, middle) if gain(middle) > 0 else (middle, high)
    return high


def break_even_requests(step: StepRates, target: CostFn, draft: CostFn | None, ks: tuple[int, ...] = (1, 2),
                        schedules: tuple[str, ...] = ("sync", "async"), overlap: float = 1.0) -> BreakEven:
    """The same question over a serving engine, where the unit is a request: ``T(R, n)`` is R concurrent
    requests of n tokens after a cached prefix. Without drafted steps the target writes a step in one
    request (:func:`~.costed.chunk_cycle`); with k, a cycle is :func:`~.costed.request_cycle` on the
    better of ``schedules``. (The engine's own token SD, where it was started with one, is in ``target``.)"""
    require(all(isinstance(k, int) and k >= 1 for k in ks), f"ks must be integers >= 1, got {ks!r}")
    alone = chunk_cycle(step.target_tokens, target).rate

    def rate(k: int, a1: float) -> float:
        return max(request_cycle(k, s, replace(step, alpha1=a1), target, draft, 0, overlap).rate for s in schedules)

    return BreakEven({k: _search(lambda a1, k=k: rate(k, a1) - alone, 1e-4) for k in ks})


__all__ = ["BreakEven", "GAMMAS", "Machine", "best_alone", "break_even", "break_even_k1", "break_even_requests",
           "lr_rate"]
