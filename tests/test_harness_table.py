"""benchmarks/harness_table.py: the harness command of each configuration, and the table read back from
the harness's results files, with the wall time added up over every run a configuration took and the time
of each answer kept once, however often its run was stopped."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from conftest import unavailable

from lookahead_reasoning.testing import tiny_model

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("harness_table", ROOT / "benchmarks" / "harness_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_configuration_is_one_resumable_harness_run_over_the_same_problems(tmp_path):
    table = _script()
    args = argparse.Namespace(out=str(tmp_path), dataset="train.jsonl", offset=100, limit=50, dtype="auto")
    commands = {name: table.command(name, args, "/models/target") for name in table.CONFIGS}
    for name, argv in commands.items():
        assert argv[:2] == ["lookahead-reasoning", "eval"]
        assert argv[argv.index("--use_cache") + 1] == str(tmp_path / f"{name}.sqlite")  # answers kept as written
        assert argv[argv.index("--gsm8k-offset") + 1] == "100" and argv[argv.index("--gsm8k-limit") + 1] == "50"
    assert "pretrained=/models/target" in commands["hf"][commands["hf"].index("--model_args") + 1]
    plain = commands["ar"][commands["ar"].index("--model_args") + 1]
    assert "mode=ar" in plain and "draft=none" in plain  # the library's loop alone: how much speed is the loop's
    likelihood = commands["lr-likelihood"][commands["lr-likelihood"].index("--model_args") + 1]
    assert "mode=lr" in likelihood and "verifier=likelihood" in likelihood and "threshold=0.3" in likelihood


def test_the_table_reads_the_last_results_and_adds_up_the_time_of_every_run(tmp_path):
    table = _script()
    written = {"hf": [("Step.\n\n\\boxed{3}", "3"), ("So 5.", "[invalid]")],
               "auto": [("Step.\n\n\\boxed{3}", "3"), ("Then 5.", "[invalid]"), ("\\boxed{7}", "7")]}
    for name, boxed in (("hf", 0.62), ("auto", 0.6)):
        folder = tmp_path / name / "model"
        folder.mkdir(parents=True)
        for stamp, score in (("2026-01-01", 0.1), ("2026-01-02", boxed)):  # an older run, then the last
            (folder / f"results_{stamp}.json").write_text(json.dumps({
                "results": {"gsm8k_lookahead": {"exact_match,boxed": score, "exact_match,last-number": score + 0.02}},
                "n-samples": {"gsm8k_lookahead": {"original": 50, "effective": 50}}}))
        (folder / "samples_gsm8k_lookahead_2026-01-02.jsonl").write_text("".join(
            json.dumps({"doc_id": i, "filter": f, "resps": [[text]], "filtered_resps": [answer if f == "boxed" else "0"]})
            + "\n" for i, (text, answer) in enumerate(written[name]) for f in ("boxed", "last-number")))
    (tmp_path / "times.jsonl").write_text("".join(json.dumps(t) + "\n" for t in (
        {"config": "hf", "seconds": 600.0, "rc": None}, {"config": "hf", "seconds": 300.0, "rc": 0},
        {"config": "auto", "seconds": 1200.0, "rc": 0})))
    (tmp_path / "answers.jsonl").write_text("".join(json.dumps({"config": "hf", "seconds": s}) + "\n"
                                                    for s in (30.0, 90.0, 60.0, 120.0)))
    rows = table.report(tmp_path).splitlines()
    assert rows[2] == "| hf | 50 | 0.62 | 0.64 | 2/2 | 2/2 | 75.0 | 4 | 5.0 | 15.0 |"  # an interrupted run's time counts
    # compared on the problems both answered: the same boxed answer (or none) on both, the same text on one
    assert rows[3] == "| auto | 50 | 0.60 | 0.62 | 2/2 | 1/2 | - | 0 | 0.0 | 20.0 |"
    assert len(rows) == 4  # configurations that have not run yet are left out


def test_each_answer_s_time_is_kept_once_and_a_resumed_run_adds_none(tmp_path, monkeypatch):
    try:
        from lm_eval.api import model as harness_model
    except ImportError:
        unavailable("lm-eval is not installed (pip install '.[eval]')")
    # the run patches the harness's hooks: monkeypatch puts them back afterwards
    monkeypatch.setattr(harness_model.CacheHook, "add_partial", harness_model.CacheHook.add_partial)
    monkeypatch.setattr(harness_model.CachingLM, "__getattr__", harness_model.CachingLM.__getattr__)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    folder = tmp_path / "tiny-target"
    loaded = tiny_model("qwen2", seed=0)
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    table, log = _script(), tmp_path / "answers.jsonl"
    argv = ["--model", "hf", "--model_args", f"pretrained={folder}", "--tasks", "gsm8k_lookahead", "--gsm8k-limit",
            "3", "--gen_kwargs", "max_gen_toks=8", "--device", "cpu", "--use_cache", str(tmp_path / "hf.sqlite"),
            "--output_path", str(tmp_path / "hf")]
    table.timed_eval("hf", log, argv)
    times = [json.loads(line) for line in log.read_text().splitlines()]
    assert [t["config"] for t in times] == ["hf"] * 3 and all(t["seconds"] > 0 for t in times)
    table.timed_eval("hf", log, argv)  # every answer is in the cache now: nothing is generated, nothing timed
    assert len(log.read_text().splitlines()) == 3


def test_interleaving_answers_each_problem_with_every_configuration_in_turn_and_resumes(tmp_path, monkeypatch):
    table = _script()
    ran, seconds = [], {"hf": 60.0, "ar": 50.0, "auto": 20.0}

    def fake_run(label, argv, out):
        name, _, problem = label.partition("#")
        assert argv[argv.index("--gsm8k-offset") + 1] == problem and argv[argv.index("--gsm8k-limit") + 1] == "1"
        ran.append(label)
        table._append(out / "answers.jsonl", {"config": label, "seconds": seconds[name] * (1 + int(problem) % 2)})
        return 0
    monkeypatch.setattr(table, "run", fake_run)
    args = argparse.Namespace(out=str(tmp_path), dataset="train.jsonl", offset=100, limit=3, dtype="bfloat16")
    names = ["hf", "ar", "auto"]
    assert table.interleave(names, args, "/models/target", tmp_path) == 0
    assert ran == ["hf#100", "ar#100", "auto#100", "ar#101", "auto#101", "hf#101", "auto#102", "hf#102", "ar#102"]
    ran.clear()
    assert table.interleave(names, args, "/models/target", tmp_path) == 0 and ran == []  # all timed: nothing again
    rows = table.side_by_side(tmp_path).splitlines()
    assert rows[0].startswith("3 problems (100-102)")
    assert "| auto | 20.00 (20.00-40.00) | 3.00x (3.00-3.00) | 2.50x (2.50-2.50) |" in rows
    assert "| hf | 60.00 (60.00-120.00) | 1.00x (1.00-1.00) | 0.83x (0.83-0.83) |" in rows
