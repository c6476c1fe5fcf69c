"""Lookahead Reasoning over the step-writer seam (decoding/stepwise.py) on the local runtime.

The cycle over :class:`StepModel` must keep the same steps as the paper's Algorithm 1
(decoding/reference.py) for width 1 and the sync schedule; the async schedule and width > 1 must
write the same text with greedy decoding and the exact verifier (then every kept step is the
target's own). Engines implement the same protocol: tests/test_engine_*.py run these properties
against a real llama.cpp server.
"""

from __future__ import annotations

import asyncio
import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lr_helpers import (ScriptedPolicy, ScriptedVerifier, at, engine_planner, engine_policy, exact, frequent_char,
                        request_table, tiny_lm)

from lookahead_reasoning import Settings, StepConfig
from lookahead_reasoning.decoding import generate, generate_lr_reference
from lookahead_reasoning.decoding.driver import FixedPolicy
from lookahead_reasoning.decoding.reference import LocalSteps
from lookahead_reasoning.decoding.stepwise import cycle_over, generate_stepwise
from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.settings import CyclePlan
from lookahead_reasoning.steps import StepRequest
from lookahead_reasoning.testing import perturbed_copy

TARGET = tiny_lm(0)
DRAFTS = {"same": lambda: tiny_lm(0), "close": lambda: perturbed_copy(TARGET, 0.3, seed=1), "other": lambda: tiny_lm(1)}
PROMPTS = st.lists(st.integers(0, 96), min_size=1, max_size=12)
FAST = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _steps(prompt: tuple[int, ...], cap: int = 30) -> StepConfig:
    return StepConfig((frequent_char(TARGET, list(prompt)),), cap)


def _run(prompt, draft: str, plan: CyclePlan, rule=lambda d, t: d == t, n: int = 48, cap: int = 30):
    steps = _steps(tuple(prompt), cap)
    verifier = ScriptedVerifier(rule)
    result = generate_stepwise(LocalSteps(TARGET, steps), LocalSteps(DRAFTS[draft](), steps), prompt, verifier,
                               policy=FixedPolicy(plan.k, width=plan.width, schedule=plan.schedule), max_new_tokens=n)
    return result, verifier


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 2, 3]), draft=st.sampled_from(["same", "close", "other"]),
       schedule=st.sampled_from(["sync", "async"]), width=st.sampled_from([1, 2]))
def test_exact_verifier_gives_greedy_ar_whatever_the_plan(prompt, k, draft, schedule, width):
    result, _ = _run(prompt, draft, CyclePlan(k, width, schedule))
    ar = generate(TARGET, prompt, max_new_tokens=48)
    assert result.token_ids == ar.token_ids
    assert result.stop_reason == ar.stop_reason
    assert "".join(s.text for c in result.stats.cycles for s in c.kept_steps) == result.text


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 2, 4]), draft=st.sampled_from(["close", "other"]),
       cap=st.sampled_from([10, 30]))
def test_sync_width_one_keeps_what_algorithm_1_keeps_with_a_lenient_verifier(prompt, k, draft, cap):
    """A verifier that accepts steps the target would not write: the seam's cycle and the reference
    must still see the same pairs and keep the same steps."""
    rule = lambda d, t: len(d) % 2 == len(t) % 2  # noqa: E731
    mine, seen_mine = _run(prompt, draft, CyclePlan(k), rule, cap=cap)
    ref_verifier = ScriptedVerifier(rule)
    ref = generate_lr_reference(TARGET, DRAFTS[draft](), prompt, ref_verifier,
                                Settings(k=k, steps=_steps(tuple(prompt), cap), max_new_tokens=48))
    assert mine.token_ids == ref.token_ids and mine.stop_reason == ref.stop_reason
    assert seen_mine.seen == ref_verifier.seen
    assert [[s.text for s in c.kept_steps] for c in mine.stats.cycles] == \
           [[s.text for s in c.kept_steps] for c in ref.stats.cycles]


def test_async_schedule_with_a_lenient_verifier_keeps_what_sync_keeps():
    """The schedule changes when rows start, not which pairs are judged on the accepted path."""
    prompt = [5, 17, 33, 2, 60]
    rule = lambda d, t: len(d) % 2 == len(t) % 2  # noqa: E731
    sync, _ = _run(prompt, "close", CyclePlan(3, 1, "sync"), rule)
    asyn, _ = _run(prompt, "close", CyclePlan(3, 1, "async"), rule)
    assert sync.token_ids == asyn.token_ids


