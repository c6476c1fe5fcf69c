"""Closed-form speedups of token-level SD and of Lookahead Reasoning (LR), in the paper's symbols.

Symbols (written once, used everywhere below):

- ``alpha``  token acceptance rate: each drafted token is accepted independently with this probability;
- ``gamma``  drafted tokens per target pass (token SD); ``k2 = gamma + 1`` positions the target scores;
- ``c``      draft/target cost ratio of one forward pass (one token);
- ``alpha1`` step acceptance rate: each drafted step passes the verifier independently with this probability;
- ``c1``     draft/target cost ratio of writing one whole step;
- ``k1``     target steps generated in parallel: the sync loop drafts ``k1 - 1`` steps and runs ``k1`` rows,
             the async pipeline keeps at most ``k1`` target steps in flight;
- ``alpha2, c2, k2``  the token-level layer when it runs inside the steps of LR.

Every speedup is relative to plain autoregressive decoding with the target model, and every formula is
the long-run ratio (expected output per cycle) / (expected time per cycle) of a renewal process (the
renewal-reward theorem), under the assumptions named in each docstring. The common ones:

- *i.i.d. acceptance*: verdicts are independent Bernoulli draws with a fixed rate, so the number of
  accepted drafts before the first rejection, X, is geometric: ``P(X = x) = alpha^x (1 - alpha)``;
- *free parallelism*: one target pass costs the same whatever the number of rows or positions it scores
  (as long as they fit the hardware budget), and verification costs nothing;
- *fixed unit costs*: a target pass (token level) or a target step (step level) takes time 1, a draft pass
  or step takes ``c`` or ``c1``.

All functions are pure. Rates and costs may be floats or numpy arrays (they broadcast); a result is a
float when every input is a scalar. Bad input raises :class:`lookahead_reasoning.errors.ConfigError`.
The derivations are in ``theory/README.md``.
"""

from __future__ import annotations

import math
import numpy as np

from ..errors import require
from .checks import ArrayLike, Mode, check_batch_cost, check_cost, check_count, check_mode, check_rate, check_rates

__all__ = [
    "Mode", "async_depth", "async_s1", "async_s2", "best_gamma", "expected_ceil", "expected_mod", "expected_tokens",
    "f_async", "f_step", "f_sync", "f_sync_batched", "g_token", "h_combined", "lookahead_pays", "parallel_degree",
    "sd_ceiling", "sd_speedup",
]


# ------------------------------------------------------------------------------------------ results


def _out(x: np.ndarray) -> float | np.ndarray:
    """A 0-d result as a Python float, anything else unchanged."""
    x = np.asarray(x, dtype=float)
    return float(x) if x.ndim == 0 else x


# -------------------------------------------------------------------------------------- token level


def expected_tokens(alpha: ArrayLike, gamma: ArrayLike) -> float | np.ndarray:
    """Expected tokens one target pass yields: ``(1 - alpha^(gamma+1)) / (1 - alpha)``.

    The accepted prefix of ``gamma`` drafts is ``min(X, gamma)`` with X geometric (i.i.d. acceptance),
    plus the target's own token (correction or bonus): ``E = 1 + alpha + ... + alpha^gamma``.
    ``gamma = 0`` (no drafts) gives 1.
    """
    a = check_rate(alpha, "alpha")
    n = check_count(gamma, "gamma", minimum=0)
    return _out((1 - a ** (n + 1)) / (1 - a))


def sd_speedup(alpha: ArrayLike, gamma: ArrayLike, c: ArrayLike) -> float | np.ndarray:
    """Token SD speedup ``S(alpha, gamma, c) = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))``.

    One cycle: the draft runs ``gamma`` passes (time ``gamma c``), the target scores all of them in one
    pass (time 1) and the cycle yields :func:`expected_tokens`. Assumes i.i.d. acceptance, a target pass
    whose cost does not grow with ``gamma`` and a draft pass of fixed relative cost ``c``
    (Leviathan et al. 2023, Thm 3.8). ``S <= 1/(1 - alpha)`` always (:func:`sd_ceiling`).
    """
    a, n, cost = check_rates(alpha, gamma, c, "alpha gamma c", minimum=0)
    return _out((1 - a ** (n + 1)) / ((1 - a) * (n * cost + 1)))


