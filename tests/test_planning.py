"""Mode auto: the cost table (interpolation, online refinement, the on-disk cache), the learned rates,
the planner's choice against the analytic optimum, the step gate, and auto's lossless property."""

from __future__ import annotations

import copy
import json
import logging
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning import ConfigError, LookaheadGenerator, StepConfig
from lookahead_reasoning.decoding import generate
from lookahead_reasoning.runtime.lm import ForwardTiming
from lookahead_reasoning.presets import LR_SD_TOKEN_SD
from lookahead_reasoning.settings import CyclePlan, Settings, TokenSD
from lookahead_reasoning.planning import (Beta, Book, CostGrid, CostTable, Planner, PlannerConfig,
                                          load_or_profile)
from lookahead_reasoning.planning import auto as cache_mod
from lookahead_reasoning.planning import costs as costs_mod
from lookahead_reasoning.planning.costs import DRAFT_GRID, TARGET_GRID
from lookahead_reasoning.planning.estimates import CONFIDENCE_BINS, TokenBook, load_book, write_json
from lookahead_reasoning.theory import lr_cycle, step_cycle
from lookahead_reasoning.runtime.pair import model_pair

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
    assert grid.seconds(1, 1) == pytest.approx(1.0, rel=0.05)  # moved to what the forwards measure
    assert grid(1, 1) == grid.seconds(1, 2) == pytest.approx(0.5)  # and now priced padded to n = 2
    assert grid(3, 13) == pytest.approx(0.5)  # untouched far away
    again = CostGrid.from_json(json.loads(json.dumps(grid.to_json())))
    assert again(1, 1) == grid(1, 1) and again(2, 9) == grid(2, 9)
    with pytest.raises(ValueError):
        CostGrid.from_json({"format": costs_mod.FORMAT, "prefix": 1, "per_context": 0, "points": {"2": {"1": 1.0}}})


def _spiky(r, n):
    """A BLAS-like table: n = 3 mod 4 costs 1.4x its neighbours, two tokens twice one."""
    return (0.4 if n == 1 else 0.8 + 0.01 * n) * (1.4 if n % 4 == 3 else 1.0) * (1 + 0.2 * (r - 1))


def test_a_forward_is_priced_and_run_at_the_cheapest_measured_n_up_to_twice_its_own():
    grid = grid_from(_spiky)
    assert [grid.padded_n(1, n) for n in (1, 2, 3, 4, 7, 11, 12)] == [1, 2, 4, 4, 8, 12, 12]
    assert grid(1, 11) == grid.seconds(1, 12) < grid.seconds(1, 11)
    assert grid.padded_n(1, 60) == 60 and grid.padded_n(4, 3) == 3  # nothing measured in (60, 120]; 4 rows unmeasured
    assert all(grid(1, n) <= grid(1, n + 1) * (1 + 0.01) for n in range(1, 25))  # priced n nearly monotone
    nearly = grid_from(lambda r, n: 1.0 - 0.01 * (n == 4))  # 1% cheaper is noise, not worth padding
    assert nearly.padded_n(1, 3) == 3
    grid.padding = False
    assert grid.padded_n(1, 11) == 11 and grid(1, 11) == grid.seconds(1, 11)


@pytest.mark.parametrize("pad", [True, False])
def test_auto_pads_its_forwards_where_the_table_says_and_stays_lossless(pad, tmp_path):
    prompt = [9, 8, 7, 6]
    gen = _auto(tiny_lm(1), prompt, tmp_path, cap=12, margin=0.0, learn=False, refine=False, max_k=0, pad=pad,
                gammas=(6, 10))
    planning = gen.planning()
    planning.costs.target = grid_from(lambda r, n: 0.5 * (1.4 if n % 4 == 3 else 1.0))  # SD nearly free but
    planning.costs.draft = grid_from(lambda r, n: 0.01, DRAFT_GRID)  # for n = 3, 7, 11, ...
    ns, installed = [], list(TARGET.listeners)
    with TARGET.metered(lambda t: ns.append(t.n)):
        result = gen.generate(prompt, max_new_tokens=60)
    assert result.token_ids == generate(TARGET, prompt, max_new_tokens=60).token_ids
    dear = [n for n in ns if n % 4 == 3]  # n the table prices 1.4x a larger n
    assert (not dear) if pad else dear, ns
    assert TARGET.pad_to is None and TARGET.listeners == installed  # the policy and the table's listener leave with the run


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
        key = {**cache_mod.cost_key(lm), **change}
        monkeypatch.setattr(cache_mod, "cost_key", lambda _lm, key=key: key)
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


