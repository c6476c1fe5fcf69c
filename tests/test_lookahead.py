"""Lookahead Reasoning on tiny random models: lossless with the exact verifier, branches equal to
running each branch alone, stops exactly where AR stops, width > 1, tokenizers that differ, bad input."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning import ConfigError, LookaheadGenerator, TokenizerMismatchError, SamplingConfig, StepConfig, TokenSD
from lookahead_reasoning.decoding import generate
from lookahead_reasoning.decoding.tools import CycleTools, CycleState, StepWriter, Translator
from lookahead_reasoning.decoding.torch_verbs import TorchVerbs
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.steps import Step
from lookahead_reasoning.render import render_html, render_terminal
from lookahead_reasoning.sampling import make_generator

from lr_helpers import ScriptedVerifier, char_tokenizer, exact, frequent_char, tiny_lm

TARGET = tiny_lm(0)
OTHER = tiny_lm(1)  # random weights of its own: almost never agrees with TARGET
PROMPTS = st.lists(st.integers(0, 96), min_size=1, max_size=12)
FAST = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _delimiter(prompt):
    return frequent_char(TARGET, prompt)


def _lr(draft, k=3, verifier=None, prompt=(5, 6, 7), cap=10, mode="lr", **kw):
    steps = StepConfig((_delimiter(list(prompt)),), cap)
    return LookaheadGenerator(target=TARGET, draft=draft, verifier=verifier or exact(), k=k, steps=steps, mode=mode,
                              **kw)


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 2, 3, 5]), mode=st.sampled_from(["lr", "lr-sd"]))
def test_lr_with_identical_draft_equals_greedy_ar(prompt, k, mode):
    gen = _lr(tiny_lm(0), k=k, prompt=prompt)  # same weights as TARGET, own forward counters
    ar = generate(TARGET, prompt, max_new_tokens=32)
    lr = gen.generate(prompt, mode=mode, max_new_tokens=32)
    assert lr.token_ids == ar.token_ids
    assert lr.stop_reason == ar.stop_reason
    # identical models: every judged draft matches the target's own step
    assert all(v.accepted for c in lr.stats.cycles for v in c.verdicts)


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 2, 3]))
def test_the_default_verifier_keeps_the_targets_text_with_any_draft(prompt, k):
    """No verifier given: fixed-k LR with a draft that disagrees writes greedy AR's tokens exactly."""
    steps = StepConfig((_delimiter(list(prompt)),), 10)
    gen = LookaheadGenerator(target=TARGET, draft=OTHER, k=k, steps=steps, mode="lr")
    lr = gen.generate(prompt, max_new_tokens=32)
    assert lr.token_ids == generate(TARGET, prompt, max_new_tokens=32).token_ids


def test_identical_draft_is_used():
    prompt = [5, 6, 7]
    gen = _lr(tiny_lm(0), k=3, prompt=prompt, cap=12)
    lr = gen.generate(prompt, max_new_tokens=48)
    assert lr.token_ids == generate(TARGET, prompt, max_new_tokens=48).token_ids
    assert lr.stats.accepted_steps >= 3 and lr.stats.alpha1 == 1.0
    assert len(lr.stats.cycles) < lr.num_tokens  # fewer cycles than tokens: steps were skipped ahead


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 3, 4]), mode=st.sampled_from(["lr", "lr-sd"]))
def test_lr_with_disagreeing_draft_equals_greedy_ar(prompt, k, mode):
    gen = _lr(OTHER, k=k, prompt=prompt)
    ar = generate(TARGET, prompt, max_new_tokens=32)
    lr = gen.generate(prompt, mode=mode, max_new_tokens=32)
    assert lr.token_ids == ar.token_ids
    cycles = lr.stats.cycles
    assert all(c.appended_target_step for c in cycles[:-1])  # every step was the target's correction