def test_async_rows_start_before_the_draft_finishes():
    """In an async cycle the row after x is requested before the first drafted step is written."""
    events: list[str] = []

    class Logged(LocalSteps):
        def __init__(self, who, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.who = who

        async def awrite(self, request: StepRequest):
            events.append(f"{self.who}:{len(request.context)}")
            await asyncio.sleep(0)
            return self.write_one(request)

    prompt = [5, 17, 33, 2, 60]
    steps = _steps(tuple(prompt))
    cycle = lambda schedule: cycle_over(Logged("target", TARGET, steps), Logged("draft", tiny_lm(0), steps),  # noqa: E731
                                        exact(), CyclePlan(2, 1, schedule), prompt, 40)
    events.clear()
    asyncio.run(cycle("sync"))
    assert events[0].startswith("draft") and events.index(f"target:{len(prompt)}") > 1
    events.clear()
    trace = asyncio.run(cycle("async"))
    assert events.index(f"target:{len(prompt)}") < events.index("draft:" + str(len(prompt) + len(trace.drafted[0].ids)))


def test_width_two_judges_alternatives_and_records_them():
    prompt = [5, 17, 33, 2, 60]
    result, verifier = _run(prompt, "other", CyclePlan(1, 2))
    cycles = [c for c in result.stats.cycles if c.drafted]
    assert cycles and all(len(c.alternatives) == sum(s.complete for s in c.drafted) for c in cycles)
    assert all(len(a) == 1 and a[0].author == "draft-alt" for c in cycles for a in c.alternatives)
    rejected = [c for c in cycles if c.verdicts and not c.verdicts[-1].accepted and c.alternatives[c.accepted:]
                and c.alternatives[c.accepted][0].complete]
    assert rejected and all(c.alt_verdicts for c in rejected)  # the alternative at a rejection is judged
    assert result.token_ids == generate(TARGET, prompt, max_new_tokens=48).token_ids


def test_plan_is_checked():
    with pytest.raises(ConfigError, match="schedule"):
        CyclePlan(2, 1, "later")
    with pytest.raises(ConfigError, match="width"):
        CyclePlan(2, 0)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        generate_stepwise(LocalSteps(TARGET), LocalSteps(TARGET), [1, 2], exact(), max_new_tokens=0)


def test_chunks_of_plain_decoding_between_cycles_keep_the_greedy_text():
    """A planner that stands aside in chunks (no delimiter) and comes back to LR at step ends."""
    prompt = [5, 17, 33, 2, 60]
    steps = _steps(tuple(prompt))
    plans = iter([CyclePlan(0, chunk=7), CyclePlan(0), CyclePlan(2), CyclePlan(0, chunk=5)] * 20)
    result = generate_stepwise(LocalSteps(TARGET, steps), LocalSteps(DRAFTS["close"](), steps), prompt, exact(),
                               policy=ScriptedPolicy(lambda at: next(plans) if at.at_boundary else CyclePlan(0)),
                               max_new_tokens=48)
    assert result.token_ids == generate(TARGET, prompt, max_new_tokens=48).token_ids
    assert any(c.plan.plan == "ar@c7" for c in result.stats.cycles)
    with pytest.raises(ConfigError, match="chunk"):
        CyclePlan(2, chunk=8)


def test_the_engine_planner_stands_aside_in_chunks_when_steps_are_rejected():
    def draft(n):
        return 0.02 + 0.01 * n

    cpu = request_table(lambda r, n: 0.05 + 0.03 * n * (1 + 0.8 * (r - 1)), draft=draft)  # every row costs
    hopeless = engine_policy(engine_planner(cpu, accepted=1, rejected=30))
    assert hopeless.plan(at(0, True)).chunk and hopeless.plan(at(10, False)).chunk
    free = request_table(lambda r, n: 0.05 + 0.03 * n, draft=draft)  # a GPU-like engine: rows in one batch are free
    hopeful = engine_policy(engine_planner(free, accepted=30, rejected=3))
    assert hopeful.plan(at(0, True)).k >= 1
    mid = hopeful.plan(at(10, False))  # mid-step: one plain step (no chunk) to reach the next boundary
    assert (mid.k, mid.chunk) == (0, 0)
