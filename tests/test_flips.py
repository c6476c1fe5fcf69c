"""The flip measurement: which accepted step changes the final answer, and what a verifier's flip rate
predicts. Branches are continued by a scripted continuation here (the engine's is one request);
tests/test_engine_real.py continues real ones over llama.cpp."""

from __future__ import annotations

import json
import math
import random

import pytest
from test_engine_client import FakeEngine

from lookahead_reasoning.bench.flips import (Flipper, harm_rows, harm_table, kept_foreign_steps, read_bank,
                                             run_flips, sample_pairs, wilson)
from lookahead_reasoning.bench.results import read_records
from lookahead_reasoning.cli import main
from lookahead_reasoning.errors import ConfigError


def _bank(tmp_path, n_problems: int = 3, steps: int = 4):
    """A bank: problem p's target writes "T<p>.<i>" steps; the drafted step is "D<p>.<i>", exact on even i."""
    rows = []
    for p in range(n_problems):
        prefix = ""
        for i in range(steps):
            target = f"T{p}.{i}\n\n"
            draft = target if i % 2 == 0 else f"D{p}.{i}\n\n"
            rows.append({"kind": "pair", "problem_id": f"p{p}", "index": p, "mode": f"step-{i}", "step": i,
                         "prefix": prefix, "prefix_tokens": len(prefix), "draft": draft, "target": target,
                         "exact": draft == target, "target_probs_of_draft": [0.9] * 3})
            prefix += target
        rows.append({"kind": "problem", "problem_id": f"p{p}", "index": p, "mode": "problem",
                     "question": f"question {p}", "gold": "7"})
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, [r for r in rows if r["kind"] == "pair"]


class Scripted:
    """Continuations: a text with a drafted step "D<p>.<i>" in it ends \\boxed{8} when i is 3, else
    \\boxed{7} (the target's answer). Counts the calls."""

    def __init__(self):
        self.calls: list[str] = []

    def __call__(self, question: str, head: str) -> tuple[str, int]:
        self.calls.append(head)
        return ("\\boxed{8}" if ".3\n\n" in head and "D" in head else "more\n\n\\boxed{7}"), 5


def test_a_flip_is_a_different_final_answer_and_target_branches_are_reused(tmp_path):
    path, pairs = _bank(tmp_path)
    script = Scripted()
    out = run_flips(path, tmp_path / "flips.jsonl", Flipper(script, "m"), progress=False)
    flips = sorted(read_records(out), key=lambda f: (f["problem_id"], f["step"]))
    assert [(f["problem_id"], f["mode"]) for f in flips] == [(p["problem_id"], p["mode"]) for p in pairs
                                                             if not p["exact"]]
    assert [f["flip"] for f in flips] == [False, True] * 3  # step 3's drafted branch answers 8
    assert all(f["target_answer"] == "7" and f["target_correct"] for f in flips)
    # the continuation after T.1 is "more", not T.2 and T.3: step 3's target branch is not inside step 1's
    # and is continued too (the next test has one that is)
    assert not any(f["target_reused"] for f in flips)
    assert len(script.calls) == 12
    again = Scripted()
    run_flips(path, tmp_path / "flips.jsonl", Flipper(again, "m"), progress=False)
    assert again.calls == [] and len(list(read_records(out))) == 6  # resumed: nothing continued twice


def test_a_target_branch_that_already_holds_a_later_pair_is_not_continued_again(tmp_path):
    path, pairs = _bank(tmp_path, n_problems=1)

    def follows_the_target(question, head):  # the target writes its own steps on, as greedy decoding would
        n = head.count("\n\n")
        return "".join(f"T0.{i}\n\n" for i in range(n, 4)) + "\\boxed{7}", 9

    for seed, order, reused in ((0, [1, 3], [False, True]), (1, [3, 1], [False, False])):
        out = run_flips(path, tmp_path / f"f{seed}.jsonl", Flipper(follows_the_target), seed=seed,
                        progress=False)
        flips = list(read_records(out))
        assert [f["step"] for f in flips] == order and not any(f["flip"] for f in flips)
        # step 1's branch, continued by the target, passes through step 3's head: step 3 reuses it; step 3's
        # branch does not serve step 1 (the target never wrote what lies between)
        assert [f["target_reused"] for f in flips] == reused


def test_the_sample_is_seeded_and_skips_exact_matches():
    pairs = [{"problem_id": "p", "mode": f"step-{i}", "exact": i % 3 == 0} for i in range(30)]
    a, b, c = sample_pairs(pairs, 7, 1), sample_pairs(pairs, 7, 1), sample_pairs(pairs, 7, 2)
    assert a == b and a != c and len(a) == 7 and not any(p["exact"] for p in a)
    everything = sample_pairs(pairs, None, 1)
    assert len(everything) == 20 and everything[:7] == a  # a larger sample extends a smaller one
    assert [p["mode"] for p in everything] != sorted((p["mode"] for p in everything), key=lambda m: int(m[5:]))


