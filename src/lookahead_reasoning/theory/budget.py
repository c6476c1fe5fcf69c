"""Splitting a parallel budget between the step layer (k1) and the token layer (k2).

LR with token SD inside every step has speedup ``h(k1, k2) = f(k1) g(k2)`` and keeps ``PD_f(k1) * k2``
target positions busy at once (``PD_f = k1`` sync, ``min(ceil(1/c1), k1)`` async). Given a budget M
(how many positions one target pass can score at no extra cost), which split is best?

- :func:`best_split` answers exactly, by enumerating every feasible ``(k1, k2)`` (at most M^2 points);
- :func:`regime` names the answer: ``hybrid`` (k1 >= 2 and k2 >= 2), ``token-only`` (k1 = 1),
  ``step-only`` (k2 = 1) or ``neither`` (plain decoding, k1 = k2 = 1);
- :func:`hybrid_conditions` is a closed-form sufficient test in the spirit of the paper's Theorems 3
  (sync) and 4 (async); :func:`paper_hybrid_box` is the example box of conditions quoted from the paper
  for the async case. Both are checked against :func:`best_split` in the tests and in theory/check.py.

Ties (equal speedup up to 1e-13 relative) go to the split that uses less of the budget, then to the
smaller k1: with async, every ``k1 >= ceil(1/c1)`` gives the same f, and the smallest is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from .formulas import Mode, async_depth, best_gamma, check_cost, check_count, check_mode, check_rate, f_step, g_token

__all__ = ["BudgetSplit", "Optimum", "Regime", "best_split", "hybrid_conditions", "paper_hybrid_box", "regime",
           "speedup_grid"]

_TIE = 1e-13


class Regime(StrEnum):
    """Which layers the optimal split uses."""

    HYBRID = "hybrid"
    TOKEN_ONLY = "token-only"
    STEP_ONLY = "step-only"
    NEITHER = "neither"


# (k1 >= 2, k2 >= 2), or in hybrid_conditions (the step layer helps, the token layer helps) -> the regime
_REGIMES = {(True, True): Regime.HYBRID, (False, True): Regime.TOKEN_ONLY, (True, False): Regime.STEP_ONLY,
            (False, False): Regime.NEITHER}


@dataclass(frozen=True)
class Optimum:
    """One allocation: ``k1`` parallel target steps, ``k2`` positions per step, its speedup and budget use."""

    k1: int
    k2: int
    speedup: float
    parallel: int  # PD_f(k1) * k2

    @property
    def regime(self) -> Regime:
        return _REGIMES[self.k1 >= 2, self.k2 >= 2]


@dataclass(frozen=True)
class BudgetSplit:
    """The best split of a budget and the two single-layer optima it is compared with."""

    best: Optimum
    sd_only: Optimum  # best with k1 = 1
    lr_only: Optimum  # best with k2 = 1

    @property
    def regime(self) -> Regime:
        return self.best.regime


def _check(alpha1: float, c1: float, alpha2: float, c2: float, M: int, mode: str) -> tuple:
    check_mode(mode)
    a1 = float(check_rate(alpha1, "alpha1"))
    k1c = float(check_cost(c1, "c1", upper=1.0 if mode == "async" else None))
    a2 = float(check_rate(alpha2, "alpha2"))
    k2c = float(check_cost(c2, "c2"))
    m = int(check_count(M, "M"))
    return a1, k1c, a2, k2c, m


def _pick(k1: np.ndarray, k2: np.ndarray, speedup: np.ndarray, parallel: np.ndarray) -> Optimum:
    near = np.flatnonzero(speedup >= speedup.max() * (1 - _TIE))
    i = near[np.lexsort((k2[near], k1[near], parallel[near]))[0]]
    return Optimum(int(k1[i]), int(k2[i]), float(speedup[i]), int(parallel[i]))


def best_split(alpha1: float, c1: float, alpha2: float, c2: float, M: int, mode: Mode = "async") -> BudgetSplit:
    """``argmax h(k1, k2)`` subject to ``PD_f(k1) * k2 <= M``, by enumeration (exact).

    Assumptions are those of :func:`~lookahead_reasoning.theory.formulas.h_combined`; ``c1 <= 1`` in async.
    """
    grid = speedup_grid(alpha1, c1, alpha2, c2, M, mode)
    m = grid.shape[0]
    # k1 beyond ceil(1/c1) changes nothing in async (same f, same PD_f): stop there, so PD_f(k1) = k1 below.
    top = m if mode == "sync" else int(min(m, async_depth(c1)))
    k1, k2 = np.indices((top, m)) + 1
    ok = k1 * k2 <= m
    k1, k2, speedup = k1[ok], k2[ok], grid[:top][ok]
    parallel, sd, lr = k1 * k2, k1 == 1, k2 == 1
    return BudgetSplit(best=_pick(k1, k2, speedup, parallel), sd_only=_pick(k1[sd], k2[sd], speedup[sd], parallel[sd]),
                       lr_only=_pick(k1[lr], k2[lr], speedup[lr], parallel[lr]))


def regime(alpha1: float, c1: float, alpha2: float, c2: float, M: int, mode: Mode = "async") -> Regime:
    """The regime of the exact optimum (:func:`best_split`)."""
    return best_split(alpha1, c1, alpha2, c2, M, mode).regime


def speedup_grid(alpha1: float, c1: float, alpha2: float, c2: float, M: int, mode: Mode = "async") -> np.ndarray:
    """``h(k1, k2)`` for ``k1, k2 = 1..M`` as an (M, M) array indexed ``[k1 - 1, k2 - 1]``; NaN where
    ``PD_f(k1) * k2 > M``. For heatmaps, and the table :func:`best_split` searches."""
    a1, k1c, a2, k2c, m = _check(alpha1, c1, alpha2, c2, M, mode)
    k1 = np.arange(1, m + 1)
    fk = np.asarray(f_step(k1, a1, k1c, mode))
    gk = np.asarray(g_token(k1, a2, k2c))
    pd = k1 if mode == "sync" else np.minimum(k1, async_depth(k1c))  # PD_f(k1), as parallel_degree gives it
    grid = fk[:, None] * gk[None, :]
    grid[pd[:, None] * k1[None, :] > m] = np.nan
    return grid


def hybrid_conditions(alpha1: float, c1: float, alpha2: float, c2: float, M: int,
                      mode: Mode = "async") -> Regime | None:
    """The regime that closed-form sufficient conditions guarantee, or None when they do not decide.

    Let ``k2* = best_gamma(alpha2, c2) + 1`` be the token layer's own optimum (no budget limit; infinite
    at c2 = 0) and ``k1*`` the step layer's (sync: ``best_gamma(alpha1, c1) + 1``, the same algebra;
    async: ``ceil(1/c1)``, where f_async stops growing). Write "the step layer helps" for
    ``alpha1 > c1`` (sync) or ``alpha1 > 0 and c1 < 1`` (async), "the token layer helps" for
    ``alpha2 > c2``; each is exactly the condition for its layer to beat plain decoding at depth 2, and
    when it fails the layer never beats plain decoding at any depth.

    - ``neither`` if M < 2 or no layer helps;
    - ``token-only`` if only the token layer helps, ``step-only`` if only the step layer helps;
    - ``hybrid`` if both help and ``PD_f(k1*) <= M/2`` and ``k2* <= M/2``: then ``(2, k2*)`` beats the
      best token-only split by the factor ``f(2) > 1`` and ``(k1*, 2)`` beats the best step-only split by
      ``g(2) > 1``, both within budget, so the optimum uses both layers.

    Otherwise (both help, but a layer's own optimum needs more than half the budget) None: use
    :func:`regime`. Proofs in theory/README.md.
    """
    a1, k1c, a2, k2c, m = _check(alpha1, c1, alpha2, c2, M, mode)
    step = a1 > k1c if mode == "sync" else (a1 > 0 and k1c < 1)  # f(k1) > 1 for some k1 (then for k1 = 2)
    token = a2 > k2c
    if m < 2:
        return Regime.NEITHER
    if not (step and token):
        return _REGIMES[step, token]
    k2_star = math.inf if k2c == 0 else best_gamma(a2, k2c) + 1
    pd_star = async_depth(k1c) if mode == "async" else (math.inf if k1c == 0 else best_gamma(a1, k1c) + 1)
    if 2 * pd_star <= m and 2 * k2_star <= m:
        return Regime.HYBRID
    return None


def paper_hybrid_box(alpha1: float, c1: float, alpha2: float, c2: float, M: int) -> bool:
    """The example conditions quoted from the paper for the async case: ``0.52 < alpha1, alpha2 < 0.8``,
    ``c1 < 1/3``, ``c2 < 1/5``, ``M >= 16``. Under them the async optimum is hybrid (checked on a grid
    in theory/check.py). They do not carry over to sync: at ``alpha1 = 0.52, c1 = 0.333, alpha2 = 0.8,
    c2 = 0, M = 16`` the sync optimum is token-only ``(1, 16)``.
    """
    a1, k1c, a2, k2c, m = _check(alpha1, c1, alpha2, c2, M, "sync")  # "sync": no bound on c1 to check
    return 0.52 < a1 < 0.8 and 0.52 < a2 < 0.8 and k1c < 1 / 3 and k2c < 1 / 5 and m >= 16
