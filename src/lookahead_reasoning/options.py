"""The generator's settings as command-line options, shared by ``lookahead-reasoning lr`` and ``bench``.

    add_generator_args(parser)                 # models, decoding, steps, verifier, planner options
    spec = generator_spec(args)                # -> GeneratorSpec; its decoding numbers: one checked Settings
    spec.check()                               # names, dtype, precision, verifier: before any model loads
    gen = spec.build()                         # loads the models: a LookaheadGenerator

The decoding numbers (k, gamma, width, steps, sampling, token-level SD, the draft's stop) become the
one :class:`~lookahead_reasoning.settings.Settings` the generator runs, checked once when it
is made; a refusal names the command-line option (``--gamma (drafted tokens per iteration) must
be ...``). An option left unset takes the preset (:mod:`lookahead_reasoning.presets`, through
``Settings.preset``), so the command line, the benchmark and the Python API run the same settings.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .errors import ConfigError, LookaheadError, require, whole
from .generator import LookaheadGenerator
from .models.loading import context_window
from .models.offline import cache_root
from .models.precision import normalize_precision, resolve_precision
from .planning import PlannerConfig
from .planning.auto import auto_token_sd
from .presets import (
    DEFAULT_DRAFT,
    DEFAULT_MODE,
    DEFAULT_TARGET,
    DEFAULT_VERIFIER,
    DRAFT_STOP_BELOW,
    LR_SD_TOKEN_SD,
    MAX_STEP_TOKENS,
    MODE_READS,
    MODES,
    STEP_MODES,
    check_k,
    no_model,
)
from .runtime.compiled import FAST_PATH_CHOICES
from .sampling import SamplingConfig
from .settings import KNOBS, Settings, TokenSD, given_settings, refuse_unread
from .steps import StepConfig
from .verifiers.options import (
    VerifierSettings,
    add_verifier_args,
    check_verifier_settings,
    verifier_settings_from_args,
)

DTYPES = ("auto", "bf16", "bfloat16", "fp16", "float16", "fp32", "float32")

# how the check of a decoding number starts its message -> the command-line option that sets the number
OPTION_NAMES = (("k ", "-k "), ("gamma ", "--gamma "), ("width ", "--width "),
                ("draft_stop_below ", "--draft-stop-below "), ("temperature ", "--temperature "),
                ("top_k ", "--top-k "), ("top_p ", "--top-p "), ("step delimiters ", "--delimiter "),
                ("max_step_tokens ", "--max-step-tokens "), ("token_sd target ", "--token-sd-target "),
                ("TokenSD target ", "--token-sd-target "), ("TokenSD draft ", "--token-sd-draft "),
                ("timeout_s ", "--engine-timeout "))


def named_option(error: ConfigError) -> ConfigError:
    """``error`` of a decoding number with the option's name in its place (``k (...)`` -> ``-k (...)``)."""
    text = str(error)
    for name, option in OPTION_NAMES:
        if text.startswith(name):
            return ConfigError(option + text[len(name):])
    return error


def named_check(check: Any) -> Any:
    """``check()``, its ConfigError naming the command-line option (:func:`named_option`)."""
    try:
        return check()
    except ConfigError as exc:
        raise named_option(exc) from None


def decoding_settings(options: Mapping[str, Any]) -> Settings:
    """The one :class:`Settings` of the decoding options of :func:`add_generator_args` but ``mode`` and
    ``reprofile``, by argparse name. A missing or None one takes the preset, but ``draft_stop_below`` None or 0
    and ``token_sd_draft`` None or "none" turn the stop / prompt lookup off. Raises ConfigError naming the option."""
    def given(*names: str) -> dict[str, Any]:
        return {name: options[name] for name in names if options.get(name) is not None}

    sides = {side: options[f"token_sd_{side}"] for side in ("target", "draft") if f"token_sd_{side}" in options}
    stop = options.get("draft_stop_below")  # 0 turns the stop off, as None does; anything else is checked
    stop = {"draft_stop_below": None if stop == 0 and not isinstance(stop, bool) else stop} \
        if "draft_stop_below" in options else {}
    try:
        steps = StepConfig(**{("delimiters" if name == "delimiter" else name): value
                              for name, value in given("delimiter", "max_step_tokens").items()})
        return Settings.preset(
            **given("k", "gamma", "width"), steps=steps, sampling=SamplingConfig(**given("temperature", "top_k", "top_p")),
            token_sd=TokenSD(**{**LR_SD_TOKEN_SD, **{s: None if v == "none" else v for s, v in sides.items()}}), **stop)
    except ConfigError as exc:
        raise named_option(exc) from None


