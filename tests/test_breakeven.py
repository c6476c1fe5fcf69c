"""The break-even step acceptance (theory.breakeven): its closed form at k = 1, its search, and simulated
cycles on either side of it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_costed import linear_costs

from lookahead_reasoning.theory import CostedPlay, StepRates, TokenRates, simulate_costed_lr, simulate_costed_sd
from lookahead_reasoning.theory.breakeven import Machine, best_alone, break_even, break_even_k1, lr_rate

STEP = StepRates(0.5, 40, 38, 10, 0.01)
TOKEN = TokenRates.plain(0.8)
GPU_LIKE = linear_costs(1.0, 0.05, 0.01), linear_costs(0.25, 0.05, 0.01)  # a row or a token more costs little
MIDDLE = linear_costs(1.0, 0.2, 0.01), linear_costs(0.3, 0.2, 0.01)  # break-even near 0.3 (k = 1) and 0.5 (k = 2)
CPU_LIKE = linear_costs(1.0, 0.9, 0.3), linear_costs(0.3, 0.9, 0.3)  # a row costs nearly a forward more


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(per_row=st.floats(0.0, 0.6), per_token=st.floats(0.0, 0.1), c=st.floats(0.05, 0.6),
       lt=st.integers(5, 60), ld=st.integers(5, 60), head=st.integers(0, 5))
def test_the_search_finds_the_closed_form_at_one_drafted_step(per_row, per_token, c, lt, ld, head):
    target, draft = linear_costs(1.0, per_row, per_token), linear_costs(c, per_row, per_token)
    step = StepRates(0.5, lt, ld, min(head, ld, lt - 1), 0.0)
    machine = Machine(target, draft, 0.002, 0.01)
    found = break_even(step, TOKEN, machine, ks=(1,), gammas=(0,)).alpha1[1]
    alone = best_alone(step, TOKEN, machine, (0,))[1]
    closed = break_even_k1(alone, 0, step, TOKEN, machine)
    if found is None:
        assert not 0 <= closed <= 0.99 or lr_rate(1, 0.99, step, TOKEN, machine, (0,)) <= alone
    elif found == 0.0:
        assert closed <= 0 or lr_rate(1, 0.0, step, TOKEN, machine, (0,)) > alone
    else:
        assert found == pytest.approx(closed, abs=2e-4)


@pytest.mark.parametrize("k", [1, 2])
def test_simulated_cycles_lose_below_the_break_even_and_win_above_it(k):
    """Played token by token (no closed form), LR with k drafted steps writes fewer tokens a second than
    the best plan without drafted steps 0.1 below the break-even, and more 0.1 above it."""
    target, draft = MIDDLE
    point = break_even(STEP, TOKEN, Machine(target, draft), ks=(k,), gammas=(0,)).alpha1[k]
    assert point is not None and 0.15 < point < 0.85
    alone = simulate_costed_sd(0, TOKEN, target, draft, iterations=2000, seed=1).speedup
    for shift, wins in ((-0.1, False), (0.1, True)):
        step = StepRates(point + shift, STEP.target_tokens, STEP.draft_tokens, STEP.head_tokens, STEP.verify_s)
        played = simulate_costed_lr(k, 0, step, TOKEN, target, draft, CostedPlay(cycles=6000, seed=2)).speedup
        assert (played > alone) == wins, (k, shift, played, alone)


def test_where_a_row_costs_nearly_a_forward_no_acceptance_pays():
    assert break_even(STEP, TOKEN, Machine(*CPU_LIKE)).alpha1 == {1: None, 2: None}


def test_cheaper_rows_and_cheaper_drafts_lower_the_break_even():
    points = [break_even(STEP, TOKEN, Machine(linear_costs(1.0, per_row, 0.01), linear_costs(c, per_row, 0.01)),
                         ks=(1,)).alpha1[1]
              for per_row, c in ((0.3, 0.3), (0.1, 0.3), (0.1, 0.1))]
    assert None not in points and points[0] > points[1] > points[2]


def test_the_best_plan_alone_may_be_token_sd():
    """Where scoring tokens is cheap and the draft is good, the bar LR must clear is token SD's, not plain decoding's."""
    machine = Machine(*GPU_LIKE)
    gamma, rate = best_alone(STEP, TokenRates.plain(0.9), machine)
    assert gamma > 0 and rate > best_alone(STEP, TokenRates.plain(0.9), machine, (0,))[1]
    with_sd = break_even(STEP, TokenRates.plain(0.9), machine, ks=(1,)).alpha1[1]
    plain = break_even(STEP, TokenRates.plain(0.9), machine, ks=(1,), gammas=(0,)).alpha1[1]
    assert with_sd is not None and plain is not None and with_sd != plain


def test_over_an_engine_the_bar_is_a_step_in_one_request():
    """Requests, not forwards: where R concurrent requests cost about one, LR pays from a low alpha1; where
    they cost R times one, never."""
    from lookahead_reasoning.theory.breakeven import break_even_requests

    cheap = break_even_requests(STEP, linear_costs(1.0, 0.05, 0.02), linear_costs(0.3, 0.05, 0.02)).alpha1
    dear = break_even_requests(STEP, linear_costs(1.0, 1.0, 0.02), linear_costs(0.3, 1.0, 0.02)).alpha1
    assert cheap[1] is not None and cheap[1] < 0.5 and dear == {1: None, 2: None}


def test_the_planner_s_break_even_is_where_its_own_choice_turns_to_lr():
    """On a planner's table and book, below its break-even the planner prices no LR plan above the best plan
    without drafted steps, above it one (mode auto's own pricing, overheads included)."""
    from lookahead_reasoning.planning.costs import CostGrid, CostTable
    from lookahead_reasoning.planning.estimates import Beta, Book, StepBook, TokenBook
    from lookahead_reasoning.planning.planner import Planner, PlannerConfig

    def grid(per_row: float, c: float) -> CostGrid:
        return CostGrid({r: {n: c * (1 + per_row * (r - 1)) * (1 + 0.01 * (n - 1)) for n in (1, 2, 4, 8, 13)}
                         for r in (1, 2, 3, 4)}, prefix=256)

    costs = CostTable(grid(0.2, 1.0), grid(0.2, 0.3))  # seconds: the host overhead priors are small beside them
    config = PlannerConfig(gammas=(), row_gammas=(0,), draft_stop_below_choices=(), margin=0.0, learn=False,
                           refine=False, progress=False)

    def book(alpha1: float) -> Book:
        return Book(TokenBook.from_rates(1.0, 0.8, 0.8), StepBook(alpha1=Beta(alpha1 * 1e4, (1 - alpha1) * 1e4)))

    point = Planner(costs, book(0.5), config, draft_stop_below=None).break_even(300).alpha1[1]
    assert point is not None and 0.05 < point < 0.95
    for shift, lr_wins in ((-0.03, False), (0.03, True)):
        planner = Planner(costs, book(point + shift), config, draft_stop_below=None)
        rates = {plan: planner.rate(plan, 300) for plan in planner.candidates() if plan.k <= 1}
        best = max(rates, key=rates.get)
        assert (best.k == 1) == lr_wins, (shift, best.label)
