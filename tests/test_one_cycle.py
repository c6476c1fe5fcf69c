"""The one Lookahead Reasoning cycle over both runtimes: the same tiny model in this process and served
over HTTP by an engine (tests/model_engine.py) write the same text for the same greedy settings, mode by
mode, and with width 1 the same cycles (what each kept), since the two runtimes run one algorithm."""

from __future__ import annotations

import pytest
from lr_helpers import ScriptedPolicy, exact, frequent_char, tiny_lm
from model_engine import ModelEngine

from lookahead_reasoning import LookaheadGenerator, Settings, StepConfig
from lookahead_reasoning.decoding import generate
from lookahead_reasoning.decoding.tools import make_tools
from lookahead_reasoning.decoding.driver import start_state
from lookahead_reasoning.decoding.reference import LocalSteps
from lookahead_reasoning.decoding.results import CycleStats
from lookahead_reasoning.decoding.stepwise import generate_stepwise
from lookahead_reasoning.decoding.torch_verbs import torch_cycle
from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.settings import CyclePlan
from lookahead_reasoning.sampling import make_generator
from lookahead_reasoning.testing import perturbed_copy
from lookahead_reasoning.runtime.pair import model_pair

TARGET = tiny_lm(0)
DRAFT = perturbed_copy(TARGET, 0.3, seed=1)
PROMPT = [5, 17, 33, 2, 60]
STEPS = StepConfig((frequent_char(TARGET, PROMPT),), 12)
N = 40


@pytest.fixture(scope="module")
def served():
    with ModelEngine(TARGET) as target, ModelEngine(DRAFT) as draft:
        yield target, draft


def _both(served, mode: str, schedule: str = "sync", **knobs):
    """The same generation in this process (sync: its rows run in one batch) and over the two engines."""
    knobs = {**knobs, **({"steps": STEPS} if mode != "ar" else {})}  # ar writes no steps: it takes none
    local = LookaheadGenerator(target=TARGET, draft=DRAFT, verifier="exact", mode=mode, **knobs)
    remote = LookaheadGenerator(target=served[0].url, draft=served[1].url, verifier="exact", mode=mode,
                                schedule=schedule, **knobs)
    try:
        return local.generate(PROMPT, max_new_tokens=N), remote.generate(PROMPT, max_new_tokens=N)
    finally:
        remote.close()


@pytest.mark.parametrize("mode,knobs", [("ar", {}), ("lr", {"k": 1}), ("lr", {"k": 3}), ("lr", {"k": 2, "width": 2}),
                                        ("lr", {"k": 2, "width": 3}), ("auto", {})])
def test_every_mode_writes_the_target_text_in_this_process_and_over_an_engine(served, mode, knobs):
    local, remote = _both(served, mode, **knobs)
    ar = generate(TARGET, PROMPT, max_new_tokens=N)
    assert local.text == ar.text and remote.text == ar.text


@pytest.mark.parametrize("k", [1, 2, 3])
def test_width_one_cycles_keep_the_same_steps_on_both_runtimes(served, k):
    local, remote = _both(served, "lr", k=k)
    shape = lambda r: [([s.text for s in c.drafted], c.accepted, c.appended_target_step) for c in r.stats.cycles]  # noqa: E731
    assert shape(local) == shape(remote)
    assert any(c.accepted for c in local.stats.cycles) and any(not c.accepted for c in local.stats.cycles if c.drafted)


def test_the_async_schedule_over_an_engine_keeps_what_this_process_keeps_in_sync(served):
    local, remote = _both(served, "lr", schedule="async", k=2)
    assert remote.text == local.text and remote.mode == "engine-lr"


def test_each_runtime_refuses_by_name_the_plan_fields_it_cannot_honour():
    """Token SD inside the rows runs in this process only, the async schedule over step models only: a
    plan asking otherwise is refused by name, never run as something else."""
    sd_rows = ScriptedPolicy(lambda at: CyclePlan(1, gamma=4))
    with pytest.raises(ConfigError, match=r"lr-sd@k1g4: token SD inside the rows \(gamma > 0\)"):
        generate_stepwise(LocalSteps(TARGET, STEPS), LocalSteps(DRAFT, STEPS), PROMPT, exact(), policy=sd_rows,
                          max_new_tokens=8)
    pair = model_pair(TARGET, DRAFT)
    tools = make_tools(pair, exact(), Settings(steps=STEPS), generator=make_generator(0), stats=CycleStats())
    with pytest.raises(ConfigError, match="sync schedule"):
        torch_cycle(start_state(pair, PROMPT, None, 8), CyclePlan(1, schedule="async"), tools)


def test_a_chunk_plan_writes_past_step_ends_in_one_cycle_on_both_runtimes():
    """k = 0 with a chunk: the target writes that many tokens (or to EOS) whatever the step ends, in one
    cycle, here and over step models; what ``ar`` and ``sd`` are as plans."""
    chunk = ScriptedPolicy(lambda at: CyclePlan(0, chunk=25))  # past the step cap (12) and the delimiters
    local = generate_stepwise(LocalSteps(TARGET, STEPS), LocalSteps(DRAFT, STEPS), PROMPT, exact(), policy=chunk,
                              max_new_tokens=30)
    pair = model_pair(TARGET, DRAFT)
    tools = make_tools(pair, exact(), Settings(steps=STEPS), generator=make_generator(0), stats=CycleStats())
    state = start_state(pair, PROMPT, None, 30)
    first = torch_cycle(state, CyclePlan(0, chunk=25), tools)
    assert first.tokens == len(first.target[0].ids) == 25
    assert [c.tokens for c in local.stats.cycles][0] == first.tokens
    assert pair.target.decode(state.target.rows[0][len(PROMPT):]) == local.stats.cycles[0].target[0].text


