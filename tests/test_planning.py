"""Mode auto: the cost table (interpolation, online refinement, the on-disk cache), the learned rates,
the planner's choice against the analytic optimum, the step gate, and auto's lossless property."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning import ConfigError, LookaheadGenerator, StepConfig
from lookahead_reasoning.decoding import generate
from lookahead_reasoning.lm import ForwardTiming
from lookahead_reasoning.planning import (Beta, Book, CostGrid, CostTable, Plan, Planner, PlannerConfig,
                                          load_or_profile)
from lookahead_reasoning.planning import costs as costs_mod
from lookahead_reasoning.planning.costs import DRAFT_GRID, TARGET_GRID
from lookahead_reasoning.planning.estimates import TokenBook, load_book, save_book
from lookahead_reasoning.theory import lr_cycle, step_cycle

from lr_helpers import exact, frequent_char, tiny_lm

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def grid_from(fn, grid=TARGET_GRID) -> CostGrid:
    return CostGrid({r: {n: fn(r, n) for n in ns} for r, ns in grid.items()})


def table(target_fn, draft_fn) -> CostTable:
    return CostTable(grid_from(target_fn), grid_from(draft_fn, DRAFT_GRID))


# ---------------------------------------------------------------------------------------- cost grid

def test_grid_is_exact_on_its_points_and_linear_between():
    fn = lambda r, n: 0.3 + 0.1 * r + 0.02 * n * r  # noqa: E731 - linear in n for every r, linear in r
    grid = grid_from(fn)
    for r, ns in TARGET_GRID.items():
        for n in ns:
            assert grid(r, n) == pytest.approx(fn(r, n))
    assert grid(1, 5) == pytest.approx(fn(1, 5))  # between grid points
    assert grid(2, 40) == pytest.approx(fn(2, 40), rel=0.1)  # past the 2-row curve: the 1-row shape
    assert grid(4, 6) == pytest.approx(fn(4, 6), rel=1e-6)  # past the measured rows: linear in R


def test_grid_learns_from_timed_forwards_and_survives_a_round_trip():
    grid = grid_from(lambda r, n: 0.5)
    for _ in range(60):
        grid.observe(ForwardTiming(1, 1, grid.prefix, 1.0))
    assert grid(1, 1) == pytest.approx(1.0, rel=0.05)  # moved to what the forwards measure
    assert grid(3, 13) == pytest.approx(0.5)  # untouched far away
    again = CostGrid.from_json(json.loads(json.dumps(grid.to_json())))
    assert again(1, 1) == grid(1, 1) and again(2, 9) == grid(2, 9)
    with pytest.raises(ValueError):
        CostGrid.from_json({"format": costs_mod.FORMAT, "prefix": 1, "per_context": 0, "points": {"2": {"1": 1.0}}})


def test_cost_table_is_cached_and_measured_again_when_the_setup_changes(tmp_path, monkeypatch, caplog):
    lm = tiny_lm(0)
    calls = []
    real_profile = costs_mod.profile

    def counting(*args, **kw):
        calls.append(1)
        return real_profile(*args, **kw)

    small = {1: (1, 2, 4), 2: (1, 2)}
    monkeypatch.setattr(costs_mod, "profile", counting)
    grid, path = load_or_profile(lm, small, progress=False, root=tmp_path)
    assert path.exists() and len(calls) == 1 and set(grid.points) == {1, 2}
    load_or_profile(lm, small, progress=False, root=tmp_path)
    assert len(calls) == 1  # read back, not measured
    for change in ({"dtype": "torch.bfloat16"}, {"onednn": True}, {"cpu": "another CPU"}, {"model": "other"}):
        key = {**costs_mod.cost_key(lm), **change}
        monkeypatch.setattr(costs_mod, "cost_key", lambda _lm, key=key: key)
        _, other = load_or_profile(lm, small, progress=False, root=tmp_path)
        assert other != path  # another setup, another table
    assert len(calls) == 5
    monkeypatch.undo()
    monkeypatch.setattr(costs_mod, "profile", counting)
    path.write_text("{ not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        grid, again = load_or_profile(lm, small, progress=False, root=tmp_path)
    assert again == path and len(calls) == 6 and "unreadable" in caplog.text
    assert json.loads(path.read_text())["format"] == costs_mod.FORMAT  # rewritten whole


def test_profile_times_forwards_of_exactly_the_grid_shapes():
    lm = tiny_lm(0)
    seen = []
    lm.listeners.append(lambda t: seen.append((t.rows, t.width, t.cached)))
    small = {1: (1, 3), 2: (1, 4)}
    grid = costs_mod.profile(lm, small, prefix=24, progress=False)
    timed = {(r, n) for r, n, cached in seen if cached == 23}  # forks re-feed the prefix's last token
    assert {(r, n) for r, ns in small.items() for n in ns} <= timed
    assert all(n in small.get(r, ()) or (r, n) == (1, 1) for r, n in timed)
    assert (1, 1, costs_mod.LONG_PREFIX - 1) in seen  # the longer context, one token wide too
    assert set(grid.points) == {1, 2}


def test_a_table_of_an_older_format_is_measured_again(tmp_path, caplog):
    lm = tiny_lm(0)
    small = {1: (1, 2)}
    _, path = load_or_profile(lm, small, progress=False, root=tmp_path)
    old = json.loads(path.read_text())
    old["format"] = costs_mod.FORMAT - 1
    old["points"]["1"]["1"] = 123.0
    path.write_text(json.dumps(old), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        grid, again = load_or_profile(lm, small, progress=False, root=tmp_path)
    assert again == path and grid(1, 1) < 123.0 and "format" in caplog.text


# ---------------------------------------------------------------------------------------- the book

def test_token_book_counts_only_judged_tokens():
    book = TokenBook(Beta(1, 1), Beta(1, 1), Beta(1, 1))
    book.record([True, True, False], drafted=3, accepted=1)  # token 2 rejected, token 3 never judged
    assert (book.alpha_sure.a, book.alpha_sure.b) == (2, 2)
    assert (book.alpha_unsure.a, book.alpha_unsure.b) == (1, 1)
    assert (book.sigma.a, book.sigma.b) == (3, 2)


def test_book_round_trip_caps_weights(tmp_path):
    book = Book()
    book.step.alpha1.add(500, 500)
    path = tmp_path / "b.json"
    save_book(book, path)
    back = load_book(path)
    assert back.step.alpha1.weight <= 40.0 + 1e-9 and back.step.alpha1.mean == pytest.approx(0.5, abs=0.01)
    path.write_text("[]", encoding="utf-8")
    assert load_book(path).step.alpha1.mean == Book().step.alpha1.mean  # unreadable: the priors


# ---------------------------------------------------------------------------------------- the planner

costs_st = st.tuples(st.floats(0.05, 1.0), st.floats(0.0, 1.5), st.floats(0.0, 0.3),  # target base, per row, per token
                     st.floats(0.005, 0.3), st.floats(0.0, 0.5), st.floats(0.0, 0.3))  # draft


def _linear(base, per_row, per_token):
    return lambda r, n: base * (1 + per_row * (r - 1)) * (1 + per_token * (n - 1))


def _book(sigma, a_s, a_u, alpha1, lt, agreement) -> Book:
    book = Book()
    book.token.sigma, book.token.alpha_sure, book.token.alpha_unsure = Beta(sigma * 50, (1 - sigma) * 50), \
        Beta(a_s * 50, (1 - a_s) * 50), Beta(a_u * 50, (1 - a_u) * 50)
    book.step.alpha1 = Beta(alpha1 * 50, (1 - alpha1) * 50)
    book.step.target_tokens.value = book.step.draft_tokens.value = lt
    book.step.agreement.value = agreement
    return book


@FAST
@given(c=costs_st, sigma=st.floats(0.05, 0.95), a_s=st.floats(0.05, 0.95), a_u=st.floats(0.05, 0.95),
       alpha1=st.floats(0.05, 0.95), lt=st.floats(5, 90), agreement=st.floats(0, 1))
def test_planner_picks_the_analytically_best_plan(c, sigma, a_s, a_u, alpha1, lt, agreement):
    target_fn, draft_fn = _linear(*c[:3]), _linear(*c[3:])
    costs = table(target_fn, draft_fn)
    book = _book(sigma, a_s, a_u, alpha1, lt, agreement)
    config = PlannerConfig(margin=0.0)
    planner = Planner(costs, book, config)
    choice = planner.choose(context=costs.target.prefix)
    token, step = book.token.model(), book.step.model()
    o_i, o_c = book.token.iteration_overhead.value, book.step.cycle_overhead.value

    def rate(plan):  # the formulas called directly, on the same interpolated costs
        t, d = (lambda r, n: costs.target(r, n)), (lambda r, n: costs.draft(r, n))
        if plan.k == 0:
            return step_cycle(plan.gamma, step, token, t, d, o_i).rate
        return lr_cycle(plan.k, plan.gamma, step, token, t, d, o_c).rate

    plans = [Plan(0, 0)] + [Plan(0, g) for g in config.gammas] + [
        Plan(k, g) for k in (1, 2) for g in config.row_gammas]
    best = max(rate(p) for p in plans)
    assert rate(choice.plan) == pytest.approx(best, rel=1e-9)
    assert choice.rate == pytest.approx(best, rel=1e-9)


def test_hysteresis_keeps_a_plan_that_is_nearly_as_good():
    costs = table(_linear(0.3, 0.35, 0.05), _linear(0.04, 0.1, 0.2))
    planner = Planner(costs, Book(), PlannerConfig(margin=0.5))
    first = planner.choose(300).plan
    planner.current = Plan(0, 4) if first != Plan(0, 4) else Plan(0, 6)
    kept = planner.current
    assert planner.estimate(kept, 300).rate * 1.5 >= planner.estimate(first, 300).rate
    assert planner.choose(300).plan == kept  # within the margin: no switch
    planner.current = Plan(0, 0)
    planner.config = PlannerConfig(margin=0.0)
    assert planner.choose(300).plan == first  # plain decoding is far slower here: switch


def test_different_costs_give_different_plans():
    """Free parallelism (a GPU with room): SD with a large gamma. Forwards whose cost grows with every
    token and row (a CPU with a slow kernel): plain decoding."""
    book = _book(0.9, 0.9, 0.4, 0.6, 40, 0.5)
    free = Planner(table(lambda r, n: 0.02, lambda r, n: 0.002), book, PlannerConfig(margin=0.0)).choose(300).plan
    dear = Planner(table(_linear(0.3, 1.0, 1.0), _linear(0.1, 1.0, 1.0)), book, PlannerConfig(margin=0.0)).choose(300).plan
    assert free.gamma >= 8 and dear == Plan(0, 0)


def test_step_gate_keeps_rows_only_where_they_pay():
    book = _book(0.9, 0.9, 0.4, 0.5, 40, 0.5)
    book.step.bands = [Beta(1, 99)] * 4 + [Beta(99, 1)]  # only fully agreeing steps are accepted
    costs = table(_linear(0.3, 0.35, 0.05), _linear(0.04, 0.1, 0.2))
    planner = Planner(costs, book, PlannerConfig())
    plan = Plan(2, 8)
    assert planner.rows_to_run(plan, 300, [40, 40], [0.1, 0.2]) == 1  # hopeless drafts: the target alone
    # exact drafts: their rows cost nothing; a third row would write a new step in a 3-row batch,
    # dearer than writing it alone next cycle
    assert planner.rows_to_run(plan, 300, [40, 40], [1.0, 1.0]) == 2
    book.step.bands = [Beta(99, 1)] * 5  # every drafted step accepted
    free = Planner(table(lambda r, n: 0.3, _linear(0.04, 0.0, 0.2)), book, PlannerConfig())
    assert free.rows_to_run(plan, 300, [40, 40], [0.5, 0.5]) == 3  # rows free as on a roomy GPU: all of them
    dear = Planner(table(_linear(0.3, 1.0, 0.05), _linear(0.04, 0.1, 0.2)), book, PlannerConfig())
    assert dear.rows_to_run(plan, 300, [40, 40], [0.5, 0.5]) < 3  # each row doubles the batch: not all
    ungated = Planner(costs, book, PlannerConfig(gate=False))
    assert ungated.rows_to_run(plan, 300, [40, 40], [0.1, 0.2]) == 3


def test_planner_config_refuses_bad_settings():
    with pytest.raises(ConfigError, match="max_k"):
        PlannerConfig(max_k=-1)
    with pytest.raises(ConfigError, match="gammas"):
        PlannerConfig(gammas=(0,))
    with pytest.raises(ConfigError, match="margin"):
        PlannerConfig(margin=1.5)


# ---------------------------------------------------------------------------------------- auto

TARGET = tiny_lm(0)


def _auto(draft, prompt, tmp_path, cap=10, **kw):
    steps = StepConfig((frequent_char(TARGET, list(prompt)),), cap)
    return LookaheadGenerator(target=TARGET, draft=draft, verifier=exact(), steps=steps, mode="auto",
                              planner=PlannerConfig(progress=False, cache_dir=str(tmp_path), **kw))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(prompt=st.lists(st.integers(0, 96), min_size=1, max_size=10), max_k=st.sampled_from([1, 2]))
def test_auto_with_identical_draft_and_exact_verifier_is_greedy_ar(prompt, max_k, tmp_path):
    gen = _auto(tiny_lm(0), prompt, tmp_path, max_k=max_k, margin=0.0)
    auto = gen.generate(prompt, max_new_tokens=40)
    ar = generate(TARGET, prompt, max_new_tokens=40)
    assert auto.token_ids == ar.token_ids and auto.stop_reason == ar.stop_reason
    assert auto.stats.plan_counts() and sum(auto.stats.plan_counts().values()) == len(auto.stats.cycles)


@pytest.mark.parametrize("regime", ["free", "dear"])
def test_auto_runs_every_kind_of_plan_losslessly(regime, tmp_path, monkeypatch):
    """Force the planner's hand with extreme tables: LR cycles (free parallelism, an exact draft) and
    plain decoding (dear forwards); both must still write greedy AR's text."""
    prompt = [9, 8, 7, 6]
    gen = _auto(tiny_lm(0), prompt, tmp_path, cap=12, margin=0.0, learn=False, refine=False)
    planning = gen.planning()
    if regime == "free":
        planning.costs.target = grid_from(lambda r, n: 1.0)
        planning.costs.draft = grid_from(lambda r, n: 0.001, DRAFT_GRID)
        planning.book = _book(0.95, 0.95, 0.9, 0.95, 8, 0.95)
    else:
        planning.costs.target = grid_from(_linear(0.3, 1.0, 1.0))
        planning.costs.draft = grid_from(_linear(0.3, 1.0, 1.0), DRAFT_GRID)
    result = gen.generate(prompt, max_new_tokens=40)
    assert result.token_ids == generate(TARGET, prompt, max_new_tokens=40).token_ids
    plans = result.stats.plan_counts()
    assert (any(p.startswith("lr") for p in plans) if regime == "free" else set(plans) == {"ar"}), plans
    assert sum(c.tokens for c in result.stats.cycles) == len(result.token_ids)


def test_calibration_learns_what_the_formulas_miss():
    """A kind of plan that keeps realising half its predicted speed is priced at half, and loses."""
    costs = table(_linear(0.3, 0.35, 0.05), _linear(0.04, 0.1, 0.2))
    book = _book(0.9, 0.9, 0.4, 0.6, 40, 0.5)
    planner = Planner(costs, book, PlannerConfig(margin=0.0))
    first = planner.choose(300)
    raw = planner.estimate(first.plan, 300).rate
    for _ in range(30):
        book.record_cycle(first.plan.label, tokens=40, seconds=40 / (raw / 2), predicted_rate=raw)
    assert book.factor(first.plan.label) == pytest.approx(0.5, rel=0.1)
    assert planner.rate(first.plan, 300) == pytest.approx(raw * book.factor(first.plan.label))
    second = planner.choose(300)
    assert second.plan.label.partition("@")[0] != first.plan.label.partition("@")[0]
    saved = Book.from_json(json.loads(json.dumps(book.to_json())))
    assert saved.factor(first.plan.label) == pytest.approx(book.factor(first.plan.label))
