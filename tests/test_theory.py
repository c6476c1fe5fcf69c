"""The speedup theory: sanity values, properties over the parameter space, closed form vs Monte Carlo.

Statistical tests compare a closed form with a seeded simulation and pass when they agree within
5 standard errors of the simulation (``SimResult.agrees``): for a correct formula, a false alarm has
probability below 1e-6 per comparison under the normal approximation, so the few hundred comparisons
hypothesis makes here fail by chance with probability below 1e-3 - and the seeds are fixed.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.theory import (
    LRSDPlay, Regime, async_depth, async_event_timeline, async_s1, async_s2, async_schedule, best_gamma,
    best_split, expected_ceil, expected_mod, expected_tokens, f_async, f_step, f_sync, f_sync_batched,
    g_token, h_combined, hybrid_conditions, lookahead_pays, paper_hybrid_box, parallel_degree, predict, regime,
    sample_run_lengths, sd_ceiling, sd_speedup, simulate_lr_async, simulate_lr_sd, simulate_lr_sync,
    simulate_sd, speedup_grid,
)

SRC = Path(__file__).resolve().parents[1] / "src"

rates = st.floats(0.0, 0.98)
sim_rates = st.floats(0.0, 0.9)
costs = st.floats(0.0, 1.0)
depths = st.integers(1, 24)
fast = settings(max_examples=150, deadline=None)
sims = settings(max_examples=25, deadline=None)


# ----------------------------------------------------------------------------------------------------
# the paper's sanity values (method note section 4), to the two decimals it gives


def test_sanity_values_step_level():
    assert f_sync(4, 0.5, 0.1) == pytest.approx(1.44, abs=0.005)
    assert f_async(4, 0.5, 0.1) == pytest.approx(1.75, abs=0.005)
    assert async_s1(0.5, 0.1) == pytest.approx(1.82, abs=0.005)
    assert f_async(10, 0.5, 0.1) == async_s1(0.5, 0.1)  # k1 = ceil(1/c1) = 10 reaches S1


def test_sanity_values_budget_split():
    split = best_split(0.6, 0.2, 0.7, 0.1, 16, mode="async")
    assert (split.best.k1, split.best.k2) == (4, 4)
    assert split.best.speedup == pytest.approx(3.66, abs=0.005)
    assert split.best.parallel == 16  # PD_f(4) = min(ceil(1/.2), 4) = 4, times k2 = 4
    assert split.sd_only.speedup == pytest.approx(1.98, abs=0.005) and split.sd_only.k2 == 5
    assert split.lr_only.speedup == pytest.approx(1.92, abs=0.005) and split.lr_only.k1 == 5
    assert split.regime is Regime.HYBRID
    assert hybrid_conditions(0.6, 0.2, 0.7, 0.1, 16, "async") is Regime.HYBRID
    assert paper_hybrid_box(0.6, 0.2, 0.7, 0.1, 16)


def test_small_closed_forms_by_hand():
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    assert sd_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)
    assert sd_ceiling(0.75) == pytest.approx(4.0)
    assert g_token(3, 0.5, 0.25) == pytest.approx(sd_speedup(0.5, 2, 0.25))
    assert async_depth(0.1) == 10 and async_depth(0.3) == 4 and async_depth(1.0) == 1
    assert async_depth(1 / 3) == 3 and async_depth(0.0) == math.inf
    assert parallel_degree(7, 0.2, "async") == 5 and parallel_degree(7, 0.2, "sync") == 7
    assert f_sync(1, 0.7, 0.3) == 1.0 and f_async(1, 0.7, 0.3) == pytest.approx(1.0)


# ----------------------------------------------------------------------------------------------------
# token level


@fast
@given(rates, st.integers(0, 200), st.floats(0.0, 10.0))
def test_sd_speedup_below_ceiling(alpha, gamma, c):
    assert sd_speedup(alpha, gamma, c) <= sd_ceiling(alpha) * (1 + 1e-12)


@fast
@given(rates, rates, st.integers(0, 64), st.floats(0.0, 2.0))
def test_sd_speedup_increasing_in_alpha(a, b, gamma, c):
    lo, hi = min(a, b), max(a, b)
    s_lo, s_hi = sd_speedup(lo, gamma, c), sd_speedup(hi, gamma, c)
    assert s_lo <= s_hi * (1 + 1e-12)
    if gamma >= 1 and hi - lo > 1e-6:
        assert s_lo < s_hi


@fast
@given(rates, st.integers(0, 64), st.floats(0.0, 2.0))
def test_token_forms_agree(alpha, gamma, c):
    assert sd_speedup(alpha, gamma, 0.0) == pytest.approx(expected_tokens(alpha, gamma))
    assert g_token(gamma + 1, alpha, c) == pytest.approx(sd_speedup(alpha, gamma, c))


@fast
@given(st.floats(0.0, 0.97), st.floats(0.01, 3.0))
def test_best_gamma_is_the_argmax(alpha, c):
    gamma = best_gamma(alpha, c)
    top = int(math.ceil(alpha / ((1 - alpha) * c))) + 2  # past it S < S(0) = 1
    values = sd_speedup(alpha, np.arange(top + 1), c)
    assert values[gamma] >= values.max() * (1 - 1e-12)
    assert best_gamma(alpha, c, gamma_max=3) == min(gamma, 3)


def test_best_gamma_zero_cost():
    assert best_gamma(0.8, 0.0, gamma_max=12) == 12
    assert best_gamma(0.0, 0.0) == 0
    with pytest.raises(ConfigError, match="gamma_max"):
        best_gamma(0.8, 0.0)


# ----------------------------------------------------------------------------------------------------
# step level


@fast
@given(rates, st.floats(0.0, 1.0), depths)
def test_async_at_least_sync(alpha1, c1, k1):
    assert f_async(k1, alpha1, c1) >= f_sync(k1, alpha1, c1) * (1 - 1e-12)


@fast
@given(rates, st.floats(0.01, 1.0), depths)
def test_async_monotone_then_flat(alpha1, c1, k1):
    """The paper's Lemma 2."""
    now, nxt = f_async(k1, alpha1, c1), f_async(k1 + 1, alpha1, c1)
    assert nxt >= now * (1 - 1e-12)
    if k1 >= async_depth(c1):
        assert now == nxt == async_s1(alpha1, c1)
    else:
        assert now == async_s2(k1, alpha1, c1)
    assert f_async(async_depth(c1) + 50, alpha1, c1) == async_s1(alpha1, c1)


