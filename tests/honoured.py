"""Where each option of every entry shows that it was honoured, for the bad-input generator: a predicate per
option name (``HONOURED``), given the value the entry received and what the case resolved to at its sentinel
(:class:`bad_inputs.View`), and the plans the loop would run for it (:func:`plans`, from the library's own
``mode_plan``). An option without a predicate fails the generator when it is accepted:
a new option is held to the promise the day it is added.

Options read only after the models load (the trace's output, the run's seed, its budget) are seen in the parsed
options the command received: the sentinels stand where the models would load, and nothing runs after them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from bad_inputs import View

from lookahead_reasoning.bench.datasets import load_jsonl
from lookahead_reasoning.decoding.driver import FIXED_MODES, mode_plan
from lookahead_reasoning.options import DRAFT_PRECISION
from lookahead_reasoning.planning import PlannerConfig
from lookahead_reasoning.planning.auto import auto_token_sd
from lookahead_reasoning.presets import MODE_READS, STEP_MODES, no_model
from lookahead_reasoning.prompts import math_messages
from lookahead_reasoning.settings import Settings
from lookahead_reasoning.verifiers.options import VerifierSettings


@dataclass
class Plan:
    """One mode as the loop would run it: its settings and its fixed policy (None: mode auto, planned per cycle)."""

    mode: str
    settings: Settings
    policy: Any
    engine: bool


def plans(view: View) -> list[Plan]:
    """The plans a case would run: the generator's mode (a benchmark: each of its modes), or the loop's own
    arguments where the case reached the loop."""
    if view.what == "loop":  # prepare(pair, ids, verifier, settings, policy, ...), or auto's planning
        args = view.reached.detail[0]
        if len(args) >= 5:
            return [Plan(args[4].mode, args[3], args[4], False)]
        return [Plan("auto", view.local("settings", "_generate_auto"), None, False)]
    runtime = view.local("settings", "generate")
    if view.what == "request" and isinstance(runtime, Settings):  # generate() over an engine: its call
        mode = view.local("mode", "generate")
        return [Plan(mode, runtime, engine_plan(mode, runtime, view.local("k", "generate")), True)]
    gen, engine = view.gen, view.what == "request"
    settings = gen.settings if gen is not None else view.find(Settings)
    config = view.local("config", "run_bench") or view.local("bench", "run_bench_over_engine")
    modes = [m.split("@")[0].removesuffix("-async") for m in config.modes] if config else [gen.mode if gen else "ar"]
    over_engine = {"sd": "ar", "ngram": "ar", "lr-sd": "lr"}  # the engine's own SD is a plain request here
    return [plan_of(over_engine.get(mode, mode) if engine else mode, settings, gen.settings.k if gen is not None else None,
                    engine) for mode in modes]


def engine_plan(mode: str, settings: Settings, k: int | None) -> Any:
    return mode_plan(mode, settings.with_overrides(k=k), engine=True)[1]


def plan_of(mode: str, settings: Settings, k: int | None, engine: bool) -> Plan:
    if engine:
        return Plan(mode, settings, engine_plan(mode, settings, k), True)
    if mode in FIXED_MODES:
        resolved, policy = mode_plan(mode, settings)
        return Plan(mode, resolved, policy, False)
    if mode == "auto":
        return Plan(mode, replace(settings, token_sd=auto_token_sd(settings.token_sd, PlannerConfig())), None, False)
    return Plan(mode, settings, None, False)  # the benchmark's peers (hf-*): transformers' own loop


def any_plan(check: Callable[[Plan], bool]) -> Callable[[Any, View], bool]:
    return lambda value, view: any(check(p, value) for p in plans(view))


def _k(p: Plan, v: Any) -> bool:
    return p.policy.k == v if p.policy is not None and p.policy.k else p.mode == "auto" and p.settings.k == v


def _gamma(p: Plan, v: Any) -> bool:
    if p.mode == "lr-sd":
        return p.settings.token_sd.gamma == v
    return p.mode in ("sd", "sd-ngram") and p.policy.gamma == v or p.mode.startswith("hf-") and p.settings.gamma == v


def _stop(p: Plan, v: Any) -> bool:
    drafts_rows = p.mode == "sd" or (p.mode in ("lr-sd", "auto") and p.settings.token_sd.target == "draft")
    given = p.policy.every.draft_stop_below if p.policy is not None else p.settings.draft_stop_below
    if v in (None, 0):  # off: honoured where nothing stops the draft
        return not drafts_rows or given in (None, 0)
    return drafts_rows and given == v


def _steps(field: str) -> Callable[[Plan, Any], bool]:
    def check(p: Plan, v: Any) -> bool:
        want = tuple(v) if field == "delimiters" else v
        return p.mode in STEP_MODES and getattr(p.settings.steps, field) == want
    return check


def _token_sd(field: str) -> Callable[[Plan, Any], bool]:
    def check(p: Plan, v: Any) -> bool:
        token_sd = auto_token_sd(p.settings.token_sd, PlannerConfig()) if p.mode == "auto" else p.settings.token_sd
        return p.mode in ("lr-sd", "auto") and getattr(token_sd, field) == (None if v == "none" else v)
    return check


def _sampling(field: str) -> Callable[[Any, View], bool]:
    def check(value: Any, view: View) -> bool:
        got = getattr(plans(view)[0].settings.sampling, field)
        return got == value or (isinstance(value, float) and math.isclose(got, value))
    return check


def _verifier(field: str) -> Callable[[Any, View], bool]:
    """A verifier option: in the verifier's settings the run holds (the generator's, a benchmark's), with a mode
    that verifies steps."""
    def check(value: Any, view: View) -> bool:
        held = [view.gen_local("verifier"), getattr(_bench_config(view), "verifier", None)]
        return any(p.mode in STEP_MODES for p in plans(view)) and any(
            isinstance(v, VerifierSettings) and getattr(v, field) == value for v in held)
    return check


def _loaded(name: str) -> Callable[[Any, View], bool]:
    return lambda value, view: view.loaded[1].get(name, "auto" if name == "cpu_linear" else None) == value


def _parsed(dest: str) -> Callable[[Any, View], bool]:
    """Read after the models load: the command received it."""
    return lambda value, view: view.args is not None and getattr(view.args, dest) == value


def _prompt(value: Any, view: View) -> bool:
    """--prompt, --dataset, --index, --raw: the question the command resolved before loading (its ``prompt``)."""
    args, prompt = view.args, view.local("prompt")
    if args.prompt is not None:
        return prompt == args.prompt
    question = load_jsonl(args.dataset or "gsm8k-mini")[args.index or 0].question
    return prompt == (question if args.raw else math_messages(question))


def _engine_name(name: str) -> Callable[[Any, View], bool]:
    return lambda value, view: (view.local("names", "__init__") or view.local("own", "__init__") or {}).get(name) == value


def _request_to(value: Any, view: View) -> bool:
    return view.what == "request" and str(view.reached.detail[0][1].url).startswith(str(value).rstrip("/"))


def _bench_config(view: View) -> Any:
    return view.local("config", "run_bench") or view.local("bench", "run_bench_over_engine")


def _bench(field: str) -> Callable[[Any, View], bool]:
    return lambda value, view: getattr(_bench_config(view), field, None) == value


HONOURED: dict[str, Callable[[Any, View], bool]] = {
    "mode": lambda value, view: plans(view)[0].mode == value,
    "k": any_plan(_k),
    "gamma": any_plan(_gamma),
    "width": any_plan(lambda p, v: p.policy is not None and p.policy.every.width == v),
    "draft_stop_below": any_plan(_stop),
    "token_sd_target": any_plan(_token_sd("target")),
    "token_sd_draft": any_plan(_token_sd("draft")),
    "delimiter": any_plan(_steps("delimiters")),
    "max_step_tokens": any_plan(_steps("max_step_tokens")),
    "schedule": any_plan(lambda p, v: p.policy is not None and p.policy.every.schedule == v),
    "temperature": _sampling("temperature"),
    "top_k": _sampling("top_k"),
    "top_p": _sampling("top_p"),
    "verifier": _verifier("name"),
    **{name: _verifier(name) for name in ("threshold", "judge_model", "judge_dtype", "judge_url", "judge_name",
                                          "judge_timeout")},
    "reprofile": lambda value, view: view.gen.mode == "auto" and view.gen.planner.reprofile == value,
    "target": lambda value, view: view.loaded[0][:1] == (value,),
    "model": lambda value, view: view.loaded[0][:1] == (value,),
    "draft": lambda value, view: view.gen_local("draft") == value and any(
        "draft" in MODE_READS[p.mode] for p in plans(view)),
    "draft_quantize": lambda value, view: (view.gen_local("precision") or {}).get("draft") == DRAFT_PRECISION[
        None if value == "none" else value],
    "dtype": _loaded("dtype"),
    "device": _loaded("device"),
    "cpu_linear": _loaded("cpu_linear"),
    "precision": _loaded("precision"),
    "fast_path": lambda value, view: view.gen.fast_path == value,
    "prompt": _prompt, "dataset": _prompt, "index": _prompt, "raw": _prompt,
    **{dest: _parsed(dest) for dest in ("max_new_tokens", "seed", "no_compare", "no_warmup", "details", "color",
                                        "verbose", "no_progress", "report", "build_only")},
    "html": lambda value, view: Path(value).is_file(),  # checked writable (made) before any model loads
    "target_url": _request_to,
    "draft_url": lambda value, view: view.gen_local("draft", view.local("draft", "__init__")) == value,
    "target_model": _engine_name("target_model"),
    "draft_model": _engine_name("draft_model"),
    "template": _engine_name("template"),
    "scorer": _engine_name("scorer"),
    "engine_timeout": lambda value, view: plans(view)[0].settings.timeout_s == value,
}

# The same option name read elsewhere by another command: (command, name) -> its predicate.
PER_COMMAND: dict[tuple[str, str], Callable[[Any, View], bool]] = {
    **{("bench", name): _bench(name) for name in ("out", "limit", "offset", "sample", "samples", "on_error",
                                                   "max_new_tokens", "concurrency")},
    ("bench", "seed"): lambda value, view: getattr(_bench_config(view), "seed", plans(view)[0].settings.seed) == value,
    ("bench", "dataset"): _bench("dataset"),
    ("bench", "modes"): lambda value, view: tuple(_bench_config(view).modes) == tuple(
        m.strip() for m in value.split(",") if m.strip()),
    ("bench", "sd_url"): _bench("sd"),
    ("bench", "ngram_url"): _bench("ngram"),
    ("generate", "max_new_tokens"): lambda value, view: _parsed("max_new_tokens")(value, view) or
    plans(view)[0].settings.max_new_tokens == value,
    ("generate", "seed"): lambda value, view: _parsed("seed")(value, view),
}


def _servers(check: Callable[[dict, Any], bool]) -> Callable[[Any, View], bool]:
    return lambda value, view: check(view.local("servers", "_prepare"), value)


def _llama(servers: dict, field: str, value: Any) -> bool:
    """A llama.cpp-only setting: every llama.cpp server has it, and there is one."""
    llama = [s for s in servers.values() if s.config.engine == "llama.cpp"]
    return bool(llama) and all(getattr(s.config, field) == value for s in llama)


def _task(value: Any, view: View) -> bool:
    """``eval``'s --gsm8k, --gsm8k-offset and --gsm8k-limit: the problems in the task folder the harness gets."""
    ours, folder = view.local("ours", "main"), view.local("folder", "main")
    lines = [line for line in Path(ours.gsm8k).read_text(encoding="utf-8").splitlines() if line.strip()]
    end = None if ours.gsm8k_limit is None else ours.gsm8k_offset + ours.gsm8k_limit
    return (Path(folder) / "problems.jsonl").read_text(encoding="utf-8").splitlines() == lines[ours.gsm8k_offset:end]


