"""The step-pair bank (bench/pairs.py) on tiny models, and the offline verifier ablation
(bench/ablation.py) on a handmade pairs file: the recorded steps follow the target's greedy solution,
every probability matches an unbatched forward, reruns resume (nothing added, a torn line handled),
and bad command-line input is a clear error."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch

from conftest import perturbed_lm
from lr_helpers import frequent_char, tiny_lm
from lookahead_reasoning.bench.ablation import (Entry, load_pairs, markdown_table, parse_entries, run_ablation,
                                                sweep)
from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning.bench.pairs import KeepNone, PairRecorder, add_pairs_commands, check_scope, pairs_spec, run_pairs
from lookahead_reasoning.decoding import generate
from lookahead_reasoning.errors import ConfigError, DatasetError
from lookahead_reasoning.sampling import SamplingConfig
from lookahead_reasoning.settings import Settings, TokenSD
from lookahead_reasoning.steps import StepConfig
from lookahead_reasoning.prompts import math_messages
from lookahead_reasoning.verifiers import EmbeddingVerifier, ExactMatchVerifier, RandomVerifier, normalize_step

QUESTIONS = ["What is 2 + 3?", "Tom has 4 apples and eats one. How many are left?"]
MAX_NEW, CAP = 36, 8


@pytest.fixture(scope="module")
def models():
    target = tiny_lm(0)
    draft = perturbed_lm(target, 0.4, seed=1)  # agrees with the target often, not always
    return target, draft


@pytest.fixture(scope="module")
def delimiter(models):
    target, _ = models
    return frequent_char(target, target.prompt_ids(math_messages(QUESTIONS[0])))


def write_dataset(path):
    path.write_text("".join(json.dumps({"question": q, "answer": f"work\n#### {i}"}) + "\n"
                            for i, q in enumerate(QUESTIONS)), encoding="utf-8")
    return path


def recorder_for(models, delimiter, target_sd=True):
    """A recorder over the tiny pair, as ``lookahead-reasoning pairs`` builds one (:func:`pairs_spec`)."""
    target, draft = models
    settings = Settings(steps=StepConfig((delimiter,), CAP), token_sd=TokenSD("draft" if target_sd else None))
    return PairRecorder(LookaheadGenerator(target, draft, KeepNone(), settings, mode="lr"), MAX_NEW)


def record(tmp_path, recorder):
    return run_pairs(recorder, str(write_dataset(tmp_path / "data.jsonl")), tmp_path / "pairs.jsonl", progress=False)


def records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def probs_of(lm, context, tokens):
    """Reference: the model's probability of each token after ``context``, one unpadded forward."""
    with torch.no_grad():
        logits = lm.model(torch.tensor([list(context) + list(tokens)])).logits[0].float()
    probs = torch.softmax(logits[len(context) - 1:-1], dim=-1)
    return [float(probs[j, t]) for j, t in enumerate(tokens)]


