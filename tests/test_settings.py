"""One settings object for every loop; one driver for fixed-k LR and mode auto; the old arguments still work."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lookahead_reasoning import ConfigError, LookaheadGenerator, Settings, TokenSD
from lookahead_reasoning.decoding import FixedPolicy, drive, generate, generate_cycles
from lookahead_reasoning.decoding.tools import make_tools
from lookahead_reasoning.settings import CyclePlan
from lookahead_reasoning.decoding.driver import TorchCycles, start_state
from lookahead_reasoning.decoding.results import CycleStats
from lookahead_reasoning.presets import DEFAULT_MAX_NEW_TOKENS, DRAFT_STOP_BELOW
from lookahead_reasoning.sampling import make_generator
from lookahead_reasoning.runtime.pair import model_pair

from conftest import tiny_lm
from lr_helpers import exact

SRC = Path(__file__).resolve().parents[1] / "src" / "lookahead_reasoning"


def test_settings_are_checked_once_when_made():
    assert Settings().max_new_tokens == DEFAULT_MAX_NEW_TOKENS and Settings().draft_stop_below is None
    assert Settings.preset().draft_stop_below == DRAFT_STOP_BELOW
    for bad in ({"k": -1}, {"k": 1.5}, {"gamma": 0}, {"width": 0}, {"max_new_tokens": -1}, {"draft_stop_below": 1.0},
                {"alt_temperature": 0.0}):
        with pytest.raises(ConfigError):
            Settings(**bad)
    with pytest.raises(ConfigError, match="unknown setting"):
        Settings().with_overrides(gamm=3)
    assert Settings(k=3).with_overrides(k=None).k is None  # None is a value k can take (the preset)
    assert Settings(width=2).with_overrides(width=None).width == 2  # None keeps a field that needs a value


def test_k_has_one_rule_checked_before_any_model_loads():
    """k >= 0 everywhere; 0 (no drafted step) is a cap only mode auto can use, refused by name for a fixed k."""
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.errors import ModelLoadError

    assert Settings(k=0).k == 0
    for mode in ("lr", "lr-sd"):
        with pytest.raises(ConfigError, match=f"k=0 drafts no step: mode {mode} needs k >= 1"):
            LookaheadGenerator(target="no-such-model", mode=mode, k=0)
    with pytest.raises(ConfigError, match="k=0 drafts no step: mode lr"):
        generate_cycles(model_pair(tiny_lm("qwen2", 0), tiny_lm("qwen2", 1)), [5, 6], exact(), Settings(k=0))
    with pytest.raises(ModelLoadError):  # k=0 passes for auto: what stops this one is the model's name
        LookaheadGenerator(target="./no-such-model-dir", mode="auto", k=0)


def test_drive_over_a_hand_built_state_with_a_fixed_plan_is_generate_cycles():
    pair, prompt = model_pair(tiny_lm("qwen2", 0), tiny_lm("qwen2", 1)), [5, 6, 7, 8]
    settings = Settings(k=2, max_new_tokens=24)
    expected = generate_cycles(pair, prompt, exact(), settings)
    stats = CycleStats(k=2)
    tools = make_tools(pair, exact(), settings, generator=make_generator(0), stats=stats)
    state = start_state(pair, prompt, None, settings.max_new_tokens)
    cycles, policy = TorchCycles(state, tools, stats), FixedPolicy(2)
    drive(cycles, policy, stats)
    result = cycles.result(policy)
    assert result.token_ids == expected.token_ids and result.mode == "lr"
    assert len(result.stats.cycles) == len(expected.stats.cycles)


def test_the_lr_loop_takes_its_knobs_in_settings_only():
    """generate_cycles names every argument it takes: single knobs change a Settings (``with_overrides``)."""
    target, prompt = tiny_lm("qwen2", 0), [9, 8, 7]
    pair = model_pair(target, tiny_lm("qwen2", 0))
    ar = generate(target, prompt, max_new_tokens=20).token_ids
    by_overrides = generate_cycles(pair, prompt, exact(), Settings().with_overrides(k=3, max_new_tokens=20))
    by_settings = generate_cycles(pair, prompt, exact(), Settings(k=3, max_new_tokens=20))
    assert by_overrides.token_ids == by_settings.token_ids == ar  # draft == target, exact verifier: AR's text
    with pytest.raises(TypeError):
        generate_cycles(pair, prompt, exact(), k=3)


def test_a_cycle_plan_carries_the_drafts_stop():
    """The stop of a plan reaches the drafter the cycle builds; the tools themselves are not changed."""
    pair = model_pair(tiny_lm("qwen2", 0), tiny_lm("qwen2", 1))
    settings = Settings(token_sd=TokenSD(target="draft"), draft_stop_below=0.3)
    tools = make_tools(pair, exact(), settings, generator=make_generator(0), stats=CycleStats(k=1))
    assert tools.plan(1) == CyclePlan(1, draft_stop_below=0.3)
    state = start_state(pair, [5, 6, 7], None, 16)
    assert tools.row_drafter(state, 1, 0.6).draft_stop_below == 0.6
    assert tools.row_drafter(state, 1, None).draft_stop_below is None


def test_auto_reaches_into_no_decoding_object():
    tree = ast.parse((SRC / "planning" / "auto.py").read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert "ModelRows" not in names
    assert "generate_cycles" in names  # the one loop


def test_the_draft_precision_is_given_in_the_precision_mapping():
    target, draft = tiny_lm("qwen2", 0), tiny_lm("qwen2", 1)
    gen = LookaheadGenerator(target=target, draft=draft, verifier=exact(), precision={"draft": None})
    assert gen.draft_quantize is None
    with pytest.raises(ConfigError, match="precision keys"):
        LookaheadGenerator(target=target, draft=draft, verifier=exact(), precision={"drafts": "int8"})
    with pytest.raises(ConfigError, match="draft's precision"):
        LookaheadGenerator(target=target, draft=draft, verifier=exact(), precision={"draft": "int4"})


def test_generator_settings_are_one_settings_object():
    gen = LookaheadGenerator(target=tiny_lm("qwen2", 0), draft=tiny_lm("qwen2", 1), verifier=exact(), mode="lr-sd",
                             k=3, gamma=5)
    settings = gen.settings
    assert (settings.k, settings.gamma, settings.draft_stop_below) == (3, 5, DRAFT_STOP_BELOW)
    assert settings.token_sd == TokenSD(target="draft", draft="ngram")
    assert not hasattr(gen, "k") and not hasattr(gen, "width")  # the knobs live in gen.settings only
    gen.settings = settings.with_overrides(width=2)
    assert gen.settings.width == 2
    with pytest.raises(ConfigError, match="width"):
        settings.with_overrides(width=0)


@pytest.mark.parametrize("value", [1.0, -0.1, True, "0.4"])
def test_a_draft_stop_no_cycle_could_run_is_refused_before_any_model_loads(value):
    """Settings and every plan share one rule for the draft's stop, so a value the first cycle would refuse
    is refused when the generator is made (the target name below is never loaded)."""
    from lookahead_reasoning import LookaheadGenerator

    with pytest.raises(ConfigError, match="draft_stop_below"):
        Settings(draft_stop_below=value)
    with pytest.raises(ConfigError, match="draft_stop_below"):
        LookaheadGenerator(target="no-such-model-is-loaded", draft_stop_below=value)


def test_a_draft_stop_of_zero_runs_in_a_cycle_as_it_does_in_token_sd():
    """0 never stops the draft early; Settings took it and a cycle's plan refused it, after the models had
    loaded. Now an lr-sd run with it writes what greedy AR writes."""
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.runtime.lm import LM
    from lookahead_reasoning.testing import perturbed_copy, tiny_model

    target = LM.from_loaded(tiny_model("qwen2", seed=0))
    gen = LookaheadGenerator(target=target, draft=perturbed_copy(target, 0.2, seed=1), draft_stop_below=0.0)
    prompt = target.prompt_ids("Ann has 3 apples and buys 4 more. How many?")
    assert (gen.generate(prompt, mode="lr-sd", max_new_tokens=32).token_ids
            == gen.generate(prompt, mode="ar", max_new_tokens=32).token_ids)


def test_a_seed_given_to_the_generator_is_the_seed_of_every_call():
    """generate() used seed 0 whenever a call named none, over a seed the generator was built with."""
    from lookahead_reasoning.runtime.lm import LM
    from lookahead_reasoning.sampling import SamplingConfig
    from lookahead_reasoning.testing import tiny_model

    target = LM.from_loaded(tiny_model("qwen2", seed=0))
    sampled = SamplingConfig(temperature=1.5)
    prompt = target.prompt_ids("Ann has 3 apples and buys 4 more. How many?")
    gen = LookaheadGenerator(target=target, mode="ar", sampling=sampled, seed=5)
    texts = {seed: gen.generate(prompt, max_new_tokens=24, seed=seed).token_ids for seed in (0, 5)}
    assert texts[0] != texts[5]  # the seed matters to this sampled run
    assert gen.generate(prompt, max_new_tokens=24).token_ids == texts[5]
    assert LookaheadGenerator(target=target, mode="ar", sampling=sampled).generate(
        prompt, max_new_tokens=24).token_ids == texts[0]  # no seed given anywhere: 0, as before
