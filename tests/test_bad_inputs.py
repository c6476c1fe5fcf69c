"""Every option of every entry is honoured or refused by name, before a model loads or a request goes out: a
generator of bad inputs (hypothesis, fixed seed, a few examples per option).

The entries: the ten subcommands of ``lookahead-reasoning`` (their options read from the parsers themselves, so
a new option is drawn the day it is added), ``LookaheadGenerator(...)`` and its ``generate(...)``, the
lm-evaluation-harness model's ``model_args``, transformers' ``custom_generate`` and the engine servers'
``ServerConfig``, each over a target of this process and, where it takes one, an engine's URL (a fake engine on
loopback). For each option a case draws a value of every kind its action admits (out of range, of the wrong type,
empty, at the boundary, a file missing, empty, not JSON lines, without the fields, broken halfway), the mode and
the target, and sometimes a second option, and runs up to the sentinels of :mod:`bad_inputs`. It must end in one
of two ways: refused (a non-zero exit with a message, or a typed exception in Python) naming an option or a file
it gave; or accepted, every option it gave seen where the loop reads it (:mod:`honoured`). Never a traceback,
never a silent drop, never a load or a request before the refusal.
"""

from __future__ import annotations

import argparse
import functools
import traceback
import uuid

import pytest
from bad_inputs import Done, Files, Outcome, View, draw_value, option_kinds, run_command, sentinels
from honoured import honoured, plans
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_engine_client import FakeEngine

from lookahead_reasoning.cli import build_parser, main
from lookahead_reasoning.integrations.harness import eval_parser
from lookahead_reasoning.presets import MODES
from lookahead_reasoning.serve_cli import ENGINES