@fast
@given(rates, st.integers(1, 20))
def test_async_branches_meet_when_one_over_c1_is_whole(alpha1, depth):
    c1 = 1.0 / depth
    assert async_s2(depth, alpha1, c1) == pytest.approx(async_s1(alpha1, c1), rel=1e-12)


@fast
@given(rates, st.integers(1, 40))
def test_geometric_identities_against_series(alpha, g):
    x = np.arange(0, 20_000)
    p = (1 - alpha) * alpha ** x  # P(X = x); the tail beyond 20000 is below 0.98^20000
    assert expected_ceil(alpha, g) == pytest.approx(float((p * np.ceil((x + 1) / g)).sum()), rel=1e-9)
    assert expected_mod(alpha, g) == pytest.approx(float((p * (x % g)).sum()), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("alpha,g", [(0.5, 3), (0.8, 4), (0.93, 7)])
def test_geometric_identities_against_samples(alpha, g):
    x = sample_run_lengths(alpha, 200_000, seed=11)
    for values, closed in ((np.ceil((x + 1) / g), expected_ceil(alpha, g)), (x % g, expected_mod(alpha, g))):
        assert abs(values.mean() - closed) <= 5 * values.std() / math.sqrt(x.size)


def test_async_schedule_has_both_regimes():
    few = async_schedule(3, 0.1, 7)  # k1 c1 < 1: rows wait for slots, blocks of 3 start 1 apart
    assert few.start == pytest.approx([0, 0.1, 0.2, 1.0, 1.1, 1.2, 2.0])
    many = async_schedule(10, 0.1, 7)  # enough slots: row j starts at (j - 1) c1
    assert many.start == pytest.approx(0.1 * np.arange(7))


@sims
@given(st.lists(st.integers(0, 30), min_size=1, max_size=40), st.integers(1, 8), costs)
def test_async_event_loop_matches_schedule(runs, k1, c1):
    """The slow reference (one clock, slot heap, cancellation) equals the per-cycle schedule."""
    verdicts = [v for x in runs for v in [True] * x + [False]]
    steps, time = async_event_timeline(verdicts, k1, c1)
    x = np.array(runs)
    schedule = async_schedule(k1, c1, int(x.max()) + 1)
    assert steps == int((x + 1).sum())
    assert time == pytest.approx(float(schedule.settled[x].sum()), rel=1e-12, abs=1e-12)


# ----------------------------------------------------------------------------------------------------
# closed form vs simulation


@sims
@given(sim_rates, st.integers(0, 12), st.floats(0.0, 1.0))
def test_sd_matches_simulation(alpha, gamma, c):
    sim = simulate_sd(alpha, gamma, c, iterations=20_000, seed=1)
    assert sim.agrees(sd_speedup(alpha, gamma, c)), (sim, sd_speedup(alpha, gamma, c))


@sims
@given(sim_rates, costs, depths)
def test_lr_sync_matches_simulation(alpha1, c1, k1):
    sim = simulate_lr_sync(k1, alpha1, c1, cycles=20_000, seed=2)
    assert sim.agrees(f_sync(k1, alpha1, c1)), (sim, f_sync(k1, alpha1, c1))


@sims
@given(sim_rates, costs, depths, st.floats(0.5, 3.0))
def test_lr_sync_with_a_costly_batch_matches_simulation(alpha1, c1, k1, beta):
    sim = simulate_lr_sync(k1, alpha1, c1, cycles=20_000, seed=4, beta=beta)
    assert sim.agrees(f_sync_batched(k1, alpha1, c1, beta)), (sim, f_sync_batched(k1, alpha1, c1, beta))


def test_batched_sync_reduces_to_free_parallelism_and_sets_the_break_even():
    assert f_sync_batched(4, 0.5, 0.1, 1.0) == pytest.approx(f_sync(4, 0.5, 0.1))
    # k1 = 2 pays exactly when 1 + alpha1 > beta + c1
    assert lookahead_pays(0.45, 0.2, 1.3) is False and lookahead_pays(0.55, 0.2, 1.3) is True
    assert lookahead_pays(0.25, 0.2, 1.0) is True
    assert f_sync_batched(2, 0.5, 0.2, 1.3) == pytest.approx(1.5 / 1.5)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="beta"):
            f_sync_batched(2, 0.5, 0.2, bad)
        with pytest.raises(ConfigError, match="beta"):
            simulate_lr_sync(2, 0.5, 0.2, beta=bad)