def test_the_async_schedule_with_a_model_of_this_process_is_refused_before_anything_loads():
    """The name would fail to load: the schedule is refused first, by name."""
    with pytest.raises(ConfigError, match="schedule 'async' runs over engines only"):
        LookaheadGenerator(target="no-such-org/no-such-model", schedule="async")
    with pytest.raises(ConfigError, match="schedule 'async' runs over engines only"):
        LookaheadGenerator(target=TARGET, draft=DRAFT, mode="lr").generate(PROMPT, max_new_tokens=4, schedule="async")


@pytest.mark.parametrize("mode", ["ar", "sd", "lr", "auto"])
def test_an_engine_s_request_settings_with_a_model_of_this_process_are_refused_by_name(mode):
    """A request timeout or a retry count means nothing without an engine: refused before anything loads (the
    name would fail to load) and in every mode of a call, instead of accepted and ignored."""
    with pytest.raises(ConfigError, match="timeout_s 5.0: per request to an engine"):
        LookaheadGenerator(target="no-such-org/no-such-model", timeout_s=5.0)
    gen = LookaheadGenerator(target=TARGET, draft=DRAFT, mode=mode)
    with pytest.raises(ConfigError, match="retries 5: per request to an engine"):
        gen.generate(PROMPT, max_new_tokens=4, retries=5)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_ar_and_sd_as_plans_write_what_their_plain_loops_write(temperature):
    """The generator runs every mode as a plan of the one loop; the plain loops the notebooks teach from stay
    as references: the same tokens (greedy and sampled, from the same seed), the same forwards of the target,
    and the same token-SD counts."""
    from lookahead_reasoning.decoding import generate_sd
    from lookahead_reasoning.decoding.drafters import NGramDrafter
    from lookahead_reasoning.sampling import SamplingConfig

    draft = perturbed_copy(TARGET, 0.3, seed=1)
    gen = LookaheadGenerator(target=TARGET, draft=draft, verifier="exact")
    sampling = SamplingConfig(temperature=temperature)
    settings = Settings(sampling=sampling, seed=3, max_new_tokens=60, gamma=5, draft_stop_below=0.4)
    for mode, reference in (("ar", None), ("sd", draft), ("sd-ngram", NGramDrafter(3, 1))):
        if reference is None:
            plain = generate(TARGET, PROMPT, max_new_tokens=60, sampling=sampling, seed=3)
        else:
            plain = generate_sd(TARGET, PROMPT, reference, settings if mode == "sd" else
                                settings.with_overrides(draft_stop_below=None))
        one = gen.generate(PROMPT, mode=mode, max_new_tokens=60, sampling=sampling, seed=3, gamma=None if mode == "ar" else 5,
                           draft_stop_below=0.4)
        assert one.token_ids == plain.token_ids and one.stop_reason == plain.stop_reason, mode
        assert one.target_forwards == plain.target_forwards and one.mode == mode
        if reference is not None:
            timing = ("c",)
            assert {k: v for k, v in one.stats.summary().items() if k not in timing} == \
                {k: v for k, v in plain.stats.summary().items() if k not in timing}
        else:
            assert one.stats is None


class _SameParity:
    """Accepts a drafted step whose length in characters has the parity of the target's: steps that are
    not the target's own are kept, deterministically on both runtimes."""

    name = "same-parity"

    def verify(self, pairs):
        from lookahead_reasoning.verifiers.base import Verdict

        return [Verdict(len(d) % 2 == len(t) % 2, 1.0, "parity", 0.0, self.name) for d, t in pairs]


@pytest.mark.parametrize("width", [1, 2])
def test_a_loose_verifier_keeps_the_same_steps_on_both_runtimes_cycle_for_cycle(served, width):
    """Width 1 and 2 with a verifier that accepts steps that are not the target's: the same drafted, accepted
    and kept steps in every cycle here and over an engine serving the same models."""
    local = LookaheadGenerator(target=TARGET, draft=DRAFT, verifier=_SameParity(), steps=STEPS, mode="lr", k=2,
                               width=width)
    remote = LookaheadGenerator(target=served[0].url, draft=served[1].url, verifier=_SameParity(), steps=STEPS,
                                mode="lr", k=2, width=width)
    try:
        here, there = local.generate(PROMPT, max_new_tokens=N), remote.generate(PROMPT, max_new_tokens=N)
    finally:
        remote.close()
    shape = lambda r: [([s.text for s in c.drafted], c.accepted, [s.text for s in c.kept_steps]) for c in r.stats.cycles]  # noqa: E731
    assert shape(here) == shape(there) and here.text == there.text
    foreign = [s for c in here.stats.cycles for s, t in zip(c.drafted[:c.accepted], c.target) if s.text != t.text]
    assert foreign  # the verifier kept a step the target would not have written


@pytest.mark.parametrize("mode", ["ar", "sd"])
def test_a_plan_of_one_cycle_streams_its_text_as_it_is_written(mode):
    """ar and sd write the whole answer in one cycle; a stream still hears it token by token (or block by
    block), not once at the end."""
    gen = LookaheadGenerator(target=TARGET, draft=perturbed_copy(TARGET, 0.3, seed=1), verifier="exact")
    heard: list[str] = []
    result = gen.generate(PROMPT, mode=mode, max_new_tokens=40, on_text=heard.append)
    assert "".join(heard) == result.text and len(heard) > 5