@pytest.mark.parametrize("token_sd", [TokenSD(target="draft", draft=None), TokenSD(target="ngram", draft="ngram", gamma=2)])
def test_lr_sd_variants_equal_ar(token_sd):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    gen = _lr(tiny_lm(0), k=3, prompt=prompt, token_sd=token_sd, mode="lr-sd")
    ar = generate(TARGET, prompt, max_new_tokens=60)
    assert gen.generate(prompt, mode="lr-sd", max_new_tokens=60).token_ids == ar.token_ids


@pytest.mark.parametrize("draft_seed", [0, 1])
def test_lr_sd_with_draft_stop_below_equals_ar(draft_seed):
    """The draft model's early stop inside the target's branches (draft_stop_below) changes how much is
    drafted, never the text: identical draft (seed 0) and a disagreeing one (seed 1)."""
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    token_sd = TokenSD(target="draft", draft=None, gamma=8)
    ar = generate(TARGET, prompt, max_new_tokens=60)
    eager = _lr(tiny_lm(draft_seed), k=2, prompt=prompt, token_sd=token_sd, mode="lr-sd").generate(
        prompt, max_new_tokens=60)
    careful = _lr(tiny_lm(draft_seed), k=2, prompt=prompt, token_sd=token_sd, mode="lr-sd",
                  draft_stop_below=0.999999).generate(prompt, max_new_tokens=60)
    assert eager.token_ids == careful.token_ids == ar.token_ids
    assert careful.stats.target_sd.drafted < eager.stats.target_sd.drafted
    # a threshold no draft reaches: at most one drafted token per row and SD iteration (one record each)
    assert careful.stats.target_sd.drafted <= careful.stats.target_sd.iterations


def test_warmup_runs_each_mode_and_the_verifier():
    verifier = ScriptedVerifier(lambda d, t: True)
    gen = _lr(tiny_lm(1), verifier=verifier)
    target_calls, draft_calls = gen.target.stats.calls, gen.draft.stats.calls
    gen.warmup(["lr", "ar"], tokens=4)
    assert gen.target.stats.calls > target_calls and gen.draft.stats.calls > draft_calls
    assert verifier.seen  # the verifier's first (slow) call happened here, not in a timed run


def test_warmup_reaches_the_embedding_model_behind_a_numbers_check():
    from lookahead_reasoning.verifiers import make_verifier

    class Embedder:
        calls = 0

        def encode(self, texts, convert_to_tensor=False, normalize_embeddings=False):
            Embedder.calls += 1
            return torch.ones(len(texts), 4)

    gen = _lr(tiny_lm(1), verifier=make_verifier("embedding-numbers", model=Embedder()))
    gen.warmup(["ar", "lr"], tokens=2)
    assert Embedder.calls >= 1  # the warm-up pair has the same numbers, so the embedding was computed


def test_branches_equal_each_branch_alone():
    """Row j of the target's batch writes the same step as the target alone from that context,
    including rows of very different lengths (a long drafted step and a short one)."""
    prompt = [10, 20, 30, 40]
    delim = _delimiter(prompt)
    steps = StepConfig((delim,), 30)
    draft_steps = [Step(OTHER.encode("x" * 25 + delim), "x" * 25 + delim, "stop_string", "draft"),
                   Step(OTHER.encode("ab" + delim), "ab" + delim, "stop_string", "draft")]
    state = CycleState(Session(TARGET, [prompt]), Session(TARGET, [prompt]), len(prompt), len(prompt), 200)
    writer = StepWriter(TARGET, steps, SamplingConfig(), make_generator(0))
    never = ScriptedVerifier(lambda d, t: True)
    tools = CycleTools(writer, writer, never, Translator(TARGET, TARGET, True))
    written = TorchVerbs(state, tools).rows(draft_steps, tools.plan(len(draft_steps)))
    assert [len(r) for r in written.rows] == [4, 4 + 26, 4 + 26 + 3]
    for row, step in zip(written.rows, written.steps):
        alone = generate(TARGET, row, max_new_tokens=30, stop_strings=(delim,))
        assert step.ids == alone.token_ids


