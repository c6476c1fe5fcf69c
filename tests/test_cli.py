"""The command line on tiny models saved to folders (the same path a user's local model takes),
including a 2-process sharded benchmark under ``accelerate launch``."""

from __future__ import annotations

import json
import time
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lookahead_reasoning.cli import main
from lookahead_reasoning.testing import tiny_model


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    dirs = []
    for seed in (0, 1):
        loaded = tiny_model("qwen2", seed=seed)
        path = root / f"tiny-{seed}"
        loaded.model.save_pretrained(path)
        loaded.tokenizer.save_pretrained(path)
        dirs.append(str(path))
    return dirs


@pytest.fixture()
def dataset(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n"
                            for i in range(1, 4)))
    return path


def test_generate_streams_text(model_dirs, capsys):
    assert main(["generate", "--model", model_dirs[0], "--prompt", "Hi", "--max-new-tokens", "12", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "12 tokens" in out and "tok/s" in out


def test_lr_command_prints_trace_and_summary(model_dirs, dataset, capsys, tmp_path):
    html = tmp_path / "trace.html"
    code = main(["lr", "--mode", "lr", "--target", model_dirs[0], "--draft", model_dirs[1], "--verifier", "exact",
                 "--dataset", str(dataset), "--index", "1", "--max-new-tokens", "24", "--dtype", "fp32",
                 "--delimiter", " ", "--html", str(html)])
    assert code == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("=== summary ===") + len("=== summary ==="):out.index("trace written")])
    assert summary["mode"] == "lr" and summary["gold"] == "4"
    assert summary["same_text_as_ar"] is True  # exact verifier: lossless
    assert "speedup_vs_ar" in summary and html.read_text().startswith("<!doctype html>")
    assert "warming up" in out  # the timed runs start warm


@pytest.mark.parametrize("value, code", [("0.5", 0), ("1.5", 2)])
def test_lr_command_sd_with_draft_stop_below(model_dirs, dataset, capsys, value, code):
    argv = ["lr", "--target", model_dirs[0], "--draft", model_dirs[1], "--mode", "sd", "--gamma", "6",
            "--draft-stop-below", value, "--dataset", str(dataset), "--index", "0", "--max-new-tokens", "16",
            "--dtype", "fp32", "--no-warmup"]
    assert main(argv) == code
    captured = capsys.readouterr()
    if code:
        assert "--draft-stop-below" in captured.err  # the option the user gave
        return
    out = captured.out
    assert "warming up" not in out
    summary = json.loads(out[out.index("=== summary ===") + len("=== summary ==="):])
    assert summary["mode"] == "sd" and summary["same_text_as_ar"] is True  # lossless with the early stop


@pytest.mark.parametrize("argv, message", [
    (["generate", "--model", "./no/such/model", "--prompt", "x"], "no such file or directory"),
    (["generate", "--model", "qwen2.5-coder-0.5b", "--prompt", "x", "--device", "cuda:7"], "cuda"),
    (["generate", "--model", "qwen2.5-coder-0.5b", "--prompt", "x", "--dtype", "int3"], "dtype"),
])
def test_bad_input_exits_with_a_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err.lower()