def _any_verifier_settings(field: str) -> Callable[[Any, View], bool]:
    """A verifier option of the ``verifiers`` command: in the settings of some entry (loaded, or judging)."""
    def check(value: Any, view: View) -> bool:
        found = [v for _, local in view.reached.frames for v in local.values() if isinstance(v, VerifierSettings)]
        found += [v for _, local in view.reached.frames for d in local.values() if isinstance(d, dict)
                  for v in d.values() if isinstance(v, VerifierSettings)]
        return any(getattr(v, field) == value for v in found)
    return check


PER_COMMAND.update({
    ("pairs", "dataset"): lambda value, view: view.local("dataset", "run_pairs") == value,
    ("pairs", "offset"): lambda value, view: view.local("offset", "run_pairs") == value,
    ("pairs", "limit"): lambda value, view: view.local("limit", "run_pairs") == value,
    ("pairs", "out"): lambda value, view: view.local("path", "run_pairs") == Path(value),
    ("pairs", "gamma"): lambda value, view: (view.gen.settings.token_sd.target, view.gen.settings.token_sd.gamma) == (
        "draft", value),
    ("pairs", "no_target_sd"): lambda value, view: (view.gen.settings.token_sd.target is None) == value,
    **{("flips", name): _parsed(name) for name in ("pairs", "out", "sample", "seed", "max_new_tokens")},
    ("score-pairs", "pairs"): _parsed("pairs"),
    ("score-pairs", "out"): lambda value, view: Path(value).is_file(),
    **{("verifiers", name): _parsed(name) for name in ("pairs", "verifiers", "limit", "flips")},
    ("verifiers", "out"): lambda value, view: view.what != "done" or Path(value).is_file(),
    **{("verifiers", name): _any_verifier_settings(name) for name in ("judge_model", "judge_dtype", "judge_url",
                                                                      "judge_name", "judge_timeout")},
    ("report", "results"): lambda value, view: view.what == "done" and "|" in view.outcome.out,
    ("report", "no_plots"): lambda value, view: view.what == "done" and "plot:" not in view.outcome.out,
    ("report", "plots"): lambda value, view: Path(value).is_dir(),
    ("serve-engine", "engine"): _servers(lambda servers, value: servers["target"].config.engine == value),
    ("serve-engine", "draft_engine"): _servers(lambda servers, value: servers["draft"].config.engine == value),
    ("serve-engine", "target"): _servers(lambda servers, value: servers["target"].config.model == value),
    ("serve-engine", "draft"): _servers(lambda servers, value: "draft" not in servers if no_model(value) else
                                        servers["draft"].config.model == value),
    ("serve-engine", "with_sd"): _servers(lambda servers, value: ({"sd", "ngram"} <= set(servers)) == value),
    ("serve-engine", "parallel"): _servers(lambda servers, value: _llama(servers, "parallel", value)),
    ("serve-engine", "no_prompt_cache"): _servers(lambda servers, value: _llama(servers, "cache_prompt", not value)),
    ("serve-engine", "context"): _servers(lambda servers, value: all(s.config.context == value for s in servers.values())),
    ("serve-engine", "threads"): _servers(lambda servers, value: all(s.config.threads == value for s in servers.values())),
    ("serve-engine", "port"): _servers(lambda servers, value: servers["target"].config.port == value),
    **{("eval", name): _task for name in ("gsm8k", "gsm8k_offset", "gsm8k_limit")},
})


def honoured(command: str, name: str) -> Callable[[Any, View], bool] | None:
    """The predicate of option ``name`` of ``command`` (None: there is none yet)."""
    return PER_COMMAND.get((command, name), HONOURED.get(name))
