"""The bad-input generator over the Python entries (``tests/test_bad_inputs.py`` does the commands):
``LookaheadGenerator(...)``'s keywords, ``generate(...)``'s, the lm-evaluation-harness model's ``model_args``,
transformers' ``custom_generate`` keywords and the engine servers' ``ServerConfig``; each keyword drawn with values
of every kind (out of range, of the wrong type, empty, None, at the boundary, a name of nothing), with the mode and
a target of this process or an engine's URL. A case is refused with a typed exception (a LookaheadError) whose
message names a keyword it gave, or accepted with every keyword it gave seen where the loop reads it; never another
exception, never a load or a request before the refusal.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import traceback

import pytest
import torch
from bad_inputs import Outcome, View, run_call, sentinels
from conftest import tiny_lm
from honoured import HONOURED, plans
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from lr_helpers import exact
from test_engine_client import FakeEngine

from lookahead_reasoning import LookaheadGenerator, SamplingConfig, Settings, StepConfig
from lookahead_reasoning.engine_runtime import ENGINE_MODES
from lookahead_reasoning.generator import _OWN_OPTIONS, LOAD_OPTION_NAMES
from lookahead_reasoning.integrations import harness, hf_generate
from lookahead_reasoning.options import option_defaults
from lookahead_reasoning.planning import PlannerConfig
from lookahead_reasoning.planning.auto import auto_token_sd
from lookahead_reasoning.presets import LR_SD_TOKEN_SD, MODES, STEP_MODES
from lookahead_reasoning.runtime.engine.process import ENGINES, ServerConfig
from lookahead_reasoning.settings import TokenSD
from lookahead_reasoning.verifiers.options import VerifierSettings

# A fixed seed, a few examples an option and no shrinking: a failure reports the case as drawn, at once
EXAMPLES = settings(max_examples=5, derandomize=True, deadline=None, database=None, phases=(Phase.generate,),
                    report_multiple_bugs=False, suppress_health_check=list(HealthCheck))
TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
PRESET = Settings.preset(token_sd=TokenSD(**LR_SD_TOKEN_SD))
DEFAULTS = {**{f.name: getattr(PRESET, f.name) for f in dataclasses.fields(Settings)},
            **{name: p.default for name, p in inspect.signature(LookaheadGenerator).parameters.items()}}


@pytest.fixture(scope="module")
def engine():
    with FakeEngine() as fake:
        yield fake


# ---------------------------------------------------------------------------------------- values of every kind

INTS = {"out_of_range": [-1, 10 ** 12], "boundary": [0, 1, 2], "wrong_type": [1.5, "3", True], "none": [None]}
FLOATS = {"out_of_range": [-1.0, 1e12, math.nan, math.inf], "boundary": [0, 0.5, 1.0], "wrong_type": ["0.5", True],
          "none": [None]}
TEXTS = {"empty": ["", " "], "none": ["none", None], "wrong_type": [3, 1.5, ["x"]], "bogus": ["no-such-thing"]}
OBJECTS = {  # the keywords that take an object: valid ones and wrong ones
    "steps": [StepConfig(("\n",), 9), "\n", {"delimiters": ("\n",)}],
    "sampling": [SamplingConfig(temperature=0.5), SamplingConfig(0.7, 5, 0.9), 0.5, {"temperature": 0.5}],
    "token_sd": [TokenSD(target="ngram"), TokenSD(target=None), TokenSD(target="draft", gamma=3), "ngram", {}],
    "planner": [PlannerConfig(max_k=1), PlannerConfig(reprofile=True), {}, "auto"],
    "settings": [Settings(k=2), Settings(gamma=5, width=2), {}, "x"],
    "verifier_kwargs": [{"threshold": 0.5}, {"bogus": 1}, "x"],
    "precision": ["int8", {"target": "int8"}, {"draft": "bogus"}, 3, "bogus"],
    "verifier": ["exact", "likelihood", "bogus", 3, VerifierSettings(name="embedding")],
    "mode": [*MODES, "bogus", 3, None],
    "fast_path": ["off", "eager", "bogus", 3],
    "schedule": ["sync", "async", "bogus", 3],
    "on_text": [print, "x"],
    "raw": [True, False, "yes"],
    "learn": [True, False, "no"],
}
INT_KEYS = {"k", "gamma", "width", "max_new_tokens", "seed", "retries", "max_gen_toks", "batch_size",
            "max_batch_size", "max_step_tokens", "context", "threads", "spec_tokens", "port", "parallel", "block_size",
            "kv_cache_gib", "max_length", "top_k", "num_beams", "num_return_sequences", "pad_token_id", "eos_token_id"}
FLOAT_KEYS = {"alt_temperature", "draft_stop_below", "timeout_s", "threshold", "judge_timeout", "temperature", "top_p"}


def kinds_of(name: str) -> dict[str, list]:
    if name in OBJECTS:
        return {"valid": OBJECTS[name][:2], "other": OBJECTS[name][2:]}
    return INTS if name in INT_KEYS else FLOATS if name in FLOAT_KEYS else TEXTS


def draw(data: st.DataObject, name: str):
    kinds = kinds_of(name)
    kind = data.draw(st.sampled_from(sorted(k for k in kinds if kinds[k])), label="kind")
    return data.draw(st.sampled_from(kinds[kind]), label="value")


def judge(outcome: Outcome, case: str, names: list[str], check, given: dict | None = None) -> None:
    """Refused with a typed exception naming a keyword given, or accepted and every keyword honoured (``check``);
    a keyword given None (the default, or the mode's preset) or its default asks for nothing to honour."""
    assert outcome.crash is None, f"{case}: not a typed refusal:\n" + "".join(traceback.format_exception(outcome.crash))
    if outcome.reached is None and outcome.code != 0:
        spelled = [n for n in names if n in outcome.error or n.replace("_", " ") in outcome.error]
        assert spelled, f"{case}: the refusal names no keyword it was given: {outcome.error!r}"
        return
    assert outcome.reached is not None, f"{case}: ran to its end without reaching the loop"
    view = View(outcome.reached)
    for name in names:
        if given is not None and (given[name] is None and name not in ("draft_stop_below", "seed")
                                  or name in DEFAULTS and _same(given[name], DEFAULTS[name])):
            continue
        assert check(name, view), f"{case}: {name} was accepted and not honoured (a silent drop)"


# ---------------------------------------------------------------------------------------- LookaheadGenerator(...)

def generator_keywords() -> list[str]:
    params = [p for p in inspect.signature(LookaheadGenerator).parameters if p not in ("target", "options")]
    fields = [f.name for f in dataclasses.fields(Settings)]
    return sorted({*params, *fields, *_OWN_OPTIONS, *LOAD_OPTION_NAMES})


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b))


