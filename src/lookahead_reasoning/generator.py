"""The front door: :class:`LookaheadGenerator`.

    from lookahead_reasoning import LookaheadGenerator

    gen = LookaheadGenerator(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b")
    result = gen.generate("Natalia sold clips to 48 friends ...", max_new_tokens=512)
    print(result.text, result.stats.summary())

One object holds the target, the draft, the verifier and the settings, and runs every mode on the
same loaded models so that their speeds can be compared in one process. It only loads, checks and
hands each prompt to the one loop (:func:`lookahead_reasoning.decoding.generate_cycles`) with its mode's policy: a
fixed plan (``ar``, ``sd``, ``sd-ngram``, ``lr``, ``lr-sd``: :func:`~lookahead_reasoning.decoding.driver.mode_plan`)
or mode ``auto``'s planner (:mod:`lookahead_reasoning.planning`); the modes and their defaults live in
:mod:`lookahead_reasoning.presets`, the knobs in one :class:`~lookahead_reasoning.settings.Settings`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any, Callable, Sequence

from .decoding.driver import check_auto_width, drive, mode_plan, prepare
from .decoding.results import GenerationResult
from .engine_runtime import (
    ENGINE_NAMES,
    EngineRuntime,
    check_scheme,
    engine_verifier,
    is_url,
    refuse_local_options,
    refuse_local_settings,
)
from .errors import require
from .models.kernels import quantize_draft_int8
from .models import LoadOptions
from .models.precision import split_precision
from .planning import PlannerConfig, Planning, generate_auto
from .planning.auto import auto_token_sd
from .presets import (
    DEFAULT_MODE,
    DEFAULT_VERIFIER,
    LR_SD_TOKEN_SD,
    MODE_READS,
    STEP_MODES,
    check_mode,
    mode_k,
    no_model,
)
from .prompts import math_messages
from .runtime.compiled import check_fast_path, default_backend
from .runtime.lm import LM
from .runtime.pair import as_lm, model_pair
from .runtime.vocab import check_same_tokenizer
from .settings import Settings, TokenSD, given_settings, local_settings, refuse_unread
from .verifiers.options import VerifierSettings, any_verifier, check_any_verifier
from .verifiers.likelihood import TokenScores, verify_pairs

log = logging.getLogger(__name__)

_SETTING_NAMES = frozenset(f.name for f in dataclasses.fields(Settings))
LOAD_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(LoadOptions))
_OWN_OPTIONS = ("verifier_kwargs", "planner", "fast_path", *ENGINE_NAMES)


class LookaheadGenerator:
    """Lookahead Reasoning over a target and a draft model, with a pluggable verifier.

    Args:
        target, draft: model names (offline short names, hub ids, local dirs, .gguf files),
            LoadedModel / LM objects or (model, tokenizer) pairs. ``draft=None`` uses the target; the name
            "none" is no draft model, as in every entry (modes ar and sd-ngram need none; the others are
            refused). A URL of an OpenAI-compatible engine (``http://...``) for the target (and the draft)
            runs over the engines (:mod:`lookahead_reasoning.engine_runtime`): the same ``generate``, modes
            auto, lr and ar; ``template``, ``target_model``, ``draft_model`` and ``scorer`` are for that case
            (a local tokenizer whose chat template to use; the served models' names; what scores drafted
            tokens for a likelihood verifier where the target's engine cannot: the target's model loaded
            here, or a scoring engine's URL).
        verifier: a Verifier, a name for :func:`lookahead_reasoning.verifiers.make_verifier`
            ("exact", "embedding", "embedding-numbers", "paper-judge", "cascade:exact+embedding", ...)
            with its ``verifier_kwargs``, or a :class:`~lookahead_reasoning.verifiers.VerifierSettings`
            (what the command line builds; checked before any model loads).
        settings: a :class:`~lookahead_reasoning.settings.Settings` with every knob below
            from ``k`` to ``draft_stop_below`` (keywords given beside it change its fields).
        mode: the mode ``generate`` runs when it is not given one (see :mod:`lookahead_reasoning.presets`).
            A knob given by keyword (``k`` to ``draft_stop_below``), a verifier or a planner that this mode
            does not read is refused by name (:data:`~lookahead_reasoning.presets.MODE_READS`); ``settings``
            and the models serve every mode ``generate`` may run.
        k: drafted steps per cycle (k >= 1) for the step modes; None takes each mode's preset (in
            ``auto``: the most drafted steps a plan may use).
        width: drafts per position (W >= 1; lr and lr-sd). W - 1 alternatives are sampled (at
            ``alt_temperature`` when decoding is greedy) at each drafted position; one can replace the
            target's correction where the main draft is rejected, and the cycle ends there (see
            ``decoding.lookahead.rescue``); the same on every runtime.
        steps: the step segmenter (delimiters, per-step token cap).
        token_sd: token-level SD inside steps, used by modes "lr-sd" and "auto" (default: the draft model
            drafts tokens for the target's branches, prompt lookup for the draft's own steps; with
            tokenizers that differ the target falls back to plain decoding inside steps).
        sampling: temperature / top-k / top-p; temperature 0 is greedy.
        gamma: drafted tokens per iteration for modes "sd", "sd-ngram" and "lr-sd"; None: the mode's preset.
        draft_stop_below: the draft model stops drafting after a token it gave less than this
            probability (modes "sd" and "lr-sd" inside the target's branches); with it a large gamma
            pays. None drafts gamma tokens every time. Mode "auto" treats it as one candidate among
            ``PlannerConfig.draft_stop_below_choices`` and picks the stop each cycle from what the
            target accepted of drafts at each confidence (None: auto drafts without a stop).
        planner: settings of mode "auto" (:class:`lookahead_reasoning.planning.PlannerConfig`).
        fast_path: how this process's models run their forwards (:mod:`lookahead_reasoning.runtime.compiled`):
            "auto" (default: inductor + CUDA graphs over a static cache on a GPU, the eager loops on a CPU; an ``LM``
            passed in keeps the path it has), "off" or None, a backend name or a ``FastPathConfig``.
        precision: the weight precision per model, a name (the target's) or ``{"target": ..., "draft": ...}``
            (:mod:`lookahead_reasoning.models.precision`). The target's, when it is loaded by name: None (as
            loaded), "int8" (weight-only) or "w8a8" (int8 activations too). The draft's: "int8-dynamic"
            (:func:`lookahead_reasoning.models.kernels.quantize_draft_int8`: a half to a third of the draft's
            cost, a somewhat lower acceptance rate, token-level SD output unchanged), "auto" (default: that,
            for a CPU draft this generator loaded itself) or None.
        options: the keywords above that are not parameters (``k``, ``width``, ``steps``, ``token_sd``,
            ``sampling``, ``gamma``, ``alt_temperature``, ``draft_stop_below``, ``verifier_kwargs``,
            ``planner``, ``schedule``, ``timeout_s``, ``retries``, the engine names above); the rest is
            passed to load_model for names (dtype=, device=, cpu_linear=, ...).
    """

    def __init__(self, target: Any, draft: Any = None, verifier: Any = DEFAULT_VERIFIER,
                 settings: Settings | None = None, *, mode: str = DEFAULT_MODE, precision: Any = None,
                 **options: Any):
        own = {name: options.pop(name) for name in _OWN_OPTIONS if name in options}
        knobs, load_kwargs = {name: options.pop(name) for name in list(options) if name in _SETTING_NAMES}, options
        require(settings is None or isinstance(settings, Settings), f"settings must be a Settings, got {settings!r}")
        self.mode, preset = check_mode(mode), TokenSD(**LR_SD_TOKEN_SD)
        self.settings = (settings or Settings.preset(token_sd=preset)).with_overrides(**knobs)
        self.settings = self.settings if self.settings.token_sd else self.settings.with_overrides(token_sd=preset)
        self.planner, self._planning, self.fast_path = own.get("planner"), None, own.get("fast_path", "auto")
        check_fast_path(self.fast_path)
        draft = self._check(target, draft, verifier, own, knobs)  # before any model loads
        unknown = sorted(set(load_kwargs) - LOAD_OPTION_NAMES)
        require(not unknown, f"{', '.join(unknown)}: not a setting or a loading option of LookaheadGenerator "
                f"(settings: {', '.join(sorted(_SETTING_NAMES))}; loading: {', '.join(sorted(LOAD_OPTION_NAMES))})")
        self.engine: EngineRuntime | None = None
        if is_url(target):
            require(self.planner is None, "planner=: over engines mode auto plans from the endpoints' own measured "
                    "costs (PlannerConfig.over_engine: chunks and LR rows, the engine's own token SD if it was started "
                    "with one); a PlannerConfig is for models this process loads")
            refuse_local_options({**load_kwargs, "fast_path": None if self.fast_path == "auto" else self.fast_path},
                                 precision)
            refuse_local_settings(knobs)  # settings' own gamma: refused by the first generate (EngineRuntime.check)
            self.pair, self.draft_quantize = None, None
            self.engine = EngineRuntime(target, draft, self.settings, None, own)  # connects: a dead URL fails first
            self.verifier = self.engine.verifier = engine_verifier(verifier, own.get("verifier_kwargs"))
            return
        unused = sorted(name for name in ENGINE_NAMES if name in own)
        require(not unused, f"{', '.join(unused)}: only for a target served by an engine (a URL)")
        target_precision, draft_precision = split_precision(precision)
        self.pair = model_pair(as_lm(target, **load_kwargs, **({"precision": target_precision}
                                                               if target_precision is not None else {})),
                               None if draft is None else as_lm(draft, **load_kwargs))
        self.draft_quantize = self._quantize_draft(draft_precision, owned=isinstance(draft, str))
        for lm in {id(self.target): self.target, id(self.draft): self.draft}.values():
            if self.fast_path != "auto" or (lm.fast is None and default_backend(lm.device) is not None):
                lm.use_fast_path(self.fast_path)
        if not self.same_vocab:
            log.warning("draft and target tokenizers differ: steps are passed as text, and token-level "
                        "SD with the draft model is off for this pair (n-gram SD still works)")
        self.verifier = any_verifier(verifier, own.get("verifier_kwargs"), self.target, load_kwargs.get("device"))

    # ------------------------------------------------------------------ the pair, read as attributes
    @property
    def target(self) -> LM | None:
        """The target p of this process (None where it is served by an engine)."""
        return None if self.pair is None else self.pair.target

    @property
    def draft(self) -> LM | None:
        """The draft q of this process (the target again, in an LM of its own, where none was given)."""
        return None if self.pair is None else self.pair.draft

    @property
    def same_vocab(self) -> bool:
        """Whether the pair shares one vocabulary (an engine pair must: it is checked on its first call)."""
        return True if self.pair is None else self.pair.same_vocab

    def _check(self, target: Any, draft: Any, verifier: Any, own: dict, knobs: dict) -> Any:
        """Every check that needs no model: what the mode would not read (:func:`~.settings.refuse_unread`: a keyword
        setting, a verifier, a planner), a URL of another scheme than http(s) and a draft "none" where the mode
        drafts are refused by name. Returns the draft to load (None for "none")."""
        if self.mode == "auto":
            check_auto_width(self.settings)
            auto_token_sd(self.settings.token_sd, self.planner or PlannerConfig())
        elif self.mode in STEP_MODES:
            mode_k(self.mode, self.settings.k)  # k=0 is a cap for auto only (Settings checked the rest)
        require(self.planner is None or isinstance(self.planner, PlannerConfig), f"planner must be a PlannerConfig, "
                f"got {self.planner!r}")
        check_any_verifier(verifier, own.get("verifier_kwargs"))
        for role, model in (("target", target), ("draft", draft)):
            check_scheme(model, role)
        require(not no_model(target), "target 'none': the target is the model that writes the answer; name one")
        if is_url(target):
            EngineRuntime.check(self.mode, Settings())  # a mode an engine cannot run, before connecting
        else:
            local_settings(self.settings)  # async, request timeout, retries: an engine's; refused before loading
        given = {name: name for name in given_settings(self.settings) if name in knobs}
        given.update({name: name for name, on in (("planner", self.planner is not None), ("verifier", own.get(
            "verifier_kwargs") or verifier not in (DEFAULT_VERIFIER, VerifierSettings()))) if on})
        refuse_unread(self.mode, self.settings, given)
        require(not no_model(draft) or "draft" not in MODE_READS[self.mode], f"draft 'none' (no draft model): mode "
                f"{self.mode} drafts with one; give a draft, or use mode ar or sd-ngram (they need none)")
        return None if no_model(draft) else draft

    def _quantize_draft(self, choice: str | None, owned: bool) -> str | None:
        """Apply the draft's precision; returns what was done ("int8" or None)."""
        own_model = self.draft.model is not self.target.model
        if choice == "auto":
            param = next(self.draft.model.parameters(), None)
            fits = param is not None and param.device.type == "cpu" and param.is_floating_point()
            choice = "int8-dynamic" if own_model and owned and fits else None
        if choice != "int8-dynamic":
            return None
        require(own_model, "precision={'draft': 'int8-dynamic'} needs a draft model of its own (the draft is the target here)")
        quantize_draft_int8(self.draft.model)
        return "int8"

    def planning(self):
        """Mode ``auto``'s cost tables and learned rates for this pair (measured or read on first use)."""
        require(self.engine is None, "over engines mode auto's planner measures the endpoints on its first call "
                                     "(gen.engine.planner); there is no PyTorch cost table")
        if self._planning is None:
            self._planning = Planning.load(self.pair, getattr(self.verifier, "name", "verifier"),
                                           self.planner or PlannerConfig())
        return self._planning

    def break_even(self, context: int = 300) -> Any:
        """When the step layer pays here: on mode ``auto``'s measured cost table and the token rates this pair
        has learned, the step acceptance alpha1 above which one and two drafted steps a cycle beat the best
        plan without them (a :class:`~lookahead_reasoning.theory.breakeven.BreakEven`; None where none pays)."""
        return self.planning().break_even(context, self.same_vocab, self.settings.draft_stop_below)

    def plan_with(self, costs: Any, book: Any = None) -> None:
        """Make mode ``auto`` price its plans with ``costs`` (a :class:`~lookahead_reasoning.planning.costs.CostTable`,
        e.g. one measured on another machine), learning rates from ``book`` (default: none yet) and saving
        nothing to the cache: what ``auto`` would choose there, on this machine's acceptance."""
        require(self.engine is None, "plan_with prices forwards of this process's models; over engines the "
                                     "planner measures the endpoints")
        self._planning = Planning.elsewhere(costs, book, self.planner or PlannerConfig())

    # ------------------------------------------------------------------ prompts
    def _prompts(self, prompt: str | list[dict[str, str]] | list[int], raw: bool) -> tuple[list[int], list[int]]:
        if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
            require(self.same_vocab, "a prompt given as token ids needs draft and target to share a tokenizer")
            require(all(0 <= t < self.target.vocab_size for t in prompt),
                    f"prompt token ids must be in [0, {self.target.vocab_size}) (the target's vocabulary)")
            return list(prompt), list(prompt)
        target_ids = self.target.prompt_ids(prompt, raw=raw)
        draft_ids = target_ids if self.same_vocab else self.draft.prompt_ids(prompt, raw=raw)
        return target_ids, draft_ids

    def close(self) -> None:
        """Close the connections to the engines (nothing to do for models in this process)."""
        if self.engine is not None:
            self.engine.pair.close()

    # ------------------------------------------------------------------ warm-up
    def warmup(self, modes: Sequence[str] = ("lr",), tokens: int = 8) -> None:
        """Run each mode once on a short question, untimed, and call the verifier once: the first forwards of a
        fresh process and the first verifier call (which loads its model) are several times slower than later
        ones, and timing a mode without this charges it for the process's start-up."""
        probe = math_messages("What is 2 + 3?")
        for lm in (self.target, self.draft):
            if lm is not None and lm.fast is not None:
                lm.fast.warm()  # every bucket shape compiled or recorded now, none during a timed run
        if self.engine is not None:  # a short completion from each endpoint: the servers' first forwards
            self.engine.warm()
            modes = ()
        for mode in modes:
            self.generate(probe, mode=mode, max_new_tokens=tokens, learn=False)
        if any(m in STEP_MODES for m in modes):
            # the same numbers on both sides, so a numbers check passes and the embedding model runs too
            verify_pairs(self.verifier, [("Add 2 and 3 to get 5.", "2 plus 3 is 5.")], [TokenScores.of([0.9] * 8)])

    # ------------------------------------------------------------------ generate
    def generate(self, prompt: str | list[dict[str, str]] | list[int], *, mode: str | None = None, raw: bool = False,
                 on_text: Callable[[str], None] | None = None, learn: bool = True,
                 **overrides: Any) -> GenerationResult:
        """Answer ``prompt``: a question, chat messages, or token ids (used as they are).

        ``mode`` defaults to the generator's. ``raw=True`` uses a text prompt as it is, without the
        chat template. ``overrides`` change the settings for this call: ``max_new_tokens`` (default
        :data:`~lookahead_reasoning.presets.DEFAULT_MAX_NEW_TOKENS`), ``seed`` (the generator's: 0 unless it was
        given one; None: unseeded), and ``gamma`` and
        ``k``, the drafted tokens per iteration and drafted steps per cycle (a benchmark sweeps them
        with the models loaded once); in mode ``auto``, ``k`` caps the drafted steps of a plan and
        gamma is the planner's to choose. A keyword the call's mode does not read (``gamma`` in ``ar`` or
        ``auto``, ``k`` in ``sd``, ...: :data:`~lookahead_reasoning.presets.MODE_READS`) is refused by name; the
        generator's own settings carry over to every mode, each reading what it reads. ``learn=False`` (mode
        ``auto``): plan with what is known, but keep nothing of this call.
        """
        mode = check_mode(self.mode if mode is None else mode)
        k = overrides.pop("k", None)
        overrides = {name: value for name, value in overrides.items()
                     if value is not None or name in ("seed", "draft_stop_below", "token_sd")}
        settings = self.settings.with_overrides(**overrides)
        call = settings if k is None else settings.with_overrides(k=k)  # what this call gives: its mode must read it
        passed = {*overrides, *(("k",) if k is not None else ())}
        refuse_unread(mode, call, {name: name for name in given_settings(call) if name in passed})
        if self.engine is not None:
            refuse_local_settings(overrides)
            return self.engine.generate(prompt, mode, settings, k=call.k, learn=learn, raw=raw, on_text=on_text)
        settings, policy = mode_plan(mode, local_settings(call))
        if policy is None:
            return self._generate_auto(prompt, raw, settings, on_text, settings.k, learn)
        target_ids, draft_ids = self._prompts(prompt, raw)
        if mode == "sd" and not self.same_vocab:
            check_same_tokenizer(self.draft, self.target)  # raises with the explanation
        cycles, policy = prepare(self.pair, target_ids, self.verifier, settings, policy, on_text=on_text,
                                 draft_ids=draft_ids)
        drive(cycles, policy, cycles.stats, cycles.streamed)  # the one loop: plan, run_cycle, learn
        return cycles.result(policy)

    def _generate_auto(self, prompt, raw: bool, settings: Settings, on_text, max_k: int | None,
                       learn: bool) -> GenerationResult:
        """Mode auto: the planner's loop, on this pair's cost tables and learned rates (a throwaway copy
        of them when ``learn`` is False)."""
        auto_token_sd(settings.token_sd, self.planner or PlannerConfig())  # refused before any cost table is measured
        config, planning = self.planner or PlannerConfig(), self.planning()
        if not learn:
            config = dataclasses.replace(config, learn=False, refine=False)
            planning = copy.deepcopy(planning)
        if max_k is not None:
            config = dataclasses.replace(config, max_k=max_k)
        target_ids, draft_ids = self._prompts(prompt, raw)
        return generate_auto(self.pair, target_ids, self.verifier, settings, on_text=on_text,
                             planning=dataclasses.replace(planning, config=config), draft_ids=draft_ids)