@sims
@given(sim_rates, costs, depths)
def test_lr_async_matches_simulation(alpha1, c1, k1):
    sim = simulate_lr_async(k1, alpha1, c1, cycles=20_000, seed=3)
    assert sim.agrees(f_async(k1, alpha1, c1)), (sim, f_async(k1, alpha1, c1))


@pytest.mark.parametrize("k1,alpha1,c1", [(4, 0.5, 0.1), (12, 0.5, 0.1), (2, 0.9, 0.3), (6, 0.95, 0.05)])
def test_lr_async_matches_simulation_both_branches(k1, alpha1, c1):
    sim = simulate_lr_async(k1, alpha1, c1, cycles=100_000, seed=4)
    assert sim.agrees(f_async(k1, alpha1, c1))
    assert sim.stderr < 0.01 * sim.speedup  # the check has teeth


@sims
@given(sim_rates, costs, st.integers(1, 8), sim_rates, st.floats(0.0, 0.5), st.integers(1, 8),
       st.sampled_from(["sync", "async"]))
def test_lr_sd_matches_simulation(alpha1, c1, k1, alpha2, c2, k2, mode):
    """h = f g against the composition it assumes (the joint sync process is tests/test_costed.py's)."""
    sim = simulate_lr_sd(k1, k2, alpha1, c1, alpha2, c2, LRSDPlay(mode=mode, cycles=20_000, seed=5, step_tokens=None))
    closed = h_combined(k1, k2, alpha1, c1, alpha2, c2, mode)
    assert sim.agrees(closed), (sim, closed)


# ----------------------------------------------------------------------------------------------------
# budget split and regimes


