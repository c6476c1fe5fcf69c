"""The likelihood verifier: a drafted step judged by the target's probabilities of its tokens.

The scores come from a different place in each implementation of the cycle: the optimised PyTorch
cycle reads them from its one checking forward over all drafted tokens, the paper's plain Algorithm 1
(decoding/reference.py) and the step-writer cycle (decoding/stepwise.py) ask the target for them in a
forward of their own. All three must judge the same steps by the same numbers and keep the same text.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lr_helpers import frequent_char, tiny_lm

from lookahead_reasoning import LookaheadGenerator, Settings, StepConfig
from lookahead_reasoning.decoding import generate, generate_lr_reference
from lookahead_reasoning.decoding.driver import FixedPolicy
from lookahead_reasoning.decoding.reference import LocalSteps
from lookahead_reasoning.decoding.stepwise import generate_stepwise
from lookahead_reasoning.errors import ConfigError, EngineError, VerifierError
from lookahead_reasoning.runtime.engine.dialects import DIALECTS
from lookahead_reasoning.sampling import token_scores
from lookahead_reasoning.testing import perturbed_copy
from lookahead_reasoning.verifiers.likelihood import LikelihoodVerifier, TokenScores, verify_pairs
from lookahead_reasoning.verifiers.registry import make_verifier

TARGET = tiny_lm(0)
DRAFTS = {"same": lambda: tiny_lm(0), "close": lambda: perturbed_copy(TARGET, 0.3, seed=1), "other": lambda: tiny_lm(1)}
PROMPTS = st.lists(st.integers(0, 96), min_size=1, max_size=12)
FAST = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SPLIT = -1.15  # a mean log-probability that accepts some of the close draft's steps and rejects others


class Recording(LikelihoodVerifier):
    """A likelihood verifier that keeps every (pair, scores) it judged."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.seen: list[tuple[tuple[str, str], TokenScores]] = []

    def verify(self, pairs, scores=None):
        self.seen += list(zip(pairs, scores or []))
        return super().verify(pairs, scores)


@functools.cache
def _steps(prompt: tuple[int, ...], cap: int = 30) -> StepConfig:
    return StepConfig((frequent_char(TARGET, list(prompt)),), cap)


def _three(prompt, draft: str, k: int, make, n: int = 48):
    """(results, verifiers) of the optimised cycle, Algorithm 1 and the step-writer cycle."""
    steps, verifiers = _steps(tuple(prompt)), [make(), make(), make()]
    gen = LookaheadGenerator(target=TARGET, draft=DRAFTS[draft](), verifier=verifiers[0], k=k, steps=steps, mode="lr")
    fast = gen.generate(prompt, max_new_tokens=n)
    ref = generate_lr_reference(TARGET, DRAFTS[draft](), prompt, verifiers[1], Settings(k=k, steps=steps, max_new_tokens=n))
    seam = generate_stepwise(LocalSteps(TARGET, steps), LocalSteps(DRAFTS[draft](), steps), prompt, verifiers[2],
                             policy=FixedPolicy(k), max_new_tokens=n)
    return (fast, ref, seam), verifiers


def _judged(result) -> list[tuple[bool, float]]:
    return [(v.accepted, v.score) for c in result.stats.cycles for v in c.verdicts[:c.accepted + 1]]


def test_token_scores_are_the_models_own_probabilities_and_ranks():
    torch.manual_seed(0)
    logits = torch.randn(5, 40)
    ids = [3, 0, 39, 7, 7]
    probs, ranks = token_scores(logits, ids)
    want = torch.softmax(logits, dim=-1)
    assert probs == pytest.approx([float(want[i, t]) for i, t in enumerate(ids)], rel=1e-5)
    assert ranks == [int((want[i] > want[i, t]).sum()) for i, t in enumerate(ids)]
    assert token_scores(logits.argmax(dim=-1, keepdim=True).float()[:0], []) == ([], [])


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 2, 3]), draft=st.sampled_from(["close", "other"]))
def test_the_three_cycles_judge_by_the_same_scores_and_keep_the_same_text(prompt, k, draft):
    (fast, ref, seam), verifiers = _three(prompt, draft, k, lambda: Recording("mean-logp", SPLIT))
    assert fast.token_ids == ref.token_ids == seam.token_ids
    mine, theirs, seams = _judged(fast), _judged(ref), _judged(seam)
    assert [a for a, _ in mine] == [a for a, _ in theirs] == [a for a, _ in seams]
    assert [s for _, s in mine] == pytest.approx([s for _, s in theirs], abs=1e-4)
    assert [s for _, s in seams] == pytest.approx([s for _, s in theirs], abs=1e-4)


