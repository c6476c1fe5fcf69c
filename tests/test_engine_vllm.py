"""Lookahead Reasoning over a real vLLM server (``engine`` tests; .ci/run installs vLLM's CPU build first).

One vLLM server for this module (conftest's ``vllm_server``) serves the 0.5B's bf16 cache as the
target; the draft is llama.cpp's server with the 0.5B's GGUF (the two tokenize alike, which the pair
checks). With greedy decoding and the exact verifier every kept step is the target's own, so LR must
write vLLM's own greedy text.

The tolerance, and why: vLLM offers batch-invariant numerics (``VLLM_BATCH_INVARIANT``) only for GPU
attention backends; its CPU attention backend does not support them. The rows of a cycle are batched,
and a prefix served from the prefix cache is not recomputed, so a forward can round differently from
the reference's; texts must then agree up to a first difference where vLLM's own top-2 log
probabilities were within ``NEAR_TIE`` nats (checked as the llama.cpp tests check it).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time

import pytest
from conftest import VLLM_MODEL
from test_engine_real import (
    GSM8K,
    _server,
    check_a_server_killed_after_the_first_cycle_is_named,
    check_async_and_sync_agree,
    check_auto_measures_plans_and_keeps_the_text,
    check_lr_writes_the_engines_greedy_text,
    gsm8k_problems,
)

from lookahead_reasoning.cli import main
from lookahead_reasoning.decoding.driver import FixedPolicy
from lookahead_reasoning import engine_runtime as runs
from lookahead_reasoning.steps import closing
from lookahead_reasoning.errors import EngineError
from lookahead_reasoning.models.loading import load_tokenizer
from lookahead_reasoning.prompts import math_messages
from lookahead_reasoning.runtime.engine.client import Endpoint, EngineClient
from lookahead_reasoning.runtime.engine.pair import EnginePair
from lookahead_reasoning.verifiers.registry import make_verifier


def lr_over(pair, prompt, verifier, policy, tokens):
    """Lookahead Reasoning over ``pair`` on an event loop of its own, its connections closed at the end."""
    return asyncio.run(closing(runs.alr(pair, prompt, verifier, policy, tokens), pair))

pytestmark = [pytest.mark.engine, pytest.mark.real]

TOKENS = 64
OFFSET = 420
LLAMA_CPP_ROUTES = {"/apply-template", "/completion", "/props", "/slots"}
LLAMA_CPP_FIELDS = {"cache_prompt", "n_probs", "verbose", "return_tokens", "id_slot", "content"}


@pytest.fixture(scope="module")
def sent():
    """Every request any engine client sends while this module runs: (url, path, body)."""
    seen: list[tuple[str, str, dict | None]] = []
    sync, asyn = EngineClient.request, EngineClient.arequest

    def request(self, method, path, body=None):
        seen.append((self.endpoint.url, path, body))
        return sync(self, method, path, body)

    async def arequest(self, method, path, body=None):
        seen.append((self.endpoint.url, path, body))
        return await asyn(self, method, path, body)

    patch = pytest.MonkeyPatch()
    patch.setattr(EngineClient, "request", request)
    patch.setattr(EngineClient, "arequest", arequest)
    yield seen
    patch.undo()


@pytest.fixture(scope="module")
def draft_server():
    with _server(VLLM_MODEL) as server:
        yield server


@pytest.fixture(scope="module")
def pair(vllm_server, draft_server, sent):
    engines = EnginePair(vllm_server.url, draft_server.url)
    yield engines
    engines.close()


@pytest.fixture(scope="module")
def problems():
    return gsm8k_problems(OFFSET)


def test_the_pair_speaks_vllm_to_vllm_and_llama_cpp_to_llama_cpp(pair):
    assert (pair.target.client.dialect.name, pair.draft.client.dialect.name) == ("vllm", "llama.cpp")
    messages = math_messages("What is 2 + 3?")
    local = load_tokenizer(VLLM_MODEL).apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    assert pair.prompt_ids(messages) == list(getattr(local, "input_ids", local))  # vLLM applied the same template


def test_lr_over_vllm_writes_vllms_greedy_text(pair, problems):
    check_lr_writes_the_engines_greedy_text(pair, problems, TOKENS)


def test_async_and_sync_schedules_agree_over_vllm(pair, problems):
    check_async_and_sync_agree(pair, problems[0], TOKENS)


def test_auto_over_vllm_measures_the_endpoint_and_keeps_the_text(pair, problems):
    check_auto_measures_plans_and_keeps_the_text(pair, problems[1], TOKENS)


def test_the_commands_run_unchanged_against_vllm(vllm_server, draft_server, tmp_path, capsys):
    """``lr`` and ``bench`` with chat prompts, as a user types them, against vLLM and a llama.cpp draft."""
    urls = ["--target-url", vllm_server.url, "--draft-url", draft_server.url]
    assert main(["lr", *urls, "--mode", "lr", "--dataset", GSM8K, "--index", str(OFFSET), "--max-new-tokens", "48",
                 "--no-compare"]) == 0
    out = tmp_path / "bench.jsonl"
    assert main(["bench", *urls, "--dataset", GSM8K, "--offset", str(OFFSET), "--limit", "1", "--modes", "ar,lr@k2",
                 "--max-new-tokens", "48", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["mode"] for r in records) == ["ar", "lr@k2"]
    assert all(r["new_tokens"] > 0 for r in records)
    capsys.readouterr()


def test_no_llama_cpp_route_or_field_reaches_vllm(pair, vllm_server, sent):
    lr_over(pair, math_messages("What is 4 + 4?"), make_verifier("exact"), FixedPolicy(1), 16)
    to_vllm = [(path, body) for url, path, body in sent if url == vllm_server.url]
    assert any(path == "/tokenize" and "messages" in (body or {}) for path, body in to_vllm)
    assert not {path for path, _ in to_vllm} & LLAMA_CPP_ROUTES
    assert not {key for _, body in to_vllm for key in (body or {})} & LLAMA_CPP_FIELDS


def test_only_the_draft_dying_is_a_clear_error_naming_the_draft(vllm_server, problems):
    """Kill the draft's server after the first cycle: the run ends with an EngineError naming the
    draft's endpoint, while the target (vLLM) is still up."""
    with _server(VLLM_MODEL) as draft:
        engines = EnginePair(vllm_server.url, draft.url)
        check_a_server_killed_after_the_first_cycle_is_named(engines, draft, problems[0].question)
        assert engines.target.client.healthy()
        engines.close()