def _plan_has(field: str):
    def check(value, view) -> bool:
        return any(_same(getattr(p.settings, field), value) for p in plans(view))
    return check


def _token_sd(value, view) -> bool:
    p = plans(view)[0]
    if p.mode == "auto":
        return auto_token_sd(p.settings.token_sd, PlannerConfig()) == auto_token_sd(value, PlannerConfig())
    return p.mode == "lr-sd" and (p.settings.token_sd.target, p.settings.token_sd.draft) == (value.target, value.draft)


def _alt(value, view) -> bool:
    p = plans(view)[0]
    return _same(p.settings.alt_temperature, value) and p.settings.width > 1 and p.settings.sampling.greedy


def _verifier(value, view) -> bool:
    return plans(view)[0].mode in STEP_MODES and view.gen_local("verifier") is value


def _steps(value, view) -> bool:
    return plans(view)[0].mode in STEP_MODES and plans(view)[0].settings.steps == value


def _settings(value, view) -> bool:
    return view.gen.settings == dataclasses.replace(value, token_sd=value.token_sd or TokenSD(**LR_SD_TOKEN_SD))


PY_HONOURED = {
    "steps": _steps, "sampling": _plan_has("sampling"), "token_sd": _token_sd, "alt_temperature": _alt,
    "max_new_tokens": _plan_has("max_new_tokens"), "seed": _plan_has("seed"), "timeout_s": _plan_has("timeout_s"),
    "retries": _plan_has("retries"), "verifier": _verifier, "settings": _settings,
    "verifier_kwargs": lambda value, view: view.gen_local("own")["verifier_kwargs"] == value and
    plans(view)[0].mode in STEP_MODES,
    "planner": lambda value, view: view.gen.planner == value and view.gen.mode == "auto",
    "precision": lambda value, view: view.loaded[1].get("precision") == (value.get("target") if isinstance(value, dict)
                                                                        else value),
    "draft": lambda value, view: view.gen_local("draft") == value,
    **{name: (lambda name: lambda value, view: view.loaded[1].get(name) == value)(name)
       for name in LOAD_OPTION_NAMES if name not in ("dtype", "device", "cpu_linear", "precision")},
}