@pytest.mark.parametrize("target_sd", [True, False])
def test_pairs_follow_the_targets_greedy_solution(tmp_path, models, delimiter, target_sd):
    target, draft = models
    path = record(tmp_path, recorder_for(models, delimiter, target_sd))
    recs = records(path)
    summaries = [r for r in recs if r["kind"] == "problem"]
    assert [s["problem_id"] for s in summaries] == ["data-0", "data-1"]
    checked = 0
    for question, summary in zip(QUESTIONS, summaries):
        prompt = target.prompt_ids(math_messages(question))
        reference = generate(target, prompt, max_new_tokens=MAX_NEW)
        greedy, greedy_ids = reference.text, reference.token_ids
        assert summary["text"] == greedy  # the target's own greedy solution, step after step
        pairs = [r for r in recs if r["kind"] == "pair" and r["problem_id"] == summary["problem_id"]]
        assert len(pairs) == summary["pairs"] >= 1 and summary["steps"] >= len(pairs)
        for r in pairs:
            assert r["mode"] == f"step-{r['step']}" and greedy.startswith(r["prefix"] + r["target"])
            assert r["prefix"] == target.decode(greedy_ids[:r["prefix_tokens"]])
            n = r["prefix_tokens"]
            context = prompt + greedy_ids[:n]
            d_ids, t_ids = r["draft_ids"], r["target_ids"]
            assert t_ids == greedy_ids[n:n + len(t_ids)] and r["target"] == target.decode(t_ids)
            alone = generate(draft, context, max_new_tokens=min(CAP, MAX_NEW - n), stop_strings=(delimiter,))
            assert d_ids == alone.token_ids  # the draft's own greedy step from the same prefix
            assert r["target_probs_of_draft"] == pytest.approx(probs_of(target, context, d_ids), abs=1e-4)
            assert r["draft_probs"] == pytest.approx(probs_of(draft, context, d_ids), abs=1e-4)
            assert r["target_probs"] == pytest.approx(probs_of(target, context, t_ids), abs=1e-4)
            shared = next((i for i, (a, b) in enumerate(zip(d_ids, t_ids)) if a != b), min(len(d_ids), len(t_ids)))
            assert r["agreed_tokens"] == shared
            checked += 1
            assert r["exact"] == (normalize_step(r["draft"]) == normalize_step(r["target"]))
    assert checked >= 3
    assert any(r["agreed_tokens"] > 0 for r in recs if r["kind"] == "pair")  # the head start was used


def test_a_rerun_adds_nothing_and_a_torn_line_is_recorded_again(tmp_path, models, delimiter):
    path = record(tmp_path, recorder_for(models, delimiter))
    first = path.read_bytes()

    def no_work():
        raise AssertionError("every problem is finished: no model may be loaded, nothing recomputed")
    record(tmp_path, no_work)
    assert path.read_bytes() == first

    lines = first.decode("utf-8").splitlines(keepends=True)
    last_pair = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "pair")
    kept = lines[:last_pair] + [lines[last_pair][:25]]  # killed while writing the last pair
    path.write_text("".join(kept), encoding="utf-8")
    assert len(load_pairs(path)) == sum(json.loads(x)["kind"] == "pair" for x in lines) - 1  # torn line skipped
    record(tmp_path, recorder_for(models, delimiter))
    again = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[len(kept):]]
    originals = [json.loads(line) for line in lines[last_pair:]]
    strip = lambda r: {k: v for k, v in r.items() if k not in ("time", "draft_s", "target_s", "wall_s")}
    assert [strip(r) for r in again] == [strip(r) for r in originals]  # the same pair and summary, once each
    keys = [(r["problem_id"], r["mode"]) for r in map(json.loads, path.read_text().splitlines()[:len(kept) - 1])]
    assert len(keys) == len(set(keys))


def test_pairs_options_are_refused_by_name_before_any_model_loads(models, delimiter):
    for bad, message in [(dict(limit=0), "--limit"), (dict(offset=-1), "--offset")]:
        with pytest.raises(ConfigError, match=message):
            check_scope(**{"offset": 0, "limit": None, **bad})
    for bad, message in [(dict(gamma=0), "--gamma"), (dict(max_step_tokens=0), "--max-step-tokens"),
                         (dict(dtype="fp8"), "--dtype")]:
        with pytest.raises(ConfigError, match=message):
            pairs_spec(**bad)
    with pytest.raises(ConfigError, match="--max-new-tokens"):
        PairRecorder(recorder_for(models, delimiter).generator, 0)
    target, draft = models
    with pytest.raises(ConfigError, match="greedy"):
        PairRecorder(LookaheadGenerator(target, draft, KeepNone(), mode="lr", sampling=SamplingConfig(temperature=0.7)))