def test_eos_inside_accepted_step_ends_generation_there():
    prompt = [7, 7, 7]
    probe = generate(TARGET, prompt, max_new_tokens=40).token_ids
    eos = probe[17]  # a token the greedy text reaches: make it the EOS
    target, draft = tiny_lm(0, eos_id=eos), tiny_lm(0, eos_id=eos)
    ar = generate(target, prompt, max_new_tokens=40)
    assert ar.stop_reason == "eos" and ar.token_ids[-1] == eos
    gen = LookaheadGenerator(target=target, draft=draft, verifier=exact(), k=4, mode="lr",
                             steps=StepConfig((frequent_char(TARGET, prompt),), 5))
    lr = gen.generate(prompt, max_new_tokens=40)
    assert lr.token_ids == ar.token_ids and lr.stop_reason == "eos"
    assert lr.stats.accepted_steps > 0


@pytest.mark.parametrize("budget", [0, 1, 7, 23])
def test_budget_is_exact(budget):
    prompt = [1, 2, 3]
    gen = _lr(tiny_lm(0), k=2, prompt=prompt)
    lr = gen.generate(prompt, max_new_tokens=budget)
    ar = generate(TARGET, prompt, max_new_tokens=budget)
    assert lr.token_ids == ar.token_ids and len(lr.token_ids) == budget


def test_sampled_lr_is_reproducible_and_seed_dependent():
    prompt = [9, 8, 7, 6]
    gen = _lr(OTHER, k=2, prompt=prompt, sampling=SamplingConfig(temperature=1.0))
    a = gen.generate(prompt, max_new_tokens=40, seed=3).token_ids
    b = gen.generate(prompt, max_new_tokens=40, seed=3).token_ids
    c = gen.generate(prompt, max_new_tokens=40, seed=4).token_ids
    assert a == b and a != c


def test_width_alternative_rescues_a_rejected_draft(monkeypatch):
    """W = 3: main drafts are all rejected, alternatives all accepted (a verifier per role), so every
    cycle with a complete alternative keeps it in place of the target's correction."""
    import lookahead_reasoning.decoding.lookahead as lr_mod

    prompt = [4, 4, 2]
    gen = _lr(OTHER, k=2, prompt=prompt, width=3, verifier=ScriptedVerifier(lambda d, t: False))
    accept_all = ScriptedVerifier(lambda d, t: True)
    original = lr_mod.rescue
    def lenient(alts, verdicts, m, written, rows):
        rows = copy.copy(rows)
        rows.verifier = accept_all
        return original(alts, verdicts, m, written, rows)

    monkeypatch.setattr(lr_mod, "rescue", lenient)
    result = gen.generate(prompt, max_new_tokens=40)
    rescued = [c for c in result.stats.cycles if c.alt_verdicts]
    assert rescued and accept_all.seen
    text = ""
    for cycle in result.stats.cycles:
        kept = cycle.drafted[:cycle.accepted]
        assert all(s.author == "draft" for s in kept[:-1])
        if cycle in rescued:
            assert kept[-1].author == "draft-alt" and not cycle.appended_target_step
        text += "".join(s.text for s in kept)
        if cycle.appended_target_step:
            text += cycle.target[cycle.accepted].text
    assert result.text == text[:len(result.text)] and len(result.token_ids) == 40


def test_draft_with_another_tokenizer_works_at_step_level():
    """Steps travel as text: a draft whose ids differ still gives AR's output with exact matching."""
    shifted = char_tokenizer(shift=17)
    draft = tiny_lm(0, tokenizer=shifted)
    prompt_text = "Q: 2+2?"
    gen_same = _lr(tiny_lm(0), k=3, prompt=TARGET.encode(prompt_text))
    gen = LookaheadGenerator(target=TARGET, draft=draft, verifier=exact(), k=3, steps=gen_same.settings.steps, mode="lr")
    assert not gen.same_vocab
    ar = generate(TARGET, TARGET.prompt_ids(prompt_text), max_new_tokens=40)
    lr = gen.generate(prompt_text, max_new_tokens=40)
    assert lr.token_ids == ar.token_ids
    with pytest.raises(TokenizerMismatchError, match="(?i)step-level speculation"):
        gen.generate(prompt_text, mode="sd", max_new_tokens=5)


