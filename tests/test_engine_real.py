"""Lookahead Reasoning over a real llama.cpp server (``engine`` tests; .ci/run builds the server first).

Two ``llama-server`` processes on loopback ports serve the offline GGUF files as they ship (Q4_K_M):
the 1.5B target and the 0.5B draft, four slots each. With greedy decoding and the exact verifier every
step LR keeps is the target's own, so LR over the engine must write the engine's own greedy text.
One caveat, stated here as the test checks it: the engine batches the concurrent rows of a cycle,
and a batched forward can round differently from a single one, so a near-tie may flip. The texts must
then agree up to a first difference where the engine's own top-2 log probabilities were within
:data:`NEAR_TIE` nats and LR's token is the second of them.
"""

from __future__ import annotations

import asyncio
import re
import threading

import pytest
from conftest import USER_CACHE, unavailable

from lookahead_reasoning.bench.datasets import load_dataset
from lookahead_reasoning.decoding.driver import FixedPolicy
from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning import engine_runtime as runs
from lookahead_reasoning.steps import closing
from lookahead_reasoning.errors import EngineError
from lookahead_reasoning.presets import MAX_STEP_TOKENS
from lookahead_reasoning.prompts import math_messages
from lookahead_reasoning.verifiers.registry import make_verifier


def lr_over(pair, prompt, verifier, policy, tokens):
    """Lookahead Reasoning over ``pair`` on an event loop of its own, its connections closed at the end."""
    return asyncio.run(closing(runs.alr(pair, prompt, verifier, policy, tokens), pair))

pytestmark = [pytest.mark.engine, pytest.mark.real]

NEAR_TIE = 0.5  # nats between the engine's first and second choice where batched rounding may flip them
TOKENS = 96
GSM8K = "../shared/data/gsm8k/train.jsonl"


def _binary():
    from lookahead_reasoning.runtime.engine.build import BINARY, built_server

    home = built_server(USER_CACHE)
    binary = None if home is None else home / "bin" / BINARY
    if binary is None:
        unavailable("llama-server is not built: `lookahead-reasoning serve-engine --build-only` builds it (~8 min)")
    return binary


def _server(model: str):
    from lookahead_reasoning.models.offline import offline_spec
    from lookahead_reasoning.runtime.engine.llamacpp import LlamaServer, ServerConfig

    _binary()
    spec = offline_spec(model)
    gguf = USER_CACHE / spec.name / spec.gguf_file
    if not gguf.is_file():
        unavailable(f"{gguf} is not joined: `lookahead-reasoning serve-engine --build-only` joins it")
    return LlamaServer(ServerConfig(str(gguf), parallel=4, context=8192, threads=2, cache_dir=USER_CACHE))


@pytest.fixture(scope="module")
def pair():
    from lookahead_reasoning.runtime.engine.pair import EnginePair

    with _server("qwen2.5-coder-1.5b") as target, _server("qwen2.5-coder-0.5b") as draft:
        engines = EnginePair(target.url, draft.url)
        yield engines
        engines.close()


def gsm8k_problems(offset: int, limit: int = 3):
    """Problems of the shared GSM8K file; the test skips where the file is not beside the checkout."""
    try:
        return load_dataset(GSM8K, limit=limit, offset=offset)
    except Exception as exc:  # the shared data set is not beside the checkout
        unavailable(f"no GSM8K file: {exc}")


@pytest.fixture(scope="module")
def problems():
    return gsm8k_problems(400)


def _engine_greedy(pair, messages, tokens: int = TOKENS) -> tuple[list[int], list]:
    done = pair.target.client.complete(pair.prompt_ids(messages), tokens, (), logprobs=2)
    return done.token_ids, done.logprobs


def assert_engine_text(ids: list[int], reference: list[int], logprobs) -> None:
    """``ids`` equal ``reference``, or first differ where the reference's top-2 were a near-tie."""
    if ids == reference:
        return
    i = next((j for j, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))
    assert i < min(len(ids), len(reference)), f"one text is a prefix of the other (lengths {len(ids)}, {len(reference)})"
    assert_near_tie(logprobs, i)


def assert_engine_prefix(text: str, done) -> None:
    """``text`` starts with the completion's text, or first differs inside a token where the engine's
    top-2 were a near-tie (the tokens' bytes locate the first differing character)."""
    if text.startswith(done.text):
        return
    c = next(j for j, (a, b) in enumerate(zip(text, done.text)) if a != b)
    at, ends = len(text[:c].encode("utf-8")), 0
    for i, token in enumerate(done.logprobs):
        ends += len(token.bytes)
        if ends > at:
            break
    assert_near_tie(done.logprobs, i)


def assert_near_tie(logprobs, i: int) -> None:
    top = logprobs[i].top
    gap = top[0][1] - top[1][1]
    assert gap <= NEAR_TIE, f"first difference at token {i}, where the engine's top-2 are {gap:.3f} nats apart"


