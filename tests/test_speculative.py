"""Token-level speculative decoding on tiny models.

Greedy SD must equal greedy AR token for token whatever the drafter: one that never agrees
(another random model), one that always agrees (the target's own weights behind a second LM
object), and prompt lookup (n-gram). Sampled SD must be reproducible from its seed and, over many
rows, emit tokens with the target's distribution. Stops inside an accepted block end it exactly
where AR would; the budget is exact; bad input raises clear errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_reasoning.decoding.autoregressive import generate
from lookahead_reasoning.decoding.drafters import ModelDrafter, NGramDrafter
from lookahead_reasoning.runtime.vocab import check_same_tokenizer
from lookahead_reasoning.decoding.results import SDStats
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.decoding.speculative import TokenSDRun, decode_rows_sd, generate_sd
from lookahead_reasoning.errors import ConfigError, TokenizerMismatchError
from lookahead_reasoning.sampling import SamplingConfig, make_generator, probs_from_logits
from lookahead_reasoning.stopping import StopChecker, StopCondition

from conftest import (
    ORDINARY_IDS, perturbed_lm, real_greedy_reference, real_lm, reference_logits, set_eos, shifted_tokenizer, tiny_lm,
)

GAMMAS = [1, 2, 4, 7]
prompts = st.lists(st.sampled_from(ORDINARY_IDS), min_size=1, max_size=16)
# prompts that repeat themselves, so prompt lookup finds something to draft
repetitive = st.tuples(st.lists(st.sampled_from(ORDINARY_IDS), min_size=1, max_size=5), st.integers(2, 4),
                       st.lists(st.sampled_from(ORDINARY_IDS), max_size=3)).map(lambda t: t[0] * t[1] + t[2])


def ar(arch, prompt, n, eos=None, stop=()):
    lm = tiny_lm(arch)
    if eos is not None:
        set_eos(lm, eos)
    return generate(lm, prompt, max_new_tokens=n, stop_strings=stop)


def drafter_for(kind, arch):
    if kind == "never":  # another random model: its greedy choice almost never matches
        return tiny_lm(arch, seed=1)
    if kind == "same":  # the target's weights, its own LM object (own counters)
        return tiny_lm(arch, seed=0)
    if kind == "ngram":
        return NGramDrafter(max_n=3, min_n=1)
    raise ValueError(kind)


def check_stats(stats: SDStats, result, gamma):
    assert 0 <= stats.accepted <= stats.drafted <= gamma * stats.iterations
    assert sum(stats.accept_histogram) == stats.iterations
    assert sum(n * c for n, c in enumerate(stats.accept_histogram)) == stats.accepted
    assert stats.iterations == stats.target_forwards == result.target_forwards
    assert stats.gamma == gamma


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
@pytest.mark.parametrize("kind", ["never", "same"])
@settings(max_examples=20, deadline=None)
@given(prompt=prompts, gamma=st.sampled_from(GAMMAS), n=st.integers(1, 24))
def test_greedy_sd_equals_ar_model_drafter(arch_name, kind, prompt, gamma, n):
    expected = ar(arch_name, prompt, n)
    result = generate_sd(tiny_lm(arch_name), prompt, drafter_for(kind, arch_name), gamma=gamma, max_new_tokens=n)
    assert result.token_ids == expected.token_ids
    assert result.stop_reason == expected.stop_reason and result.text == expected.text
    check_stats(result.stats, result, gamma)
    assert result.mode == "sd"


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
@settings(max_examples=25, deadline=None)
@given(prompt=repetitive, gamma=st.sampled_from(GAMMAS), n=st.integers(1, 30))
def test_greedy_sd_equals_ar_ngram_drafter(arch_name, prompt, gamma, n):
    expected = ar(arch_name, prompt, n)
    result = generate_sd(tiny_lm(arch_name), prompt, NGramDrafter(max_n=2), gamma=gamma, max_new_tokens=n)
    assert result.token_ids == expected.token_ids and result.stop_reason == expected.stop_reason
    check_stats(result.stats, result, gamma)
    assert result.mode == "sd-ngram" and result.stats.draft_forwards == 0


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
@pytest.mark.parametrize("gamma", GAMMAS)
def test_all_gammas_all_drafters_fixed_prompt(arch_name, gamma):
    prompt = [72, 101, 108, 108, 111, 72, 101, 108]
    expected = ar(arch_name, prompt, 40).token_ids
    for kind in ("never", "same", "ngram"):
        result = generate_sd(tiny_lm(arch_name), prompt, drafter_for(kind, arch_name), gamma=gamma, max_new_tokens=40)
        assert result.token_ids == expected, kind
        check_stats(result.stats, result, gamma)


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_identical_draft_accepts_everything_and_saves_forwards(arch_name):
    prompt, n, gamma = [5, 6, 7, 8], 42, 4
    target = set_eos(tiny_lm(arch_name), [])
    expected = ar(arch_name, prompt, n, eos=[])
    result = generate_sd(target, prompt, tiny_lm(arch_name), gamma=gamma, max_new_tokens=n)
    stats = result.stats
    assert result.token_ids == expected.token_ids
    assert stats.alpha == 1.0 and stats.accepted == stats.drafted
    assert result.target_forwards < expected.target_forwards
    # every full iteration emits gamma + 1 tokens; the budget shortens the last drafts
    assert result.target_forwards == -(-n // (gamma + 1))
    assert target.stats.calls == result.target_forwards
    # one draft forward per drafted token: none wasted on drafts the budget would cut
    assert stats.draft_forwards == stats.drafted == n - result.target_forwards


def test_never_agreeing_draft_accepts_little():
    prompt, n = [5, 6, 7, 8], 40
    result = generate_sd(set_eos(tiny_lm("qwen2"), []), prompt, tiny_lm("qwen2", seed=1), gamma=4, max_new_tokens=n)
    assert result.stats.alpha < 0.5
    assert result.target_forwards >= n // 2


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_eos_inside_an_accepted_block_ends_there(arch_name):
    prompt, gamma = [10, 20, 30, 40], 7
    free = ar(arch_name, prompt, 40, eos=[]).token_ids
    # the first new token id whose first occurrence is not at the end of a block of gamma + 1
    j = next(i for i in range(3, len(free)) if free[i] not in free[:i] and (i + 1) % (gamma + 1))
    expected = ar(arch_name, prompt, 40, eos=[free[j]])
    assert expected.token_ids == free[:j + 1] and expected.stop_reason == "eos"
    result = generate_sd(set_eos(tiny_lm(arch_name), [free[j]]), prompt, tiny_lm(arch_name), gamma=gamma,
                         max_new_tokens=40)
    assert result.token_ids == expected.token_ids and result.stop_reason == "eos"
    # the block that held the EOS was accepted past it, then cut
    assert result.stats.accepted + result.stats.iterations > result.num_tokens


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_stop_string_inside_an_accepted_block_ends_there(arch_name):
    from test_autoregressive import spanning_stop_string

    prompt, gamma = [65, 66, 67], 7
    free = ar(arch_name, prompt, 40, eos=[]).token_ids
    lm = tiny_lm(arch_name)
    found = None
    for start in range(3, 30):
        found = spanning_stop_string(lm, free, start)
        if found and found[1] % (gamma + 1):
            break
    stop, cut = found
    expected = ar(arch_name, prompt, 40, eos=[], stop=[stop])
    assert expected.token_ids == free[:cut] and expected.stop_reason == "stop_string"
    for drafter in (tiny_lm(arch_name), NGramDrafter()):
        result = generate_sd(set_eos(tiny_lm(arch_name), []), prompt, drafter, gamma=gamma, max_new_tokens=40,
                             stop_strings=[stop])
        assert result.token_ids == expected.token_ids and result.stop_reason == "stop_string"
        assert result.text.endswith(stop)
    # with the identical draft the stop fell inside an accepted block
    result = generate_sd(set_eos(tiny_lm(arch_name), []), prompt, tiny_lm(arch_name), gamma=gamma,
                         max_new_tokens=40, stop_strings=[stop])
    assert result.stats.accepted + result.stats.iterations > result.num_tokens


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8, 9, 23])
def test_budget_is_exact(n):
    prompt = [1, 2, 3]
    for drafter in (tiny_lm("llama"), tiny_lm("llama", seed=1), NGramDrafter()):
        result = generate_sd(set_eos(tiny_lm("llama"), []), prompt, drafter, gamma=7, max_new_tokens=n)
        assert result.num_tokens == n and result.stop_reason == "budget"
        assert result.token_ids == ar("llama", prompt, n, eos=[]).token_ids
    assert generate_sd(tiny_lm("llama"), prompt, tiny_lm("llama"), max_new_tokens=0).target_forwards == 0


def test_streaming_deltas_add_up_to_the_text():
    chunks: list[str] = []
    result = generate_sd(set_eos(tiny_lm("qwen2"), []), [195, 169, 32], tiny_lm("qwen2"), gamma=3,
                         max_new_tokens=30, on_text=chunks.append)
    assert "".join(chunks) == result.text and len(chunks) > 1


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_decode_rows_sd_batched_equals_each_row_alone(arch_name):
    """Rows of different length and budget in one session, as Lookahead Reasoning runs its branches."""
    target = set_eos(tiny_lm(arch_name), [])
    rows = [[1, 2, 3], list(range(40, 70)), [9], [4, 4, 4, 4, 4, 4]]
    budgets = [15, 4, 20, 9]
    for drafter in (ModelDrafter(tiny_lm(arch_name, seed=1), SamplingConfig()),
                    ModelDrafter(tiny_lm(arch_name), SamplingConfig()), NGramDrafter()):
        session = Session(target, rows)
        checkers = [StopChecker(StopCondition(frozenset(), (), b), target.decode) for b in budgets]
        stats = SDStats()
        hits = decode_rows_sd(session, [len(r) for r in rows], checkers, TokenSDRun(SamplingConfig(), drafter, 3, stats=stats))
        for b, (row, n) in enumerate(zip(rows, budgets)):
            assert session.rows[b] == row + ar(arch_name, row, n, eos=[]).token_ids, f"row {b}"
            assert (hits[b].keep, hits[b].reason) == (n, "budget")
        assert stats.accepted <= stats.drafted and sum(stats.accept_histogram) == stats.iterations


def test_sampled_sd_reproducible_by_seed():
    hot = SamplingConfig(temperature=1.2, top_k=20)
    prompt = [1, 2, 3, 4]

    def run(seed, drafter=None):
        return generate_sd(tiny_lm("qwen2"), prompt, drafter or tiny_lm("qwen2", seed=1), gamma=3,
                           max_new_tokens=24, sampling=hot, seed=seed).token_ids

    assert run(7) == run(7)
    assert len({tuple(run(s)) for s in range(4)}) >= 2
    assert run(5, NGramDrafter()) == run(5, NGramDrafter())
    # sampled SD with top_k = 1 is greedy
    greedy = ar("qwen2", prompt, 24).token_ids
    assert generate_sd(tiny_lm("qwen2"), prompt, tiny_lm("qwen2", seed=1), gamma=3, max_new_tokens=24,
                       sampling=SamplingConfig(temperature=1.0, top_k=1), seed=3).token_ids == greedy


@pytest.mark.parametrize("draft_stop_below", [None, 0.6])
def test_sampled_sd_emits_the_target_distribution(draft_stop_below):
    """4,000 independent rows of one prompt, 3 new tokens each, gamma = 2, a draft that disagrees.

    The first token should follow p(x1) and the second the marginal sum_x1 p(x1) p(x2 | x1), both
    computed from the target alone. DKW (Massart): P(sup |F_n - F| > eps) <= 2 exp(-2 n eps^2); with
    n = 4,000 and eps = 0.045 that is 2 exp(-16.2) < 2e-7 per token position. A loop that compared
    a drafted token with the wrong position's p or q is typically off by more than 0.1.
    With ``draft_stop_below`` the draft stops early when unsure: the distribution must not move.
    """
    sampling = SamplingConfig(temperature=1.0, top_k=4)
    target = set_eos(tiny_lm("llama"), [])
    draft = perturbed_lm(target, 0.3)  # agrees with the target about 70% of the time here
    prompt = [11, 22, 33]
    p1 = probs_from_logits(reference_logits(target, prompt)[-1], sampling)
    p2 = torch.zeros_like(p1)
    for x1 in torch.nonzero(p1).flatten().tolist():
        p2 += p1[x1] * probs_from_logits(reference_logits(target, prompt + [x1])[-1], sampling)
    n_rows, n_runs = 1000, 4
    first, second = torch.zeros_like(p1), torch.zeros_like(p1)
    stats = SDStats()
    for run in range(n_runs):
        generator = make_generator(100 + run)
        session = Session(target, [prompt] * n_rows)
        checkers = [StopChecker(StopCondition(frozenset(), (), 3), target.decode) for _ in range(n_rows)]
        drafter = ModelDrafter(draft, sampling, generator, draft_stop_below=draft_stop_below)
        decode_rows_sd(session, [3] * n_rows, checkers, TokenSDRun(sampling, drafter, 2, generator, stats))
        for row in session.rows:
            first[row[3]] += 1
            second[row[4]] += 1
    n = n_rows * n_runs
    eps = 0.045
    assert float((first.cumsum(0) / n - p1.cumsum(0)).abs().max()) <= eps
    assert float((second.cumsum(0) / n - p2.cumsum(0)).abs().max()) <= eps
    assert 0 < stats.accepted < stats.drafted  # the draft was both accepted and rejected


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
@settings(max_examples=15, deadline=None)
@given(prompt=prompts, gamma=st.sampled_from([2, 5, 8]), n=st.integers(1, 24),
       draft_stop_below=st.sampled_from([0.05, 0.5, 0.95]))
def test_draft_stop_below_keeps_greedy_sd_equal_to_ar(arch_name, prompt, gamma, n, draft_stop_below):
    expected = ar(arch_name, prompt, n).token_ids
    for kind in ("never", "same"):
        result = generate_sd(tiny_lm(arch_name), prompt, drafter_for(kind, arch_name), gamma=gamma, max_new_tokens=n,
                             draft_stop_below=draft_stop_below)
        assert result.token_ids == expected
        check_stats(result.stats, result, gamma)


def test_draft_stop_below_drafts_less_when_the_draft_is_unsure():
    """The two ends of the rule, and one point between. A threshold just under 1 stops every draft
    after its first token (no draft is that sure); 0 never stops early (same as no threshold);
    0.5 drafts between the two. The text is the same in every case."""
    prompt, gamma, n = [5, 6, 7, 8], 6, 20

    def run(draft_stop_below):
        return generate_sd(tiny_lm("qwen2"), prompt, tiny_lm("qwen2", seed=1), gamma=gamma, max_new_tokens=n,
                           draft_stop_below=draft_stop_below)

    eager, never, middle, always = run(None), run(0.0), run(0.5), run(0.999999)
    assert never.token_ids == middle.token_ids == always.token_ids == eager.token_ids
    assert never.stats.drafted == eager.stats.drafted > 3 * eager.stats.iterations
    # one token per draft, then unsure: stop (the last iteration may draft none: no budget left for it)
    assert always.stats.iterations - 1 <= always.stats.drafted <= always.stats.iterations
    assert always.stats.drafted <= middle.stats.drafted <= eager.stats.drafted
    assert always.stats.draft_forwards < eager.stats.draft_forwards


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2])
def test_bad_draft_stop_below_raises(bad):
    with pytest.raises(ConfigError, match="draft_stop_below"):
        ModelDrafter(tiny_lm("qwen2", seed=1), SamplingConfig(), draft_stop_below=bad)


def test_draft_with_a_padded_vocabulary():
    """A draft whose embedding has more rows than the tokenizer (and the target) has ids: it must only
    propose ids the target can score, greedy and sampled."""
    target = tiny_lm("qwen2")
    draft = tiny_lm("qwen2", seed=2, extra_vocab=40)
    assert draft.vocab_size == target.vocab_size + 40
    prompt = [1, 2, 3]
    greedy = generate_sd(target, prompt, draft, gamma=4, max_new_tokens=24)
    assert greedy.token_ids == ar("qwen2", prompt, 24).token_ids
    hot = SamplingConfig(temperature=3.0)
    for seed in range(3):
        result = generate_sd(tiny_lm("qwen2"), prompt, tiny_lm("qwen2", seed=2, extra_vocab=40), gamma=4,
                             max_new_tokens=24, sampling=hot, seed=seed)
        assert result.num_tokens >= 1 and max(result.token_ids) < target.vocab_size


def test_a_smaller_draft_vocabulary_is_padded():
    target = tiny_lm("qwen2", seed=3, extra_vocab=40)
    prompt = [1, 2, 3]
    expected = generate(tiny_lm("qwen2", seed=3, extra_vocab=40), prompt, max_new_tokens=16).token_ids
    assert generate_sd(target, prompt, tiny_lm("qwen2"), gamma=3, max_new_tokens=16).token_ids == expected
    result = generate_sd(tiny_lm("qwen2", seed=3, extra_vocab=40), prompt, tiny_lm("qwen2"), gamma=3,
                         max_new_tokens=16, sampling=SamplingConfig(temperature=1.0), seed=1)
    assert result.num_tokens >= 1


# ------------------------------------------------------------------------------------ n-gram lookup

def test_ngram_lookup():
    d = NGramDrafter(max_n=3, min_n=1)
    # the last 3 tokens (1, 2, 3) occurred at the start: propose what followed them
    assert d.lookup([1, 2, 3, 4, 5, 9, 1, 2, 3], 2) == [4, 5]
    # the most recent earlier occurrence wins
    assert d.lookup([7, 8, 1, 7, 9, 1, 7], 3) == [9, 1, 7]
    # a longer match is preferred to a more recent shorter one
    assert d.lookup([1, 2, 5, 6, 0, 2, 8, 8, 1, 2], 1) == [5]
    # no earlier occurrence of the last token: nothing
    assert d.lookup([1, 2, 3], 4) == []
    assert d.lookup([5], 4) == []
    # up to gamma tokens, fewer at the end of the row
    assert d.lookup([4, 5, 4], 5) == [5, 4]
    assert NGramDrafter(max_n=2, min_n=2).lookup([1, 2, 3, 2], 2) == []
    prop = d.propose([[1, 2, 1], [3, 4, 3]], 2, [True, False])
    assert prop.tokens == [[2, 1], []] and prop.q == [None, None]


# ------------------------------------------------------------------------------------- bad input

def test_gamma_below_one_raises():
    target = tiny_lm("qwen2")
    for gamma in (0, -1, 1.5):
        with pytest.raises(ConfigError):
            generate_sd(target, [1, 2], tiny_lm("qwen2"), gamma=gamma, max_new_tokens=4)
    session = Session(target, [[1, 2]])
    checkers = [StopChecker(StopCondition(frozenset(), (), 4), target.decode)]
    with pytest.raises(ConfigError):
        decode_rows_sd(session, [2], checkers, TokenSDRun(SamplingConfig(), NGramDrafter(), 0))


def test_mismatched_tokenizers_raise():
    target = tiny_lm("qwen2")
    other = tiny_lm("qwen2", tokenizer=shifted_tokenizer(3))
    with pytest.raises(TokenizerMismatchError) as info:
        generate_sd(target, [1, 2], other, max_new_tokens=4)
    assert "step-level" in str(info.value).lower()
    with pytest.raises(TokenizerMismatchError):
        check_same_tokenizer(other, target)
    check_same_tokenizer(tiny_lm("llama"), target)  # same tokenizer, other architecture: fine


@pytest.mark.parametrize("kwargs", [{"max_n": 1, "min_n": 2}, {"min_n": 0}, {"max_n": 2.0}])
def test_bad_ngram_sizes_raise(kwargs):
    with pytest.raises(ConfigError):
        NGramDrafter(**kwargs)


# ------------------------------------------------------------------------------------- real models

@pytest.mark.real
def test_real_smoke_ar_and_ngram_sd_equal_transformers():
    """Qwen2.5-Coder-0.5B in float32, one GSM8K question with the chat template, 32 new tokens: our
    greedy AR equals transformers' ``generate``, and n-gram SD (6 drafted tokens, n <= 2) equals AR."""
    name = "qwen2.5-coder-0.5b"
    prompt, expected = real_greedy_reference(name, 0, 32)
    ar_result = generate(real_lm(name), prompt, max_new_tokens=32)
    assert ar_result.token_ids == expected
    sd = generate_sd(real_lm(name), prompt, NGramDrafter(max_n=2), gamma=6, max_new_tokens=32)
    assert sd.token_ids == ar_result.token_ids
    check_stats(sd.stats, sd, 6)


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("question", [0, 1, 2])
@pytest.mark.parametrize("drafter", ["0.5b", "0.5b-int8", "ngram"])
def test_real_sd_0p5b_to_1p5b_equals_ar(question, drafter):
    """0.5B drafts for the 1.5B (float32; the draft also as int8, as the CLI runs it), or prompt
    lookup drafts; 128 new tokens: the output is the 1.5B's greedy output.

    The reference is transformers' greedy ``generate`` on the 1.5B, which our AR loop equals
    (test_autoregressive.py::test_real_1p5b_greedy_equals_transformers), so SD == AR.
    """
    from lookahead_reasoning.models.kernels import quantize_draft_int8
    from lookahead_reasoning.runtime.lm import LM
    from lookahead_reasoning.models import load_model

    prompt, expected = real_greedy_reference("qwen2.5-coder-1.5b", question, 128)
    if drafter == "ngram":
        source, gamma = NGramDrafter(max_n=2), 6
    elif drafter == "0.5b":
        source, gamma = real_lm("qwen2.5-coder-0.5b"), 4
    else:
        source = LM.from_loaded(load_model("qwen2.5-coder-0.5b", dtype="float32", cpu_linear="default"))
        quantize_draft_int8(source.model)
        gamma = 4
    result = generate_sd(real_lm("qwen2.5-coder-1.5b"), prompt, source, gamma=gamma, max_new_tokens=128)
    assert result.token_ids == expected
    check_stats(result.stats, result, gamma)
    if drafter != "ngram":
        assert result.stats.alpha > 0.5  # the pair agrees most of the time (93% top-1 in the notes)


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.93])
def test_the_theorys_alpha_is_recovered_from_geometric_iterations_and_the_acceptance_rate_is_below_it(alpha):
    """Iterations drawn as the theory has them: each drafted token is judged only while every one before
    it was accepted, and accepted with probability alpha; a third of the drafts stop early (fewer
    tokens drafted, all of them judged). ``SDStats.alpha`` (accepted / judged) recovers alpha within
    0.01; ``acceptance_rate`` (accepted / drafted) is biased below it."""
    rng = np.random.default_rng(7)
    stats, gamma = SDStats(gamma=8), 8
    for _ in range(20_000):
        drafted = int(rng.integers(1, gamma + 1)) if rng.random() < 1 / 3 else gamma
        accepted = 0
        while accepted < drafted and rng.random() < alpha:
            accepted += 1
        stats.record(drafted, accepted)
    assert stats.alpha == pytest.approx(alpha, abs=0.01)
    assert stats.acceptance_rate < alpha - 0.03
    summary = stats.summary()
    assert summary["alpha_judged"] == round(stats.alpha, 4) and summary["rejected"] == stats.rejected
    assert summary["accepted_per_drafted"] == round(stats.acceptance_rate, 4) and "alpha" not in summary
