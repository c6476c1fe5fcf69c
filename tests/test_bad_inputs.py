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
from honoured import honoured
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_client import FakeEngine

from lookahead_reasoning.cli import build_parser, main
from lookahead_reasoning.integrations.harness import eval_parser
from lookahead_reasoning.presets import MODES

EXAMPLES = settings(max_examples=3, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


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
             "lr": lambda: ["--mode", data.draw(st.sampled_from(MODES), label="mode"), "--no-warmup"]}
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