def py_check(name: str, value):
    check = PY_HONOURED.get(name) or HONOURED.get(name)
    assert check is not None, f"{name}: accepted, and no predicate shows it honoured: add one"
    return lambda _, view: check(value, view)


@pytest.mark.parametrize("name", generator_keywords())
@EXAMPLES
@given(data=st.data())
def test_every_keyword_of_the_generator(name, data, engine):
    target = data.draw(st.sampled_from(("local", "engine")), label="target")
    url = engine.url
    keywords = {"target": TARGET if target == "local" else url, "draft": DRAFT if target == "local" else url,
                "mode": data.draw(st.sampled_from(MODES if target == "local" else ENGINE_MODES), label="mode")}
    keywords[name] = draw(data, name)
    with sentinels():
        outcome = run_call(lambda: LookaheadGenerator(**keywords))
    given_ = [n for n in (name, "mode") if n in keywords]
    judge(outcome, f"LookaheadGenerator({keywords})", given_,
          lambda n, view: py_check(n, keywords[n])(n, view) if n != "mode" else plans(view)[0].mode == keywords[n],
          keywords)


# ---------------------------------------------------------------------------------------- generate(...)

GENERATE_KEYWORDS = sorted({"mode", "raw", "learn", "on_text", *(f.name for f in dataclasses.fields(Settings))})


@functools.cache
def tiny_generator(mode: str) -> LookaheadGenerator:
    verifier = {"verifier": exact()} if mode in STEP_MODES else {}  # a mode that verifies nothing takes none
    return LookaheadGenerator(target=tiny_lm("qwen2", 0), draft=tiny_lm("qwen2", 1), mode=mode, **verifier)


def _generate_check(name: str, value, gen: LookaheadGenerator):
    def check(n: str, view: View) -> bool:
        if n == "k" and plans(view)[0].mode == "auto":
            return view.local("max_k", "_generate_auto") == value
        if n == "raw":
            return view.local("raw") == value
        if n == "learn":
            return plans(view)[0].mode.removeprefix("engine-") != "auto" or view.local("learn") == value
        if n == "on_text":
            return view.local("on_text", "generate_cycles") is value or view.local("on_text", "generate") is value
        if n == "mode":
            return plans(view)[0].mode.removeprefix("engine-") == value
        return py_check(n, value)(n, view)
    return check


@pytest.mark.parametrize("name", GENERATE_KEYWORDS)
@EXAMPLES
@given(data=st.data())
def test_every_keyword_of_generate(name, data, engine):
    target = data.draw(st.sampled_from(("local", "engine")), label="target")
    mode = data.draw(st.sampled_from(MODES if target == "local" else ENGINE_MODES), label="mode")
    gen = tiny_generator(mode) if target == "local" else engine_generator(engine.url, mode)
    keywords = {name: draw(data, name)}
    with sentinels():
        outcome = run_call(lambda: gen.generate("What is 2 + 2?", **keywords))
    judge(outcome, f"{target} generator, mode {mode}: generate({keywords})", [name],
          _generate_check(name, keywords[name], gen), keywords)


@functools.cache
def engine_generator(url: str, mode: str) -> LookaheadGenerator:
    return LookaheadGenerator(target=url, draft=url, mode=mode)


# ---------------------------------------------------------------------------------------- the harness's model_args

MODEL_ARGS = sorted({*harness.LOADING_ARGS, *harness.DECODING_ARGS, *harness.VERIFIER_ARGS, *harness.HARNESS_OWN})
TEXT_VALUES = {"int": ["-1", "0", "2", "1.5", "x", "", "true"], "float": ["-1", "0", "0.3", "nan", "x", ""],
               "text": ["", "none", "None", "no-such-thing", "3", "fp32", "cpu", "ngram", "draft", "\n"]}


