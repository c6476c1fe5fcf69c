"""The command line builds the one Settings: ``generator_spec(args).settings`` is what the generator
runs, its defaults are the presets', and a bad number is refused once, naming its option."""

from __future__ import annotations

import pytest

from lookahead_reasoning import ConfigError, LookaheadGenerator, Settings, TokenSD
from lookahead_reasoning.cli import build_parser
from lookahead_reasoning.steps import StepConfig
from lookahead_reasoning.options import GeneratorSpec, decoding_settings, generator_spec
from lookahead_reasoning.presets import LR_SD_TOKEN_SD
from lookahead_reasoning.sampling import SamplingConfig

from conftest import tiny_lm
from lr_helpers import exact


def spec_of(*argv: str) -> GeneratorSpec:
    return generator_spec(build_parser().parse_args(["lr", *argv]))


def test_unset_options_give_the_presets_settings():
    assert spec_of().settings == Settings.preset(token_sd=TokenSD(**LR_SD_TOKEN_SD)) == GeneratorSpec().settings
    bench = generator_spec(build_parser().parse_args(["bench", "--dataset", "d.jsonl"]))
    assert bench.settings == spec_of().settings and bench.mode == "auto"


def test_given_options_land_in_the_one_settings():
    spec = spec_of("--mode", "lr-sd", "-k", "3", "--gamma", "5", "--width", "2", "--draft-stop-below", "0",
                   "--token-sd-target", "ngram", "--token-sd-draft", "none", "--delimiter", "\n", "--delimiter", ";",
                   "--max-step-tokens", "40", "--temperature", "0.5", "--top-k", "7", "--top-p", "0.9")
    assert spec.mode == "lr-sd"
    assert spec.settings == Settings(k=3, gamma=5, width=2, steps=StepConfig(("\n", ";"), 40),
                                     sampling=SamplingConfig(0.5, 7, 0.9), token_sd=TokenSD(target="ngram"),
                                     draft_stop_below=None)


def test_the_generator_runs_the_specs_settings_as_the_keywords_did():
    """``spec.build`` hands its Settings to the generator: the same settings the former field-by-field
    keywords made."""
    target, draft = tiny_lm("qwen2", 0), tiny_lm("qwen2", 1)
    spec = spec_of("--mode", "lr", "-k", "3", "--width", "2", "--temperature", "0.5", "--max-step-tokens", "40")
    gen = spec.build(target=target, draft=draft, verifier=exact())
    s = spec.settings
    by_keywords = LookaheadGenerator(target=target, draft=draft, verifier=exact(), mode="lr", k=s.k, width=s.width,
                                     gamma=s.gamma, steps=s.steps, token_sd=s.token_sd, sampling=s.sampling,
                                     draft_stop_below=s.draft_stop_below)
    assert gen.settings == by_keywords.settings == s and gen.mode == "lr"


@pytest.mark.parametrize("argv, message", [
    (["-k", "-1"], "-k (drafted steps per cycle) must be an integer >= 0, got -1"),
    (["--mode", "lr", "-k", "0"], "-k 0 drafts no step: --mode lr needs k >= 1 (k=0 is a cap for mode auto"),
    (["--gamma", "0"], "--gamma (drafted tokens per iteration) must be an integer >= 1, got 0"),
    (["--width", "0"], "--width (drafts per position) must be an integer >= 1, got 0"),
    (["--draft-stop-below", "1.5"], "--draft-stop-below "),
    (["--max-step-tokens", "0"], "--max-step-tokens must be an integer >= 1, got 0"),
    (["--delimiter", ""], "--delimiter must be non-empty strings"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--top-p", "0"], "--top-p must be in (0, 1], got 0"),
])
def test_a_bad_number_is_refused_when_the_spec_is_made_naming_its_option(argv, message):
    with pytest.raises(ConfigError) as refused:
        spec_of(*argv)
    assert str(refused.value).startswith(message), str(refused.value)