def test_cost_key_tells_an_instruction_set_cap_from_the_full_cpu(monkeypatch):
    for name in cache_mod._ISA_CAPS:
        monkeypatch.delenv(name, raising=False)
    lm = tiny_lm(0)
    plain = cache_mod.cost_key(lm)
    assert not set(cache_mod._ISA_CAPS) & plain.keys()  # unset: the key is what it always was
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    capped = cache_mod.cost_key(lm)
    assert capped != plain and capped["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert cache_mod.cost_key(lm) not in (plain, capped)


def test_profile_times_forwards_of_exactly_the_grid_shapes():
    lm = tiny_lm(0)
    seen = []
    lm.listeners.append(lambda t: seen.append((t.rows, t.n, t.cached)))
    small = {1: (1, 3), 2: (1, 4)}
    grid = costs_mod.profile(lm, small, prefix=24, progress=False)
    timed = {(r, n) for r, n, cached in seen if cached == 23}  # forks re-feed the prefix's last token
    assert {(r, n) for r, ns in small.items() for n in ns} <= timed
    assert all(n in small.get(r, ()) or (r, n) == (1, 1) for r, n in timed)
    assert (1, 1, costs_mod.LONG_PREFIX - 1) in seen  # the longer context, one token wide too
    assert set(grid.points) == {1, 2}


def test_out_of_order_points_are_the_ones_a_forward_cannot_cost():
    clean = {1: {1: 0.25, 2: 0.37, 6: 0.42, 13: 0.56}, 2: {1: 0.37, 6: 0.56, 13: 0.80}}
    assert costs_mod.out_of_order(clean) == set()
    wide_is_cheaper = {1: {**clean[1], 6: 0.70}, 2: clean[2]}  # T(1, 6) > T(1, 13) and > T(2, 6)
    assert costs_mod.out_of_order(wide_is_cheaper) == {(1, 6)}  # the dearer point of each broken pair
    more_rows_cheaper = {1: clean[1], 2: {**clean[2], 1: 0.20}}  # T(2, 1) < T(1, 1); it also pulls the
    # interpolated T(2, 2) = 0.27 below T(1, 2) = 0.37, so n = 2 of one row is suspect too
    assert costs_mod.out_of_order(more_rows_cheaper) == {(1, 1), (1, 2)}


def test_profile_times_again_a_point_that_a_passing_load_slowed(monkeypatch):
    lm = tiny_lm(0)
    calls = []

    def fake(lm_, session, rows, tokens, repeats, keep=1):  # T = 0.1 (rows + tokens), one slow moment
        calls.append((rows, tokens))
        slow = (rows, tokens) == (1, 3) and calls.count((1, 3)) == 1
        return 0.1 * (rows + tokens) * (5.0 if slow else 1.0)

    monkeypatch.setattr(costs_mod, "forward_seconds", fake)
    grid = costs_mod.profile(lm, {1: (1, 3, 6), 2: (1, 3)}, prefix=24, progress=False)
    assert calls.count((1, 3)) >= 2 and grid.points[1][3] == pytest.approx(0.4)
    assert costs_mod.out_of_order(grid.points) == set()


def test_profile_keeps_a_point_that_is_slow_every_time_after_one_more_look(monkeypatch):
    """A BLAS's poor shape is slow on every try: timed once more, then believed (and padded around)."""
    lm = tiny_lm(0)
    calls = []

    def fake(lm_, session, rows, tokens, repeats, keep=1):
        calls.append((rows, tokens))
        return 0.1 * (rows + tokens) * (2.0 if (rows, tokens) == (1, 3) else 1.0)

    monkeypatch.setattr(costs_mod, "forward_seconds", fake)
    grid = costs_mod.profile(lm, {1: (1, 2, 3, 4, 6)}, prefix=24, progress=False)
    assert calls.count((1, 3)) == 2 and grid.points[1][3] == pytest.approx(0.8)
    assert grid.padded_n(1, 3) == 4


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

def _empty_token_book() -> TokenBook:
    return TokenBook([0.0] * CONFIDENCE_BINS, [0.0] * CONFIDENCE_BINS, [0.0] * CONFIDENCE_BINS)


def test_token_book_counts_only_judged_tokens_per_confidence_band():
    book = _empty_token_book()
    book.record(None, drafted=3, accepted=1, confidence=[0.93, 0.55, 0.12])  # token 2 rejected, 3 never judged
    assert [i for i, n in enumerate(book.seen) if n] == [2, 11, 18]
    assert book.accepted[18] == 1 and book.rejected[11] == 1 and book.accepted[2] == book.rejected[2] == 0
    at_half = book.model(0.5)  # tokens 1 and 2 are at or above the stop: one accepted, one rejected
    assert at_half.sigma == pytest.approx(2 / 3) and at_half.alpha_sure == pytest.approx(0.5)
    higher = book.model(0.6)  # only token 1 is sure now; token 2 is the unsure one, rejected
    assert higher.sigma == pytest.approx(1 / 3) and higher.alpha_sure == pytest.approx(0.995)
    assert higher.alpha_unsure == pytest.approx(0.0)
    assert book.model(None).sigma == 1.0 and book.model(None).alpha == pytest.approx(0.5)
    flags = _empty_token_book()  # without confidences: sure tokens in the top band, unsure in the bottom
    flags.record([True, True, False], drafted=3, accepted=2)
    assert flags.seen[-1] == 2 and flags.seen[0] == 1 and flags.rejected[0] == 1 and flags.accepted[-1] == 2


def test_token_book_from_rates_reproduces_them_at_its_stop():
    book = TokenBook.from_rates(0.7, 0.9, 0.3, draft_stop_below=0.4)
    model = book.model(0.4)
    assert (model.sigma, model.alpha_sure, model.alpha_unsure) == pytest.approx((0.7, 0.9, 0.3))
    saved = Book(token=book)
    saved.token.seen = [x * 100 for x in book.seen]  # a long run: capped when saved, shares kept
    back = Book.from_json(json.loads(json.dumps(saved.to_json())))
    assert sum(back.token.seen) <= 400.0 + 1e-6
    assert back.token.model(0.4).sigma == pytest.approx(0.7)


def test_book_round_trip_caps_weights(tmp_path):
    book = Book()
    book.step.alpha1.add(500, 500)
    path = tmp_path / "b.json"
    write_json(book.to_json(), path)
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
    book = Book(token=TokenBook.from_rates(sigma, a_s, a_u, draft_stop_below=0.4))
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
    planner = Planner(costs, book, config, draft_stop_below=0.4)
    choice = planner.choose(context=costs.target.prefix)
    step = book.step.model()
    o_i, o_c = book.token.iteration_overhead.value, book.step.cycle_overhead.value

    def rate(plan):  # the formulas called directly, on the same interpolated costs
        t, d = (lambda r, n: costs.target(r, n)), (lambda r, n: costs.draft(r, n))
        token = book.token.model(plan.draft_stop_below)
        if plan.k == 0:
            return step_cycle(plan.gamma, step, token, t, d, o_i).rate
        return lr_cycle(plan.k, plan.gamma, step, token, t, d, o_c).rate

    choices = sorted({0.4, *config.draft_stop_below_choices})
    plans = [CyclePlan(0, gamma=0)] + [CyclePlan(0, gamma=g, draft_stop_below=s) for g in config.gammas for s in choices] + [
        CyclePlan(k, gamma=g, draft_stop_below=s if g else None) for k in (1, 2) for g in config.row_gammas for s in choices]
    best = max(rate(p) for p in plans)
    assert rate(choice.plan) == pytest.approx(best, rel=1e-9)
    assert choice.rate == pytest.approx(best, rel=1e-9)


def test_the_first_cycle_pays_for_the_prompt_and_the_draft_only_when_it_drafts():
    """A prompt neither model has seen costs T(1, prompt) at an empty cache on top of the cycle; the
    draft's prompt only for a plan that drafts."""
    costs = table(_linear(0.3, 0.35, 0.05), _linear(0.04, 0.1, 0.2))
    planner = Planner(costs, _book(0.9, 0.9, 0.4, 0.6, 40, 0.5), PlannerConfig(margin=0.0), draft_stop_below=0.4)
    prefill = (120, 118)  # (target, draft)
    t_pre, d_pre = costs.target(1, 120, 0), costs.draft(1, 118, 0)
    assert t_pre > costs.target(1, 96, 0) > 0 and d_pre > 0  # past the grid: extrapolated, still growing
    for plan, paid in ((CyclePlan(0, gamma=0), t_pre), (CyclePlan(0, gamma=12, draft_stop_below=0.4), t_pre + d_pre), (CyclePlan(1, gamma=0), t_pre + d_pre),
                       (CyclePlan(2, gamma=8, draft_stop_below=0.4), t_pre + d_pre)):
        bare, first = planner.estimate(plan, 300), planner.estimate(plan, 300, prefill)
        assert first.tokens == bare.tokens
        assert first.seconds == pytest.approx(bare.seconds + paid)
        assert planner.rate(plan, 300, prefill) == pytest.approx(first.rate * planner.book.factor(plan.label))
    assert planner.choose(300, prefill).rate < planner.choose(300).rate


def test_hysteresis_keeps_a_plan_that_is_nearly_as_good():
    costs = table(_linear(0.3, 0.35, 0.05), _linear(0.04, 0.1, 0.2))
    planner = Planner(costs, Book(), PlannerConfig(margin=0.5))
    first = planner.choose(300).plan
    planner.current = CyclePlan(0, gamma=4) if first != CyclePlan(0, gamma=4) else CyclePlan(0, gamma=6)
    kept = planner.current
    assert planner.estimate(kept, 300).rate * 1.5 >= planner.estimate(first, 300).rate
    assert planner.choose(300).plan == kept  # within the margin: no switch
    planner.current = CyclePlan(0, gamma=0)
    planner.config = PlannerConfig(margin=0.0)
    assert planner.choose(300).plan == first  # plain decoding is far slower here: switch


def test_different_costs_give_different_plans():
    """Free parallelism (a GPU with room): SD with a large gamma. Forwards whose cost grows with every
    token and row (a CPU with a slow kernel): plain decoding."""
    book = _book(0.9, 0.9, 0.4, 0.6, 40, 0.5)
    config = PlannerConfig(margin=0.0)
    free = Planner(table(lambda r, n: 0.02, lambda r, n: 0.002), book, config, draft_stop_below=0.4).choose(300).plan
    dear = Planner(table(_linear(0.3, 1.0, 1.0), _linear(0.1, 1.0, 1.0)), book, config,
                   draft_stop_below=0.4).choose(300).plan
    assert free.gamma >= 8 and dear == CyclePlan(0, gamma=0)


def test_the_stop_follows_what_the_target_accepts_of_doubtful_drafts():
    """The book prices every confidence stop from one run's tokens: when the target accepts the draft's
    doubtful tokens anyway, drafting past them pays (a low stop); when it rejects every token below 0.7,
    the draft should stop right after one (stop 0.7)."""
    costs = table(_linear(0.3, 0.35, 0.03), _linear(0.02, 0.1, 0.2))
    chosen = []
    for cut in (0.0, 0.7):
        book = _book(0.7, 0.9, 0.4, 0.5, 40, 0.5)
        book.token = _empty_token_book()
        rng = random.Random(0)
        for _ in range(2000):  # confidences uniform over (0, 1); accepted iff at or above the cut
            confidence = [rng.random() for _ in range(8)]
            accepted = next((j for j, q in enumerate(confidence) if q < cut), 8)
            book.token.record(None, 8, accepted, confidence)
        planner = Planner(costs, book, PlannerConfig(margin=0.0, max_k=0), draft_stop_below=0.4)
        plan = planner.choose(300).plan
        assert plan.k == 0 and plan.gamma > 0, plan
        chosen.append(plan.draft_stop_below)
    assert chosen == [min(PlannerConfig().draft_stop_below_choices), 0.7]
    assert CyclePlan(0, gamma=12, draft_stop_below=0.4).label == "sd@g12s0.4" and CyclePlan(1, gamma=8, draft_stop_below=0.3).label == "lr-sd@k1g8s0.3"
    assert CyclePlan(0, gamma=12).label == "sd@g12" and CyclePlan(2, gamma=0).label == "lr@k2"


def test_step_gate_keeps_rows_only_where_they_pay():
    book = _book(0.9, 0.9, 0.4, 0.5, 40, 0.5)
    book.step.bands = [Beta(1, 99)] * 4 + [Beta(99, 1)]  # only fully agreeing steps are accepted
    costs = table(_linear(0.3, 0.35, 0.05), _linear(0.04, 0.1, 0.2))
    planner = Planner(costs, book, PlannerConfig(), draft_stop_below=0.4)
    plan = CyclePlan(2, gamma=8)
    assert planner.rows_to_run(plan, 300, [40, 40], [0.1, 0.2]) == 1  # hopeless drafts: the target alone
    # exact drafts: their rows cost nothing; a third row would write a new step in a 3-row batch,
    # dearer than writing it alone next cycle
    assert planner.rows_to_run(plan, 300, [40, 40], [1.0, 1.0]) == 2
    book.step.bands = [Beta(99, 1)] * 5  # every drafted step accepted
    free = Planner(table(lambda r, n: 0.3, _linear(0.04, 0.0, 0.2)), book, PlannerConfig(), draft_stop_below=0.4)
    assert free.rows_to_run(plan, 300, [40, 40], [0.5, 0.5]) == 3  # rows free as on a roomy GPU: all of them
    dear = Planner(table(_linear(0.3, 1.0, 0.05), _linear(0.04, 0.1, 0.2)), book, PlannerConfig(), draft_stop_below=0.4)
    assert dear.rows_to_run(plan, 300, [40, 40], [0.5, 0.5]) < 3  # each row doubles the batch: not all
    ungated = Planner(costs, book, PlannerConfig(gate=False), draft_stop_below=0.4)
    assert ungated.rows_to_run(plan, 300, [40, 40], [0.1, 0.2]) == 3


def test_planner_config_refuses_bad_settings():
    with pytest.raises(ConfigError, match="max_k"):
        PlannerConfig(max_k=-1)
    with pytest.raises(ConfigError, match="gammas"):
        PlannerConfig(gammas=(0,))
    with pytest.raises(ConfigError, match="margin"):
        PlannerConfig(margin=1.5)
    with pytest.raises(ConfigError, match="draft_stop_below_choices"):
        PlannerConfig(draft_stop_below_choices=(0.5, 1.0))


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


@pytest.mark.parametrize("token_sd", [None, TokenSD(**LR_SD_TOKEN_SD), TokenSD(target=None)],
                         ids=["auto's own", "the preset, as the command line gives it", "no token SD"])
def test_auto_searches_within_the_token_sd_a_user_chose(token_sd, tmp_path):
    """A user's ``token_sd`` is a limit of auto's search, not overwritten: with ``target=None`` no plan drafts
    tokens, where the same tables with auto's own choice pick plans with token SD."""
    prompt = [9, 8, 7, 6]
    gen = _auto(tiny_lm(0), prompt, tmp_path, cap=12, margin=0.0, learn=False, refine=False)
    if token_sd is not None:
        gen.settings = gen.settings.with_overrides(token_sd=token_sd)
    planning = gen.planning()
    planning.costs.target = grid_from(lambda r, n: 1.0)  # forwards free of rows and tokens: token SD pays
    planning.costs.draft = grid_from(lambda r, n: 0.001, DRAFT_GRID)
    planning.book = _book(0.95, 0.95, 0.9, 0.95, 8, 0.95)
    result = gen.generate(prompt, max_new_tokens=40)
    assert result.token_ids == generate(TARGET, prompt, max_new_tokens=40).token_ids
    plans = result.stats.plan_counts()
    assert any("sd" in p for p in plans) == (token_sd is None or token_sd.target == "draft"), plans


def test_auto_refuses_what_its_planner_cannot_price_by_name_before_loading(tmp_path):
    from lookahead_reasoning.planning.auto import generate_auto

    with pytest.raises(ConfigError, match="token_sd target 'ngram': mode auto"):
        LookaheadGenerator(target="no-such-model", mode="auto", token_sd=TokenSD(target="ngram"))
    with pytest.raises(ConfigError, match="width 2: mode auto prices one draft per position"):
        LookaheadGenerator(target="no-such-model", mode="auto", width=2)
    with pytest.raises(ConfigError, match="width 2: mode auto prices one draft per position"):
        generate_auto(model_pair(TARGET), [1, 2, 3], exact(), Settings(width=2))
    with pytest.raises(ConfigError, match="planner=: over engines mode auto plans from the endpoints"):
        LookaheadGenerator(target="http://127.0.0.1:9", planner=PlannerConfig())  # refused before any request


def test_auto_drafts_with_the_stop_of_each_cycles_plan(tmp_path, monkeypatch):
    """The stop in a plan's label is the stop its drafter used, and every drafted token's confidence
    reached the book (a different draft: tokens get rejected, so SD plans with stops run)."""
    from lookahead_reasoning.decoding.tools import ModelRows

    used = []
    built = ModelRows.__call__

    def spy(self, state, n_rows, stop):
        drafter = built(self, state, n_rows, stop)
        used.append(drafter.draft_stop_below)
        return drafter

    monkeypatch.setattr(ModelRows, "__call__", spy)
    prompt = [9, 8, 7, 6]
    gen = _auto(tiny_lm(1), prompt, tmp_path, cap=12, margin=0.0, learn=False, refine=False, max_k=0)
    planning = gen.planning()
    planning.costs.target = grid_from(lambda r, n: 1.0)  # verification free: SD pays whatever alpha is
    planning.costs.draft = grid_from(lambda r, n: 0.001, DRAFT_GRID)
    seen_before = sum(planning.book.token.seen)
    result = gen.generate(prompt, max_new_tokens=40)
    labels = [c.plan.plan for c in result.stats.cycles]
    assert labels and all(label.startswith("sd@g") for label in labels), labels
    assert used == [float(label.rpartition("s")[2]) for label in labels]
    assert result.stats.target_sd.drafted > 0
    assert sum(planning.book.token.seen) - seen_before == pytest.approx(result.stats.target_sd.drafted)
    assert result.token_ids == generate(TARGET, prompt, max_new_tokens=40).token_ids  # SD stays lossless


@pytest.mark.parametrize("regime", ["sd", "lr-sd"])
def test_auto_teaches_its_book_the_token_records_the_run_holds_in_their_order(regime, tmp_path, monkeypatch):
    """The row drafter is the book's only teacher of token rates: every record the book takes is the
    next entry of the run's ``SDStats.log`` (what auto used to read after each cycle), in order, and
    replaying the log on the book as it was gives the same counts. ``lr-sd``: the target's rows are
    free and the book optimistic, so LR cycles run SD in several rows at once."""
    records, record, forwards = [], TokenBook.record, []

    def spy(self, sure, drafted, accepted, confidence=None):
        records.append((self, (sure, drafted, accepted, confidence)))
        forwards.append(TARGET.stats.calls)  # when it is taught: after which target forward
        record(self, sure, drafted, accepted, confidence)

    monkeypatch.setattr(TokenBook, "record", spy)
    prompt = [9, 8, 7, 6]
    gen = _auto(tiny_lm(1), prompt, tmp_path, cap=12, margin=0.0, learn=False, refine=False,
                max_k=0 if regime == "sd" else 2)
    planning = gen.planning()
    planning.costs.target = grid_from(lambda r, n: 1.0)
    planning.costs.draft = grid_from(lambda r, n: 0.001, DRAFT_GRID)
    if regime == "lr-sd":
        planning.book = _book(0.95, 0.95, 0.9, 0.95, 8, 0.95)
    before = copy.deepcopy(planning.book.token)
    result = gen.generate(prompt, max_new_tokens=40)
    log = result.stats.target_sd.log
    assert [entry for _, entry in records] == log
    assert all(book is planning.book.token for book, _ in records)
    assert any(accepted < drafted for _, drafted, accepted, _ in log)  # rejections too, not only full blocks
    kinds = {c.plan.plan.partition("@")[0] for c in result.stats.cycles}
    # taught through the policy, off each cycle's trace: a cycle's records all at once, when it ends
    assert forwards == sorted(forwards) and len(set(forwards)) <= len(result.stats.cycles) < len(log), forwards
    if regime == "sd":
        assert kinds == {"sd"}, kinds
    else:
        assert any(c.plan.plan.startswith("lr-sd") and c.target_rows > 1 for c in result.stats.cycles), kinds
    for entry in log:
        record(before, *entry)
    token = planning.book.token
    assert (before.seen, before.accepted, before.rejected) == (token.seen, token.accepted, token.rejected)


@pytest.mark.parametrize("regime", ["measured", "dear draft"])
def test_auto_prices_the_prompt_on_its_first_cycle_only(regime, tmp_path, monkeypatch):
    """The target reads the prompt in the first cycle, so only that cycle prices its prefill. The draft
    reads it (with the text written so far) in the first cycle whose plan runs the draft, which depends on
    the plans auto picks from the cost table (this machine's, or one where a draft forward costs a minute,
    so that no plan drafts): every cycle up to that one prices the draft's whole context, and no cycle
    after it prices any."""
    seen = []
    choose = Planner.choose

    def spy(self, context, prefill=(0, 0)):
        seen.append((context, prefill))
        return choose(self, context, prefill)

    monkeypatch.setattr(Planner, "choose", spy)
    prompt = [9, 8, 7, 6, 5]
    # 60 tokens: at least two cycles whatever the plans (one writes at most 3 steps of 10, or one step and
    # an SD iteration past its end); at 30 an LR cycle whose two drafts pass wrote the whole budget
    gen = _auto(tiny_lm(1), prompt, tmp_path, learn=False)
    if regime == "dear draft":
        gen.planning().costs.draft = grid_from(lambda r, n: 60.0, DRAFT_GRID)
    result = gen.generate(prompt, max_new_tokens=60)
    cycles = result.stats.cycles
    assert len(seen) == len(cycles) >= 2
    assert seen[0] == (len(prompt), (len(prompt), len(prompt)))
    assert all(target == 0 for _, (target, _) in seen[1:])  # prefill = (target, draft)
    ran = [bool(c.draft_forwards) for c in cycles]  # whether the cycle fed the draft model anything
    assert all(c.plan.plan.partition("@")[0] != "ar" for c, r in zip(cycles, ran) if r), \
        [(c.plan.plan, len(c.draft_forwards)) for c in cycles]  # only a plan that drafts runs the draft
    first = ran.index(True) if any(ran) else len(cycles)  # the first cycle that ran the draft
    assert [draft for _, (_, draft) in seen[:first + 1]] == [context for context, _ in seen[:first + 1]]
    assert all(draft == 0 for _, (_, draft) in seen[first + 1:])


def test_calibration_learns_what_the_formulas_miss():
    """A kind of plan that keeps realising half its predicted speed is priced at half, and loses."""
    costs = table(_linear(0.3, 0.35, 0.05), _linear(0.04, 0.1, 0.2))
    book = _book(0.9, 0.9, 0.4, 0.6, 40, 0.5)
    planner = Planner(costs, book, PlannerConfig(margin=0.0), draft_stop_below=0.4)
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


def test_calibration_weighs_cycles_by_their_time():
    """Two kinds of cycle, equal in tokens, one twice and one half as fast as predicted: the run takes
    4 + 16 = 20 s where 8 + 8 = 16 s were predicted, so the factor that makes the run's prediction
    right is 16 / 20 = 0.8 (a mean over tokens would say 1.25 and stay optimistic)."""
    book = Book()
    for _ in range(200):
        book.record_cycle("sd@g12", tokens=40, seconds=2.0, predicted_rate=10.0)
        book.record_cycle("sd@g12", tokens=40, seconds=8.0, predicted_rate=10.0)
    assert book.factor("sd@g12") == pytest.approx(0.8, rel=0.01)
    predicted_seconds = 2 * 40 / (10.0 * book.factor("sd@g12"))
    assert predicted_seconds == pytest.approx(2.0 + 8.0, rel=0.01)


def test_a_book_calibrated_by_tokens_starts_its_calibration_again(tmp_path):
    """Factors saved by an older version (a mean over tokens) are dropped on load; its rates are kept."""
    book = _learned_book()
    data = book.to_json()
    del data["calibrated_by"]
    path = tmp_path / "book.json"
    path.write_text(json.dumps(data))
    loaded = load_book(path)
    assert loaded.factor("sd@g12") == 1.0
    assert loaded.token.model(0.4) == book.token.model(0.4)
    write_json(book.to_json(), path)  # this version's own books keep their calibration
    assert load_book(path).factor("sd@g12") == pytest.approx(book.factor("sd@g12"))


# ------------------------------------------------------------------ a pair's rates across cost regimes

def _learned_book() -> Book:
    book = Book()
    for _ in range(50):
        book.token.record(None, 8, 6, confidence=[0.95] * 6 + [0.3, 0.2])
        book.step.record_verdict(0.9, True)
        book.step.target_tokens.add(25.0)
    book.token.iteration_overhead.add(0.5, 100)
    book.step.cycle_overhead.add(0.7, 100)
    book.record_cycle("sd@g12", 400, 10.0, 10.0)  # realised 4x the prediction, over four steps of time
    return book


def test_rates_only_keeps_what_the_pair_decides_and_forgets_what_the_machine_decides():
    book, fresh = _learned_book(), Book()
    rates = book.rates_only()
    assert rates.token.accepted == book.token.accepted and rates.token.seen == book.token.seen
    assert rates.token.model(0.4).alpha != pytest.approx(fresh.token.model(0.4).alpha)
    assert rates.step.bands == book.step.bands and rates.step.target_tokens == book.step.target_tokens
    assert rates.token.iteration_overhead == fresh.token.iteration_overhead
    assert rates.step.cycle_overhead == fresh.step.cycle_overhead and rates.step.verify_s == fresh.step.verify_s
    assert rates.factor("sd@g12") == 1.0 and book.factor("sd@g12") > 1.5
    rates.token.record(None, 4, 4, confidence=[0.95] * 4)  # a copy: learning on it leaves the source alone
    rates.step.record_verdict(0.1, False)
    rates.step.target_tokens.add(90.0)
    assert rates.token.seen != book.token.seen
    assert rates.step.bands != book.step.bands and rates.step.target_tokens != book.step.target_tokens


def test_a_new_cost_regime_starts_from_the_rates_the_pair_learned_in_another(tmp_path, monkeypatch):
    from lookahead_reasoning.planning import auto as auto_mod

    regime = {"dtype": "bf16"}

    def fake_profile(lm, grid, *, label, root, **kw):
        key = {**regime, "model": lm.name, "grid": label}
        return CostGrid({1: {1: 0.1, 2: 0.12}}, key=key), tmp_path / "costs" / f"{label}-{regime['dtype']}.json"

    monkeypatch.setattr(auto_mod, "load_or_profile", fake_profile)
    config = PlannerConfig(progress=False, cache_dir=str(tmp_path))
    first = auto_mod.Planning.load(model_pair(TARGET, tiny_lm(1)), "exact", config)
    assert first.book.token.accepted == Book().token.accepted  # nothing learned anywhere yet: the priors
    first.book = _learned_book()
    first.save()

    regime["dtype"] = "float32"  # same pair and verifier, another cost regime
    second = auto_mod.Planning.load(model_pair(TARGET, tiny_lm(1)), "exact", config)
    assert second.paths[2] != first.paths[2]
    assert second.book.token.accepted == first.book.token.accepted
    assert second.book.factor("sd@g12") == 1.0  # the other regime's calibration is not carried over
    assert second.book.token.iteration_overhead == Book().token.iteration_overhead

    regime["dtype"] = "bf16"  # back in the first regime: its own book, calibration and all
    again = auto_mod.Planning.load(model_pair(TARGET, tiny_lm(1)), "exact", config)
    assert again.book.factor("sd@g12") == pytest.approx(first.book.factor("sd@g12"))
    other_verifier = auto_mod.Planning.load(model_pair(TARGET, tiny_lm(1)), "embedding", config)
    assert other_verifier.paths[3] != first.paths[3]  # step rates are per verifier
    assert other_verifier.book.step.bands == Book().step.bands  # the new verifier's: the priors
    assert other_verifier.book.token.accepted == first.book.token.accepted  # token rates are the pair's
    assert other_verifier.book.factor("sd@g12") == 1.0


def test_token_rates_only_keeps_the_drafts_acceptance_and_forgets_the_verifiers():
    book, fresh = _learned_book(), Book()
    rates = book.token_rates_only()
    assert rates.token.accepted == book.token.accepted and rates.token.seen == book.token.seen
    assert rates.step.bands == fresh.step.bands and rates.step.target_tokens == fresh.step.target_tokens
    assert book.step.bands != fresh.step.bands  # the learned book had step rates to forget
    assert rates.factor("sd@g12") == 1.0


@pytest.mark.parametrize("refine", [True, False])
def test_auto_refines_its_tables_from_the_forwards_its_traces_carry(refine, tmp_path):
    """A table that prices every forward 100x too dear moves toward the forwards the run timed (each
    cycle's trace carries them; the policy teaches both grids), and stays put without ``refine``."""
    prompt = [9, 8, 7, 6]
    gen = _auto(tiny_lm(1), prompt, tmp_path, cap=12, learn=False, refine=refine, max_k=1, pad=False)
    planning = gen.planning()
    planning.costs.target = grid_from(lambda r, n: 5.0)
    planning.costs.draft = grid_from(lambda r, n: 5.0, DRAFT_GRID)
    before = [json.dumps(g.to_json()) for g in (planning.costs.target, planning.costs.draft)]
    result = gen.generate(prompt, max_new_tokens=40)
    assert result.token_ids == generate(TARGET, prompt, max_new_tokens=40).token_ids
    timed = [c for c in result.stats.cycles if c.target_forwards]
    assert timed and sum(len(c.target_forwards) for c in timed) >= len(result.stats.cycles)
    after = [json.dumps(g.to_json()) for g in (planning.costs.target, planning.costs.draft)]
    if refine:
        assert planning.costs.target.points[1][1] < 5.0
        assert after[0] != before[0] and (after[1] != before[1]) == any(c.draft_forwards for c in result.stats.cycles)
    else:
        assert after == before