@dataclass(frozen=True)
class GeneratorSpec:
    """What ``lr`` and ``bench`` build a :class:`~lookahead_reasoning.LookaheadGenerator` from: the
    models and how they load, the verifier, the mode, and ``settings``, the one checked
    :class:`~lookahead_reasoning.settings.Settings` of every decoding number."""

    target: str = DEFAULT_TARGET
    draft: str | None = DEFAULT_DRAFT
    verifier: VerifierSettings = field(default_factory=VerifierSettings)
    mode: str = DEFAULT_MODE
    settings: Settings = field(default_factory=lambda: decoding_settings({}))
    draft_quantize: str | None = "auto"
    dtype: str = "auto"
    device: str | None = None
    cpu_linear: str = "auto"
    precision: str | None = None
    reprofile: bool = False
    fast_path: str = "auto"

    def check(self) -> None:
        """Raise ConfigError, naming the option, for a name or choice that cannot work (the decoding
        numbers were checked when ``settings`` was made). Loads nothing."""
        require(self.mode in MODES, f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        require(self.dtype.lower() in DTYPES, f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        require(bool(self.target and self.target.strip()) and not no_model(self.target),
                f"--target must name a model (the one that writes the answer), got {self.target!r}")
        require(self.draft is None or bool(self.draft.strip()), "--draft must name a model")
        if self.mode == "auto":  # prompt lookup for the target's rows is lr-sd's, not auto's
            named_check(lambda: auto_token_sd(self.settings.token_sd, PlannerConfig()))
        require(self.draft_quantize in DRAFT_PRECISION, f"--draft-quantize must be auto, int8 or none, got "
                f"{self.draft_quantize!r}")
        require(self.fast_path in FAST_PATH_CHOICES,
                f"--fast-path must be one of {', '.join(FAST_PATH_CHOICES)}, got {self.fast_path!r}")
        if self.precision is not None:  # a name this device can run, refused or warned about before loading
            try:
                name = normalize_precision(self.precision)
            except LookaheadError:
                name = None
            require(name not in (None, "int8-dynamic"),
                    f"--precision must be one of auto, float32, bf16, int8, w8a8, got {self.precision!r}")
            resolve_precision(name, self.device)  # refuses what cannot run here, warns where w8a8 is slow
        check_verifier_settings(self.verifier)

    def build(self, *, target: Any = None, draft: Any = None, verifier: Any = None):
        """Load the models and build the generator. ``target``, ``draft``, ``verifier``: what to use instead
        of the spec's names (anything :class:`~lookahead_reasoning.LookaheadGenerator` takes for them,
        such as loaded models or a verifier object); None: the spec's."""
        return LookaheadGenerator(
            target=self.target if target is None else target, draft=self.draft if draft is None else draft,
            verifier=self.verifier if verifier is None else verifier, settings=self.settings, mode=self.mode,
            planner=PlannerConfig(reprofile=self.reprofile) if self.mode == "auto" else None, dtype=self.dtype, device=self.device,
            cpu_linear=self.cpu_linear, precision={"target": self.precision, "draft": DRAFT_PRECISION[self.draft_quantize]},
            fast_path=self.fast_path)


# Above any context window of the models this library runs (the offline pair holds 32768 tokens); a
# loaded model's own window is checked by :func:`check_fits_context`.
MAX_NEW_TOKENS_LIMIT = 131072


def check_max_new_tokens(value: Any) -> None:
    """``--max-new-tokens`` is a whole number from 1 to :data:`MAX_NEW_TOKENS_LIMIT`. Loads nothing."""
    require(whole(value, 1), f"--max-new-tokens must be at least 1 (the tokens to write; with none there is nothing "
            f"to time or grade), got {value!r}")
    require(value <= MAX_NEW_TOKENS_LIMIT, f"--max-new-tokens {value} is more than any model here can hold in its "
                                           f"context: give at most {MAX_NEW_TOKENS_LIMIT}")


def check_fits_context(model: Any, max_new_tokens: int) -> None:
    """Refuse ``max_new_tokens`` that cannot fit in a model's context window (prompt excluded).

    ``model``: a name or path, whose config.json is read without loading it (a local directory or an
    offline model already converted; anything else passes), or a loaded transformers model.
    """
    if isinstance(model, (str, os.PathLike)):
        name, window = str(model), context_window(model)
    else:
        config = getattr(model, "config", None)
        name = getattr(config, "name_or_path", None) or type(model).__name__
        window = getattr(config, "max_position_embeddings", None)
    require(not isinstance(window, int) or max_new_tokens < window,
            f"--max-new-tokens {max_new_tokens} does not fit in the context of {name} ({window} tokens, the "
            f"prompt included): give less than {window}")


def check_cache_writable(why: str) -> None:
    """Refuse, before any model loads, a cache folder that cannot be written (``why``: what needs it)."""
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"the cache folder {root} is not writable ({exc.strerror or exc}), and {why}: set "
                          f"LOOKAHEAD_REASONING_CACHE to a writable folder") from None


def add_generator_args(parser: argparse.ArgumentParser, *, mode: bool = True) -> None:
    """Add the generator's options to ``parser`` (``mode``: also ``--mode``)."""
    m = parser.add_argument_group("models")
    m.add_argument("--target", default=DEFAULT_TARGET, help="offline name, hub id, local directory or .gguf file")
    m.add_argument("--draft", default=DEFAULT_DRAFT)
    m.add_argument("--draft-quantize", default="auto", choices=["auto", "int8", "none"],
                   help="auto (int8 for a CPU draft) | int8 | none: dynamic int8 linears make the draft 2-3x cheaper")
    m.add_argument("--dtype", default="auto", help="auto | bf16 | fp16 | fp32 (auto: bf16 where the CPU/GPU supports it)")
    m.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when present)")
    m.add_argument("--precision", default=None,
                   help="target weight precision: auto | float32 | bf16 | int8 (weight-only int8 linears) | w8a8 "
                        "(int8 weights and per-token int8 activations: cheap many-token forwards); default: as "
                        "loaded in --dtype")
    m.add_argument("--cpu-linear", default="auto", choices=["auto", "onednn", "default"],
                   help="linear-layer kernel for float32 CPU models (auto: oneDNN, much faster for SD's "
                        "few-token forwards; default: torch's BLAS path)")
    m.add_argument("--fast-path", default="auto", choices=FAST_PATH_CHOICES,
                   help="how forwards run: auto (inductor + CUDA graphs over a static cache on a GPU, the eager "
                        "loops on a CPU), off (the eager loops), or a backend of the compiled path")
    d = parser.add_argument_group("decoding")
    if mode:
        d.add_argument("--mode", default="auto", choices=MODES,
                       help="auto (a planner picks every cycle's plan), lr, lr-sd, sd, sd-ngram, ar")
    d.add_argument("-k", type=int, default=None,
                   help="drafted steps per cycle (default: 2 for lr, 1 for lr-sd; auto: the most a plan may use)")
    d.add_argument("--width", type=int, default=1, help="drafts per position")
    d.add_argument("--gamma", type=int, default=None,
                   help="drafted tokens per SD iteration (default: 12 for the draft model, 6 for prompt lookup)")
    d.add_argument("--draft-stop-below", type=float, default=DRAFT_STOP_BELOW,
                   help="the draft model stops after a token it gave less than this probability "
                        f"(default {DRAFT_STOP_BELOW}; 0 drafts gamma tokens every time)")
    d.add_argument("--token-sd-target", default=LR_SD_TOKEN_SD["target"], choices=["ngram", "draft"], help="SD inside target steps (lr-sd)")
    d.add_argument("--token-sd-draft", default=LR_SD_TOKEN_SD["draft"], choices=["ngram", "none"], help="SD inside draft steps (lr-sd)")
    d.add_argument("--delimiter", action="append", help="step delimiter (repeatable; default a blank line)")
    d.add_argument("--max-step-tokens", type=int, default=MAX_STEP_TOKENS)
    d.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    d.add_argument("--top-k", type=int, default=None)
    d.add_argument("--top-p", type=float, default=1.0)
    d.add_argument("--reprofile", action="store_true",
                   help="auto: measure this machine's cost table again even when a cached one matches")
    add_verifier_args(parser, default=DEFAULT_VERIFIER)


