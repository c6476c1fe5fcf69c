"""Verifier options shared by the command lines and the Python API.

    parser = argparse.ArgumentParser()
    add_verifier_args(parser)                       # --verifier --threshold --judge-model --judge-url ...
    args = parser.parse_args()
    settings = verifier_settings_from_args(args)
    check_verifier_settings(settings)               # before any model is loaded: fail fast
    ...                                             # load the target
    verifier = build_verifier(settings, target_lm=target)

``check_verifier_settings`` reads no file and loads no model; every problem it finds is a
:class:`~lookahead_reasoning.errors.ConfigError` naming the command-line option.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, VerifierError, require
from ..models import load_model
from ..presets import DEFAULT_TARGET, DEFAULT_VERIFIER
from ..runtime.lm import LM
from .registry import check_verifier_spec, make_verifier, stage_names

DEFAULT_JUDGE_TIMEOUT = 10.0
JUDGE_DTYPES = ("auto", "bf16", "bfloat16", "fp16", "float16", "fp32", "float32")
_JUDGES = {"judge", "paper-judge"}  # stages that can run a local judge model
_REMOTE = {"openai-judge", "paper-judge"}  # stages that can ask a server
# Threshold meaning per stage: (low, high, what it is); "random" maps it to p_accept.
_THRESHOLDS = {"embedding": (-1.0, 1.0, "a cosine"), "embedding-numbers": (-1.0, 1.0, "a cosine"),
               "judge": (0.0, 1.0, "a P(yes) share"), "openai-judge": (0.0, 1.0, "a P(yes) share"),
               "paper-judge": (0.0, 1.0, "a P(aligned) share"), "random": (0.0, 1.0, "an accept probability"),
               "target-score": (0, 9, "an integer score"),
               "likelihood": (0.0, 1.0, "the lowest probability of a drafted token"),
               "likelihood-numbers": (0.0, 1.0, "the lowest probability of a drafted token")}


@dataclass(frozen=True)
class VerifierSettings:
    """Which verifier to build and with what: the command line's verifier options, as data.

    ``judge_model``: a local chat model for "judge" / "paper-judge" (offline short name, hub id,
    path, or "target" for the target model itself). ``judge_url`` / ``judge_name`` /
    ``judge_timeout`` / ``judge_api_key``: an OpenAI-compatible completions server for
    "openai-judge" / "paper-judge" (``judge_name`` None: the server's only model).
    """

    name: str = DEFAULT_VERIFIER
    threshold: float | None = None
    judge_model: str | None = None
    judge_url: str | None = None
    judge_name: str | None = None
    judge_timeout: float | None = None
    judge_dtype: str = "auto"
    judge_api_key: str | None = None


def add_verifier_args(parser: argparse.ArgumentParser, default: str = DEFAULT_VERIFIER) -> None:
    """Add the verifier options (in their own help group) to ``parser``."""
    g = parser.add_argument_group("verifier")
    g.add_argument("--verifier", default=default,
                   help="exact | embedding | embedding-numbers | judge | openai-judge | paper-judge | target-score | "
                        f"likelihood | likelihood-numbers | random | cascade:<first>+<then> (default: {default})")
    g.add_argument("--threshold", type=float, default=None,
                   help="embedding: cosine; judge, openai-judge, paper-judge: P(yes) share in [0, 1] (paper-judge "
                        "without it reads the judge's one most likely token); target-score: lowest accepted 0-9 "
                        "score (default 9); likelihood: lowest target probability of a drafted token (default 0.3); "
                        "random: accept probability")
    add_judge_args(g)


def add_judge_args(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add the judge options alone (--judge-model, --judge-dtype, --judge-url, --judge-name, --judge-timeout)."""
    g.add_argument("--judge-model", default=None, metavar="NAME",
                   help="judge, paper-judge: a local chat model (offline name such as qwen2.5-coder-0.5b, hub id, "
                        "path, or 'target')")
    g.add_argument("--judge-dtype", default="auto", help="dtype of --judge-model (auto | bf16 | fp16 | fp32)")
    g.add_argument("--judge-url", default=None, metavar="URL",
                   help="openai-judge, paper-judge: an OpenAI-compatible server, e.g. http://localhost:8000/v1")
    g.add_argument("--judge-name", default=None, metavar="NAME",
                   help="the model name the --judge-url server serves (default: its only model)")
    g.add_argument("--judge-timeout", type=float, default=None, metavar="S",
                   help=f"seconds per --judge-url request (default {DEFAULT_JUDGE_TIMEOUT:g}); "
                        "a timeout rejects the step")


def verifier_settings_from_args(args: argparse.Namespace) -> VerifierSettings:
    """The settings from parsed arguments (options not added to the parser take their defaults)."""
    given = {name: getattr(args, name) for name in ("threshold", "judge_model", "judge_url", "judge_name",
                                                    "judge_timeout", "judge_dtype") if hasattr(args, name)}
    return VerifierSettings(name=getattr(args, "verifier", DEFAULT_VERIFIER), **given)


def check_verifier_settings(settings: VerifierSettings) -> list[str]:
    """Validate ``settings`` without loading anything; returns the verifier's stage names.

    Raises ConfigError naming the option: an unknown ``--verifier``, a ``--threshold`` out of the
    range of the verifier it applies to (or given to one that takes none), a judge verifier without
    its ``--judge-model`` / ``--judge-url``, judge options given to a verifier that uses no judge,
    a malformed URL, a ``--judge-timeout`` that is not a positive number of seconds.
    """
    require(isinstance(settings.name, str) and settings.name.strip() != "", "--verifier must name a verifier")
    try:
        stages = stage_names(settings.name)
    except VerifierError as e:
        raise ConfigError(f"--verifier: {e}") from None
    label = f"the {settings.name!r} verifier"
    _check_threshold(settings.threshold, stages, label)
    _check_judge_source(settings, stages, label)
    t = settings.judge_timeout
    require(t is None or (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0),
            f"--judge-timeout must be a number of seconds > 0, got {t!r}")
    return stages


def _check_threshold(threshold: float | None, stages: list[str], label: str) -> None:
    if threshold is None:
        return
    ranges = [_THRESHOLDS[s] for s in stages if s in _THRESHOLDS]
    require(bool(ranges), f"--threshold does not apply to {label} (it has no threshold)")
    require(isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and math.isfinite(threshold),
            f"--threshold must be a number, got {threshold!r}")
    for low, high, what in ranges:
        require(low <= threshold <= high, f"--threshold must be in [{low:g}, {high:g}] for {label} ({what}), "
                                          f"got {threshold:g}")
        require(what != "an integer score" or float(threshold).is_integer(),
                f"--threshold must be an integer score in [0, 9] for {label}, got {threshold:g}")


def _check_judge_source(s: VerifierSettings, stages: list[str], label: str) -> None:
    local, remote = bool(_JUDGES & set(stages)), bool(_REMOTE & set(stages))
    for option, value in (("--judge-model", s.judge_model), ("--judge-url", s.judge_url)):
        require(value is None or (isinstance(value, str) and value.strip() != ""), f"{option} is empty")
    if s.judge_model is not None:
        require(local, f"--judge-model is given, but {label} runs no local judge "
                       "(use it with judge or paper-judge)")
    if s.judge_url is not None:
        require(remote, f"--judge-url is given, but {label} asks no server (use it with openai-judge or paper-judge)")
        require(s.judge_url.startswith(("http://", "https://")),
                f"--judge-url must be an http(s) URL such as http://localhost:8000/v1, got {s.judge_url!r}")
    for option, value in (("--judge-name", s.judge_name), ("--judge-timeout", s.judge_timeout)):
        require(value is None or s.judge_url is not None, f"{option} only applies with --judge-url")
    require(s.judge_dtype == "auto" or s.judge_model is not None, "--judge-dtype only applies with --judge-model (the "
            "judge model loaded here)")
    require(isinstance(s.judge_dtype, str) and s.judge_dtype.lower() in JUDGE_DTYPES,
            f"--judge-dtype must be one of {', '.join(JUDGE_DTYPES)}, got {s.judge_dtype!r}")
    if "judge" in stages:
        require(s.judge_model is not None, f"--judge-model is required by {label}: a local chat model, e.g. "
                                           "--judge-model qwen2.5-coder-1.5b (an offline name, a hub id or a path)")
    if "openai-judge" in stages:
        require(s.judge_url is not None, f"--judge-url is required by {label}: an OpenAI-compatible server, "
                                         "e.g. --judge-url http://localhost:8000/v1")
    if "paper-judge" in stages:
        require((s.judge_model is None) != (s.judge_url is None),
                f"{label} needs one judge: --judge-model NAME (a local chat model) or --judge-url URL "
                "(an OpenAI-compatible server), not both" if s.judge_model and s.judge_url else
                f"{label} needs a judge: --judge-model NAME (a local chat model, e.g. qwen2.5-coder-1.5b) or "
                "--judge-url URL (an OpenAI-compatible server)")


def build_verifier(settings: VerifierSettings, target_lm: Any = None, *, judge_lm: Any = None,
                   device: str | None = None) -> Any:
    """The verifier ``settings`` describe, ready to ``verify``.

    Args:
        settings: checked here first (:func:`check_verifier_settings`).
        target_lm: the target's LM: needed by "target-score", and reused as the judge when
            ``judge_model`` is "target" or the target's own name (no second copy of the weights).
        judge_lm: an already-loaded judge LM to use instead of loading ``judge_model``.
        device: where a judge model loaded here goes (default: load_model's choice).
    """
    stages = check_verifier_settings(settings)
    kw: dict[str, Any] = {}
    if settings.threshold is not None:  # random reads it as its accept probability
        if "random" in stages:
            kw["p_accept"] = settings.threshold
        if any(s in _THRESHOLDS and s != "random" for s in stages):
            kw["threshold"] = settings.threshold
    if "target-score" in stages:
        require(target_lm is not None, f"the {settings.name!r} verifier rates drafts with the target model: "
                                       "pass target_lm= (the target's LM) to build_verifier")
        kw["target"] = target_lm
    if settings.judge_model is not None:
        kw["judge"] = judge_lm if judge_lm is not None else load_judge(settings, target_lm, device)
    if settings.judge_url is not None:
        kw.update(base_url=settings.judge_url, model=settings.judge_name,
                  timeout=settings.judge_timeout or DEFAULT_JUDGE_TIMEOUT)
        if settings.judge_api_key:
            kw["api_key"] = settings.judge_api_key
    return make_verifier(settings.name, **kw)


def check_any_verifier(verifier: Any, verifier_kwargs: dict | None = None) -> None:
    """ConfigError for a verifier in any of the forms the generator takes (a name with its ``verifier_kwargs``,
    a :class:`VerifierSettings`, an object with ``verify``) that cannot work. Loads nothing."""
    require(isinstance(verifier_kwargs, (dict, type(None))), f"verifier_kwargs must be a dict, got {verifier_kwargs!r}")
    if isinstance(verifier, str):
        check_verifier_spec(verifier, **(verifier_kwargs or {}))
    elif isinstance(verifier, VerifierSettings):
        check_verifier_settings(verifier)
    else:
        require(callable(getattr(verifier, "verify", None)),
                f"verifier must be a name, a VerifierSettings or an object with .name and .verify(pairs); "
                f"got {type(verifier).__name__}")


def any_verifier(verifier: Any, verifier_kwargs: dict | None = None, target_lm: Any = None,
                 device: str | None = None) -> Any:
    """The verifier object of any of the forms :func:`check_any_verifier` takes (built from a name or settings;
    some need the target's LM, e.g. target-score)."""
    if isinstance(verifier, str):
        return make_verifier(verifier, **(verifier_kwargs or {}))
    if isinstance(verifier, VerifierSettings):
        return build_verifier(verifier, target_lm=target_lm, device=device)
    return verifier


def refuse_unread_verifier_options(args: Any, settings: Any) -> None:
    """ConfigError naming each option of the ``verifiers`` command that none of its entries (``settings``) reads:
    the judge's options where no entry judges with them, the target's where none rates with the target."""
    settings = list(settings)
    judged = {"--judge-model": any(s.judge_model for s in settings), "--judge-dtype": any(s.judge_model for s in settings),
              **{flag: any(s.judge_url for s in settings) for flag in ("--judge-url", "--judge-name", "--judge-timeout")}}
    targets = any("target-score" in stage_names(s.name) or (s.judge_model or "").strip().lower() in
                  ("target", args.target.lower()) for s in settings)
    given = {"--judge-model": args.judge_model is not None, "--judge-dtype": args.judge_dtype != "auto",
             "--judge-url": args.judge_url is not None, "--judge-name": args.judge_name is not None,
             "--judge-timeout": args.judge_timeout is not None, "--target": args.target != DEFAULT_TARGET,
             "--dtype": args.dtype != "auto", "--device": args.device is not None}  # the ablation's own
    unread = [flag for flag, on in given.items() if on and not judged.get(flag, targets)]
    require(not unread, f"{', '.join(unread)}: no entry of --verifiers reads it (the judge's options go to judge, "
            "openai-judge and paper-judge; --target, --dtype and --device load the target for target-score or a "
            "judge that is the target)", ConfigError)


def load_judge(settings: VerifierSettings, target_lm: Any = None, device: str | None = None) -> Any:
    """The judge's LM: the target's weights when ``judge_model`` names the target, else load_model's."""
    name = settings.judge_model
    if target_lm is not None and name.strip().lower() in ("target", str(getattr(target_lm, "name", "")).lower()):
        base = LM.from_loaded(target_lm)
        return LM(base.model, base.tokenizer, name=f"{base.name} (judge)")
    require(name.strip().lower() != "target", "--judge-model target needs the target model (pass target_lm=)")
    return LM.from_loaded(load_model(name, dtype=settings.judge_dtype, device=device))


__all__ = ["DEFAULT_JUDGE_TIMEOUT", "VerifierSettings", "add_judge_args", "add_verifier_args", "any_verifier",
           "build_verifier", "check_any_verifier", "check_verifier_settings", "load_judge", "refuse_unread_verifier_options", "verifier_settings_from_args"]