def sd_ceiling(alpha: ArrayLike) -> float | np.ndarray:
    """The token-SD ceiling ``1 / (1 - alpha)``: the limit of :func:`sd_speedup` as gamma -> inf at c = 0.

    For every gamma >= 0 and c >= 0, ``S(alpha, gamma, c) <= 1/(1 - alpha)``: the numerator is below 1
    and ``gamma c + 1 >= 1``. No amount of parallel hardware lifts it; only a higher alpha does.
    """
    a = check_rate(alpha, "alpha")
    return _out(1 / (1 - a))


def best_gamma(alpha: float, c: float, gamma_max: int | None = None) -> int:
    """The gamma >= 0 that maximises ``S(alpha, gamma, c)`` (the smallest one on a tie).

    ``S`` is quasi-concave in gamma: ``S(gamma+1) > S(gamma)`` holds exactly while
    ``alpha^(gamma+1) (1 - alpha)(gamma c + 1) > c (1 - alpha^(gamma+1))``, a condition that, once false,
    stays false (see theory/README.md), so a binary search finds the peak. With ``gamma_max`` the search
    is limited to ``gamma <= gamma_max`` (the constrained optimum is ``min(peak, gamma_max)``).
    At ``c = 0`` and ``alpha > 0`` S grows without bound in gamma: ``gamma_max`` is then required.
    """
    a = float(check_rate(alpha, "alpha"))
    cost = float(check_cost(c, "c"))
    if gamma_max is not None:
        gamma_max = int(check_count(gamma_max, "gamma_max", minimum=0))
    if a == 0:
        return 0
    if cost == 0:
        require(gamma_max is not None,
                "best_gamma: at c = 0 the speedup increases for ever with gamma; pass gamma_max")
        return gamma_max  # type: ignore[return-value]

    def rises(n: int) -> bool:  # S(n + 1) > S(n)
        p = a ** (n + 1)
        return p * (1 - a) * (n * cost + 1) > cost * (1 - p)

    # Past gamma = alpha / ((1 - alpha) c) the speedup is below S(0) = 1, so the peak lies before it.
    past_peak = a / (1 - a) / cost
    lo, hi = 0, int(math.ceil(past_peak)) + 1 if past_peak < 2.0 ** 64 else 2 ** 64
    if gamma_max is not None:
        hi = min(hi, gamma_max)
    while lo < hi:  # the first n that does not rise
        mid = (lo + hi) // 2
        if rises(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def g_token(k2: ArrayLike, alpha2: ArrayLike, c2: ArrayLike) -> float | np.ndarray:
    """Token layer in the combined form: ``g(k2) = (1 - alpha2^k2) / ((1 - alpha2)(1 - c2 + c2 k2))``.

    This is :func:`sd_speedup` written with ``k2 = gamma + 1`` positions scored in parallel:
    ``1 - c2 + c2 k2 = gamma c2 + 1``, so ``g(k2) = S(alpha2, k2 - 1, c2)``. ``g(1) = 1`` (no SD).
    Same assumptions as :func:`sd_speedup`.
    """
    a, k, cost = check_rates(alpha2, k2, c2, "alpha2 k2 c2")
    return _out((1 - a ** k) / ((1 - a) * (1 - cost + cost * k)))


# --------------------------------------------------------------------------------------- step level


def f_sync(k1: ArrayLike, alpha1: ArrayLike, c1: ArrayLike) -> float | np.ndarray:
    """Synchronous LR: ``f_sync(k1) = (1 - alpha1^k1) / ((1 - alpha1)(1 - c1 + c1 k1))``.

    One cycle drafts ``k1 - 1`` steps one after another (time ``(k1 - 1) c1``), then the target writes
    ``k1`` steps in one batched pass (time 1: row j continues the prefix with drafts 1..j-1). The cycle
    keeps the accepted drafts up to the first rejection plus the target's step of the next row (a
    correction, or a bonus when all pass): ``min(X + 1, k1)`` steps, expectation
    ``1 + alpha1 + ... + alpha1^(k1-1)``. Assumes i.i.d. step verdicts, a batched target pass that costs
    the same as one step, a free verifier. The algebra is token SD's with ``gamma = k1 - 1``.
    """
    a, k, cost = check_rates(alpha1, k1, c1, "alpha1 k1 c1")
    return _out((1 - a ** k) / ((1 - a) * (1 - cost + cost * k)))


def f_sync_batched(k1: ArrayLike, alpha1: ArrayLike, c1: ArrayLike, beta: ArrayLike) -> float | np.ndarray:
    """Synchronous LR when the batched pass is not free: ``(1 - alpha1^k1) / ((1 - alpha1)(beta + c1 (k1 - 1)))``.

    ``beta`` is the time of the target's ``k1``-row batched step relative to a one-row step (``beta = 1``
    is :func:`f_sync`'s free parallelism, the GPU picture). A CPU, or a GPU already full of token-SD
    positions, pays for every row: with k1 = 2 the step layer wins over the target alone only when
    ``1 + alpha1 > beta + c1`` (see :func:`lookahead_pays`). ``beta`` prices a batch of k1 > 1 rows;
    at ``k1 = 1`` there is one row and no batch, so the value is 1 (the target alone) whatever beta.
    :func:`lookahead_reasoning.theory.costed.f_sync_costed` reads beta off a measured cost table.
    """
    a, k, cost = check_rates(alpha1, k1, c1, "alpha1 k1 c1")
    b = np.where(k > 1, check_batch_cost(beta), 1.0)
    return _out((1 - a ** k) / ((1 - a) * (b + cost * (k - 1))))


def lookahead_pays(alpha1: float, c1: float, beta: float) -> bool:
    """Whether one drafted step per cycle (k1 = 2 rows) beats the target alone: ``1 + alpha1 > beta + c1``.

    Equivalently the step acceptance must exceed ``beta + c1 - 1``: on free parallel hardware
    (``beta = 1``) any ``alpha1 > c1`` pays; a batched step that costs 1.3 one-row steps needs
    ``alpha1 > 0.3 + c1``.
    """
    return bool(f_sync_batched(2, alpha1, c1, beta) > 1.0)


def async_depth(c1: float) -> int | float:
    """``ceil(1/c1)``: the least k1 with ``k1 c1 >= 1``; ``inf`` at ``c1 = 0`` (and below 2^-53).

    This many target steps are in flight at once when the draft, writing a step every ``c1``, feeds
    target steps that each take 1. With at least this many slots the pipeline never waits for a slot.
    (Computed so that float rounding in ``1/c1`` cannot push it one too high.)
    """
    cost = float(check_cost(c1, "c1"))
    inverse = math.inf if cost == 0 else 1 / cost
    if inverse > 2.0 ** 53:  # also c1 = 0: no whole k1 reaches it
        return math.inf
    depth = math.ceil(inverse)
    if depth > 1 and (depth - 1) * cost >= 1:  # 1/c1 rounded up past a whole number
        depth -= 1
    elif depth * cost < 1:  # ... or down below one
        depth += 1
    return depth


def async_s1(alpha1: ArrayLike, c1: ArrayLike) -> float | np.ndarray:
    """Asynchronous LR with enough slots (``k1 >= ceil(1/c1)``): ``S1 = 1 / (c1 + (1 - c1)(1 - alpha1))``.

    The draft never waits: row j starts at ``(j - 1) c1`` and ends 1 later, so a cycle with X accepted
    steps lasts ``X c1 + 1`` and yields ``X + 1`` steps; an accepted step costs ``c1``, a rejected one 1.
    Assumes i.i.d. step verdicts, ``0 <= c1 <= 1``, draft and target running concurrently, target steps
    that take 1 however many are in flight (up to the slot count), a free verifier.
    """
    a = check_rate(alpha1, "alpha1")
    cost = check_cost(c1, "c1", upper=1.0)
    return _out(1 / (cost + (1 - cost) * (1 - a)))


def expected_ceil(alpha: ArrayLike, g: ArrayLike) -> float | np.ndarray:
    """``E[ceil((X + 1)/g)] = 1 / (1 - alpha^g)`` for geometric X (``P(X = x) = alpha^x (1 - alpha)``).

    ``ceil((X+1)/g) = sum_{b >= 0} 1[X >= b g]`` and ``P(X >= n) = alpha^n``: a geometric series.
    """
    a = check_rate(alpha, "alpha")
    n = check_count(g, "g")
    return _out(1 / (1 - a ** n))


def expected_mod(alpha: ArrayLike, g: ArrayLike) -> float | np.ndarray:
    """``E[X mod g] = (alpha - alpha^(g+1) - g (1 - alpha) alpha^g) / ((1 - alpha)(1 - alpha^g))``.

    For geometric X, ``X mod g`` is independent of ``floor(X/g)`` and has the geometric law truncated
    to ``0..g-1``; the formula is its mean.
    """
    a = check_rate(alpha, "alpha")
    n = check_count(g, "g")
    return _out((a - a ** (n + 1) - n * (1 - a) * a ** n) / ((1 - a) * (1 - a ** n)))


def async_s2(k1: ArrayLike, alpha1: ArrayLike, c1: ArrayLike) -> float | np.ndarray:
    """Asynchronous LR with too few slots (``k1 < ceil(1/c1)``):
    ``S2 = (1 - alpha1^k1) / ((1 - alpha1) + c1 (alpha1 - alpha1^(k1+1) - k1 (1 - alpha1) alpha1^k1))``.

    With ``k1 c1 < 1`` row ``j = b k1 + i`` (``i = 1..k1``) waits for the slot of row ``j - k1`` and
    starts at ``b + (i - 1) c1``, so a cycle with X accepted steps lasts
    ``ceil((X+1)/k1) + c1 (X mod k1)``; :func:`expected_ceil` and :func:`expected_mod` give the
    mean and ``S2 = E[X + 1] / E[time]``. Same assumptions as :func:`async_s1`. The expression is only
    the async speedup for ``k1 < ceil(1/c1)``; use :func:`f_async` to pick the branch.
    """
    a, k, cost = check_rates(alpha1, k1, c1, "alpha1 k1 c1", upper=1.0)
    return _out((1 - a ** k) / ((1 - a) + cost * (a - a ** (k + 1) - k * (1 - a) * a ** k)))


def f_async(k1: ArrayLike, alpha1: ArrayLike, c1: ArrayLike) -> float | np.ndarray:
    """Asynchronous LR speedup: ``S1`` if ``k1 >= ceil(1/c1)``, else ``S2`` (see :func:`async_s1`, :func:`async_s2`).

    The paper's Lemma 2: non-decreasing in k1 and constant (= S1) from ``k1 = ceil(1/c1)`` on; more
    slots only let target steps start earlier. ``f_async(k1) >= f_sync(k1)`` for every k1 (README).
    Requires ``0 <= c1 <= 1`` (a draft step no slower than a target step).
    """
    a, k, cost = check_rates(alpha1, k1, c1, "alpha1 k1 c1", upper=1.0)
    k, a, cost = np.broadcast_arrays(k, a, cost)
    levels, where = np.unique(cost, return_inverse=True)
    depth = np.array([async_depth(x) for x in levels], dtype=float)[where].reshape(cost.shape)
    return _out(np.where(k >= depth, async_s1(a, cost), async_s2(k, a, cost)))


def parallel_degree(k1: int, c1: float, mode: Mode = "async") -> int:
    """``PD_f``: target steps actually in flight. ``k1`` (sync) or ``min(ceil(1/c1), k1)`` (async)."""
    k = int(check_count(k1, "k1"))
    check_cost(c1, "c1", upper=None if check_mode(mode) == "sync" else 1.0)
    return k if mode == "sync" else int(min(async_depth(c1), k))


def f_step(k1: ArrayLike, alpha1: ArrayLike, c1: ArrayLike, mode: Mode = "async") -> float | np.ndarray:
    """The step layer of either kind: :func:`f_sync` or :func:`f_async`."""
    return f_sync(k1, alpha1, c1) if check_mode(mode) == "sync" else f_async(k1, alpha1, c1)


def h_combined(k1: ArrayLike, k2: ArrayLike, alpha1: ArrayLike, c1: ArrayLike, alpha2: ArrayLike, c2: ArrayLike,
               mode: Mode = "async") -> float | np.ndarray:
    """LR with token SD inside every step: ``h(k1, k2) = f(k1) g(k2)``.

    The layers multiply when the step timeline is measured in target steps *as written with SD*: token
    SD makes each target step ``g(k2)`` times shorter, and ``c1`` is the draft step's cost relative to
    that shortened target step (if the draft step did not speed up too, use ``c1 * g(k2)``). Each target
    row then scores ``k2`` positions, so the hardware budget is ``PD_f(k1) * k2`` (:func:`parallel_degree`).
    """
    return _out(np.asarray(f_step(k1, alpha1, c1, mode)) * np.asarray(g_token(k2, alpha2, c2)))