def test_a_request_that_outlives_its_timeout_is_not_sent_again(vllm_server):
    """A completion that takes longer than the timeout ends with an error naming the endpoint after one
    timeout, not after three (the server may still be computing it: it is not sent again)."""
    client = EngineClient(Endpoint(vllm_server.url, timeout_s=1.5, retries=2))
    began = time.monotonic()
    with pytest.raises(EngineError, match=f"{re.escape(vllm_server.url)}/v1/completions did not answer within 1.5 s"):
        client.complete(client.tokenize("Count from one to five hundred:"), 400)
    assert time.monotonic() - began < 4.0
    client.close()


def test_vllm_scores_a_step_as_it_wrote_it_and_the_likelihood_verifier_runs_over_it(pair, problems):
    """One scoring request (vLLM's prompt log-probabilities) of vLLM's own greedy tokens: each is its
    first choice (rank 0) save at near-ties, with the probability the generation reported. LR whose
    verifier accepts only such steps (likelihood, max-rank 0) then keeps vLLM's greedy text."""
    from test_engine_real import NEAR_TIE, _engine_greedy, assert_engine_text

    from lookahead_reasoning.verifiers.likelihood import LikelihoodVerifier

    messages = math_messages(problems[2].question)
    reference, logprobs = _engine_greedy(pair, messages, TOKENS)
    prompt = pair.prompt_ids(messages)
    scores = pair.target.score(prompt, reference)
    assert len(scores.probs) == len(scores.ranks) == len(reference)
    for i, (p, rank, lp) in enumerate(zip(scores.probs, scores.ranks, logprobs)):
        tie = len(lp.top) > 1 and lp.top[0][1] - lp.top[1][1] <= NEAR_TIE
        assert rank == 0 or tie, f"token {i} of vLLM's greedy text has rank {rank} when scored"
        assert abs(math.log(p) - lp.logprob) <= NEAR_TIE, (i, p, lp.logprob)
    lr = lr_over(pair, messages, LikelihoodVerifier("max-rank", 0), FixedPolicy(2), TOKENS)
    assert_engine_text(lr.token_ids, reference, logprobs)
    assert [v.verifier for c in lr.stats.cycles for v in c.verdicts] and \
        all(v.verifier == "likelihood:max-rank" for c in lr.stats.cycles for v in c.verdicts)
