"""The generator's settings as command-line options, shared by ``lookahead-reasoning lr`` and ``bench``.

    add_generator_args(parser)                 # models, decoding, steps, verifier, planner options
    settings = generator_settings(args)        # -> GeneratorSettings
    settings.check()                           # every number and name, before any model loads
    gen = settings.build()                     # loads the models: a LookaheadGenerator

Defaults come from :mod:`lookahead_reasoning.presets`; an option left unset (None) means "the mode's
preset", so the command line, the benchmark and the Python API run the same settings.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, LookaheadError, require
from .presets import DEFAULT_DRAFT, DEFAULT_MODE, DEFAULT_TARGET, DEFAULT_VERIFIER, DRAFT_STOP_BELOW, MAX_STEP_TOKENS
from .verifiers.options import VerifierSettings, add_verifier_args, check_verifier_settings, verifier_settings_from_args

DTYPES = ("auto", "bf16", "bfloat16", "fp16", "float16", "fp32", "float32")


@dataclass(frozen=True)
class GeneratorSettings:
    """Everything a :class:`~lookahead_reasoning.LookaheadGenerator` is built from, as plain data."""

    target: str = DEFAULT_TARGET
    draft: str | None = DEFAULT_DRAFT
    verifier: VerifierSettings = field(default_factory=VerifierSettings)
    mode: str = DEFAULT_MODE
    k: int | None = None
    width: int = 1
    gamma: int | None = None
    draft_stop_below: float | None = DRAFT_STOP_BELOW
    draft_quantize: str | None = "auto"
    token_sd_target: str = "draft"
    token_sd_draft: str | None = "ngram"
    delimiters: tuple[str, ...] = ("\n\n",)
    max_step_tokens: int = MAX_STEP_TOKENS
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0
    dtype: str = "auto"
    device: str | None = None
    cpu_linear: str = "auto"
    precision: str | None = None
    reprofile: bool = False

    def check(self) -> None:
        """Raise ConfigError, naming the option, for any setting that cannot work. Loads nothing."""
        from .presets import MODES

        def count(value: Any, option: str, low: int = 1, allow_none: bool = False) -> None:
            ok = (allow_none and value is None) or (isinstance(value, int) and not isinstance(value, bool) and value >= low)
            require(ok, f"{option} must be an integer >= {low}, got {value!r}")

        require(self.mode in MODES, f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        count(self.k, "-k (drafted steps per cycle)", allow_none=True)
        count(self.width, "--width (drafts per position)")
        count(self.gamma, "--gamma (drafted tokens per iteration)", allow_none=True)
        count(self.max_step_tokens, "--max-step-tokens")
        count(self.top_k, "--top-k", allow_none=True)
        require(self.draft_stop_below is None or 0.0 <= self.draft_stop_below < 1.0,
                f"--draft-stop-below must be in [0, 1), got {self.draft_stop_below!r}")
        require(self.temperature >= 0, f"--temperature must be >= 0 (0 is greedy), got {self.temperature!r}")
        require(0.0 < self.top_p <= 1.0, f"--top-p must be in (0, 1], got {self.top_p!r}")
        require(self.dtype.lower() in DTYPES, f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        require(all(isinstance(d, str) and d for d in self.delimiters) and self.delimiters,
                f"--delimiter must be a non-empty string, got {self.delimiters!r}")
        require(bool(self.target and self.target.strip()), "--target must name a model")
        require(self.draft is None or bool(self.draft.strip()), "--draft must name a model")
        if self.precision is not None:
            self._check_precision()
        check_verifier_settings(self.verifier)

    def _check_precision(self) -> None:
        """A precision name this device can run, refused or warned about (one line) before loading."""
        from .precision import normalize_precision, resolve_precision

        try:
            name = normalize_precision(self.precision)
        except LookaheadError:
            name = None
        require(name not in (None, "int8-dynamic"),
                f"--precision must be one of auto, float32, bf16, int8, w8a8, got {self.precision!r}")
        resolve_precision(name, self.device)  # refuses what cannot run here, warns where w8a8 is slow

    def build(self, **overrides: Any):
        """Load the models and build the generator (``overrides``: LookaheadGenerator arguments)."""
        from .decoding.cycle import TokenSD
        from .decoding.steps import StepConfig
        from .generator import LookaheadGenerator
        from .planning import PlannerConfig
        from .sampling import SamplingConfig

        kwargs: dict[str, Any] = dict(
            target=self.target, draft=self.draft, verifier=self.verifier, mode=self.mode, k=self.k,
            width=self.width, gamma=self.gamma, steps=StepConfig(self.delimiters, self.max_step_tokens),
            token_sd=TokenSD(target=self.token_sd_target, draft=self.token_sd_draft),
            sampling=SamplingConfig(self.temperature, self.top_k, self.top_p),
            draft_stop_below=self.draft_stop_below, planner=PlannerConfig(reprofile=self.reprofile), dtype=self.dtype,
            device=self.device, cpu_linear=self.cpu_linear,
            precision={"target": self.precision, "draft": DRAFT_PRECISION[self.draft_quantize]})
        kwargs.update(overrides)
        return LookaheadGenerator(**kwargs)


# Above any context window of the models this library runs (the offline pair holds 32768 tokens); a
# loaded model's own window is checked by :func:`check_fits_context`.
MAX_NEW_TOKENS_LIMIT = 131072


def check_max_new_tokens(value: Any) -> None:
    """``--max-new-tokens`` is a whole number from 1 to :data:`MAX_NEW_TOKENS_LIMIT`. Loads nothing."""
    require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
            f"--max-new-tokens must be at least 1 (the tokens to write; with none there is nothing to time or "
            f"grade), got {value!r}")
    require(value <= MAX_NEW_TOKENS_LIMIT, f"--max-new-tokens {value} is more than any model here can hold in its "
                                           f"context: give at most {MAX_NEW_TOKENS_LIMIT}")


def check_fits_context(model: Any, max_new_tokens: int) -> None:
    """Refuse ``max_new_tokens`` that cannot fit in a model's context window (prompt excluded).

    ``model``: a name or path, whose config.json is read without loading it (a local directory or an
    offline model already converted; anything else passes), or a loaded transformers model.
    """
    from .models.loading import context_window

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
    import tempfile

    from .models.offline import cache_root

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
    from .presets import MODES

    m = parser.add_argument_group("models")
    m.add_argument("--target", default=DEFAULT_TARGET, help="offline name, hub id, local directory or .gguf file")
    m.add_argument("--draft", default=DEFAULT_DRAFT)
    m.add_argument("--draft-quantize", default="auto", choices=["auto", "int8", "none"],
                   help="auto (int8 for a CPU draft) | int8 | none: dynamic int8 linears make the draft 2-3x cheaper")
    m.add_argument("--dtype", default="auto", help="auto | bf16 | fp16 | fp32 (auto: bf16 where the CPU/GPU supports it)")
    m.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when present)")
    m.add_argument("--precision", default=None,
                   help="target weight precision: auto | float32 | bf16 | int8 (weight-only int8 linears) | w8a8 "
                        "(int8 weights and per-token int8 activations: cheap wide forwards); default: as "
                        "loaded in --dtype")
    m.add_argument("--cpu-linear", default="auto", choices=["auto", "onednn", "default"],
                   help="linear-layer kernel for float32 CPU models (auto: oneDNN, much faster for SD's "
                        "few-token forwards; default: torch's BLAS path)")
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
    d.add_argument("--token-sd-target", default="draft", choices=["ngram", "draft"], help="SD inside target steps (lr-sd)")
    d.add_argument("--token-sd-draft", default="ngram", choices=["ngram", "none"], help="SD inside draft steps (lr-sd)")
    d.add_argument("--delimiter", action="append", help="step delimiter (repeatable; default a blank line)")
    d.add_argument("--max-step-tokens", type=int, default=MAX_STEP_TOKENS)
    d.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    d.add_argument("--top-k", type=int, default=None)
    d.add_argument("--top-p", type=float, default=1.0)
    d.add_argument("--reprofile", action="store_true",
                   help="auto: measure this machine's cost table again even when a cached one matches")
    add_verifier_args(parser, default=DEFAULT_VERIFIER)


DRAFT_PRECISION = {"auto": "auto", "int8": "int8-dynamic", None: None}  # --draft-quantize -> the draft's precision


def generator_settings(args: argparse.Namespace) -> GeneratorSettings:
    """The settings the parsed options describe (see :func:`add_generator_args`)."""
    return GeneratorSettings(
        target=args.target, draft=args.draft, verifier=verifier_settings_from_args(args),
        mode=getattr(args, "mode", "auto"), k=args.k, width=args.width, gamma=args.gamma,
        draft_stop_below=args.draft_stop_below or None,
        draft_quantize=None if args.draft_quantize == "none" else args.draft_quantize,
        token_sd_target=args.token_sd_target, token_sd_draft=None if args.token_sd_draft == "none" else args.token_sd_draft,
        delimiters=tuple(args.delimiter or ["\n\n"]), max_step_tokens=args.max_step_tokens,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, dtype=args.dtype, device=args.device,
        cpu_linear=args.cpu_linear, precision=args.precision, reprofile=args.reprofile)


__all__ = ["GeneratorSettings", "MAX_NEW_TOKENS_LIMIT", "add_generator_args", "check_cache_writable", "check_fits_context",
           "check_max_new_tokens", "generator_settings"]
