"""Seeded Monte Carlo of token SD and synchronous LR priced by measured costs T(R, n).

They play the processes of :mod:`.costed` token by token and never call its closed forms:

* ``simulate_costed_sd``: an endless stream of SD iterations. Per iteration every drafted token is
  sure with probability sigma (drafting stops after an unsure one, or at gamma) and accepted with
  its own probability; the leading accepted tokens plus one target token are kept. The closed form
  :func:`.costed.sd_rate` is exact for this process (renewal-reward), so the two must agree.
* ``simulate_costed_lr``: LR cycles. The R = k + 1 target rows are played *jointly*: with SD inside
  (gamma > 0) each row draws its own iterations, a row finishing with a rejected draft cancels the
  rows after it, and the batch runs until its last live row finishes: a batch waits for its slowest
  row. The closed form :func:`.costed.lr_cycle` takes each row's iteration count at its mean; with
  plain rows (gamma = 0, whole-token steps) that is exact and the two agree; with SD inside the rows
  the gap is the price of the slowest row, reported by ``theory/check.py``.

Times are in seconds of the given cost functions; ``SimResult.speedup`` is then tokens per second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import require
from .costed import CostFn, StepRates, TokenRates
from .formulas import check_count
from .simulate import SimResult, _ratio

__all__ = ["CostedPlay", "simulate_costed_lr", "simulate_costed_sd"]


def _iteration(rng: np.random.Generator, gamma: int, model: TokenRates) -> tuple[int, int]:
    """One SD iteration of one row: (drafted D, accepted A)."""
    drafted, accepted, leading = 0, 0, True
    while drafted < gamma:
        drafted += 1
        sure = rng.random() < model.sigma
        ok = rng.random() < (model.alpha_sure if sure else model.alpha_unsure)
        leading = leading and ok
        accepted += leading
        if not sure:
            break
    return drafted, accepted


def simulate_costed_sd(gamma: int, model: TokenRates, target: CostFn, draft: CostFn, *,
                       iterations: int = 50_000, seed: int = 0, overhead: float = 0.0) -> SimResult:
    """Token SD priced by ``target``/``draft``: tokens per second (``SimResult.speedup``)."""
    gamma = int(check_count(gamma, "gamma", 0))
    rng = np.random.default_rng(seed)
    n = int(check_count(iterations, "iterations"))
    tokens, seconds = np.empty(n), np.empty(n)
    for i in range(n):
        d, a = _iteration(rng, gamma, model)
        tokens[i] = a + 1
        seconds[i] = target(1, 1 + d) + d * draft(1, 1) + overhead
    return _ratio(tokens, seconds)


def _rows_phase(rng: np.random.Generator, needs: list[float], verdicts: list[bool], gamma: int,
                model: TokenRates, target: CostFn, draft: CostFn) -> float:
    """Seconds of the target's batched rows (module docstring): play iterations until no row is live.

    ``needs[j]`` tokens row j still has to write; ``verdicts[j]`` the verifier's verdict on row j's drafted
    counterpart (rows without one: True). Every iteration costs the whole batch (R rows), as a padded batch does.
    """
    rows, written, seconds = len(needs), [0.0] * len(needs), 0.0
    while True:
        done = [w >= need for w, need in zip(written, needs)]  # a row with nothing left is done at once
        cut = next((j for j in range(rows) if done[j] and not verdicts[j]), rows)  # the rows after it are cancelled
        live = [not done[j] and j < cut for j in range(rows)]
        if not any(live):
            return seconds
        draws = [_iteration(rng, gamma, model) if live[j] else (0, 0) for j in range(rows)]
        n = 1 + max(d for d, _ in draws)  # new tokens per row of the target's forward
        seconds += target(rows, n) + (n - 1) * draft(rows, 1)
        written = [w + a + 1 if alive else w for w, (_, a), alive in zip(written, draws, live)]


@dataclass(frozen=True)
class CostedPlay:
    """How :func:`simulate_costed_lr` plays: ``cycles`` LR cycles from ``seed``, each paying
    ``overhead`` seconds on top of its forwards and verdicts."""

    cycles: int = 20_000
    seed: int = 0
    overhead: float = 0.0


def simulate_costed_lr(k: int, gamma: int, step: StepRates, token: TokenRates, target: CostFn, draft: CostFn,
                       play: CostedPlay = CostedPlay()) -> SimResult:
    """Synchronous LR cycles priced by ``target``/``draft``; the rows played jointly (module docstring),
    as ``play`` says (:class:`CostedPlay`).

    The fixed parts of a cycle are priced as :func:`.costed.lr_cycle` prices them (the draft's
    catch-up and k steps, the scoring pass, the verifier per judged pair up to the first rejection).
    """
    k = int(check_count(k, "k"))
    gamma = int(check_count(gamma, "gamma", 0))
    n = int(check_count(play.cycles, "cycles"))
    require(float(step.target_tokens).is_integer() and float(step.head_tokens).is_integer(),
            "the simulator plays whole tokens: give integer target_tokens and head_tokens")
    rng = np.random.default_rng(play.seed)
    lt, ld, a1 = step.target_tokens, step.draft_tokens, step.alpha1
    fixed = draft(1, max(1, round(lt))) + k * ld * draft(1, 1) + target(1, max(1, round(k * ld)) + 1) + play.overhead
    needs = [max(0.0, lt - step.head_tokens - 1)] * k + [max(0.0, lt - 1)]
    tokens, seconds = np.empty(n), np.empty(n)
    for i in range(n):
        verdicts = list(rng.random(k) < a1) + [True]
        first_reject = next((j for j in range(k) if not verdicts[j]), k)
        phase = _rows_phase(rng, needs, verdicts, gamma, token, target, draft)
        tokens[i] = ld * first_reject + lt
        seconds[i] = fixed + phase + step.verify_s * min(first_reject + 1, k)
    return _ratio(tokens, seconds)
