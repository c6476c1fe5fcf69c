"""The plain Algorithm 1 (decoding/reference.py) against the optimised cycle (decoding/lookahead.py).

Both see the same (drafted step, target step) pairs, so with any verifier they must keep the same
steps and write the same text: with the exact verifier (then both equal greedy autoregressive
decoding), and with a scripted verifier that also accepts steps the target would not have written.
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning import ConfigError, LookaheadGenerator, Settings, StepConfig, TokenizerMismatchError
from lookahead_reasoning.decoding import generate, generate_lr_reference
from lookahead_reasoning.decoding.reference import LocalSteps, lr_cycle_reference
from lookahead_reasoning.sampling import SamplingConfig
from lookahead_reasoning.testing import perturbed_copy

from lr_helpers import ScriptedVerifier, char_tokenizer, exact, frequent_char, tiny_lm

TARGET = tiny_lm(0)
DRAFTS = {
    "same": lambda: tiny_lm(0),  # the target's weights, own forward counters
    "close": lambda: perturbed_copy(TARGET, 0.3, seed=1),  # agrees with the target now and then
    "other": lambda: tiny_lm(1),  # random weights of its own: almost never agrees
}
PROMPTS = st.lists(st.integers(0, 96), min_size=1, max_size=12)
FAST = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same_parity(draft: str, target: str) -> bool:
    """A rule that also accepts steps the target would not write: both lengths even, or both odd."""
    return len(draft) % 2 == len(target) % 2


@functools.cache
def _steps(prompt: tuple[int, ...], cap: int) -> StepConfig:
    """Steps cut at the target's most frequent character: short steps that often end on the delimiter."""
    return StepConfig((frequent_char(TARGET, list(prompt)),), cap)


def _both(draft_name: str, rule, prompt, k: int, cap: int = 30, max_new_tokens: int = 48):
    """(reference result, optimised result, the verifiers they used) for one setting."""
    steps = _steps(tuple(prompt), cap)
    ref_verifier, opt_verifier = ScriptedVerifier(rule), ScriptedVerifier(rule)
    ref = generate_lr_reference(TARGET, DRAFTS[draft_name](), prompt, ref_verifier,
                                Settings(k=k, steps=steps, max_new_tokens=max_new_tokens))
    gen = LookaheadGenerator(target=TARGET, draft=DRAFTS[draft_name](), verifier=opt_verifier, k=k, steps=steps,
                             mode="lr")
    return ref, gen.generate(prompt, max_new_tokens=max_new_tokens), ref_verifier, opt_verifier


def _decisions(result) -> list[tuple]:
    """Per cycle: the drafted texts, the verdicts up to the first rejection, the steps kept."""
    return [([s.text for s in c.drafted], [v.accepted for v in c.verdicts[:c.accepted + 1]],
             [s.text for s in c.kept_steps]) for c in result.stats.cycles]


def _assert_same_run(ref, opt) -> None:
    assert ref.token_ids == opt.token_ids
    assert ref.text == opt.text and ref.stop_reason == opt.stop_reason
    assert _decisions(ref) == _decisions(opt)
    assert "".join(s.text for c in ref.stats.cycles for s in c.kept_steps) == ref.text


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 2, 3, 5]), draft=st.sampled_from(["same", "close", "other"]))
def test_reference_equals_optimised_and_ar_with_the_exact_verifier(prompt, k, draft):
    ref, opt, _, _ = _both(draft, lambda d, t: d == t, prompt, k)
    _assert_same_run(ref, opt)
    ar = generate(TARGET, prompt, max_new_tokens=48)
    assert ref.token_ids == ar.token_ids and ref.stop_reason == ar.stop_reason


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 2, 4]), draft=st.sampled_from(["close", "other"]),
       cap=st.sampled_from([10, 30]))
def test_reference_equals_optimised_with_a_verifier_that_accepts_by_a_rule(prompt, k, draft, cap):
    ref, opt, ref_verifier, opt_verifier = _both(draft, same_parity, prompt, k, cap=cap)
    _assert_same_run(ref, opt)
    # the reference judges up to the first rejection; the optimised cycle may also judge a row that
    # finished before an earlier row was rejected, never fewer pairs
    assert set(ref_verifier.seen) <= set(opt_verifier.seen)


def test_the_rule_verifier_keeps_steps_the_target_would_not_write():
    """The equality above is not trivial: here accepted drafts differ from the target's steps, so the
    text leaves greedy AR's, and both implementations leave it the same way."""
    prompt = [5, 6, 7]
    ref, opt, _, _ = _both("other", same_parity, prompt, k=3, max_new_tokens=60)
    _assert_same_run(ref, opt)
    kept_foreign = [c.drafted[j].text for c in ref.stats.cycles for j in range(c.accepted)
                    if c.drafted[j].text != c.target[j].text]
    assert kept_foreign
    assert ref.token_ids != generate(TARGET, prompt, max_new_tokens=60).token_ids


