"""LR with token SD inside every step, as one process: the exact expectation of the sync joint cycle.

``h_combined = f(k1) g(k2)`` multiplies two speedups, each derived on its own. In the synchronous
loop the layers meet: the k1 target rows of a cycle are one batch, each row writes its step by SD
iterations, and the batch lasts as many iterations as its *slowest* row. :func:`h_joint` prices that
cycle exactly (under A1 for both layers), with step lengths drawn from a distribution (a measured
one, say), and is what :func:`~.simulate.simulate_lr_sd` plays with the same inputs:

* an SD iteration drafts ``gamma = k2 - 1`` tokens and writes ``G = 1 + min(X, gamma)`` of them
  (``P(X >= j) = alpha2^j``), costing ``1 + gamma c2`` plain target passes;
* a row whose step has ``L`` tokens needs ``N_L`` iterations, the first ``n`` with ``G_1 + .. + G_n >= L``
  (:func:`iterations_cdf`, by dynamic programming over the tokens written);
* a cycle drafts ``k1 - 1`` steps at ``c1 tau`` each (``tau = E[N] (1 + gamma c2)``, one row's mean
  step, as in ``h_combined``), then the batch takes ``E[max of k1 rows' N] (1 + gamma c2)``, with
  ``E[max] = sum_n (1 - F(n)^k1)``, ``F`` the row's CDF mixed over the step lengths;
* it keeps ``min(X1 + 1, k1)`` steps (``E = (1 - alpha1^k1) / (1 - alpha1)``) of ``E[L]`` tokens each.

The speedup over plain decoding (one token per pass) is ``E[steps] E[L] / E[time]`` (renewal-reward).
``h_combined`` takes the batch's time as one row's mean, so it is optimistic by about
``E[max] / E[N]`` wherever rows vary (long gamma, low alpha2, many rows), and by the tokens a step's
last iteration writes past its end (dropped; this remains at ``k1 = 1``); and where step lengths vary,
by the batch waiting for its longest step (this remains at ``k2 = 1``). With one step length and
``k2 = 1`` the two agree (theory/README, section 4; notebook 07 maps the ratio).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from ..errors import require
from .formulas import check_cost, check_count, check_rate

__all__ = ["gain_pmf", "h_joint", "iterations_cdf", "step_length_pmf"]

TAIL = 1e-12  # probability mass left out of an infinite sum


def gain_pmf(gamma: int, alpha: float) -> np.ndarray:
    """``P(G = g)`` for ``g = 0..gamma + 1``: the tokens one SD iteration writes (its accepted drafts
    and the target's own token)."""
    pmf = np.zeros(gamma + 2)
    pmf[1:gamma + 1] = [alpha ** x * (1 - alpha) for x in range(gamma)]
    pmf[gamma + 1] = alpha ** gamma
    return pmf


def iterations_cdf(tokens: int, gamma: int, alpha: float) -> np.ndarray:
    """``F(n) = P(N <= n)`` for ``n = 0, 1, ..``, ``N`` the SD iterations a step of ``tokens`` tokens
    needs; the array ends once ``1 - F`` is below :data:`TAIL` (at most ``tokens`` entries past 0)."""
    gains = gain_pmf(gamma, alpha)
    short = np.zeros(tokens)  # short[t]: P(t tokens written so far, t < tokens), after n iterations
    short[0] = 1.0
    cdf = [0.0]
    for _ in range(tokens):
        grown = np.convolve(short, gains)
        short = grown[:tokens]
        cdf.append(1.0 - short.sum())
        if 1.0 - cdf[-1] < TAIL:
            break
    return np.array(cdf)


@lru_cache(maxsize=8192)
def _cdf(tokens: int, gamma: int, alpha: float) -> tuple[float, ...]:
    """:func:`iterations_cdf`, remembered (a grid of k1 values reuses each length's CDF)."""
    return tuple(iterations_cdf(tokens, gamma, alpha))


def step_length_pmf(lengths) -> dict[int, float]:
    """A step-length distribution from an int, a mapping length -> weight, or observed lengths."""
    if isinstance(lengths, (int, np.integer)):
        require(lengths >= 1, f"a step has at least one token, got {lengths}")
        return {int(lengths): 1.0}
    items = lengths.items() if isinstance(lengths, Mapping) else ((int(x), 1.0) for x in lengths)
    pmf: dict[int, float] = {}
    for length, weight in items:
        require(int(length) >= 1 and weight >= 0, f"step lengths must be >= 1 with weights >= 0, got {length}: {weight}")
        pmf[int(length)] = pmf.get(int(length), 0.0) + float(weight)
    total = sum(pmf.values())
    require(total > 0, "no step lengths given")
    return {length: weight / total for length, weight in sorted(pmf.items())}


def h_joint(k1: int, k2: int, alpha1: float, c1: float, alpha2: float, c2: float, lengths=40) -> float:
    """The sync LR x SD speedup of the joint cycle (module docstring); ``lengths``: the target steps'
    token counts (an int, a mapping length -> weight, or observed lengths)."""
    k1, k2 = int(check_count(k1, "k1")), int(check_count(k2, "k2"))
    a1, a2 = float(check_rate(alpha1, "alpha1")), float(check_rate(alpha2, "alpha2"))
    cost1, cost2 = float(check_cost(c1, "c1")), float(check_cost(c2, "c2"))
    pmf, gamma = step_length_pmf(lengths), k2 - 1
    cdfs = {length: np.array(_cdf(length, gamma, a2)) for length in pmf}
    width = max(len(c) for c in cdfs.values())
    row = sum(p * np.pad(cdfs[length], (0, width - len(cdfs[length])), constant_values=1.0)
              for length, p in pmf.items())  # a row's CDF, mixed over its step's length
    mean_n, mean_max = float((1 - row).sum()), float((1 - row ** k1).sum())
    iteration = 1 + gamma * cost2
    steps = (1 - a1 ** k1) / (1 - a1)
    mean_length = sum(length * p for length, p in pmf.items())
    time = (k1 - 1) * cost1 * mean_n * iteration + mean_max * iteration
    return steps * mean_length / time