@fast
@given(rates, costs, rates, st.floats(0.0, 0.5), st.integers(1, 40), st.sampled_from(["sync", "async"]))
def test_best_split_is_feasible_and_maximal(alpha1, c1, alpha2, c2, M, mode):
    split = best_split(alpha1, c1, alpha2, c2, M, mode)
    best = split.best
    assert best.parallel == parallel_degree(best.k1, c1, mode) * best.k2 <= M
    assert best.speedup == pytest.approx(h_combined(best.k1, best.k2, alpha1, c1, alpha2, c2, mode))
    grid = speedup_grid(alpha1, c1, alpha2, c2, M, mode)
    assert best.speedup >= np.nanmax(grid) * (1 - 1e-12)
    assert best.speedup >= max(split.sd_only.speedup, split.lr_only.speedup) * (1 - 1e-12)
    assert split.sd_only.k1 == 1 and split.lr_only.k2 == 1
    assert split.regime is regime(alpha1, c1, alpha2, c2, M, mode)


@fast
@given(rates, costs, rates, st.floats(0.0, 0.5), st.integers(1, 40), st.sampled_from(["sync", "async"]))
def test_hybrid_conditions_agree_with_exact_optimum(alpha1, c1, alpha2, c2, M, mode):
    claimed = hybrid_conditions(alpha1, c1, alpha2, c2, M, mode)
    if claimed is None:
        return
    split = best_split(alpha1, c1, alpha2, c2, M, mode)
    # skip float near-ties (a layer that helps by less than 1e-9): the exact optimum is then a coin toss
    assume(split.best.speedup > (1 + 1e-9) * max(split.sd_only.speedup, split.lr_only.speedup)
           or claimed is not Regime.HYBRID)
    assume(abs(f_step(2, alpha1, c1, mode) - 1) > 1e-9 and abs(g_token(2, alpha2, c2) - 1) > 1e-9)
    assert split.regime is claimed


@fast
@given(st.floats(0.5201, 0.7999), st.floats(0.0, 0.3333), st.floats(0.5201, 0.7999), st.floats(0.0, 0.1999),
       st.integers(16, 64))
def test_paper_box_gives_hybrid_async(alpha1, c1, alpha2, c2, M):
    assert paper_hybrid_box(alpha1, c1, alpha2, c2, M)
    assert regime(alpha1, c1, alpha2, c2, M, "async") is Regime.HYBRID


def test_paper_box_does_not_carry_over_to_sync():
    assert paper_hybrid_box(0.52 + 1e-6, 0.333, 0.8 - 1e-6, 0.0, 16)
    split = best_split(0.52 + 1e-6, 0.333, 0.8 - 1e-6, 0.0, 16, "sync")
    assert split.regime is Regime.TOKEN_ONLY and (split.best.k1, split.best.k2) == (1, 16)


def test_regimes_at_the_edges():
    assert regime(0.7, 0.2, 0.1, 0.2, 16, "sync") is Regime.STEP_ONLY  # token drafts do not pay
    assert regime(0.1, 0.2, 0.7, 0.1, 16, "sync") is Regime.TOKEN_ONLY  # step drafts do not pay
    assert regime(0.7, 0.2, 0.7, 0.1, 1, "async") is Regime.NEITHER  # no budget
    assert hybrid_conditions(0.0, 0.2, 0.0, 0.1, 8, "async") is Regime.NEITHER


def test_speedup_grid_masks_infeasible_cells():
    grid = speedup_grid(0.6, 0.2, 0.7, 0.1, 16, "async")
    assert grid.shape == (16, 16)
    assert np.isnan(grid[4, 3]) and not np.isnan(grid[3, 3])  # (5, 4): 5 * 4 > 16; (4, 4) fits
    assert not np.isnan(grid[15, 2]) and np.isnan(grid[15, 3])  # async k1 = 16 uses only 5 slots


# ----------------------------------------------------------------------------------------------------
# predict


@dataclass
class _SD:
    alpha: float
    gamma: int
    c: float


@dataclass
class _LR:
    k: int
    alpha1: float
    c1: float
    target_sd: _SD | None = None


