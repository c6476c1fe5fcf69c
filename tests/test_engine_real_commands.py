"""``pairs`` and ``generate`` with ``--target-url`` over a real llama.cpp server (``engine`` tests).

One ``llama-server`` on a loopback port serves the 0.5B offline GGUF as target and draft. The pairs
follow the target's greedy solution, so their target steps, put together, are the engine's own
greedy text (up to a near-tie a cached prefix may round differently, as test_engine_real explains);
``generate`` prints that text from one completion request (the same tolerance: by then the prompt is
cached, and a prompt reused from the cache can round its first token differently from one prefilled).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import unavailable

from lookahead_reasoning.bench.datasets import load_dataset
from lookahead_reasoning.cli import main
from lookahead_reasoning.prompts import math_messages

from test_engine_real import GSM8K, _server, assert_engine_prefix, assert_engine_text

pytestmark = [pytest.mark.engine, pytest.mark.real]

TOKENS = 64
OFFSET = 400


def test_pairs_and_generate_over_a_real_engine_write_its_greedy_text(tmp_path, capsys):
    from lookahead_reasoning.runtime.engine.pair import EnginePair

    if not Path(GSM8K).is_file():
        unavailable(f"no GSM8K file at {GSM8K}")
    [problem] = load_dataset(GSM8K, limit=1, offset=OFFSET)
    out = tmp_path / "pairs.jsonl"
    with _server("qwen2.5-coder-0.5b") as server:
        pair = EnginePair(server.url)
        done = pair.target.client.complete(pair.prompt_ids(math_messages(problem.question)), TOKENS, (), logprobs=2)
        pair.close()
        assert main(["pairs", "--dataset", GSM8K, "--offset", str(OFFSET), "--limit", "1", "--out", str(out),
                     "--target-url", server.url, "--draft-url", server.url, "--max-new-tokens", str(TOKENS)]) == 0
        capsys.readouterr()
        assert main(["generate", "--target-url", server.url, "--dataset", GSM8K, "--index", str(OFFSET),
                     "--max-new-tokens", str(TOKENS)]) == 0
    printed = capsys.readouterr().out
    records = [json.loads(line) for line in out.read_text().splitlines()]
    pairs, [summary] = records[:-1], records[-1:]
    assert summary["kind"] == "problem" and summary["pairs"] == len(pairs) >= 2
    assert all(r["kind"] == "pair" and r["problem_id"] == problem.id for r in pairs)
    assert "".join(r["target"] for r in pairs) == summary["text"]
    assert_engine_text([t for r in pairs for t in r["target_ids"]], done.token_ids, done.logprobs)
    assert_engine_prefix(printed, done)
    assert f"engine {server.url}, stop: " in printed

