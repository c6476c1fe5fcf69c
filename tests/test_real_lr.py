"""Lookahead Reasoning on the real offline models.

``real``: a smoke subset that CI runs (the 0.5B as draft and target in float32 with the exact
verifier must equal greedy AR; the 0.5B -> 1.5B pair with the embedding verifier must run end to end).
``slow``: the longer equivalence checks, run with ``pytest -m slow``.
Token-for-token checks run in float32: in bf16, scoring many tokens in one forward can flip a
greedy argmax at a near-tie compared with one token per forward.
"""

from __future__ import annotations

import pytest
from conftest import gsm8k_questions, real_lm


@pytest.fixture(scope="module")
def small_fp32():
    return real_lm("qwen2.5-coder-0.5b")


@pytest.mark.real
def test_lr_exact_with_identical_real_models_equals_ar(small_fp32):
    from lookahead_reasoning import LookaheadGenerator, StepConfig
    from lookahead_reasoning.decoding import generate
    from lookahead_reasoning.prompts import math_messages
    from lookahead_reasoning.runtime.lm import LM

    draft = LM(small_fp32.model, small_fp32.tokenizer, "draft")  # same weights, own counters
    gen = LookaheadGenerator(target=small_fp32, draft=draft, verifier="exact", k=3, steps=StepConfig(), mode="lr")
    messages = math_messages(gsm8k_questions(1)[0])
    ar = generate(small_fp32, small_fp32.prompt_ids(messages), max_new_tokens=64)
    lr = gen.generate(messages, max_new_tokens=64)
    assert lr.token_ids == ar.token_ids
    assert lr.stats.accepted_steps >= 1 and all(v.accepted for c in lr.stats.cycles for v in c.verdicts)


@pytest.mark.real
def test_lr_pair_with_embedding_verifier_runs():
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.prompts import math_messages

    gen = LookaheadGenerator(target=real_lm("qwen2.5-coder-1.5b", "auto"), draft=real_lm("qwen2.5-coder-0.5b", "auto"),
                             verifier="embedding", k=2)
    result = gen.generate(math_messages(gsm8k_questions(1)[0]), mode="lr-sd", max_new_tokens=48)
    assert result.num_tokens == 48 or result.stop_reason == "eos"
    summary = result.summary()
    assert summary["cycles"] >= 1 and summary["judged_pairs"] >= 1
    assert all(-1.0 <= v.score <= 1.0 for c in result.stats.cycles for v in c.verdicts)


@pytest.mark.real
def test_auto_measures_the_machine_and_stays_lossless(small_fp32, tmp_path):
    """Mode auto on the real 0.5B as target and draft, exact verifier, float32: it profiles the model
    (a cost table on disk), plans every cycle, and writes greedy AR's text."""
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.decoding import generate
    from lookahead_reasoning.planning import PlannerConfig
    from lookahead_reasoning.prompts import math_messages
    from lookahead_reasoning.runtime.lm import LM

    draft = LM(small_fp32.model, small_fp32.tokenizer, "draft")
    gen = LookaheadGenerator(target=small_fp32, draft=draft, verifier="exact",
                             planner=PlannerConfig(cache_dir=str(tmp_path), progress=False))
    messages = math_messages(gsm8k_questions(2)[1])
    ar = generate(small_fp32, small_fp32.prompt_ids(messages), max_new_tokens=48)
    auto = gen.generate(messages, max_new_tokens=48)
    assert auto.mode == "auto" and auto.token_ids == ar.token_ids
    assert sum(auto.stats.plan_counts().values()) == len(auto.stats.cycles) > 0
    assert auto.summary()["predicted_tok_s"] > 0 and list(tmp_path.rglob("*.json"))


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3])
def test_lr_exact_identical_three_problems(small_fp32, k):
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.decoding import generate
    from lookahead_reasoning.prompts import math_messages
    from lookahead_reasoning.runtime.lm import LM

    draft = LM(small_fp32.model, small_fp32.tokenizer, "draft")
    for mode in ("lr", "lr-sd"):
        gen = LookaheadGenerator(target=small_fp32, draft=draft, verifier="exact", k=k)
        for question in gsm8k_questions(3):
            messages = math_messages(question)
            ar = generate(small_fp32, small_fp32.prompt_ids(messages), max_new_tokens=128)
            assert gen.generate(messages, mode=mode, max_new_tokens=128).token_ids == ar.token_ids


@pytest.mark.real
@pytest.mark.slow
def test_lr_exact_with_real_pair_equals_target_ar():
    """0.5B drafts, 1.5B verifies with exact matching, float32: the output is the 1.5B's greedy text."""
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.decoding import generate
    from lookahead_reasoning.prompts import math_messages

    target, draft = real_lm("qwen2.5-coder-1.5b"), real_lm("qwen2.5-coder-0.5b")
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", k=3, precision={"draft": None})
    for question in gsm8k_questions(3):
        messages = math_messages(question)
        ar = generate(target, target.prompt_ids(messages), max_new_tokens=128)
        for mode in ("lr", "auto"):
            assert gen.generate(messages, mode=mode, max_new_tokens=128).token_ids == ar.token_ids, mode
