"""score-pairs: the target's probabilities for a bank written over engines, from one cached session per
problem, checked against a plain forward over the whole text (no cache) for every pair."""

from __future__ import annotations

import json

import pytest
import torch

from lookahead_reasoning.bench.bank_scores import needs_scores, run_score_pairs
from lookahead_reasoning.bench.results import read_records
from lookahead_reasoning.cli import main
from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.prompts import math_messages
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.testing import tiny_model

STEPS = [("First add 3 and 4.\n\n", "We add 3 and 4.\n\n"), ("That is 7.\n\n", "So 3 + 4 = 7.\n\n"),
         ("The answer is 7.", "The answer is \\boxed{7}.")]


@pytest.fixture(scope="module")
def lm():
    return LM.from_loaded(tiny_model("qwen2", seed=5))


def _engine_bank(tmp_path, lm, gap: bool = False):
    """An engine-written bank of two problems (no probabilities). ``gap``: problem q1's second step was
    written by the target alone after a step cut at the cap (no pair): the next prefix is not the sum of the
    earlier pairs' steps."""
    rows = []
    for q in range(2):
        prefix = ""
        for i, (draft, target) in enumerate(STEPS):
            if gap and q == 1 and i == 1:
                prefix += "a step written alone"
            rows.append({"kind": "pair", "problem_id": f"q{q}", "index": q, "mode": f"step-{i}", "step": i,
                         "prefix": prefix, "prefix_tokens": len(lm.encode(prefix)), "draft": draft,
                         "target": target, "draft_ids": lm.encode(draft), "target_ids": lm.encode(target),
                         "draft_probs": None, "target_probs": None, "target_probs_of_draft": None,
                         "exact": False, "engine": True})
            prefix += target
        rows.append({"kind": "problem", "problem_id": f"q{q}", "mode": "problem", "question": f"What is 3 + {q}?",
                     "gold": "7"})
    path = tmp_path / "bank.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows


def _reference(lm, question: str, prefix: str, step: str) -> list[float]:
    """The target's probability of each token of ``step`` after the prompt and ``prefix``: one forward over
    the whole text, no cache."""
    head = lm.prompt_ids(math_messages(question)) + lm.encode(prefix)
    ids = lm.encode(step)
    with torch.no_grad():
        logits = lm.model(torch.tensor([head + ids])).logits[0].float()
    probs = torch.softmax(logits[len(head) - 1:-1], dim=-1)
    return probs[torch.arange(len(ids)), torch.tensor(ids)].tolist()


@pytest.mark.parametrize("gap", [False, True])
def test_scores_match_a_plain_forward_and_every_record_is_kept(tmp_path, lm, gap):
    bank, rows = _engine_bank(tmp_path, lm, gap)
    out = run_score_pairs(bank, tmp_path / "scored.jsonl", lm, "tiny (float32)", progress=False)
    records = list(read_records(out))
    assert len(records) == len(rows) and not any(map(needs_scores, records))
    questions = {r["problem_id"]: r["question"] for r in rows if r["kind"] == "problem"}
    for r in (r for r in records if r["kind"] == "pair"):
        want = _reference(lm, questions[r["problem_id"]], r["prefix"], r["draft"])
        assert r["target_probs_of_draft"] == pytest.approx(want, abs=2e-5)
        assert r["target_probs"] == pytest.approx(_reference(lm, questions[r["problem_id"]], r["prefix"], r["target"]),
                                                  abs=2e-5)
        assert r["scored_by"] == "tiny (float32)"
    assert [r["kind"] for r in records][-2:] == ["problem", "problem"]  # summaries last: a problem is whole after


def test_an_interrupted_pass_resumes_and_scores_nothing_twice(tmp_path, lm):
    bank, _ = _engine_bank(tmp_path, lm)
    whole = list(read_records(run_score_pairs(bank, tmp_path / "whole.jsonl", lm, "s", progress=False)))
    part = tmp_path / "part.jsonl"
    part.write_text("".join(json.dumps(r) + "\n" for r in whole[:4]) + '{"kind": "pa', encoding="utf-8")  # torn
    calls = []
    lm.listeners.append(calls.append)
    try:
        resumed = list(read_records(run_score_pairs(bank, part, lm, "s", progress=False)))
    finally:
        lm.listeners.remove(calls.append)
    key = lambda r: (r["problem_id"], r["mode"])  # noqa: E731
    assert sorted(map(key, resumed)) == sorted(map(key, whole))
    assert {key(r): r.get("target_probs_of_draft") for r in resumed} == \
        {key(r): r.get("target_probs_of_draft") for r in whole}
    assert 0 < len(calls) <= 2 * 2  # q1's last two pairs only: two forwards each (the draft's, the target's step)


def test_scored_pairs_are_copied_and_bad_input_is_named(tmp_path, lm, capsys):
    bank, rows = _engine_bank(tmp_path, lm)
    rows[0]["target_probs_of_draft"] = [0.5] * len(rows[0]["draft_ids"])  # scored already: kept as it is
    bank.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = run_score_pairs(bank, tmp_path / "s.jsonl", lm, "s", progress=False)
    first = next(r for r in read_records(out) if r["mode"] == "step-0" and r["problem_id"] == "q0")
    assert first["target_probs_of_draft"] == [0.5] * len(rows[0]["draft_ids"]) and "scored_by" not in first
    with pytest.raises(ConfigError, match="another file"):
        run_score_pairs(bank, bank, lm, "s", progress=False)
    no_summary = tmp_path / "no-summary.jsonl"
    no_summary.write_text(json.dumps(rows[1]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="without their summary"):
        run_score_pairs(no_summary, tmp_path / "x.jsonl", lm, "s", progress=False)
    assert main(["score-pairs", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "y.jsonl")]) == 2
    assert "no pairs file" in capsys.readouterr().err
