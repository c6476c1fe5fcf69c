"""The autoregressive loop: greedy ``generate`` equals transformers' ``model.generate`` token for
token; batched ``decode_rows`` equals each row alone; EOS, stop strings, the budget and a zero
budget end generation exactly where they should; streaming deltas add up to the final text;
sampling is reproducible from its seed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_reasoning.decoding.autoregressive import decode_rows, generate
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.sampling import SamplingConfig, make_generator
from lookahead_reasoning.stopping import StopChecker, StopCondition

from conftest import ORDINARY_IDS, hf_greedy_ids, real_greedy_reference, real_lm, set_eos, tiny_lm

prompts = st.lists(st.sampled_from(ORDINARY_IDS), min_size=1, max_size=20)


def no_eos(lm):
    return set_eos(lm, [])


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
@settings(max_examples=30, deadline=None)
@given(prompt=prompts, n=st.integers(1, 24))
def test_greedy_generate_equals_transformers(arch_name, prompt, n):
    lm = tiny_lm(arch_name)
    result = generate(lm, prompt, max_new_tokens=n)
    expected = hf_greedy_ids(lm, prompt, n)
    assert result.token_ids == expected
    assert result.prompt_ids == prompt
    assert result.text == lm.decode(expected)
    assert result.stop_reason == ("eos" if expected[-1] in lm.eos_ids else "budget")
    assert result.target_forwards == len(expected)  # prefill gives the first token, then one per token


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_decode_rows_batched_equals_each_row_alone(arch_name):
    lm = no_eos(tiny_lm(arch_name))
    prompts_ = [[1, 2, 3], list(range(30, 55)), [200], [7, 7, 7, 7, 7]]
    budgets = [12, 5, 20, 1]
    session = Session(lm, prompts_)
    checkers = [StopChecker(StopCondition(lm.eos_ids, (), b), lm.decode) for b in budgets]
    hits = decode_rows(session, [len(p) for p in prompts_], checkers, SamplingConfig())
    for b, (p, n) in enumerate(zip(prompts_, budgets)):
        alone = generate(no_eos(tiny_lm(arch_name)), p, max_new_tokens=n).token_ids
        assert session.rows[b] == p + alone, f"row {b}"
        assert (hits[b].keep, hits[b].reason) == (n, "budget")
    # one forward per step of the longest row
    assert lm.stats.calls == max(budgets)


def test_decode_rows_on_done_cancels_rows():
    lm = no_eos(tiny_lm("qwen2"))
    session = Session(lm, [[1, 2], [3, 4], [5, 6]])
    checkers = [StopChecker(StopCondition(frozenset(), (), b), lm.decode) for b in (3, 50, 50)]
    done = []

    def on_done(b):
        done.append(b)
        return [2] if b == 0 else []

    hits = decode_rows(session, [2, 2, 2], checkers, SamplingConfig(), on_done=on_done)
    assert hits[0].reason == "budget" and hits[2].reason == "cancelled" and hits[2].keep == 3
    assert hits[1].reason == "budget" and hits[1].keep == 50
    assert len(session.rows[2]) == 5 and done[0] == 0


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_eos_ends_generation_at_the_eos_token(arch_name):
    prompt = [10, 20, 30, 40]
    free = generate(no_eos(tiny_lm(arch_name)), prompt, max_new_tokens=40).token_ids
    # an EOS that the greedy text reaches: its first occurrence at position >= 3
    j = next(i for i in range(3, len(free)) if free[i] not in free[:i])
    lm = set_eos(tiny_lm(arch_name), [free[j]])
    result = generate(lm, prompt, max_new_tokens=40)
    assert result.token_ids == free[:j + 1] and result.stop_reason == "eos"
    assert result.token_ids == hf_greedy_ids(lm, prompt, 40, eos=[free[j]])


def spanning_stop_string(lm, tokens, start=3):
    """A stop string made of the last character of decode(tokens[:j+1]) and the text token j+1 adds;
    it first appears with token j+1. Returns (stop_string, j + 2) or None."""
    for j in range(start, len(tokens) - 1):
        before, after = lm.decode(tokens[:j + 1]), lm.decode(tokens[:j + 2])
        if not before or "\ufffd" in after[len(before) - 1:] or not after.startswith(before) or len(after) == len(before):
            continue
        stop = after[len(before) - 1:]
        if stop not in before:
            return stop, j + 2
    return None


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_stop_string_spanning_two_tokens(arch_name):
    for prompt in ([65, 66, 67], [97, 98, 32, 99], [49, 50, 51, 10], [72, 105, 33]):
        free = generate(no_eos(tiny_lm(arch_name)), prompt, max_new_tokens=40).token_ids
        found = spanning_stop_string(tiny_lm(arch_name), free)
        if found:
            break
    assert found, "no usable stop string in the greedy texts"
    stop, cut = found
    result = generate(no_eos(tiny_lm(arch_name)), prompt, max_new_tokens=40, stop_strings=["\x00never", stop])
    assert result.token_ids == free[:cut]
    assert result.stop_reason == "stop_string" and result.text.endswith(stop)
    assert stop not in tiny_lm(arch_name).decode(free[:cut - 1])


@pytest.mark.parametrize("n", [1, 7, 30])
def test_budget_is_exact(n):
    lm = no_eos(tiny_lm("llama"))
    result = generate(lm, [1, 2, 3], max_new_tokens=n)
    assert result.num_tokens == n and result.stop_reason == "budget"
    assert result.target_forwards == n


def test_zero_budget():
    lm = tiny_lm("llama")
    result = generate(lm, [1, 2, 3], max_new_tokens=0)
    assert result.token_ids == [] and result.text == "" and result.stop_reason == "budget"
    assert result.target_forwards == 0 and lm.stats.calls == 0


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=1.0)])
def test_streaming_deltas_add_up_to_the_text(sampling):
    lm = no_eos(tiny_lm("qwen2"))
    chunks: list[str] = []
    result = generate(lm, [195, 169, 32], max_new_tokens=40, sampling=sampling, seed=3, on_text=chunks.append)
    assert "".join(chunks) == result.text
    assert len(chunks) > 1 and all(chunks)


def test_sampled_generation_is_reproducible_by_seed():
    lm = no_eos(tiny_lm("qwen2"))
    hot = SamplingConfig(temperature=1.5)
    a = generate(lm, [1, 2, 3], max_new_tokens=32, sampling=hot, seed=11).token_ids
    b = generate(lm, [1, 2, 3], max_new_tokens=32, sampling=hot, seed=11).token_ids
    assert a == b
    others = {tuple(generate(lm, [1, 2, 3], max_new_tokens=32, sampling=hot, seed=s).token_ids) for s in range(12, 16)}
    assert len(others | {tuple(a)}) >= 3
    # top_k = 1 is greedy, whatever the seed
    greedy = generate(lm, [1, 2, 3], max_new_tokens=16).token_ids
    assert generate(lm, [1, 2, 3], max_new_tokens=16, sampling=SamplingConfig(temperature=1.0, top_k=1),
                    seed=5).token_ids == greedy


def test_sampled_decode_rows_uses_the_generator():
    lm = no_eos(tiny_lm("llama"))
    hot = SamplingConfig(temperature=2.0)

    def run(seed):
        session = Session(lm, [[1, 2], [3]])
        checkers = [StopChecker(StopCondition(frozenset(), (), 10), lm.decode) for _ in range(2)]
        decode_rows(session, [2, 1], checkers, hot, make_generator(seed))
        return session.rows

    assert run(0) == run(0)
    assert len({str(run(s)) for s in range(1, 5)}) >= 2


# ------------------------------------------------------------------------------------- real models

@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("question", [0, 1, 2])
def test_real_1p5b_greedy_equals_transformers(question):
    """Qwen2.5-Coder-1.5B in float32, a GSM8K question with the chat template, 128 new tokens."""
    prompt, expected = real_greedy_reference("qwen2.5-coder-1.5b", question, 128)
    result = generate(real_lm("qwen2.5-coder-1.5b"), prompt, max_new_tokens=128)
    assert result.token_ids == expected