def option_defaults() -> dict[str, Any]:
    """The default of every option :func:`add_generator_args` adds, by argparse name."""
    parser = argparse.ArgumentParser(add_help=False)
    add_generator_args(parser)
    return {action.dest: action.default for action in parser._actions}


DRAFT_PRECISION = {"auto": "auto", "int8": "int8-dynamic", None: None}  # --draft-quantize -> the draft's precision
# The generator's options (argparse names, which are also the lm-evaluation-harness model_args) that set what a
# mode may not read: the name of that in presets.MODE_READS. Every other option is read by every mode.
OPTION_READS = {"draft": "draft", "draft_quantize": "draft", "k": "k", "gamma": "gamma", "width": "width",
                "draft_stop_below": "draft_stop_below", "token_sd_target": "token_sd", "token_sd_draft": "token_sd",
                "delimiter": "steps", "max_step_tokens": "steps", "reprofile": "planner", "schedule": "schedule",
                **{name: "verifier" for name in ("verifier", "threshold", "judge_model", "judge_dtype", "judge_url",
                                                 "judge_name", "judge_timeout")}}


def refuse_unread_options(modes: Sequence[str], settings: Settings, given: Mapping[str, str], draft: Any) -> None:
    """ConfigError naming each option of ``given`` (as the entry names it -> its argparse name) that none of
    ``modes`` reads (:func:`~.settings.refuse_unread`), and a draft ``draft`` of "none" (no draft model) where
    one of them drafts. Loads nothing."""
    knobs = given_settings(settings)  # a knob that turns off what a mode does not do anyway is no knob given
    named = {label: OPTION_READS[name] for label, name in given.items()
             if name in OPTION_READS and (OPTION_READS[name] in knobs or OPTION_READS[name] not in KNOBS)}
    if no_model(draft):  # no draft model: nothing to read
        named = {label: setting for label, setting in named.items() if given[label] != "draft"}
    refuse_unread(modes, settings, named)
    needs = [mode for mode in modes if "draft" in MODE_READS[mode]]
    label = next((label for label, name in given.items() if name == "draft"), "--draft")
    require(not no_model(draft) or not needs, f"{label} none (no draft model): mode {', '.join(needs)} drafts with "
            "one; give a draft, or use mode ar or sd-ngram (they need none)")
    quantize = [name for name, dest in given.items() if dest == "draft_quantize"]
    require(not no_model(draft) or not quantize, f"{', '.join(quantize)}: there is no draft to quantise ({label} none)")