def test_identical_draft_skips_ahead_in_the_reference():
    prompt = [5, 6, 7]
    ref, opt, _, _ = _both("same", lambda d, t: d == t, prompt, k=3, cap=12)
    _assert_same_run(ref, opt)
    assert ref.stats.accepted_steps >= 2 and ref.stats.alpha1 == 1.0
    assert all(v.accepted for c in ref.stats.cycles for v in c.verdicts)


def test_eos_inside_an_accepted_step_ends_the_reference_there():
    prompt = [7, 7, 7]
    eos = generate(TARGET, prompt, max_new_tokens=40).token_ids[17]  # a token the greedy text reaches
    target, draft = tiny_lm(0, eos_id=eos), tiny_lm(0, eos_id=eos)
    steps = StepConfig((frequent_char(TARGET, prompt),), 5)
    ar = generate(target, prompt, max_new_tokens=40)
    ref = generate_lr_reference(target, draft, prompt, exact(), Settings(k=4, steps=steps, max_new_tokens=40))
    assert ar.stop_reason == "eos" and ref.token_ids == ar.token_ids and ref.stop_reason == "eos"
    assert ref.stats.accepted_steps > 0


@pytest.mark.parametrize("budget", [0, 1, 7, 23])
def test_reference_budget_is_exact(budget):
    prompt = [1, 2, 3]
    ref = generate_lr_reference(TARGET, tiny_lm(0), prompt, exact(),
                                Settings(k=2, steps=_steps((1, 2, 3), 10), max_new_tokens=budget))
    assert ref.token_ids == generate(TARGET, prompt, max_new_tokens=budget).token_ids
    assert len(ref.token_ids) == budget and ref.stop_reason == "budget"


def test_one_cycle_keeps_drafts_up_to_the_first_rejection_then_the_targets_step():
    """A scripted verifier accepts the first pair and rejects the second: the cycle keeps s^_1 and
    the target's step s_2, which continues x + s^_1."""
    prompt, steps = [40, 41], _steps((40, 41), 40)
    answers = iter([True, False])
    verifier = ScriptedVerifier(lambda d, t: next(answers))
    cycle = lr_cycle_reference(LocalSteps(TARGET, steps), LocalSteps(DRAFTS["close"](), steps), prompt, verifier, k=3,
                               budget=80)
    assert len(cycle.drafted) == 3 and all(s.boundary for s in cycle.drafted)
    assert cycle.target_rows == 4 and [v.accepted for v in cycle.verdicts] == [True, False]
    assert cycle.accepted == 1 and cycle.appended_target_step
    assert cycle.kept_steps == [cycle.drafted[0], cycle.target[1]]
    alone = generate(TARGET, prompt + cycle.drafted[0].ids, max_new_tokens=40, stop_strings=steps.delimiters)
    assert cycle.target[1].ids == alone.token_ids
    assert cycle.tokens == len(cycle.drafted[0].ids) + len(cycle.target[1].ids)


def test_sampled_reference_is_reproducible_and_seed_dependent():
    prompt = [9, 8, 7, 6]
    sampled = Settings(k=2, steps=_steps((9, 8, 7, 6), 10), max_new_tokens=30, sampling=SamplingConfig(temperature=1.0))

    def run(seed: int):
        return generate_lr_reference(TARGET, tiny_lm(1), prompt, exact(), sampled.with_overrides(seed=seed))
    assert run(3).token_ids == run(3).token_ids != run(4).token_ids


def test_bad_input_is_refused():
    with pytest.raises(ConfigError, match="k "):
        generate_lr_reference(TARGET, TARGET, [1, 2], exact(), Settings(k=0))
    with pytest.raises(ConfigError, match="max_new_tokens"):
        generate_lr_reference(TARGET, TARGET, [1, 2], exact(), Settings(max_new_tokens=-1))
    with pytest.raises(ConfigError, match="prompt"):
        generate_lr_reference(TARGET, TARGET, [], exact())
    with pytest.raises(TokenizerMismatchError):
        generate_lr_reference(TARGET, tiny_lm(0, tokenizer=char_tokenizer(shift=5)), [1, 2], exact())


def test_perturbed_copy_is_a_close_but_different_draft():
    close, again = perturbed_copy(TARGET, 0.3, seed=1), perturbed_copy(TARGET, 0.3, seed=1)
    prompt = [3, 1, 4, 1, 5]
    mine = generate(close, prompt, max_new_tokens=40).token_ids
    assert mine == generate(again, prompt, max_new_tokens=40).token_ids  # the seed fixes the noise
    theirs = generate(TARGET, prompt, max_new_tokens=40).token_ids
    assert mine != theirs and mine[0] == theirs[0]
    assert close.model is not TARGET.model and perturbed_copy(TARGET, 0.0).name.endswith("-perturbed")
    with pytest.raises(ConfigError, match="scale"):
        perturbed_copy(TARGET, -1.0)