def test_a_pair_without_one_vocabulary_cuts_the_prompt_with_the_draft_s_own_tokenizer():
    """generate_cycles given only the target's prompt ids: the pair knows its draft reads other ids, so the
    draft starts from the prompt's text in its own tokenizer (not from the target's ids), and the output
    is AR's with exact matching."""
    from lookahead_reasoning import Settings
    from lookahead_reasoning.decoding import generate_cycles
    from lookahead_reasoning.decoding.driver import start_state
    from lookahead_reasoning.runtime.pair import model_pair

    pair = model_pair(TARGET, tiny_lm(0, tokenizer=char_tokenizer(shift=17)))
    prompt = TARGET.encode("Q: 2+2?")
    assert not pair.same_vocab
    state = start_state(pair, prompt, None, 8)
    assert state.draft.rows[0] == pair.draft.encode("Q: 2+2?") != prompt
    lr = generate_cycles(pair, prompt, exact(), Settings(k=3, max_new_tokens=40, steps=StepConfig(("1",), 6)))
    assert lr.token_ids == generate(TARGET, prompt, max_new_tokens=40).token_ids


def test_trace_and_rendering_show_every_step():
    prompt = [5, 6, 7]
    gen = _lr(OTHER, k=2, prompt=prompt, cap=12, verifier=ScriptedVerifier(lambda d, t: len(d) % 2 == 0))
    result = gen.generate(prompt, max_new_tokens=30)
    stats = result.stats
    assert stats.judged > 0
    assert stats.accepted_steps <= stats.judged
    assert 0 <= stats.alpha1 <= 1
    plain = render_terminal(result, color=False, details=True)
    assert plain.startswith(result.text)
    page = render_html(result)
    assert "<table>" in page and page.count("<tr>") == stats.judged + 1
    summary = result.summary()
    assert summary["mode"] == "lr" and summary["new_tokens"] == len(result.token_ids) and "alpha1" in summary


@pytest.mark.parametrize("kwargs, pattern", [
    ({"k": -1}, "k "), ({"width": 0}, "width"), ({"gamma": 0}, "gamma"),
])
def test_bad_numbers_are_refused(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        LookaheadGenerator(target=TARGET, draft=OTHER, verifier=exact(), **kwargs)


def test_bad_step_config_and_mode():
    with pytest.raises(ConfigError, match="delimiter"):
        StepConfig(("",))
    with pytest.raises(ConfigError, match="delimiter"):
        StepConfig(())
    with pytest.raises(ConfigError, match="max_step_tokens"):
        StepConfig(max_step_tokens=0)
    gen = LookaheadGenerator(target=TARGET, draft=OTHER, verifier=exact())
    with pytest.raises(ConfigError, match="unknown mode"):
        gen.generate([1, 2], mode="fast")
    with pytest.raises(ConfigError, match="max_new_tokens"):
        gen.generate([1, 2], max_new_tokens=-1)


def test_prompt_errors_are_clear():
    from lookahead_reasoning.errors import PromptError
    from lookahead_reasoning.runtime.lm import LM

    with pytest.raises(PromptError, match="empty"):
        TARGET.prompt_ids("   ")
    with pytest.raises(PromptError, match="empty"):
        TARGET.prompt_ids([])
    with pytest.raises(PromptError, match="empty"):
        TARGET.prompt_ids("", raw=True)
    bare = char_tokenizer()
    bare.chat_template = None
    no_template = LM(TARGET.model, bare, "no-template")
    with pytest.raises(PromptError, match="no chat template"):
        no_template.prompt_ids("What is 2 + 2?")
    assert no_template.prompt_ids("What is 2 + 2?", raw=True) == no_template.encode("What is 2 + 2?")
    gen = LookaheadGenerator(target=no_template, draft=OTHER, verifier=exact())
    with pytest.raises(PromptError, match="raw=True"):
        gen.generate("What is 2 + 2?")
