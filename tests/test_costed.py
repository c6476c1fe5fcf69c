"""The speed formulas priced by measured costs (theory.costed) against their simulators, their
reduction to the paper's formulas, and the theory repairs that came with them."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.theory import (
    CostedPlay, LRSDPlay, StepRates, TokenRates, drafted_pmf, expected_accepted, expected_tokens, f_sync_batched,
    f_sync_costed, h_combined, lr_cycle, predict, sd_rate, simulate_costed_lr, simulate_costed_sd, simulate_lr_sd,
    step_cycle,
)
from lookahead_reasoning.theory.costed import chunk_cycle, iteration_seconds, max_pmf, request_cycle

SIMS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def linear_costs(base: float, per_row: float, per_token: float):
    """A cost function T(R, n) = base (1 + per_row (R - 1)) (1 + per_token (n - 1))."""
    return lambda r, n: base * (1 + per_row * (r - 1)) * (1 + per_token * (n - 1))


token_models = st.builds(TokenRates, st.floats(0.0, 1.0), st.floats(0.0, 0.95), st.floats(0.0, 0.95))
cost_fns = st.builds(linear_costs, st.floats(0.05, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 0.3))


@SIMS
@given(model=token_models, gamma=st.integers(0, 12), target=cost_fns, draft=cost_fns)
def test_sd_rate_matches_its_simulation(model, gamma, target, draft):
    sim = simulate_costed_sd(gamma, model, target, draft, iterations=20_000, seed=1)
    assert sim.agrees(sd_rate(gamma, model, target, draft)), (sim, sd_rate(gamma, model, target, draft))


@SIMS
@given(k=st.integers(1, 3), alpha1=st.floats(0.0, 0.95), lt=st.integers(2, 60), head=st.integers(0, 60),
       ld=st.floats(1, 60), target=cost_fns, draft=cost_fns)
def test_lr_cycle_with_plain_rows_matches_its_simulation(k, alpha1, lt, head, ld, target, draft):
    step = StepRates(alpha1, lt, ld, min(head, ld, lt), 0.01)
    step = StepRates(alpha1, lt, ld, float(int(step.head_tokens)), 0.01)
    closed = lr_cycle(k, 0, step, TokenRates.plain(0.7), target, draft).rate
    sim = simulate_costed_lr(k, 0, step, TokenRates.plain(0.7), target, draft, CostedPlay(cycles=4000, seed=2))
    assert sim.agrees(closed), (sim, closed)


def test_sd_inside_rows_makes_the_batch_wait_for_its_slowest_row():
    """With SD inside the rows, the joint process is slower than the mean-rows closed form, by a few %."""
    target, draft = linear_costs(0.3, 0.35, 0.05), linear_costs(0.04, 0.1, 0.3)
    step, token = StepRates(0.5, 40, 38, 12, 0.02), TokenRates(0.8, 0.85, 0.4)
    closed = lr_cycle(2, 6, step, token, target, draft).rate
    sim = simulate_costed_lr(2, 6, step, token, target, draft, CostedPlay(cycles=3000, seed=3))
    assert sim.speedup < closed and sim.speedup > 0.85 * closed


def test_without_a_stop_the_token_layer_is_leviathans():
    for alpha in (0.0, 0.3, 0.8):
        for gamma in (1, 4, 9):
            assert expected_accepted(gamma, TokenRates.plain(alpha)) + 1 == pytest.approx(expected_tokens(alpha, gamma))


def test_drafted_counts_form_a_distribution():
    for gamma, sigma in ((0, 0.5), (1, 0.3), (6, 0.0), (6, 1.0), (8, 0.7)):
        pmf = drafted_pmf(gamma, sigma)
        assert pmf.sum() == pytest.approx(1.0) and (pmf >= 0).all() and pmf.size == gamma + 1
        both = max_pmf(pmf, 3)
        assert both.sum() == pytest.approx(1.0)
        assert (both * range(pmf.size)).sum() >= (pmf * range(pmf.size)).sum() - 1e-12  # the max of 3 draws is larger


def test_costed_sync_reads_beta_off_the_table_and_matches_its_simulation():
    from lookahead_reasoning.theory import simulate_lr_sync

    target = linear_costs(0.5, 0.35, 0.2)  # a batch of rows costs more the more tokens each row feeds
    for i, (k1, a, c, n) in enumerate(((2, 0.5, 0.1, 1), (3, 0.7, 0.2, 1), (2, 0.6, 0.05, 13))):
        sim = simulate_lr_sync(k1, a, c, cycles=20_000, seed=10 + i, beta=target(k1, n) / target(1, n))
        assert sim.agrees(f_sync_costed(k1, a, c, target, n)), (k1, n)
    assert f_sync_costed(1, 0.5, 0.1, target) == 1.0


def test_lr_cycle_reduces_to_f_sync_batched():
    """Price every target pass of the cycle like the paper (one batched step of beta per token of
    target work, the scoring pass standing in for the rows' first token), make the draft's catch-up
    free and the draft cost c1 per token: lr_cycle's rate is f_sync_batched over a target token's time."""
    t11, c1, beta = 0.4, 0.15, 1.3
    target = lambda r, n: t11 * beta if (r > 1 or n > 1) else t11  # noqa: E731
    draft = lambda r, n: c1 * t11 if n == 1 else 0.0  # noqa: E731
    for k, a1 in ((1, 0.5), (2, 0.7), (3, 0.3)):
        est = lr_cycle(k, 0, StepRates(a1, 40, 40, 0, 0.0), TokenRates.plain(0.5), target, draft)
        assert est.rate == pytest.approx(f_sync_batched(k + 1, a1, c1, beta) / t11)


def test_step_cycle_is_sd_over_one_step():
    target, draft = linear_costs(0.3, 0.3, 0.05), linear_costs(0.04, 0.1, 0.2)
    step, token = StepRates(0.5, 40, 40), TokenRates(0.8, 0.9, 0.3)
    assert step_cycle(8, step, token, target, draft).rate == pytest.approx(sd_rate(8, token, target, draft))
    assert step_cycle(0, step, token, target, draft).rate == pytest.approx(1 / target(1, 1))
    assert iteration_seconds(4, token, target, draft, rows=2) > iteration_seconds(4, token, target, draft, rows=1)


def test_models_refuse_bad_numbers():
    with pytest.raises(ConfigError, match="sigma"):
        TokenRates(1.5, 0.5, 0.5)
    with pytest.raises(ConfigError, match="alpha_sure"):
        TokenRates(0.5, 1.0, 0.5)
    with pytest.raises(ConfigError, match="at least one token"):
        StepRates(0.5, 0, 10)
    with pytest.raises(ConfigError, match="head start"):
        StepRates(0.5, 40, 10, 11)


# ---------------------------------------------------------------------------------------- repairs

def test_one_row_is_no_batch():
    assert f_sync_batched(1, 0.5, 0.2, 1.7) == 1.0
    assert f_sync_batched(2, 0.5, 0.2, 1.0) == pytest.approx(1.5 / 1.2)


def test_lr_sd_simulation_plays_the_joint_process():
    """h = f g assumes every row of a batch takes the mean step time; the joint process pays for the
    slowest row (and for the tokens an iteration writes past a step's end)."""
    joint = simulate_lr_sd(3, 5, 0.6, 0.2, 0.7, 0.1, LRSDPlay(mode="sync", cycles=20_000, seed=5))
    assert joint.speedup < 0.97 * h_combined(3, 5, 0.6, 0.2, 0.7, 0.1, "sync")
    plain = simulate_lr_sd(1, 1, 0.6, 0.2, 0.7, 0.1, LRSDPlay(mode="sync", cycles=2_000, seed=5))
    assert plain.speedup == pytest.approx(1.0)
    composed = simulate_lr_sd(3, 5, 0.6, 0.2, 0.7, 0.1, LRSDPlay(mode="sync", cycles=20_000, seed=5, step_tokens=None))
    assert composed.agrees(h_combined(3, 5, 0.6, 0.2, 0.7, 0.1, "sync"))


def test_predict_prices_the_batch_when_given_costs():
    stats = {"alpha1": 0.5, "c1": 0.1, "k": 1, "alpha": 0.7, "gamma": 8, "c": 0.1}
    free = predict(stats)
    target = linear_costs(0.3, 0.4, 0.0)
    priced = predict(stats, costs=target)
    assert priced.lr_sync == pytest.approx(f_sync_batched(2, 0.5, 0.1, 1.4))
    assert priced.lr_sync < free.lr_sync and priced.lr_sd < free.lr_sd
    assert math.isclose(priced.sd, free.sd)


# ---------------------------------------------------------------------------------------- over an engine

def _play_sync_requests(k, step, target, draft, load, overlap, cycles, rng):
    """Play sync LR cycles over an engine: each drafted step passes with probability alpha1 until the
    first rejection; a cycle pays its drafts (with ``overlap`` under load), one batch of k + 1 + load
    requests, and the verifier per judged pair. Returns (tokens, seconds) over all cycles."""
    tokens = seconds = 0.0
    td = draft(1, step.draft_tokens)
    for _ in range(cycles):
        m = 0
        while m < k and rng.random() < step.alpha1:
            m += 1
        judged = min(m + 1, k)
        tokens += m * step.draft_tokens + step.target_tokens
        seconds += (k * td * (overlap if load else 1.0) + target(k + 1 + load, step.target_tokens)
                    + judged * step.verify_s)
    return tokens, seconds


@SIMS
@given(k=st.integers(1, 4), alpha1=st.floats(0.0, 0.95), load=st.integers(0, 3), overlap=st.floats(1.0, 4.0),
       target=cost_fns, draft=cost_fns)
def test_sync_request_cycle_matches_its_simulation(k, alpha1, load, overlap, target, draft):
    import random

    step = StepRates(alpha1, 40.0, 30.0, verify_s=0.01)
    tokens, seconds = _play_sync_requests(k, step, target, draft, load, overlap, 4000, random.Random(7))
    priced = request_cycle(k, "sync", step, target, draft, load, overlap)
    assert priced.rate == pytest.approx(tokens / seconds, rel=0.05)


def test_request_cycles_over_free_rows_and_a_free_draft_are_the_paper_ceiling():
    """Rows free (T(R, n) = T(1, n)), drafts free, no verifier cost: a cycle costs one target step and
    keeps E[m] drafted steps, so LR's speed-up over one request per step is f_sync's with c = 0:
    (1 - alpha1^(k+1)) / (1 - alpha1) steps per cycle, in either schedule."""
    step = StepRates(0.6, 40.0, 40.0)
    for k in (1, 2, 3):
        for schedule in ("sync", "async"):
            cycle = request_cycle(k, schedule, step, lambda r, n: 0.02 * n, lambda r, n: 0.0)
            plain = chunk_cycle(40.0, lambda r, n: 0.02 * n)
            assert cycle.rate / plain.rate == pytest.approx((1 - 0.6 ** (k + 1)) / (1 - 0.6))


def test_async_request_cycles_pay_the_overlap_and_load_makes_every_plan_dearer():
    step, target = StepRates(0.5, 40.0, 40.0), linear_costs(0.5, 0.8, 0.05)
    draft = linear_costs(0.2, 0.8, 0.05)
    for k in (1, 2):
        base = request_cycle(k, "async", step, target, draft)
        assert request_cycle(k, "async", step, target, draft, overlap=3.0).seconds == pytest.approx(3 * base.seconds)
        for schedule in ("sync", "async"):
            by_load = [request_cycle(k, schedule, step, target, draft, load).seconds for load in range(4)]
            assert by_load == sorted(by_load) and by_load[0] < by_load[-1]
    assert chunk_cycle(256, target, 2).seconds == target(3, 256)
    with pytest.raises(ConfigError, match="schedule"):
        request_cycle(1, "eager", step, target, draft)