# A fixed seed, a few examples an option and no shrinking: a failure reports the case as drawn, at once
EXAMPLES = settings(max_examples=5, derandomize=True, deadline=None, database=None, phases=(Phase.generate,),
                    report_multiple_bugs=False, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Files:
    return Files(tmp_path_factory.mktemp("bad-inputs"))


@pytest.fixture(scope="module")
def engine():
    with FakeEngine() as fake:
        yield fake


# ---------------------------------------------------------------------------------------- the commands' options

@functools.cache
def parsers() -> dict[str, argparse.ArgumentParser]:
    sub = build_parser()._subparsers._group_actions[0].choices
    return {**{name: parser for name, parser in sub.items() if name != "eval"}, "eval": eval_parser()}


@functools.cache
def actions(command: str) -> list[argparse.Action]:
    return [a for a in parsers()[command]._actions if a.dest not in ("help", "func")]


COMMAND_OPTIONS = [(command, action.dest) for command in parsers() for action in actions(command)]
IN_FILES = {"dataset", "pairs", "results", "flips", "gsm8k"}
OUT_FILES = {"out", "html", "plots"}
URL_OPTIONS = {"target_url", "draft_url", "sd_url", "ngram_url", "judge_url"}
TARGETED = {"lr", "generate", "bench", "pairs", "flips"}  # the commands that take --target-url
BENCH_MODES = {"local": ("ar", "ar,auto", "sd", "lr,ar", "lr-sd", "sd-ngram", "hf-assisted,ar", "hf-lookup",
                         "auto@k1"),
               "engine": ("ar", "ar,lr@k1", "auto", "lr@k2-async")}
GOOD = {"target": ["qwen2.5-coder-0.5b"], "model": ["qwen2.5-coder-0.5b"], "draft": ["qwen2.5-coder-0.5b"],
        "device": ["cpu"], "dtype": ["fp32", "bf16"], "precision": ["float32", "int8"], "prompt": ["What is 2 + 2?"],
        "delimiter": ["\n"], "verifier": ["likelihood", "embedding"], "judge_model": ["qwen2.5-coder-0.5b"],
        "judge_name": ["j"], "template": ["qwen2.5-coder-1.5b"], "target_model": ["m"], "draft_model": ["m"],
        "modes": ["ar", "lr,ar"], "verifiers": ["exact", "random@0.5"], "judge_dtype": ["fp32"]}


def category(dest: str) -> str:
    return "in" if dest in IN_FILES else "out" if dest in OUT_FILES else "url" if dest in URL_OPTIONS else ""


def good_values(action: argparse.Action, files: Files, url: str) -> list[list[str]]:
    """Values an option takes well (for the second option of a case)."""
    if action.nargs == 0:
        return [[]]
    if action.choices:
        return [[str(c)] for c in action.choices]
    if action.dest in URL_OPTIONS or action.dest == "scorer":
        return [[url]]
    if action.dest in IN_FILES:
        return [[files[{"pairs": "bank", "results": "results", "flips": "flips"}.get(action.dest, "gsm8k")]]]
    if action.dest in OUT_FILES:
        return [[files.out(f"{uuid.uuid4().hex}.{'html' if action.dest == 'html' else 'jsonl'}")]]
    if action.type is int:
        return [["1"], ["2"]]
    if action.type is float:
        return [["0.5"]]
    return [[v] for v in GOOD.get(action.dest, [])]


def context(command: str, data: st.DataObject, files: Files, url: str) -> tuple[list[str], dict[str, str]]:
    """A valid line for ``command`` (the target, the mode, the files it needs) and the options it gives."""
    target = data.draw(st.sampled_from(("local", "engine")), label="target") if command in TARGETED else "local"
    out = files.out(uuid.uuid4().hex + ".jsonl")
    lines = {"bench": lambda: ["--dataset", files["gsm8k"], "--out", out,
                               "--modes", data.draw(st.sampled_from(BENCH_MODES[target]), label="modes")],
             "pairs": lambda: ["--dataset", files["gsm8k"], "--out", out],
             "flips": lambda: [files["bank"], "--out", out], "score-pairs": lambda: [files["bank"], "--out", out],
             "verifiers": lambda: [files["bank"], "--out", out.replace(".jsonl", ".md"), "--verifiers", "exact"],
             "report": lambda: [files["results"], "--no-plots"],
             "lr": lambda: ["--mode", data.draw(st.sampled_from(MODES), label="mode"), "--no-warmup"],
             "serve-engine": lambda: ["--engine", data.draw(st.sampled_from(ENGINES), label="engine")]}
    line = lines.get(command, list)()
    if target == "engine" or command == "flips":
        line += ["--target-url", url] + (["--draft-url", url] if command in ("lr", "bench", "pairs") else [])
    flags = {a.option_strings[0]: a.dest for a in actions(command) if a.option_strings}
    given = {token: flags[token] for token in line if token in flags}
    return line, given


def with_option(line: list[str], given: dict[str, str], action: argparse.Action, value: list[str]) -> list[str]:
    """``line`` with ``action`` set to ``value`` (a positional replaces the line's own)."""
    if action.option_strings:
        flag = action.option_strings[0]
        given[flag] = action.dest
        if flag in line and action.nargs != 0:  # the line's own value of it goes
            i = line.index(flag)
            line = line[:i] + line[i + 2:]
        return [*line, flag, *value]
    given[action.dest] = action.dest
    return [*value, *[t for t in line[1:]]] if line else value


def judge(outcome: Outcome, command: str, given: dict[str, str], line: list[str]) -> None:
    """Refused naming an option or a file the case gave, or accepted with every option it gave honoured."""
    case = f"{command} {' '.join(line)}"
    assert outcome.crash is None, f"{case}: a traceback:\n" + "".join(traceback.format_exception(outcome.crash))
    if outcome.reached is None and outcome.code != 0:
        assert outcome.code and outcome.error, f"{case}: refused without a word (exit {outcome.code})"
        assert "Traceback" not in outcome.error, f"{case}: {outcome.error}"
        named = [word for word in [*given, *[v for v in line if "/" in v]] if word and word in outcome.error]
        assert named, f"{case}: the refusal names no option or file it was given: {outcome.error!r}"
        return
    args = parsers()[command].parse_known_args(line)[0]
    seen = View(outcome.reached) if outcome.reached is not None else Done(outcome, args)
    defaults = {a.dest: a.default for a in actions(command)}
    for flag, dest in given.items():
        if getattr(args, dest) == defaults[dest]:
            continue  # an option at its default changes nothing: nothing to drop
        check = honoured(command, dest)
        assert check is not None, f"{case}: accepted, and {flag} has no predicate in honoured.py to show it honoured"
        assert check(getattr(args, dest), seen), f"{case}: {flag} was accepted and not honoured (a silent drop)"


@pytest.mark.parametrize("command, dest", COMMAND_OPTIONS, ids=[f"{c}:{d}" for c, d in COMMAND_OPTIONS])
@EXAMPLES
@given(data=st.data())
def test_every_option_of_every_command(command, dest, data, files, engine):
    action = next(a for a in actions(command) if a.dest == dest)
    line, given_ = context(command, data, files, engine.url)
    kind, value = draw_value(data, option_kinds(action, files, category(dest)))
    line = with_option(line, given_, action, value)
    others = [a for a in actions(command) if a.dest != dest and a.option_strings and good_values(a, files, engine.url)]
    if others and data.draw(st.booleans(), label="second option"):
        other = data.draw(st.sampled_from(others), label="second")
        line = with_option(line, given_, other, data.draw(st.sampled_from(good_values(other, files, engine.url))))
    argv = ["eval", *line] if command == "eval" else [command, *line]
    with sentinels():
        outcome = run_command(main, argv)
    judge(outcome, command, given_, line)


# ---------------------------------------------------------------------------------------- each kind, on its own

def refused(argv: list[str]) -> str:
    """The one-line refusal of ``argv`` (no load, no request, no traceback before it)."""
    with sentinels():
        outcome = run_command(main, argv)
    assert outcome.crash is None and outcome.reached is None and outcome.code == 2, (argv, outcome)
    return outcome.error


def reached(argv: list[str]) -> View:
    with sentinels():
        outcome = run_command(main, argv)
    assert outcome.reached is not None, (argv, outcome.error, outcome.crash)
    return View(outcome.reached)


@pytest.mark.parametrize("argv, named", [
    (["lr", "--mode", "sd", "-k", "3"], "-k"),  # a drafted step count with a token-SD mode
    (["lr", "--mode", "ar", "--gamma", "5"], "--gamma"),  # a drafted-token count with plain decoding
    (["lr", "--mode", "auto", "--gamma", "5"], "--gamma"),
    (["lr", "--mode", "sd", "--width", "2"], "--width"),  # several drafts per position with token SD
    (["lr", "--mode", "lr", "--reprofile"], "--reprofile"),  # auto's cost table, in a fixed mode
    (["lr", "--mode", "sd", "--verifier", "embedding"], "--verifier"),  # a verifier where no step is verified
    (["lr", "--mode", "lr-sd", "--token-sd-target", "ngram", "--draft-stop-below", "0.3"], "--draft-stop-below"),
    (["bench", "--modes", "ar,sd", "-k", "2"], "-k"),  # no mode of the benchmark reads it
    (["generate", "--top-k", "5"], "--top-k"),  # greedy decoding reads no top-k
    (["pairs", "--dataset", "gsm8k-mini", "--no-target-sd", "--gamma", "3"], "--gamma"),
    (["report", "results.jsonl", "--plots", "p", "--no-plots"], "--plots"),
    (["flips", "bank.jsonl", "--out", "f.jsonl", "--target-url", "http://127.0.0.1:9", "--seed", "3"], "--seed"),
    (["serve-engine", "--engine", "vllm", "--parallel", "8"], "--parallel"),  # llama.cpp's slots, no llama.cpp
    (["verifiers", "bank.jsonl", "--verifiers", "exact", "--judge-url", "http://127.0.0.1:9"], "--judge-url"),
])
def test_an_option_the_run_would_not_read_is_refused_by_name(argv, named, files):
    argv = [files[a.removesuffix(".jsonl")] if a in ("results.jsonl", "bank.jsonl") else a for a in argv]
    error = refused(argv)
    assert error.startswith("error: ") and named in error, error


def test_what_the_mode_reads_is_honoured_where_the_loop_reads_it(files):
    view = reached(["lr", "--mode", "lr-sd", "-k", "3", "--gamma", "5", "--width", "2", "--no-warmup"])
    [plan] = plans(view)
    assert (plan.policy.k, plan.policy.every.width, plan.settings.token_sd.gamma) == (3, 2, 5)
    view = reached(["lr", "--mode", "sd", "--gamma", "7", "--draft-stop-below", "0.2"])
    assert (plans(view)[0].policy.gamma, plans(view)[0].policy.every.draft_stop_below) == (7, 0.2)


def test_none_as_a_draft_means_no_draft_model_in_every_entry(files):
    assert "--draft none" in refused(["lr", "--mode", "lr", "--draft", "none"])
    view = reached(["lr", "--mode", "ar", "--draft", "none"])  # ar needs none: the target alone is loaded
    assert view.local("draft", "__init__") is None
    assert "--draft none" in refused(["pairs", "--dataset", files["gsm8k"], "--draft", "none"])
    assert "--with-sd" in refused(["serve-engine", "--draft", "none", "--with-sd"])
    servers = reached(["serve-engine", "--draft", "none"]).local("servers", "_prepare")
    assert set(servers) == {"target"}
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.errors import ConfigError
    from lookahead_reasoning.integrations.harness import LookaheadLM

    for make in (lambda: LookaheadGenerator(target="qwen2.5-coder-1.5b", draft="none", mode="lr"),
                 lambda: LookaheadLM.create_from_arg_string("mode=lr,draft=none", {"batch_size": 1})):
        with sentinels(), pytest.raises(ConfigError, match="draft 'none'|draft none"):
            make()  # the lm-eval entry refused it too: no minutes of the target drafting for itself
    assert "target" in refused(["lr", "--target", "none"])


@pytest.mark.parametrize("argv, named", [
    (["lr", "--target-url", "ftp://127.0.0.1:9"], "--target-url"),  # not taken for a model name
    (["lr", "--target-url", "not a url"], "--target-url"),
    (["generate", "--target-url", ""], "--target-url"),  # empty: not taken for "no URL"
    (["bench", "--sample", "0"], "--sample"),  # not "no problems from offset 0"
    (["eval", "--gsm8k-limit", "0"], "--gsm8k-limit"),
])
def test_an_error_names_the_option_at_fault(argv, named):
    error = refused(argv)
    assert named in error and "--template" not in error, error


@pytest.mark.parametrize("kind", ["not_jsonl", "no_fields", "empty", "broken_mid", "missing"])
def test_a_task_file_that_is_not_gsm8k_json_lines_is_named_before_the_harness_starts(kind, files):
    error = refused(["eval", "--gsm8k", files[kind], "--model", "lookahead"])
    assert files[kind] in error and "Traceback" not in error, error
    if kind == "broken_mid":
        assert "line 2" in error


def test_a_dataset_broken_halfway_names_its_line_and_keeps_what_was_written(files, tmp_path):
    """A run that already wrote results: the dataset's second line broken, the rerun is refused naming the file and
    the line before anything loads, and the results stay as they were, to resume once the line is fixed."""
    out = tmp_path / "bench.jsonl"
    out.write_text(open(files["results"], encoding="utf-8").read(), encoding="utf-8")
    before = out.read_bytes()
    for argv in (["bench", "--dataset", files["broken_mid"], "--out", str(out), "--modes", "ar"],
                 ["pairs", "--dataset", files["broken_mid"], "--out", str(out)],
                 ["lr", "--dataset", files["broken_mid"], "--index", "2", "--mode", "ar"]):
        error = refused(argv)
        assert f"{files['broken_mid']}, line 2" in error, error
        assert out.read_bytes() == before


def test_the_options_page_is_the_code_s():
    """OPTIONS.md is what the parsers and the table the refusals use say (scripts/write_options_page.py)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("_write_options_page", root / "scripts" / "write_options_page.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = root / "OPTIONS.md"
    assert page.read_text(encoding="utf-8") == script.options_page(), "OPTIONS.md is stale: run scripts/write_options_page.py"