def test_the_split_is_not_trivial_and_a_kept_draft_can_leave_the_targets_text():
    """With the threshold above, some drafted steps pass and some do not, and what passes is not
    always what the target would have written (so the equality above compares real decisions)."""
    prompt = [5, 6, 7]
    (fast, ref, _), (verifier, _, _) = _three(prompt, "close", 3, lambda: Recording("mean-logp", SPLIT), n=96)
    decisions = [a for a, _ in _judged(ref)]
    assert any(decisions) and not all(decisions)
    kept_foreign = [c.drafted[j].text for c in ref.stats.cycles for j in range(c.accepted)
                    if c.drafted[j].text != c.target[j].text]
    assert kept_foreign and ref.token_ids != generate(TARGET, prompt, max_new_tokens=96).token_ids
    # the scores the fast cycle judged by are the target's, recomputed here from scratch
    for (draft_text, _), scores in verifier.seen[:3]:
        assert len(scores.probs) == len(scores.ranks) > 0 and all(0 < p <= 1 for p in scores.probs)


@FAST
@given(prompt=PROMPTS, k=st.sampled_from([1, 3]), draft=st.sampled_from(["same", "close", "other"]))
def test_rank_zero_everywhere_keeps_greedy_ar_text(prompt, k, draft):
    """max-rank 0 accepts a drafted step only when every token is the target's own first choice, i.e.
    the step greedy decoding would write: any draft then gives greedy AR's text."""
    (fast, ref, seam), _ = _three(prompt, draft, k, lambda: LikelihoodVerifier("max-rank", 0))
    ar = generate(TARGET, prompt, max_new_tokens=48)
    assert fast.token_ids == ref.token_ids == seam.token_ids == ar.token_ids
    if draft == "same":
        assert all(v.accepted for c in fast.stats.cycles for v in c.verdicts)


def test_the_rules_read_the_scores_as_documented():
    s = TokenScores.of([0.9, 0.5, 0.05], [0, 1, 4])
    assert LikelihoodVerifier("min-prob", 0.05).measure(s)[:2] == (True, 0.05)
    assert not LikelihoodVerifier("min-prob", 0.06).measure(s)[0]
    mean = (math.log(0.9) + math.log(0.5) + math.log(0.05)) / 3
    assert LikelihoodVerifier("mean-logp", mean).measure(s)[:2] == (True, pytest.approx(mean))
    assert not LikelihoodVerifier("mean-logp", mean + 1e-6).measure(s)[0]
    assert LikelihoodVerifier("low-count", 0.6, allowed=2).measure(s)[:2] == (True, 2.0)
    assert not LikelihoodVerifier("low-count", 0.6, allowed=1).measure(s)[0]
    assert LikelihoodVerifier("max-rank", 4).measure(s)[:2] == (True, 4.0)
    assert not LikelihoodVerifier("max-rank", 3).measure(s)[0]
    no_ranks = TokenScores.of([0.9])
    assert not LikelihoodVerifier("max-rank", 3).measure(no_ranks)[0]
    assert not LikelihoodVerifier("min-prob", 0.0).measure(TokenScores.of([]))[0]