def test_predict_from_mapping_and_objects():
    p = predict({"alpha": 0.7, "gamma": 4, "c": 0.1, "alpha1": 0.5, "c1": 0.1, "k": 3})
    assert p.k1 == 4
    assert p.sd == pytest.approx(g_token(5, 0.7, 0.1))
    assert p.lr_sync == pytest.approx(1.4423, abs=1e-4) and p.lr_async == pytest.approx(1.7544, abs=1e-4)
    assert p.lr_sd == pytest.approx(p.lr_sync * p.sd) and p.lr_sd_async == pytest.approx(p.lr_async * p.sd)
    q = predict(_LR(k=3, alpha1=0.5, c1=0.1, target_sd=_SD(0.7, 4, 0.1)))
    assert q == p
    only_sd = predict(_SD(0.7, 4, 0.1))
    assert only_sd.sd == p.sd and only_sd.lr_sync is None and only_sd.lr_sd is None


def test_predict_missing_and_odd_fields():
    p = predict({"alpha1": 0.5, "c1": 1.5, "k1": 4, "alpha": float("nan")})
    assert p.sd is None and p.lr_sync is not None and p.lr_async is None  # async needs c1 <= 1
    assert predict({}).sd is None and predict(object()).lr_sync is None
    with pytest.raises(ConfigError, match="alpha1"):
        predict({"alpha1": 1.0, "c1": 0.1, "k": 2})
    with pytest.raises(ConfigError, match="k"):
        predict({"alpha1": 0.5, "c1": 0.1, "k": -1})


# ----------------------------------------------------------------------------------------------------
# bad input and array input


@pytest.mark.parametrize("call,match", [
    (lambda: sd_speedup(1.0, 4, 0.1), "alpha"),
    (lambda: sd_speedup(-0.1, 4, 0.1), "alpha"),
    (lambda: sd_speedup(float("nan"), 4, 0.1), "alpha"),
    (lambda: sd_speedup(0.5, 4, -0.1), "c"),
    (lambda: sd_speedup(0.5, -1, 0.1), "gamma"),
    (lambda: sd_speedup(0.5, 2.5, 0.1), "gamma"),
    (lambda: sd_ceiling(1.2), "alpha"),
    (lambda: f_sync(0, 0.5, 0.1), "k1"),
    (lambda: f_async(3, 0.5, 1.5), "c1"),
    (lambda: f_async(3, 1.0, 0.1), "alpha1"),
    (lambda: g_token(0, 0.5, 0.1), "k2"),
    (lambda: h_combined(2, 2, 0.5, 0.1, 0.5, -0.2), "c2"),
    (lambda: best_split(0.5, 0.1, 0.5, 0.1, 0), "M"),
    (lambda: best_split(0.5, 0.1, 0.5, 0.1, 16, mode="batched"), "mode"),
    (lambda: simulate_lr_async(0, 0.5, 0.1), "k1"),
    (lambda: simulate_sd(0.5, 3, 0.1, iterations=0), "iterations"),
    (lambda: expected_ceil(0.5, 0), "g"),
])
def test_bad_input_raises_config_error(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


def test_arrays_broadcast():
    k1 = np.arange(1, 13)
    values = f_async(k1, 0.5, 0.1)
    assert values.shape == (12,)
    assert values == pytest.approx([f_async(int(k), 0.5, 0.1) for k in k1])
    s = sd_speedup(np.array([0.5, 0.8]), np.array([[1], [4]]), 0.1)
    assert s.shape == (2, 2)
    with pytest.raises(ConfigError):
        sd_speedup(np.array([0.5, 1.0]), 3, 0.1)


def test_theory_needs_no_torch():
    """The theory package imports with torch blocked (the parent package's __init__ is bypassed)."""
    code = textwrap.dedent(f"""
        import sys, types
        sys.modules["torch"] = None  # any 'import torch' now fails
        pkg = types.ModuleType("lookahead_reasoning")
        pkg.__path__ = [{str(SRC / "lookahead_reasoning")!r}]
        sys.modules["lookahead_reasoning"] = pkg
        import lookahead_reasoning.theory as t
        assert abs(t.f_sync(4, 0.5, 0.1) - 1.4423) < 1e-4
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules if sys.modules[m])
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