def check_lr_writes_the_engines_greedy_text(pair, problems, tokens: int = TOKENS) -> None:
    """Greedy LR with the exact verifier writes the target engine's own greedy text (module docstring)."""
    exact = make_verifier("exact")
    for problem in problems:
        messages = math_messages(problem.question)
        reference, logprobs = _engine_greedy(pair, messages, tokens)
        lr = lr_over(pair, messages, exact, FixedPolicy(2), tokens)
        assert_engine_text(lr.token_ids, reference, logprobs)
        assert lr.stats.cycles and lr.text == "".join(s.text for c in lr.stats.cycles for s in c.kept_steps)


def check_async_and_sync_agree(pair, problem, tokens: int = TOKENS) -> None:
    exact = make_verifier("exact")
    messages = math_messages(problem.question)
    reference, logprobs = _engine_greedy(pair, messages, tokens)
    asyn = lr_over(pair, messages, exact, FixedPolicy(2, schedule="async"), tokens)
    sync = lr_over(pair, messages, exact, FixedPolicy(2), tokens)
    assert_engine_text(asyn.token_ids, reference, logprobs)
    assert_engine_text(sync.token_ids, reference, logprobs)
    assert any(c.target_rows > 1 for c in asyn.stats.cycles)


def check_auto_measures_plans_and_keeps_the_text(pair, problem, tokens: int = TOKENS) -> None:
    import asyncio

    from lookahead_reasoning.planning import AutoPolicy, Book, Planner, PlannerConfig, ameasure

    messages = math_messages(problem.question)
    prompt = pair.prompt_ids(messages)
    costs = asyncio.run(ameasure(pair.target, pair.draft, prompt, rows=3, repeats=1))
    assert costs.target(3, 40) > costs.target(1, 8) > 0
    planner = AutoPolicy(Planner(costs, Book(), PlannerConfig.over_engine(2)), ("\n\n",), mode="engine-auto")
    auto = asyncio.run(runs.alr(pair, messages, make_verifier("exact"), planner, tokens))  # it learns as a policy
    reference, logprobs = _engine_greedy(pair, messages, tokens)
    assert_engine_text(auto.token_ids, reference, logprobs)
    assert sum(auto.stats.plan_counts().values()) == len(auto.stats.cycles) > 0
    assert auto.stats.predicted_tok_s() > 0


def test_lr_over_the_engine_writes_the_engines_greedy_text(pair, problems):
    check_lr_writes_the_engines_greedy_text(pair, problems)


def test_plain_decoding_in_windows_writes_the_engines_greedy_text(pair, problems):
    messages = math_messages(problems[2].question)
    reference, logprobs = _engine_greedy(pair, messages)
    timeline = []
    result = asyncio.run(closing(runs.alr(pair, messages, make_verifier("exact"), runs.window_plan(32), TOKENS,
                                          lambda trace, run: timeline.append(len(run.new))), pair))
    assert_engine_text(result.token_ids, reference, logprobs)
    assert timeline == [min(32 * (i + 1), len(result.token_ids)) for i in range(len(timeline))]


def test_async_and_sync_schedules_agree(pair, problems):
    check_async_and_sync_agree(pair, problems[0])


def test_auto_over_the_engine_measures_plans_and_keeps_the_text(pair, problems):
    check_auto_measures_plans_and_keeps_the_text(pair, problems[1])


def check_a_server_killed_after_the_first_cycle_is_named(pair, server, question: str) -> None:
    """Kill ``server`` (one of the pair's engines) after the run's first cycle: the run ends at once with
    an EngineError naming that endpoint, not a hang and not a traceback from deep inside. The budget
    is more than one cycle of k = 1 can write (a drafted step and the target's, each at most
    MAX_STEP_TOKENS), so a second cycle must meet the dead server."""
    import asyncio

    tokens = 3 * MAX_STEP_TOKENS

    killed = threading.Event()
    first_cycle_tokens = []

    def kill_after_first(trace, run) -> None:
        if not killed.is_set():
            first_cycle_tokens.append(trace.tokens)
            server.kill()
            killed.set()

    with pytest.raises(EngineError, match=f"cannot connect to the engine at {re.escape(server.url)}"):
        try:
            asyncio.run(runs.alr(pair, math_messages(question), make_verifier("exact"), FixedPolicy(1), tokens,
                                 kill_after_first))
        finally:  # a run that ends in its first cycle never meets the dead server: the check proves nothing
            assert first_cycle_tokens and first_cycle_tokens[0] < tokens, (
                f"the first cycle wrote {first_cycle_tokens} of the {tokens} tokens; give the run more tokens")
    assert killed.is_set()


def test_a_server_killed_mid_run_is_a_clear_error(problems):
    from lookahead_reasoning.runtime.engine.pair import EnginePair

    with _server("qwen2.5-coder-0.5b") as server:
        check_a_server_killed_after_the_first_cycle_is_named(EnginePair(server.url, server.url), server,
                                                             problems[0].question)