def generator_spec(args: argparse.Namespace, modes: Sequence[str] | None = None) -> GeneratorSpec:
    """The spec the parsed options describe (see :func:`add_generator_args`); its ``settings`` are
    made (and checked) here, a bad decoding number raising ConfigError that names its option, and so is an
    option that none of ``modes`` (default: ``--mode``'s) reads (:func:`refuse_unread_options`); ``--draft none``
    is no draft model."""
    settings, mode = decoding_settings(vars(args)), getattr(args, "mode", "auto")
    if mode in STEP_MODES:
        try:
            check_k(settings.k, mode)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("k=0", "-k 0", 1).replace("mode ", "--mode ", 1)) from None
    modes = tuple(modes or (mode,))
    given = {flag: dest for dest, (flag, default) in getattr(args, "option_flags", {}).items()
             if getattr(args, dest, default) != default}
    refuse_unread_options(modes, settings, given, args.draft)
    none = no_model(args.draft)  # no draft model: what a results file records as its draft, too
    return GeneratorSpec(
        target=args.target, draft=None if none else args.draft, verifier=verifier_settings_from_args(args),
        mode=mode, settings=settings, draft_quantize=None if args.draft_quantize == "none" or none
        else args.draft_quantize, dtype=args.dtype, device=args.device, cpu_linear=args.cpu_linear,
        precision=args.precision, reprofile=args.reprofile, fast_path=args.fast_path)


__all__ = ["GeneratorSpec", "MAX_NEW_TOKENS_LIMIT", "add_generator_args", "check_cache_writable",
           "check_fits_context", "check_max_new_tokens", "decoding_settings", "generator_spec",
           "named_check", "option_defaults", "refuse_unread_options"]