def test_the_number_check_and_a_cascade_with_exact_get_their_share_of_the_scores():
    high, low = TokenScores.of([0.9, 0.8]), TokenScores.of([0.9, 0.01])
    numbers = make_verifier("likelihood-numbers", threshold=0.5)
    got = numbers.verify([("add 3", "add 3"), ("add 3", "add 4"), ("add 3", "add 3")], scores=[high, high, low])
    assert [v.accepted for v in got] == [True, False, False] and "numbers differ" in got[1].reason
    cascade = make_verifier("cascade:exact+likelihood", threshold=0.5)
    assert cascade.needs_scores
    pairs = [("Same.", "same."), ("Other.", "Step."), ("Other.", "Step.")]
    verdicts = verify_pairs(cascade, pairs, [low, high, low])
    assert [v.accepted for v in verdicts] == [True, True, False]  # exact, then the scores of pairs 2 and 3
    assert [v.verifier for v in verdicts] == ["exact", "likelihood:min-prob", "likelihood:min-prob"]


def test_bad_settings_and_missing_scores_are_named():
    for kw in [dict(rule="median"), dict(rule="min-prob", threshold=1.5), dict(rule="mean-logp", threshold=0.5),
               dict(rule="max-rank", threshold=1.5), dict(rule="low-count", allowed=-1)]:
        with pytest.raises(VerifierError):
            LikelihoodVerifier(**kw)
    with pytest.raises(VerifierError, match="TokenScores per pair"):
        LikelihoodVerifier().verify([("a", "b")])
    [verdict] = LikelihoodVerifier().verify([("a", "b")], scores=[None])
    assert not verdict.accepted and verdict.error == "unclear"


def test_vllm_prompt_logprobs_are_read_and_llama_cpp_says_it_cannot_score():
    ids = [11, 12, 13, 14]
    reply = {"choices": [{"prompt_logprobs": [None, {"12": {"logprob": -0.5, "rank": 1}},
                                              {"13": {"logprob": -2.0, "rank": 3}, "7": {"logprob": -0.1, "rank": 1}},
                                              {"14": {"logprob": 0.0, "rank": 1}}]}]}
    probs, ranks = DIALECTS["vllm"].read_scores(reply, ids, 2, "the engine at X")
    assert probs == pytest.approx([math.exp(-2.0), 1.0]) and ranks == [2, 0]
    body = DIALECTS["vllm"].score_body(ids)
    assert body["prompt"] == ids and body["prompt_logprobs"] == 0 and body["max_tokens"] == 1
    with pytest.raises(EngineError, match="prompt log-probabilities"):
        DIALECTS["vllm"].read_scores({"choices": [{}]}, ids, 2, "the engine at X")
    with pytest.raises(EngineError, match="llama.cpp"):
        DIALECTS["llama.cpp"].score_body(ids)


def test_a_step_model_that_cannot_score_is_refused_with_the_verifiers_name():
    class Plain:
        name = "plain"

        def __init__(self):
            self.inner = LocalSteps(TARGET, _steps((5, 6, 7)))

        async def awrite(self, request):
            return self.inner.write_one(request)

        def decode(self, ids):
            return self.inner.decode(ids)

    with pytest.raises(ConfigError, match="likelihood:min-prob.*plain"):
        generate_stepwise(Plain(), LocalSteps(tiny_lm(0), _steps((5, 6, 7))), [5, 6, 7], LikelihoodVerifier(),
                          policy=FixedPolicy(2), max_new_tokens=16)


def test_width_two_scores_the_alternatives_too():
    """Alternatives are not in the checking forward; the fast cycle scores them in one more forward.
    max-rank 0 still keeps greedy AR's text."""
    prompt = [5, 6, 7]
    steps = _steps(tuple(prompt))
    verifier = Recording("max-rank", 0)
    gen = LookaheadGenerator(target=TARGET, draft=DRAFTS["close"](), verifier=verifier, k=2, steps=steps, mode="lr",
                             width=2)
    out = gen.generate(prompt, max_new_tokens=48)
    assert out.token_ids == generate(TARGET, prompt, max_new_tokens=48).token_ids
    alternatives = [a.text for c in out.stats.cycles for row in c.alternatives for a in row]
    judged_alternatives = [(pair, sc) for pair, sc in verifier.seen if pair[0] in alternatives]
    assert any(c.alt_verdicts for c in out.stats.cycles) and judged_alternatives
    assert all(len(sc.probs) == len(sc.ranks) > 0 for _, sc in judged_alternatives)