def test_a_pair_of_the_bank_is_continued_to_an_answer_on_both_branches(pair):
    """flips over llama.cpp: a near-final pair of the committed bank (its two steps carry different
    numbers), both branches continued by the engine's target and graded.

    ``engine_finish``'s budget counts the text so far (the head: prefix + the branch's step, re-encoded),
    so each branch may write at most the budget less its head's tokens: the drafted step, shorter here
    than the target's, leaves its branch more room. How long each continuation runs, and what it
    answers, depends on the machine's numerics (on an avx512_bf16 CPU the target's branch boxes 30
    within 20 tokens, while the drafted branch repeats one sentence until its room runs out). What the
    code guarantees does not: a branch writes at least one token and stays within its room, and one
    that stops short of its room stopped at EOS, so, given 400 tokens of room beyond the target's step,
    it has written an answer of its own; the record grades each whole branch."""
    from pathlib import Path

    from lookahead_reasoning.bench.flips import Flipper, engine_finish, read_bank
    from lookahead_reasoning.bench.grading import answers_match, extract_answer

    pairs, problems = read_bank(Path(__file__).parents[1] / "benchmarks" / "results" / "pairs-gsm8k.jsonl")
    chosen = next(p for p in pairs if (p["problem_id"], p["mode"]) == ("train-312", "step-5"))
    assert not chosen["same_numbers"] and chosen["draft_end"] != "eos" and chosen["target_end"] != "eos"
    budget = chosen["prefix_tokens"] + len(chosen["target_ids"]) + 400
    gen = LookaheadGenerator(target=pair.target.client.endpoint.url, settings=pair.settings, mode="ar")  # as `flips`
    try:
        record = Flipper(engine_finish(gen, budget), pair.target.name).flip(chosen, problems["train-312"])
    finally:
        gen.close()
    assert not record["target_reused"]
    for branch in ("draft", "target"):
        head = chosen["prefix"] + chosen[branch]
        room = budget - len(pair.target.encode(head))
        written, text = record[f"{branch}_tokens"], record[f"{branch}_text"]
        assert 0 < written <= room, (branch, written, room)
        assert record[f"{branch}_answer"] == extract_answer(head + text)  # graded on the whole branch
        if written < room:  # it ended at EOS, with an answer of its own
            assert extract_answer(text) is not None, (branch, text)
    assert record["flip"] == (not answers_match(record["draft_answer"], record["target_answer"]))


def test_the_target_loaded_here_scores_llama_cpp_steps_for_the_likelihood_verifier(pair, problems):
    """llama.cpp's server scores no prompt; a SessionScorer over the float32 target does. The real vocabularies
    agree (EnginePair checks them), the engine's own greedy text is what the scorer finds most likely nearly
    everywhere (the engine runs the 4-bit build), and LR over the engine judges every drafted step by it:
    each verdict is the rule applied to the target's probabilities of that step's tokens after the text
    before it, recomputed here with one plain forward. (Which steps pass depends on the drafted text, so
    on the engine's numerics: on an avx512_bf16 CPU the one step that passed had a least probability of
    0.45 against the rule's 0.3; the test asks no verdict of its own.)"""
    import torch
    from conftest import real_lm

    from lookahead_reasoning.runtime.engine.pair import EnginePair
    from lookahead_reasoning.runtime.scorer import SessionScorer
    from lookahead_reasoning.verifiers.likelihood import LikelihoodVerifier

    lm = real_lm("qwen2.5-coder-1.5b")
    scorer = SessionScorer(lm)
    scored = EnginePair(pair.target.client.endpoint.url, pair.draft.client.endpoint.url, scorer=scorer)
    rule = LikelihoodVerifier()  # what make_verifier("likelihood") builds: min-prob at its default threshold

    def least_probability(context: list[int], ids: list[int]) -> float:
        with torch.no_grad():
            logits = lm.model(torch.tensor([context + ids])).logits[0, len(context) - 1:-1].float()
        return float(logits.softmax(-1)[torch.arange(len(ids)), torch.tensor(ids)].min())

    try:
        messages = math_messages(problems[1].question)
        own, _ = _engine_greedy(scored, messages, 48)
        view = scored.target.score(scored.prompt_ids(messages), own)
        assert sum(r == 0 for r in view.ranks) >= 0.9 * len(own) and min(view.probs) > 0
        lr = lr_over(scored, messages, make_verifier("likelihood"), FixedPolicy(2), TOKENS)
        judged = [v for c in lr.stats.cycles for v in c.verdicts if v.verifier.startswith("likelihood")]
        assert judged and all(v.score is not None for v in judged)
        assert scorer.calls >= len(judged)
        before = scored.prompt_ids(messages)
        for cycle in lr.stats.cycles:
            context = list(before)
            for step, verdict in zip(cycle.drafted, cycle.verdicts):  # verdict i: drafted step i after steps < i
                low = least_probability(context, list(step.ids))
                assert verdict.score == pytest.approx(low, abs=1e-3), (step.text, verdict.reason)
                if abs(low - rule.threshold) > 1e-3:
                    assert verdict.accepted == (low >= rule.threshold), (step.text, verdict.reason)
                context += list(step.ids)
            before += [t for kept in cycle.kept_steps for t in kept.ids]
        assert before == scored.prompt_ids(messages) + lr.token_ids
    finally:
        scored.close()
