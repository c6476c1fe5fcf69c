"""Every command-line option, given with a target of this process and with a target served by an engine,
is honoured or refused by name, before any model loads and before any request is sent.

The walk reads the options from the parser itself (a new option is walked without editing this file, and
fails here until it has a sample value). With an engine target (a URL where nothing listens), an option the
engine run honours (``engine_cli.OVER_ENGINE``) lets the command go as far as connecting, and the error
names the URL; any other is refused by name first. With a target of this process, every option but the
engine's lets the command go as far as loading a model (which the test stops); the engine's options are
refused by name. A second test checks, over a fake engine, that what the table calls honoured reaches the
requests.
"""

from __future__ import annotations

import json

import pytest
from test_engine_client import FakeEngine
from test_verifiers import free_port

from lookahead_reasoning.cli import build_parser, main
from lookahead_reasoning.engine_cli import OVER_ENGINE

COMMANDS = ("lr", "generate", "bench", "pairs")


class Loaded(Exception):
    """Raised where a model would load (not a tokenizer: a chat template is read before connecting): the
    command got past every check."""


@pytest.fixture()
def no_loading(monkeypatch):
    import transformers

    def refuse(*args, **kwargs):
        raise Loaded()

    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModel):  # a tokenizer (a template) may load
        monkeypatch.setattr(cls, "from_pretrained", refuse)
    import lookahead_reasoning.runtime.pair as pair

    monkeypatch.setattr(pair, "load_model", refuse)


@pytest.fixture()
def files(tmp_path):
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                            for i in range(3)))
    return {"data": str(data), "out": str(tmp_path / "out.jsonl"), "html": str(tmp_path / "trace.html")}


def options(command: str) -> dict[str, tuple[str, object]]:
    parser = build_parser()
    return parser._subparsers._group_actions[0].choices[command].get_default("option_flags")


# A value other than the default for every option (flags: given alone), and what it needs beside it.
SAMPLES = {
    "target": ["other-target"], "draft": ["other-draft"], "draft_quantize": ["none"], "dtype": ["fp32"],
    "device": ["cpu"], "precision": ["float32"], "cpu_linear": ["default"], "fast_path": ["off"], "mode": ["lr"],
    "k": ["1"], "width": ["2", "--mode", "lr"], "gamma": ["5"], "draft_stop_below": ["0.3"],
    "token_sd_target": ["ngram", "--mode", "lr-sd"], "token_sd_draft": ["none"], "delimiter": ["\n"], "max_step_tokens": ["50"],
    "temperature": ["0.5"], "top_k": ["5"], "top_p": ["0.9"], "reprofile": [], "verifier": ["likelihood"],
    "threshold": ["0.5", "--verifier", "likelihood"], "judge_model": ["some-judge", "--verifier", "paper-judge"],
    "judge_dtype": ["fp32", "--verifier", "paper-judge", "--judge-model", "some-judge"], "judge_url": ["http://127.0.0.1:9", "--verifier", "paper-judge"],
    "judge_name": ["j", "--verifier", "paper-judge", "--judge-url", "http://127.0.0.1:9"],
    "judge_timeout": ["5", "--verifier", "paper-judge", "--judge-url", "http://127.0.0.1:9"],
    "prompt": ["Hi"], "dataset": ["{data}"], "index": ["1"], "raw": [], "max_new_tokens": ["16"], "seed": ["3"],
    "no_compare": [], "no_warmup": [], "details": [], "color": [], "html": ["{html}"],
    "target_model": ["m"], "draft_model": ["m"], "template": ["qwen2.5-coder-1.5b"], "engine_timeout": ["5"],
    "scorer": ["http://127.0.0.1:9"], "sd_url": ["http://127.0.0.1:9"], "ngram_url": ["http://127.0.0.1:9"],
    "concurrency": ["2"], "schedule": ["async", "--mode", "lr"], "target_url": None, "draft_url": ["http://127.0.0.1:9"],
    "out": ["{out}"], "modes": ["ar"], "limit": ["1"], "offset": ["1"], "sample": ["1"], "samples": ["2"],
    "on_error": ["skip"], "no_progress": [], "report": [], "model": ["other-model"], "no_target_sd": [],
}
BASE = {"lr": [], "generate": [], "bench": ["--dataset", "{data}", "--out", "{out}", "--modes", "ar"],
        "pairs": ["--dataset", "{data}", "--out", "{out}"]}