def test_the_recorder_runs_the_one_loop_with_one_drafted_step_and_one_target_row(tmp_path, models, delimiter,
                                                                                  monkeypatch):
    """Every cycle the recorder runs is the plan lr@k1r1 at a step boundary (or the target alone mid-step),
    through the driver every mode runs through, and its one row is the target's step from x: a refactor
    that gives the recorder a loop of its own, or runs the bonus row, fails here."""
    import lookahead_reasoning.decoding.driver as driver

    plans = []
    real = driver.run_cycle

    def cycle(rows, plan):
        trace = real(rows, plan)
        plans.append((plan.label, trace.target_rows, len(trace.drafted)))
        return trace
    monkeypatch.setattr(driver, "run_cycle", cycle)
    recs = records(record(tmp_path, recorder_for(models, delimiter)))
    assert {label for label, _, drafted in plans if drafted} == {"lr@k1r1"}
    assert all(rows == 1 for _, rows, _ in plans)
    assert sum(1 for _, _, drafted in plans if drafted) == sum(r["kind"] == "pair" for r in recs)


# ------------------------------------------------------------------------------------------ ablation

PAIRS = [  # (draft, target, the stub's cosine between them); the numbers differ in pairs 2 and 4
    ("x = 48 / 2 = 24", "X=48/2=24", 1.0),             # exact match
    ("48 divided by 2 is 24", "48 / 2 = 24", 0.95),
    ("48 / 2 = 42", "48 / 2 = 24", 0.97),               # one number differs: a harmful acceptance
    ("She sold 48 + 24 = 72 clips.", "Add them: 48 + 24 = 72", 0.88),
    ("Next, the cost of 3 pens.", "Multiply 3 by 5 to get 15.", 0.6),
    ("Let x be the apples.", "Let x be the apples sold.", 0.91),
]


class CosineStub:
    """Embeds every text of a pair so that the pair's cosine is the one in PAIRS."""

    def __init__(self):
        self.vectors = {}
        for d, t, cos in PAIRS:
            self.vectors[t] = [1.0, 0.0]
            self.vectors[d] = [cos, math.sqrt(max(0.0, 1 - cos * cos))]

    def encode(self, texts, convert_to_tensor=False, normalize_embeddings=False):
        return torch.tensor([self.vectors[t] for t in texts])


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    lines = [json.dumps({"kind": "pair", "problem_id": f"p{i // 3}", "mode": f"step-{i}", "draft": d, "target": t})
             for i, (d, t, _) in enumerate(PAIRS)]
    lines.append(json.dumps({"kind": "problem", "problem_id": "p0", "mode": "problem"}))
    path.write_text("\n".join(lines) + '\n{"kind": "pair", "draft": "tor', encoding="utf-8")  # a torn last line
    return path


def test_ablation_rows_shared_scores_and_the_numbers_proxy(pairs_file):
    pairs = load_pairs(pairs_file)
    assert len(pairs) == len(PAIRS)
    stub = CosineStub()

    def make(entry: Entry):
        if entry.name == "exact":
            return ExactMatchVerifier()
        if entry.name == "random":
            return RandomVerifier(entry.threshold if entry.threshold is not None else 0.5, seed=0)
        return EmbeddingVerifier(model=stub, threshold=entry.threshold if entry.threshold is not None else 0.85,
                                 same_numbers=entry.name == "embedding-numbers")

    entries = parse_entries("exact, embedding@0.9,embedding@0.96,embedding-numbers,random@1")
    rows, runs = run_ablation(pairs, entries, make)
    by = {r.verifier: r for r in rows}
    assert set(runs) == {"exact", "embedding@0.9", "embedding-numbers", "random@1"}  # embedding@0.96: same scores
    assert (by["exact"].accepted, by["exact"].numbers_differ_accepted) == (1, 0.0)
    # cosine >= 0.9: pairs 0, 1, 2, 5 (pair 2 has another number); >= 0.96: pairs 0 and 2
    assert (by["embedding@0.9"].accepted, by["embedding@0.9"].numbers_differ_accepted) == (4, 0.25)
    assert (by["embedding@0.96"].accepted, by["embedding@0.96"].numbers_differ_accepted) == (2, 0.5)
    assert by["embedding@0.96"].note == "scores of embedding@0.9"
    direct = EmbeddingVerifier(model=stub, threshold=0.96).verify([(d, t) for d, t, _ in PAIRS])
    assert by["embedding@0.96"].accepted == sum(v.accepted for v in direct)
    # same numbers required: pairs 2 and 4 rejected without the model; cosine >= 0.85 for pairs 0, 1, 3, 5
    assert (by["embedding-numbers"].accepted, by["embedding-numbers"].numbers_differ_accepted) == (4, 0.0)
    assert by["random@1"].accept_rate == 1.0 and by["random@1"].numbers_differ_accepted == pytest.approx(2 / 6)
    assert all(r.pairs == len(PAIRS) and r.failures == 0 and r.median_latency_ms >= 0 for r in rows)
    curve = sweep(runs["embedding@0.9"], [False, False, True, False, True, False], [0.5, 0.9, 0.96, 1.0])
    assert [round(a, 3) for _, a, _ in curve] == [1.0, round(4 / 6, 3), round(2 / 6, 3), round(1 / 6, 3)]
    table = markdown_table(rows, pairs)
    assert table.splitlines()[0].startswith("6 step pairs from 2 problems; the numbers differ in 2")
    assert "| embedding@0.9 | 6 | 4 | 66.7% | 25.0% |" in table