@pytest.mark.parametrize("name", MODEL_ARGS)
@EXAMPLES
@given(data=st.data())
def test_every_model_arg_of_the_harness(name, data):
    simple_parse_args_string = pytest.importorskip("lm_eval.utils").simple_parse_args_string  # the eval extra

    family = "int" if name in INT_KEYS else "float" if name in FLOAT_KEYS else "text"
    value = data.draw(st.sampled_from(TEXT_VALUES[family]), label="value")
    args = {"mode": data.draw(st.sampled_from(MODES), label="mode"), name: value}
    line = ",".join(f"{k}={v}" for k, v in args.items())
    parsed = simple_parse_args_string(line)
    with sentinels():
        outcome = run_call(lambda: harness.LookaheadLM.create_from_arg_string(line, {}))

    def check(n: str, view: View) -> bool:
        v = parsed.get(n)
        if v == option_defaults().get(n, harness.HARNESS_OWN.get(n, object())):
            return True  # the option's default: nothing to honour
        if n in ("max_gen_toks",):
            return view.find(harness.LookaheadLM).max_gen_toks == v
        if n in ("batch_size", "max_batch_size"):
            return v in (1, "1", "auto", None) or (n == "max_batch_size" and isinstance(v, int) and v >= 1)
        if n == "draft" and (v is None or str(v).lower() == "none"):
            return all(p.mode in ("ar", "sd-ngram") for p in plans(view))
        if v is None:  # lm-eval's "none": the default
            return True
        if n == "delimiter":
            return HONOURED[n]((v,), view)
        return HONOURED[n](v, view)
    judge(outcome, f"model_args {line!r}", list(args), check)


# ---------------------------------------------------------------------------------------- custom_generate

CUSTOM_KEYWORDS = sorted({*hf_generate.OWN, *hf_generate.UNSUPPORTED, *hf_generate.PASSED_EMPTY, "max_new_tokens",
                          "do_sample", "temperature", "top_k", "top_p", "max_length", "return_dict_in_generate",
                          "assistant_tokenizer", "streamer"} - {"tokenizer"})


@functools.cache
def tiny_pair():
    target, draft = tiny_lm("qwen2", 0), tiny_lm("qwen2", 1)
    return target.model, draft.model, target.tokenizer


@pytest.mark.parametrize("name", CUSTOM_KEYWORDS)
@EXAMPLES
@given(data=st.data())
def test_every_keyword_of_custom_generate(name, data):
    model, draft, tokenizer = tiny_pair()
    mode = data.draw(st.sampled_from(MODES), label="mode")
    keywords = {"mode": mode, name: draw(data, name)}
    assistant = draft if data.draw(st.booleans(), label="assistant") else None
    ids = torch.tensor([[5, 6, 7]])
    with sentinels():
        outcome = run_call(lambda: hf_generate.generate(model, ids, None, assistant_model=assistant,
                                                        tokenizer=tokenizer, **keywords))

    def check(n: str, view: View) -> bool:
        v = keywords[n]
        if n == "mode":
            return plans(view)[0].mode == v
        if n in ("max_new_tokens",):
            return plans(view)[0].settings.max_new_tokens == v
        if n in ("max_length",):
            return plans(view)[0].settings.max_new_tokens == v - ids.shape[1]
        if n in ("do_sample", "temperature", "top_k", "top_p"):
            sampling = plans(view)[0].settings.sampling
            return (not sampling.greedy) == bool(keywords.get("do_sample")) if n == "do_sample" else \
                _same(getattr(sampling, n), v) or not keywords.get("do_sample")
        if n in hf_generate.UNSUPPORTED:
            return v == hf_generate.UNSUPPORTED[n] or v is None
        if n in hf_generate.PASSED_EMPTY:
            return not v or n in ("synced_gpus", "use_model_defaults")
        if n in ("return_dict_in_generate", "streamer", "assistant_tokenizer"):
            return True  # read after the loop: what generate returns, what it streams to
        return _generate_check(n, v, None)(n, view)
    judge(outcome, f"custom_generate({keywords}, assistant {assistant is not None})", list(keywords), check, keywords)


# ---------------------------------------------------------------------------------------- ServerConfig

SERVER_FIELDS = [f.name for f in dataclasses.fields(ServerConfig) if f.name != "model"]


@pytest.mark.parametrize("name", SERVER_FIELDS)
@EXAMPLES
@given(data=st.data())
def test_every_setting_of_an_engine_server(name, data, tmp_path_factory):
    engine = data.draw(st.sampled_from(ENGINES), label="engine")
    value = draw(data, name) if name != "engine" else data.draw(st.sampled_from([*ENGINES, "bogus", None]))
    keywords = {"engine": engine, name: value}
    outcome = run_call(lambda: ServerConfig("qwen2.5-coder-0.5b", **keywords))
    case = f"ServerConfig({keywords})"
    assert outcome.crash is None, f"{case}: not a typed refusal:\n" + "".join(traceback.format_exception(outcome.crash))
    if outcome.code != 0:
        assert name in outcome.error or "engine" in outcome.error, f"{case}: names nothing given: {outcome.error!r}"
        return
    config = ServerConfig("qwen2.5-coder-0.5b", **keywords)
    assert config.get(name) == value or value is None, f"{case}: {name} accepted and not kept"