PER_COMMAND = {("bench", "width"): ["2"], ("bench", "token_sd_target"): ["ngram"]}  # bench has no --mode


def argv(command: str, flag: str, dest: str, files: dict, engine: str | None) -> list[str]:
    sample = PER_COMMAND.get((command, dest), SAMPLES[dest])
    given = [flag, *sample] if sample else [flag]
    base = [a.format(**files) for a in BASE[command]]
    if dest in ("dataset", "out", "modes") and command in ("bench", "pairs"):  # given by the sample instead
        base = [a.format(**files) for a in BASE[command]]
        i = base.index(flag)
        del base[i:i + 2]
    if engine is not None:
        base += ["--target-url", engine] + (["--draft-url", engine] if command in ("lr", "bench", "pairs") else [])
    return [command, *base, *[a.format(**files) for a in given]]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_with_an_engine_target_is_honoured_or_refused_by_name(command, files, no_loading, capsys,
                                                                          monkeypatch):
    import lookahead_reasoning.runtime.engine.client as client

    monkeypatch.setattr(client, "pause", lambda *args: 0.0)  # a refused connection is retried: without waiting
    dead = f"http://127.0.0.1:{free_port()}"
    walked = []
    for dest, (flag, default) in options(command).items():
        if dest in ("target_url", "draft_url"):
            continue  # the URLs themselves
        assert dest in SAMPLES, f"{command} {flag}: no sample value in SAMPLES (a new option: add one)"
        line = argv(command, flag, dest, files, dead)
        try:
            code = main(line)
        except Loaded:
            pytest.fail(f"{' '.join(line)}: a model loaded with an engine target")
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("error: ") and "\n" not in err, (line, code, err)
        if dest in OVER_ENGINE[command]:
            assert "cannot connect to the engine at http://127.0.0.1:" in err, (line, err)
        else:
            assert flag in err and "cannot connect" not in err, (line, err)
        walked.append(flag)
    assert len(walked) >= 10


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_with_a_local_target_is_honoured_or_refused_by_name(command, files, no_loading, capsys):
    engine_only = set(build_parser()._subparsers._group_actions[0].choices[command].get_default("engine_options"))
    for dest, (flag, default) in options(command).items():
        if dest in ("target_url",):
            continue
        line = argv(command, flag, dest, files, None)
        if dest in engine_only:
            assert main(line) == 2, line
            err = capsys.readouterr().err.strip()
            assert flag in err and "--target-url" in err, (line, err)
            continue
        try:  # a model load was reached: stopped here, or the hub asked for a name that is not offline
            code = main(line)
        except Loaded:
            continue
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("error: could not load "), (line, code, err)


def test_what_the_engine_run_honours_reaches_its_requests(capsys):
    """Sampling, steps, seed and width given to ``lr --target-url`` are in the requests the engine receives."""
    with FakeEngine(text="So 2 + 2 = 4, and the answer is \\boxed{4}.") as engine:
        code = main(["lr", "--target-url", engine.url, "--draft-url", engine.url, "--mode", "lr", "-k", "1",
                     "--width", "2", "--temperature", "0.5", "--top-k", "7", "--top-p", "0.9", "--seed", "11",
                     "--delimiter", "\n", "--max-step-tokens", "9", "--prompt", "What is 2 + 2?",
                     "--max-new-tokens", "30", "--no-compare", "--no-warmup"])
        requests = list(engine.requests)
    assert code == 0, capsys.readouterr().err
    steps = [r for r in requests if r.get("stop")]
    assert steps and all(r["stop"] == ["\n"] and r["max_tokens"] <= 9 for r in steps)
    assert all(r["temperature"] == 0.5 and r["top_k"] == 7 and r["top_p"] == 0.9 for r in steps)
    assert any(r.get("seed") is not None for r in steps)
    assert len(steps) >= 3  # a drafted step, its alternative (width 2), the target's row