def run_cli(*argv):
    parser = argparse.ArgumentParser()
    add_pairs_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_verifiers_command_writes_table_json_and_plot(pairs_file, tmp_path, capsys):
    out = tmp_path / "ablation.md"
    assert run_cli("verifiers", str(pairs_file), "--verifiers", "exact,random@0.5,random@1", "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert "| exact | 6 | 1 | 16.7% | 0.0% |" in printed and "| random@1 | 6 | 6 | 100.0% |" in printed
    assert out.read_text().startswith("6 step pairs") and "(ablation.png)" in out.read_text()
    data = json.loads(out.with_suffix(".json").read_text())
    assert [r["verifier"] for r in data["rows"]] == ["exact", "random@0.5", "random@1"]
    assert len(data["keys"]) == 6 and data["accepted"]["random@1"] == "111111" and data["accepted"]["exact"].count("1") == 1
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, error, message", [
    (["verifiers", "PAIRS", "--verifiers", "bleu"], ConfigError, "entry 'bleu'.*unknown verifier"),
    (["verifiers", "PAIRS", "--verifiers", "embedding@high"], ConfigError, "bad threshold in 'embedding@high'"),
    (["verifiers", "PAIRS", "--verifiers", "exact,exact"], ConfigError, "twice"),
    (["verifiers", "PAIRS", "--verifiers", "judge"], ConfigError, "--judge-model is required"),
    (["verifiers", "PAIRS", "--verifiers", "embedding@1.5"], ConfigError, r"--threshold must be in \[-1, 1\]"),
    (["verifiers", "PAIRS", "--verifiers", "exact", "--limit", "0"], ConfigError, "--limit"),
    (["verifiers", "MISSING", "--verifiers", "exact"], DatasetError, "no pairs file"),
    (["pairs", "--dataset", "MISSING", "--out", "OUT"], DatasetError, "not found"),
    (["pairs", "--dataset", "MISSING", "--limit", "0"], ConfigError, "--limit must be >= 1"),
])
def test_command_errors_name_the_problem(pairs_file, tmp_path, argv, error, message):
    argv = [{"PAIRS": str(pairs_file), "MISSING": str(tmp_path / "missing.jsonl"),
             "OUT": str(tmp_path / "o.jsonl")}.get(a, a) for a in argv]
    with pytest.raises(error, match=message):
        run_cli(*argv)


def test_missing_required_arguments_exit_with_usage(capsys):
    with pytest.raises(SystemExit) as info:
        run_cli("pairs")
    assert info.value.code == 2 and "--dataset" in capsys.readouterr().err
