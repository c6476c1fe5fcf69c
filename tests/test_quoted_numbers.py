"""Numbers the prose quotes are recomputed from the committed files they come from, so that a count
edited by hand, or a file rerun without its sentence, fails here instead of misleading a reader."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lookahead_reasoning.bench.grading import same_answer
from lookahead_reasoning.bench.report import fidelity_table, load_results, markdown_table, summarize

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = (ROOT / "README.md").read_text(encoding="utf-8")
BENCH_README = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
THEORY_README = (ROOT / "theory" / "README.md").read_text(encoding="utf-8")


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (RESULTS / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_end_to_end_verifier_sentence_is_what_its_files_hold():
    exact, loose = load_results(RESULTS / "e2e-llamacpp.jsonl"), load_results(RESULTS / "e2e-llamacpp-likelihood@0.3.jsonl")
    ar = {r["problem_id"]: r for r in exact if r["mode"] == "ar"}

    def kept(records):
        runs = [r for r in records if r["mode"] != "ar"]
        return sum(same_answer(r["predicted"], ar[r["problem_id"]]["predicted"]) for r in runs), len(runs)

    def alpha1(records):
        runs = [r for r in records if r["mode"] != "ar"]
        return sum(r["accepted_steps"] for r in runs) / sum(r["judged_pairs"] for r in runs)

    (same_exact, n), (same_loose, n_loose) = kept(exact), kept(loose)
    assert n == n_loose == len(ar)
    assert f"kept `ar`'s answer on {same_loose} of {n}, `exact` on {same_exact}" in README
    assert f"accepted {alpha1(loose) / alpha1(exact):.2f}x what `exact` accepted" in README
    assert all(r["verifier_threshold"] == 0.3 for r in loose)  # the record says its threshold, not only the file name


def test_the_bank_and_flip_counts_quoted_are_the_files():
    pairs = [r for name in ("pairs-gsm8k.jsonl", "pairs-gsm8k-llamacpp.jsonl") for r in _jsonl(name)
             if "agreed_tokens" in r]
    flips = _jsonl("flips-gsm8k-llamacpp.jsonl")
    assert f"bank pairs accepted (of {len(pairs)})" in README
    assert f"(`flips`, {len(flips)} pairs)" in README


def test_theory_readme_counts_the_checks_check_py_runs():
    out = subprocess.run([sys.executable, str(ROOT / "theory" / "check.py")], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    [(count, failed)] = re.findall(r"^(\d+) checks, (\d+) failed", out.stdout, re.M)
    assert failed == "0"
    assert f"# {count} checks" in THEORY_README


@pytest.mark.parametrize("name", ["gsm8k10-cpu.jsonl", "gsm8k5-sd-cpu.jsonl"])
def test_report_tables_reprinted_in_the_run_log_are_what_report_prints(name):
    records = load_results(RESULTS / name)
    for line in markdown_table(summarize(records)).splitlines()[2:]:
        assert line in BENCH_README, f"benchmarks/README.md quotes another row for {name}: {line}"
    assert fidelity_table(records)  # both files compare their modes with ar
