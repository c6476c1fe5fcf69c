"""Verifier options shared by the command lines: parsing, validation before any model is loaded,
building every verifier by name, and the light import of the verifiers' base types."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.presets import DEFAULT_VERIFIER
from lookahead_reasoning.testing import tiny_model
from lookahead_reasoning.verifiers import (CascadeVerifier, EmbeddingVerifier, ExactMatchVerifier, LLMJudgeVerifier,
                                           OpenAIJudgeVerifier, RandomVerifier, TargetScoreVerifier, VerifierSettings,
                                           add_verifier_args, build_verifier, check_verifier_settings,
                                           verifier_settings_from_args)
from lookahead_reasoning.verifiers import options as options_module

SRC = Path(__file__).resolve().parents[1] / "src"


def parse(*argv: str) -> VerifierSettings:
    parser = argparse.ArgumentParser()
    add_verifier_args(parser)
    return verifier_settings_from_args(parser.parse_args(list(argv)))


@pytest.fixture(scope="module")
def tiny_lm():
    loaded = tiny_model("qwen2", seed=6)
    return LM(loaded.model, loaded.tokenizer, name="tiny-target")


def test_arguments_become_settings():
    assert parse() == VerifierSettings()  # the library's default verifier with its own threshold
    assert parse().name == DEFAULT_VERIFIER  # the one default the API, lr and bench share
    s = parse("--verifier", "paper-judge", "--judge-url", "http://127.0.0.1:8000/v1", "--judge-name", "judge-7b",
              "--judge-timeout", "2.5", "--threshold", "0.7")
    assert s == VerifierSettings(name="paper-judge", threshold=0.7, judge_url="http://127.0.0.1:8000/v1",
                                 judge_name="judge-7b", judge_timeout=2.5)
    s = parse("--verifier", "judge", "--judge-model", "qwen2.5-coder-0.5b", "--judge-dtype", "bf16")
    assert (s.judge_model, s.judge_dtype) == ("qwen2.5-coder-0.5b", "bf16")
    assert check_verifier_settings(s) == ["judge"]
    # a parser without the options (an older command) still gives settings
    assert verifier_settings_from_args(argparse.Namespace(verifier="exact")) == VerifierSettings(name="exact")


@pytest.mark.parametrize("argv, message", [
    (["--verifier", "bleu"], "--verifier: unknown verifier 'bleu'"),
    (["--verifier", "cascade:exact"], "--verifier: a cascade is written"),
    (["--verifier", "judge", "--threshold", "1.5", "--judge-model", "m"], r"--threshold must be in \[0, 1\]"),
    (["--verifier", "paper-judge", "--threshold", "-0.1", "--judge-model", "m"], r"--threshold must be in \[0, 1\]"),
    (["--verifier", "embedding", "--threshold", "1.01"], r"--threshold must be in \[-1, 1\]"),
    (["--verifier", "embedding", "--threshold", "nan"], "--threshold must be a number"),
    (["--verifier", "random", "--threshold", "2"], r"--threshold must be in \[0, 1\]"),
    (["--verifier", "target-score", "--threshold", "10"], r"--threshold must be in \[0, 9\]"),
    (["--verifier", "target-score", "--threshold", "8.5"], r"--threshold must be an integer score in \[0, 9\]"),
    (["--verifier", "exact", "--threshold", "0.5"], "--threshold does not apply to the 'exact' verifier"),
    (["--verifier", "judge"], "--judge-model is required by the 'judge' verifier"),
    (["--verifier", "cascade:exact+judge"], "--judge-model is required"),
    (["--verifier", "openai-judge"], "--judge-url is required by the 'openai-judge' verifier"),
    (["--verifier", "paper-judge"], "needs a judge: --judge-model NAME .* or --judge-url URL"),
    (["--verifier", "paper-judge", "--judge-model", "m", "--judge-url", "http://h:1/v1"], "not both"),
    (["--verifier", "openai-judge", "--judge-url", "localhost:8000"], "--judge-url must be an http"),
    (["--verifier", "openai-judge", "--judge-url", "http://h:1/v1", "--judge-timeout", "0"],
     "--judge-timeout must be a number of seconds > 0"),
    (["--verifier", "openai-judge", "--judge-url", "http://h:1/v1", "--judge-timeout", "inf"], "--judge-timeout"),
    (["--verifier", "embedding", "--judge-model", "m"], "--judge-model is given, but the 'embedding' verifier"),
    (["--verifier", "judge", "--judge-model", "m", "--judge-url", "http://h:1/v1"], "--judge-url is given, but"),
    (["--verifier", "paper-judge", "--judge-model", "m", "--judge-name", "x"], "--judge-name only applies with"),
    (["--verifier", "judge", "--judge-model", "m", "--judge-timeout", "3"], "--judge-timeout only applies"),
    (["--verifier", "judge", "--judge-model", " "], "--judge-model is empty"),
])
def test_bad_settings_name_the_option(argv, message, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("validation must not load a model")
    monkeypatch.setattr(options_module, "load_judge", no_loading)
    settings = parse(*argv)
    with pytest.raises(ConfigError, match=message):
        check_verifier_settings(settings)
    with pytest.raises(ConfigError, match=message):
        build_verifier(settings)


def test_build_every_verifier_by_name(tiny_lm, monkeypatch):
    loaded = []

    def fake_load(settings, target_lm=None, device=None):
        loaded.append(settings.judge_model)
        return tiny_lm
    monkeypatch.setattr(options_module, "load_judge", fake_load)
    assert isinstance(build_verifier(parse("--verifier", "exact")), ExactMatchVerifier)
    v = build_verifier(parse("--verifier", "random", "--threshold", "0.25"))
    assert isinstance(v, RandomVerifier) and v.p_accept == 0.25
    judge = build_verifier(parse("--verifier", "judge", "--judge-model", "qwen2.5-coder-0.5b", "--threshold", "0.8"))
    assert isinstance(judge, LLMJudgeVerifier) and judge.threshold == 0.8 and judge.judge is tiny_lm
    assert loaded == ["qwen2.5-coder-0.5b"]
    paper = build_verifier(parse("--verifier", "paper-judge", "--judge-model", "x"))
    assert isinstance(paper, CascadeVerifier) and paper.then.rule == "top" and paper.then.prefill == "["
    remote = build_verifier(parse("--verifier", "paper-judge", "--judge-url", "http://127.0.0.1:9/v1",
                                  "--judge-name", "m", "--judge-timeout", "3"))
    assert isinstance(remote.then, OpenAIJudgeVerifier) and (remote.then.timeout, remote.then.model) == (3.0, "m")
    openai = build_verifier(parse("--verifier", "openai-judge", "--judge-url", "http://127.0.0.1:9/v1",
                                  "--judge-name", "m"))
    assert isinstance(openai, OpenAIJudgeVerifier) and openai.timeout == options_module.DEFAULT_JUDGE_TIMEOUT
    score = build_verifier(parse("--verifier", "target-score"), target_lm=tiny_lm)
    assert isinstance(score, TargetScoreVerifier) and score.threshold == 9
    assert build_verifier(parse("--verifier", "score", "--threshold", "7"), target_lm=tiny_lm).threshold == 7
    cascade = build_verifier(parse("--verifier", "cascade:exact+embedding", "--threshold", "0.9"))
    assert isinstance(cascade.then, EmbeddingVerifier) and cascade.then.threshold == 0.9 and cascade.then._model is None


def test_target_score_needs_the_target():
    with pytest.raises(ConfigError, match="pass target_lm="):
        build_verifier(parse("--verifier", "target-score"))


def test_judge_model_target_reuses_the_targets_weights(tiny_lm):
    judge = build_verifier(parse("--verifier", "judge", "--judge-model", "target"), target_lm=tiny_lm)
    assert judge.judge.model is tiny_lm.model and judge.judge is not tiny_lm  # counters of its own
    by_name = build_verifier(parse("--verifier", "paper-judge", "--judge-model", "tiny-target"), target_lm=tiny_lm)
    assert by_name.then.judge.model is tiny_lm.model
    with pytest.raises(ConfigError, match="needs the target model"):
        build_verifier(parse("--verifier", "judge", "--judge-model", "target"))


def test_base_types_import_without_heavy_packages():
    """verifiers.base (and the package's __init__) import no torch, sentence-transformers or urllib
    machinery: the parent package's own __init__ (which loads the decoding loops) is bypassed."""
    code = textwrap.dedent(f"""
        import sys, types
        blocked = ("torch", "transformers", "sentence_transformers", "urllib.request", "http.client")

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name in blocked or name.startswith(tuple(b + "." for b in blocked)):
                    raise ImportError("blocked: " + name)
                return None

        sys.meta_path.insert(0, Block())
        package = types.ModuleType("lookahead_reasoning")
        package.__path__ = [{str(SRC / "lookahead_reasoning")!r}]
        sys.modules["lookahead_reasoning"] = package
        from lookahead_reasoning.verifiers.base import Verdict, Verifier, BaseVerifier
        from lookahead_reasoning.verifiers import Verdict as Same, ExactMatchVerifier, step_numbers
        assert Same is Verdict and ExactMatchVerifier().verify([("A b", "ab")])[0].accepted
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "sentence_transformers")
                       or m in ("urllib.request", "http.client"))
        print("heavy:", heavy)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "heavy: []" in out.stdout