def test_bench_and_report(model_dirs, dataset, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    argv = ["bench", "--dataset", str(dataset), "--target", model_dirs[0],
            "--modes", "ar,hf-generate", "--limit", "2", "--max-new-tokens", "8",
            "--dtype", "fp32", "--out", str(out), "--no-progress", "--report"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| ar | 2 |" in text and "| hf-generate | 2 |" in text
    assert len(out.read_text().splitlines()) == 4
    assert main(["bench", "--dataset", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2
    assert main(["bench", "--dataset", str(dataset), "--modes", "ar,turbo", "--out", str(out)]) == 2


def test_two_process_sharded_bench(model_dirs, dataset, tmp_path):
    """accelerate launch with 2 processes on the CPU: each writes its own shard, report merges them."""
    out = tmp_path / "r.jsonl"
    accelerate = Path(sys.executable).with_name("accelerate")
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "lookahead_reasoning", "bench",
           "--dataset", str(dataset), "--target", model_dirs[0], "--modes", "ar", "--max-new-tokens", "6",
           "--dtype", "fp32", "--out", str(out), "--no-progress"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    shards = sorted(p.name for p in tmp_path.glob("r.jsonl.shard*"))
    assert shards == ["r.jsonl.shard0-of-2", "r.jsonl.shard1-of-2"]
    sizes = [len((tmp_path / s).read_text().splitlines()) for s in shards]
    assert sorted(sizes) == [1, 2]  # problems 0 and 2 to rank 0, problem 1 to rank 1
    from lookahead_reasoning.bench.report import load_results

    assert len({r["problem_id"] for r in load_results(out)}) == 3


def test_lr_command_defaults_to_auto_and_shows_its_plans(model_dirs, dataset, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("LOOKAHEAD_REASONING_CACHE", str(tmp_path / "cache"))
    code = main(["lr", "--target", model_dirs[0], "--draft", model_dirs[1], "--verifier", "exact",
                 "--dataset", str(dataset), "--max-new-tokens", "20", "--dtype", "fp32", "--delimiter", " ",
                 "--details", "--no-warmup"])
    assert code == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("=== summary ===") + len("=== summary ==="):])
    assert summary["mode"] == "auto" and summary["same_text_as_ar"] is True  # exact verifier: lossless
    assert summary["plans"] and "predicted_tok_s" in summary
    pays = summary["step_layer_pays_above_alpha1"]  # when the step layer pays on this machine (theory.breakeven)
    assert set(pays) == {"k1", "k2"} and all(a is None or 0 <= a < 1 for a in pays.values())
    assert "plan " in out and "predicted" in out and "realised" in out  # every cycle's plan in the trace
    assert list((tmp_path / "cache").rglob("*.json"))  # the measured cost tables were cached


@pytest.mark.parametrize("mode, target, gamma, k", [
    ("sd", "draft", 12, None), ("lr-sd", "draft", 12, 1), ("sd-ngram", "draft", 6, None), ("lr-sd", "ngram", 6, 1),
    ("lr", "draft", 4, 2),
])
def test_presets_give_each_mode_its_defaults(mode, target, gamma, k):
    from lookahead_reasoning.cli import build_parser
    from lookahead_reasoning.presets import mode_gamma, mode_k

    assert mode_gamma(mode, None, target) == gamma
    assert (mode_k(mode) if k else None) == k
    args = build_parser().parse_args(["lr", "--mode", mode])
    assert args.gamma is None and args.k is None and args.draft_stop_below == 0.4  # the presets decide


# ------------------------------------------------------------------------------------------ fail fast

@pytest.fixture()
def no_loading(monkeypatch):
    """Any model load fails the test: the errors below must come before loading."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad option was refused")

    import lookahead_reasoning.generator as generator
    import lookahead_reasoning.models as models

    monkeypatch.setattr(models, "load_model", refuse)
    monkeypatch.setattr(generator, "as_lm", refuse)


@pytest.mark.parametrize("extra, message", [
    (["--max-new-tokens", "-5"], "--max-new-tokens"),
    (["--threshold", "2"], "--threshold"),
    (["--verifier", "no-such-verifier"], "--verifier"),
    (["--verifier", "judge"], "--judge-model"),
    (["--prompt", ""], "--prompt is empty"),
    (["-k", "-1"], "-k"),
    (["--mode", "lr", "-k", "0"], "-k 0 drafts no step: --mode lr needs k >= 1"),
    (["--gamma", "0"], "--gamma"),
    (["--draft-stop-below", "1.5"], "--draft-stop-below"),
    (["--top-p", "0"], "--top-p"),
    (["--dtype", "int3"], "--dtype"),
])
def test_lr_refuses_bad_settings_before_loading(no_loading, extra, message, capsys):
    start = time.perf_counter()
    assert main(["lr"] + extra) == 2
    assert message in capsys.readouterr().err
    assert time.perf_counter() - start < 10


def test_lr_refuses_bad_questions_before_loading(no_loading, dataset, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\nnot json\n', encoding="utf-8")
    cases = [
        (["--dataset", str(tmp_path / "missing.jsonl")], "not found"),
        (["--dataset", str(bad)], "bad.jsonl"),
        (["--dataset", str(dataset), "--index", "99"], "--index 99 is past the end"),
        (["--dataset", str(dataset), "--index", "-1"], "--index must be >= 0"),
        (["--index", "64"], "--index 64 is past the end of gsm8k-mini (64 problems: 0..63)"),
        (["--prompt", "What is 2 + 2?", "--index", "3"], "give --prompt, or --dataset and --index, not both"),
    ]
    for extra, message in cases:
        assert main(["lr"] + extra) == 2, extra
        assert message in capsys.readouterr().err, extra


def test_bench_refuses_bad_settings_before_loading(no_loading, dataset, tmp_path, capsys):
    out = str(tmp_path / "r.jsonl")
    for extra, message in ((["--threshold", "2"], "--threshold"), (["--samples", "0"], "--samples"),
                           (["--offset", "-3"], "offset"), (["--verifier", "openai-judge"], "--judge-url")):
        assert main(["bench", "--dataset", str(dataset), "--out", out] + extra) == 2, extra
        assert message in capsys.readouterr().err, extra


def test_report_refuses_what_is_not_a_result_file(tmp_path, capsys):
    garbage, empty = tmp_path / "garbage.jsonl", tmp_path / "empty.jsonl"
    garbage.write_text('{"a": 1}\n[1, 2]\nnot json\n', encoding="utf-8")
    empty.write_text("", encoding="utf-8")
    for path in (garbage, empty):
        assert main(["report", str(path), "--no-plots"]) == 2
        assert "no benchmark results" in capsys.readouterr().err
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert refused(["report", str(folder), "--no-plots"], capsys) == f"error: cannot read results from {folder} (Is a directory)"


def test_an_unknown_model_name_lists_the_offline_names(capsys):
    assert main(["generate", "--model", "no-such-model", "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert "qwen2.5-coder-0.5b" in err and "qwen2.5-coder-1.5b" in err


# ------------------------------------------------------------------- bad inputs, one line each, exit 2

def refused(argv: list[str], capsys) -> str:
    """Run the command, expect exit 2 and exactly one line on stderr, "error: ..."; return that line."""
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def read_only_folder(tmp_path) -> Path:
    """A folder this process cannot write to: a chmod 555 folder, or /sys when running as root (root
    writes through file modes)."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys")
    try:
        (folder / "lookahead-write-check").touch()
    except OSError:
        return folder
    pytest.skip("no read-only folder available to this root process")


@pytest.fixture()
def bad_datasets(tmp_path):
    no_question = tmp_path / "no-question.jsonl"
    no_question.write_text('{"question": "What is 1 + 1?", "answer": "#### 2"}\n{"answer": "#### 4"}\n', encoding="utf-8")
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes('{"question": "Combien coûte un café ?", "answer": "#### 2"}\n'.encode("latin-1"))
    return no_question, latin1


def test_bad_datasets_are_refused_naming_file_and_line(no_loading, bad_datasets, tmp_path, capsys):
    no_question, latin1 = bad_datasets
    for command in (["lr", "--dataset"], ["bench", "--out", str(tmp_path / "r.jsonl"), "--dataset"]):
        err = refused(command + [str(no_question)], capsys)
        assert f"{no_question}, line 2: missing 'question' (or 'problem')" in err
        err = refused(command + [str(latin1)], capsys)
        assert f"{latin1} is not UTF-8 text" in err


@pytest.mark.parametrize("value, message", [
    ("0", "--max-new-tokens must be at least 1 (the tokens to write; with none there is nothing to time or grade), got 0"),
    ("-5", "--max-new-tokens must be at least 1 (the tokens to write; with none there is nothing to time or grade), got -5"),
    ("1000000000", "--max-new-tokens 1000000000 is more than any model here can hold in its context: give at most 131072"),
])
def test_max_new_tokens_out_of_range_is_refused_before_loading(no_loading, dataset, tmp_path, capsys, value, message):
    for command in (["generate", "--prompt", "x"], ["lr", "--prompt", "x"],
                    ["bench", "--dataset", str(dataset), "--out", str(tmp_path / "r.jsonl")]):
        assert message in refused(command + ["--max-new-tokens", value], capsys)


def test_max_new_tokens_beyond_the_models_context_is_refused_before_loading(no_loading, model_dirs, dataset, tmp_path,
                                                                            capsys):
    for command in (["generate", "--model", model_dirs[0], "--prompt", "x"], ["lr", "--target", model_dirs[0]],
                    ["bench", "--target", model_dirs[0], "--dataset", str(dataset), "--out", str(tmp_path / "r.jsonl")]):
        err = refused(command + ["--max-new-tokens", "5000"], capsys)
        assert err == (f"error: --max-new-tokens 5000 does not fit in the context of {model_dirs[0]} (4096 tokens, "
                       f"the prompt included): give less than 4096")


def test_the_context_of_a_loaded_model_is_checked_too():
    from lookahead_reasoning.errors import ConfigError
    from lookahead_reasoning.options import check_fits_context

    model = tiny_model("qwen2", seed=0).model
    check_fits_context(model, 4095)
    with pytest.raises(ConfigError, match=r"\(4096 tokens, the prompt included\): give less than 4096"):
        check_fits_context(model, 4096)


@pytest.mark.parametrize("modes, message", [
    ("", "--modes is empty: give one or more of auto, lr, lr-sd, ar, sd, sd-ngram, hf-generate"),
    (" , ", "--modes is empty"),
    ("ar,sd,ar", "--modes: ar listed twice"),
    ("sd@g6, sd@g6", "--modes: sd@g6 listed twice"),
])
def test_empty_and_repeated_modes_are_refused(no_loading, dataset, tmp_path, capsys, modes, message):
    assert message in refused(["bench", "--dataset", str(dataset), "--out", str(tmp_path / "r.jsonl"),
                               "--modes", modes], capsys)


def test_resuming_into_results_of_another_setup_is_refused(no_loading, dataset, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    record = {"problem_id": "d-0", "mode": "ar", "sample": 0, "target": "other-target", "draft": "other-draft",
              "precision": "as-loaded", "temperature": 0.0}
    out.write_text(json.dumps(record) + "\n", encoding="utf-8")
    before = out.read_text(encoding="utf-8")
    err = refused(["bench", "--dataset", str(dataset), "--out", str(out), "--modes", "ar"], capsys)
    assert f"{out} holds results of another setup (target 'other-target', draft 'other-draft'; this run:" in err
    assert "give another --out" in err and out.read_text(encoding="utf-8") == before
    err = refused(["bench", "--dataset", str(dataset), "--out", str(out), "--modes", "ar,sd", "--target", "other-target",
                   "--draft", "other-draft", "--precision", "int8"], capsys)
    assert "(precision 'as-loaded'; this run: precision 'int8')" in err


def test_an_out_folder_that_cannot_be_written_is_refused(no_loading, dataset, tmp_path, capsys):
    folder = read_only_folder(tmp_path)
    err = refused(["bench", "--dataset", str(dataset), "--out", str(folder / "r.jsonl")], capsys)
    assert f"cannot write results to {folder / 'r.jsonl'} (" in err and "give a path in a writable folder" in err


def test_a_cache_that_cannot_be_written_is_refused_when_auto_needs_it(no_loading, dataset, tmp_path, capsys,
                                                                       monkeypatch):
    cache = read_only_folder(tmp_path) / "cache"
    monkeypatch.setenv("LOOKAHEAD_REASONING_CACHE", str(cache))
    for argv in (["lr", "--prompt", "x"], ["bench", "--dataset", str(dataset), "--out", str(tmp_path / "r.jsonl")]):
        err = refused(argv, capsys)
        assert f"the cache folder {cache} is not writable (" in err and "set LOOKAHEAD_REASONING_CACHE" in err
    with pytest.raises(AssertionError, match="a model was loaded"):  # no auto: the cache is not needed
        main(["bench", "--dataset", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--modes", "ar"])


def test_ctrl_c_in_a_benchmark_keeps_every_finished_run_and_resumes(dataset, tmp_path, capsys, monkeypatch):
    import lookahead_reasoning.bench.runner as runner
    from lookahead_reasoning.bench.results import setup_of

    class FakeRunner:
        """Writes a record per run without a model; Ctrl-C arrives during the run after ``stop_after``."""

        stop_after: int | None = 2
        runs: list = []

        def __init__(self, config):
            self.config = config

        def warmup(self):
            pass

        def run(self, problem, mode, sample=0):
            if FakeRunner.stop_after is not None and len(FakeRunner.runs) == FakeRunner.stop_after:
                raise KeyboardInterrupt
            FakeRunner.runs.append((problem.id, mode))
            return {"problem_id": problem.id, "mode": mode, "sample": sample, **setup_of(self.config)}

    monkeypatch.setattr(runner, "ModeRunner", FakeRunner)
    out = tmp_path / "r.jsonl"
    argv = ["bench", "--dataset", str(dataset), "--out", str(out), "--modes", "ar,sd", "--no-progress"]
    assert main(argv) == 130
    err = capsys.readouterr().err.strip()
    assert err == f"interrupted: every finished run is saved in {out}; run the same command again to resume"
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    FakeRunner.stop_after = None
    assert main(argv) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 6 and len({(r["problem_id"], r["mode"]) for r in lines}) == 6
    assert len(FakeRunner.runs) == 6  # the two finished runs were not run again


@pytest.mark.parametrize("argv, message", [
    (["lr", "--mode", "warp"], "argument --mode: invalid choice: 'warp'"),
    (["bench", "--dataset", "d.jsonl", "--max-new-tokens", "abc"], "argument --max-new-tokens: invalid int value: 'abc'"),
    (["bench", "--modes"], "argument --modes: expected one argument"),
    (["warp"], "argument command: invalid choice: 'warp'"),
])
def test_option_parsing_errors_take_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err and "--help` lists the options" in err


@pytest.mark.parametrize("argv, named", [
    (["lr", "--scorer", "qwen2.5-coder-1.5b", "--prompt", "What is 2 + 3?"], "--scorer"),
    (["lr", "--draft-url", "http://127.0.0.1:9", "--schedule", "async", "--prompt", "2 + 3?"], "--draft-url, --schedule"),
    (["bench", "--dataset", "d.jsonl", "--concurrency", "2", "--engine-timeout", "5"], "--engine-timeout, --concurrency"),
    (["generate", "--template", "qwen2.5-coder-1.5b", "--prompt", "What is 2 + 3?"], "--template"),
])
def test_an_engine_option_without_an_engine_is_refused_before_anything_loads(argv, named, capsys, monkeypatch):
    def loaded(*a, **k):
        pytest.fail("a model loaded")

    for where in ("runtime.pair", "runtime.engine.pair"):  # the generator's models; the scorer
        monkeypatch.setattr(f"lookahead_reasoning.{where}.load_model", loaded)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named}: for a target served by an engine (--target-url URL)"), err


def test_index_picks_a_shipped_gsm8k_problem_from_a_fresh_checkout():
    """``--index N`` without ``--dataset`` is GSM8K train problem N, from the 64 shipped with the package
    (no path outside the repository); the gold answer comes with it."""
    from lookahead_reasoning.cli import _question, build_parser

    messages, gold = _question(build_parser().parse_args(["lr", "--index", "3"]))
    assert "Julie is reading a 120-page book" in messages[-1]["content"] and gold == "42"
    text, none = _question(build_parser().parse_args(["lr", "--prompt", "What is 2 + 2?"]))
    assert (text, none) == ("What is 2 + 2?", None)