def test_a_grown_bank_is_drawn_in_proportion_to_who_wrote_its_pairs():
    old = [{"problem_id": "p", "mode": f"step-{i}", "exact": i % 3 == 0, "target_model": "a"} for i in range(30)]
    new = [{"problem_id": "q", "mode": f"step-{i}", "exact": False, "target_model": "b", "engine": True}
           for i in range(60)]
    alone = sample_pairs(old, None, 0)
    expected = [p for p in old if not p["exact"]]
    random.Random(0).shuffle(expected)
    assert alone == expected  # one stratum: the order a bank had before it grew
    both = sample_pairs(old + new, None, 0)
    assert [p for p in both if p["target_model"] == "a"] == alone  # the old order, interleaved with the new
    cut = [{**p, "draft_end": "budget"} if i % 4 == 1 else p for i, p in enumerate(old)]  # some cut at the step cap
    assert sample_pairs(cut, None, 0) == [p for p in alone if old.index(p) % 4 != 1]  # the others keep their order
    for n in (9, 30, 45):  # every first part holds each stratum in proportion (20 : 60)
        first = sample_pairs(old + new, n, 0)
        assert abs(sum(p["target_model"] == "a" for p in first) - n / 4) <= 1


def test_a_bank_of_several_files_is_read_as_one(tmp_path):
    path, pairs = _bank(tmp_path, n_problems=2)
    other = tmp_path / "more"
    other.mkdir()
    more, more_pairs = _bank(other, n_problems=3)
    lines = [json.loads(x) for x in more.read_text().splitlines()]
    more.write_text("".join(json.dumps({**r, "problem_id": "m" + r["problem_id"]}) + "\n" for r in lines))
    read, problems = read_bank([path, more])
    assert len(read) == len(pairs) + len(more_pairs) and len(problems) == 5
    with pytest.raises(ConfigError, match="no pairs file"):
        read_bank([path, tmp_path / "missing.jsonl"])


def test_wilson_interval_covers_the_rate_and_matches_known_values():
    low, high = wilson(0, 20)
    assert low == 0.0 and high == pytest.approx(0.1611, abs=1e-3)
    low, high = wilson(5, 10)
    assert (low, high) == (pytest.approx(0.2366, abs=1e-3), pytest.approx(0.7634, abs=1e-3))
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 200)
        k = rng.randint(0, n)
        lo, hi = wilson(k, n)
        assert 0 <= lo <= k / n <= hi <= 1
    assert all(math.isnan(x) for x in wilson(0, 0))


def test_harm_rows_count_the_flips_a_verifier_accepts_and_predict_retention(tmp_path):
    path, pairs = _bank(tmp_path)
    out = run_flips(path, tmp_path / "f.jsonl", Flipper(Scripted()), progress=False)
    flips = list(read_records(out))
    everything = [True] * len(pairs)
    exact_only = [p["exact"] for p in pairs]
    no_step_3 = [p["exact"] or p["step"] == 1 for p in pairs]
    rows = {r.verifier: r for r in harm_rows(pairs, {"all": everything, "exact": exact_only, "safe": no_step_3}, flips)}
    assert (rows["all"].continued, rows["all"].flips) == (6, 3) and rows["all"].rate == 0.5
    assert rows["all"].steps_per_problem == 2.0 and rows["all"].retention == pytest.approx(0.25)
    assert (rows["exact"].continued, rows["exact"].rate, rows["exact"].retention) == (0, 0.0, 1.0)
    assert (rows["safe"].flips, rows["safe"].retention) == (0, 1.0) and rows["safe"].high > 0
    table = harm_table(list(rows.values()), flips)
    assert "| all | 6 | 3 | 50.0%" in table and "25.0%" in table


def test_a_bank_without_pairs_or_summaries_is_refused(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text(json.dumps({"kind": "problem", "problem_id": "p"}) + "\n")
    with pytest.raises(ConfigError, match="no step pairs"):
        read_bank(empty)
    path, pairs = _bank(tmp_path, n_problems=1)
    lines = [l for l in path.read_text().splitlines() if '"kind": "problem"' not in l]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="without their summary"):
        read_bank(path)
    with pytest.raises(ConfigError, match="no pairs file"):
        read_bank(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match="--sample"):
        run_flips(tmp_path / "missing.jsonl", tmp_path / "f.jsonl", Flipper(Scripted()), sample=0)