# LookaheadGenerator's keywords: a value other than the default for each, and whether an engine target honours it
KEYWORDS = {
    "k": (1, True), "gamma": (5, False), "width": (2, True), "alt_temperature": (0.9, True),
    "draft_stop_below": (0.3, False), "max_new_tokens": (16, True), "seed": (3, True), "schedule": ("async", True),
    "timeout_s": (5.0, True), "retries": (0, True), "verifier_kwargs": ({"threshold": 0.5}, True),
    "planner": ("PlannerConfig", False), "fast_path": ("off", False), "precision": ("int8", False),
    "dtype": ("fp32", False), "device": ("cpu", False), "cpu_linear": ("default", False),
    "attn_implementation": ("eager", False), "mode": ("sd", False), "steps": ("StepConfig", True),
    "sampling": ("SamplingConfig", True), "token_sd": ("TokenSD", False), "template": ("qwen2.5-coder-1.5b", True),
    "target_model": ("m", True), "draft_model": ("m", True), "scorer": ("http://127.0.0.1:9", True),
    "device_map": ("auto", False), "trust_remote_code": (True, False),
}


def _value(name: str):
    from lookahead_reasoning import SamplingConfig, StepConfig
    from lookahead_reasoning.planning import PlannerConfig
    from lookahead_reasoning.settings import TokenSD

    value = KEYWORDS[name][0]
    made = {"PlannerConfig": PlannerConfig(max_k=1), "StepConfig": StepConfig(("\n",), 9),
            "SamplingConfig": SamplingConfig(temperature=0.5), "TokenSD": TokenSD(target="ngram")}
    return made.get(value, value) if isinstance(value, str) else value


def _keywords() -> list[str]:
    import dataclasses
    import inspect

    from lookahead_reasoning import LookaheadGenerator, Settings
    from lookahead_reasoning.generator import _OWN_OPTIONS, LOAD_OPTION_NAMES

    params = [p for p in inspect.signature(LookaheadGenerator).parameters if p not in ("target", "draft", "options",
                                                                                         "verifier", "settings")]
    fields = [f.name for f in dataclasses.fields(Settings)]
    return sorted({*params, *fields, *_OWN_OPTIONS, *LOAD_OPTION_NAMES} - {"cache_dir", "local_files_only"})


def test_every_generator_keyword_is_honoured_or_refused_by_name(no_loading, monkeypatch):
    """The Python API's own walk: each keyword of ``LookaheadGenerator`` with an engine target (nothing
    listening) and with a model name of this process."""
    import lookahead_reasoning.runtime.engine.client as client
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.errors import ConfigError, EngineError, ModelLoadError

    monkeypatch.setattr(client, "pause", lambda *args: 0.0)
    dead = f"http://127.0.0.1:{free_port()}"
    walked = _keywords()
    missing = [name for name in walked if name not in KEYWORDS]
    assert not missing, f"keywords without a sample value: {missing}"
    local_only_for_engine = {"template", "target_model", "draft_model", "scorer", "timeout_s", "retries", "schedule"}
    for name in walked:
        value, over_engine = KEYWORDS[name][0], KEYWORDS[name][1]
        extra = {"mode": "lr"} if name in ("width", "schedule", "token_sd") else {}
        if name == "verifier_kwargs":
            extra = {"verifier": "likelihood"}
        kwargs = {name: _value(name), **extra} if name != "mode" else {"mode": value}
        if over_engine:
            with pytest.raises(EngineError, match="cannot connect"):
                LookaheadGenerator(target=dead, draft=dead, **kwargs)
        else:
            with pytest.raises(ConfigError, match=name.replace("_", "[_ ]") if name != "mode" else "mode sd"):
                LookaheadGenerator(target=dead, draft=dead, **kwargs)
        if name in local_only_for_engine:
            with pytest.raises(ConfigError, match=name if name != "schedule" else "async"):
                LookaheadGenerator(target="qwen2.5-coder-1.5b", **kwargs)
        else:
            with pytest.raises((Loaded, ModelLoadError)):
                LookaheadGenerator(target="qwen2.5-coder-1.5b", **kwargs)