def test_the_command_continues_over_an_engine_and_the_ablation_adds_the_flip_rates(tmp_path, capsys):
    path, pairs = _bank(tmp_path, n_problems=1)
    out = tmp_path / "flips.jsonl"
    with FakeEngine(flavour="vllm", text="so \\boxed{7}") as engine:
        assert main(["flips", str(path), "--out", str(out), "--target-url", engine.url, "--max-new-tokens", "64"]) == 0
        asked = len(engine.requests)
        assert main(["flips", str(path), "--out", str(out), "--target-url", engine.url]) == 0
        assert len(engine.requests) == asked  # resumed: no request sent again
    flips = list(read_records(out))
    assert len(flips) == 2 and not any(f["flip"] for f in flips) and all(f["draft_answer"] == "7" for f in flips)
    table = tmp_path / "ablation.md"
    assert main(["verifiers", str(path), "--verifiers", "exact,random", "--flips", str(out), "--out", str(table)]) == 0
    text = table.read_text()
    assert "flip rate (95% interval)" in text and "| random |" in text.split("flip rate")[1]
    assert main(["flips", str(path), "--out", str(out)]) == 2 and "--target-url" in capsys.readouterr().err


def test_a_drafted_step_cut_at_the_cap_is_neither_continued_nor_counted():
    """No cycle keeps a drafted step cut at the step cap, so its pair says nothing about a verifier's harm."""
    pairs = [{"problem_id": "p", "mode": f"step-{i}", "step": i, "exact": False,
              "draft_end": "budget" if i == 0 else "stop_string"} for i in range(3)]
    assert [p["step"] for p in sorted(sample_pairs(pairs, None, 0), key=lambda p: p["step"])] == [1, 2]
    flips = [{"kind": "flip", "problem_id": "p", "mode": f"step-{i}", "flip": True} for i in range(3)]
    [row] = harm_rows(pairs, {"all": [True] * 3}, flips)
    assert (row.continued, row.flips, row.steps_per_problem) == (2, 2, 2.0)
    assert row.retention == 0.0 and row.retention_low == 0.0


def test_flips_and_the_ablation_take_a_bank_of_two_files(tmp_path):
    path, pairs = _bank(tmp_path, n_problems=1)
    grown = tmp_path / "grown.jsonl"
    grown.write_text("".join(json.dumps({**json.loads(x), "problem_id": "g", "target_model": "gguf", "engine": True})
                             + "\n" for x in path.read_text().splitlines()))
    out, table = tmp_path / "flips.jsonl", tmp_path / "ablation.md"
    with FakeEngine(flavour="vllm", text="so \\boxed{7}") as engine:
        assert main(["flips", str(path), str(grown), "--out", str(out), "--target-url", engine.url]) == 0
    assert sorted(f["problem_id"] for f in read_records(out)) == ["g", "g", "p0", "p0"]
    assert main(["verifiers", str(path), str(grown), "--verifiers", "exact", "--flips", str(out), "--out", str(table)]) == 0
    head = table.read_text().splitlines()[0]
    assert head.startswith(f"{2 * len(pairs)} step pairs from 2 problems") and "4 by gguf" in head


@pytest.mark.parametrize("served, stop, tokens, traced", [("m", "eos", 100, True), ("other", "eos", 100, False),
                                                          ("m", "budget", 100, False), ("m", "budget", 1024, True),
                                                          ("m", "eos", 2000, False)])
def test_a_bank_written_by_the_same_target_is_its_own_target_branch(tmp_path, served, stop, tokens, traced):
    path, pairs = _bank(tmp_path, n_problems=2)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    for r in rows:
        r.update(engine=True, target_model="m")
        if r["kind"] == "problem":  # the trace: every target step, then the answer
            steps = "".join(p["target"] for p in pairs if p["problem_id"] == r["problem_id"])
            r.update(text=steps + "so \\boxed{6}", stop_reason=stop, new_tokens=tokens)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = Scripted()
    out = run_flips(path, tmp_path / "f.jsonl", Flipper(script, served), progress=False)
    flips = list(read_records(out))
    assert all(f["target_reused"] == traced for f in flips)
    if traced:  # no target branch was asked for; the trace's answer is the target's
        assert len(script.calls) == len(flips) and all(f["target_answer"] == "6" for f in flips)
    else:
        assert len(script.calls) > len(flips) and all(f["target_answer"] == "7" for f in flips)


def test_a_runs_kept_foreign_steps_are_counted_from_its_cycle_log():
    log = [{"drafted": ["A.\n\n", "b.\n\n"], "target": ["a.\n\n", "c.\n\n"], "accepted": 2},  # "A." is "a." normalised
           {"drafted": ["x\n\n", "y\n\n"], "target": ["z\n\n", "w\n\n"], "accepted": 1},
           {"drafted": ["p\n\n"], "target": ["q\n\n"], "accepted": 0}]
    assert kept_foreign_steps({"cycle_log": log}) == 2
    assert kept_foreign_steps({"cycle_log": json.dumps(log)}) == 2 and kept_foreign_steps({"mode": "ar"}) == 0
