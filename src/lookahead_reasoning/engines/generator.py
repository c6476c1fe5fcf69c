"""What :class:`~lookahead_reasoning.LookaheadGenerator` runs when its target is an engine's URL.

    gen = LookaheadGenerator(target="http://127.0.0.1:8080", draft="http://127.0.0.1:8081")
    result = gen.generate("A bakery sells muffins ...", max_new_tokens=512)          # mode auto
    same = gen.generate("A bakery sells muffins ...", mode="lr", k=2, schedule="async")
    base = gen.generate("A bakery sells muffins ...", mode="ar")                     # the engine alone

The generator stays one class with one ``generate``; over engines it hands each call to an
:class:`EngineRuntime`, which honours the settings an engine can honour (sampling, seed, steps, k,
width, schedule, max_new_tokens, timeouts) and refuses the rest by name: modes ``sd``, ``sd-ngram``
and ``lr-sd`` run token SD in this process (an engine does its own: start it with its SD and use
``ar``), and the loading options (dtype, device, precision, ...) belong to models this process loads.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from typing import Any, Callable, Sequence

from ..decoding.driver import FixedK
from ..decoding.results import GenerationResult
from ..errors import ConfigError, require
from ..planning.endpoints import ameasured_planner
from ..planning.planner import Planner
from ..planning.policy import AutoPolicy
from ..presets import check_max_k, mode_k
from ..prompts import math_messages
from ..runtime.engine.pair import EnginePair
from ..settings import Settings
from ..verifiers.options import VerifierSettings, build_verifier
from ..verifiers.registry import make_verifier
from . import runs

ENGINE_MODES = ("auto", "lr", "ar")
ENGINE_NAMES = ("template", "target_model", "draft_model", "scorer")  # options that only an engine target takes


def is_url(model: Any) -> bool:
    return isinstance(model, str) and model.startswith(("http://", "https://"))


def engine_verifier(verifier: Any, verifier_kwargs: dict | None = None) -> Any:
    """The verifier object for a run over engines: a judge over HTTP works; a verifier that reads the
    target's weights (``target-score``) cannot, since an engine shares none."""
    name = verifier.name if isinstance(verifier, VerifierSettings) else verifier if isinstance(verifier, str) else None
    require(name is None or "target-score" not in name, "the target-score verifier reads the target's weights, "
            "which an engine does not share: pick another verifier over engines")
    if isinstance(verifier, str):
        return make_verifier(verifier, **(verifier_kwargs or {}))
    if isinstance(verifier, VerifierSettings):
        return build_verifier(verifier)
    return verifier


class EngineRuntime:
    """Target and draft endpoints, and mode ``auto``'s planner for them (measured on first use)."""

    def __init__(self, target: str, draft: Any, settings: Settings, verifier: Any, names: dict[str, Any]):
        require(draft is None or is_url(draft), f"with an engine target the draft must be an engine URL too (or "
                f"None, or draft_model= on the target's engine), got {type(draft).__name__} {draft!r}")
        self.pair = EnginePair(target, draft, target_model=names.get("target_model"),
                               draft_model=names.get("draft_model"), settings=settings, template=names.get("template"),
                               scorer=names.get("scorer"))
        self.planner: Planner | None = None
        self.verifier = verifier

    def generate(self, prompt: str | Sequence, mode: str, settings: Settings, *,
                 k: int | None = None, learn: bool = True, raw: bool = False,
                 on_text: Callable[[str], None] | None = None) -> GenerationResult:
        """One answer in ``mode`` with ``settings`` (a question string is wrapped as a math problem
        unless ``raw``); ``k``: mode lr's drafted steps, mode auto's cap on them."""
        require(mode in ENGINE_MODES, f"mode {mode} runs token-level SD in this process; over an engine the modes "
                f"are {', '.join(ENGINE_MODES)} (for the engine's own token SD, start it with its SD and use ar)")
        require(settings.gamma is None, "gamma is not used over engines (the engine drafts its own tokens, if "
                                        "started with SD): leave it unset")
        self.pair.use(settings)
        ids = self.pair.prompt_ids(prompt if raw or not isinstance(prompt, str) else math_messages(prompt))  # once
        if mode == "ar":
            return runs.ar(self.pair, ids, settings.max_new_tokens, on_text)
        if mode == "lr":
            plan = FixedK(mode_k("lr", k), mode="engine-lr", width=settings.width, schedule=settings.schedule)
            return runs.lr(self.pair, ids, self.verifier, plan, settings.max_new_tokens, on_text)
        require(settings.width == 1, "width > 1 is not supported by mode auto; use mode lr")
        policy = AutoPolicy(self._planner(ids, k, learn), settings.steps.delimiters, mode="engine-auto")
        result = runs.lr(self.pair, ids, self.verifier, policy, settings.max_new_tokens, on_text)
        result.mode = "engine-auto"
        return result

    def _planner(self, ids: list[int], k: int | None, learn: bool) -> Planner:
        """The pair's planner (its endpoints measured once, after the prompt ``ids``), for one run: its
        cost table and book are the pair's, or copies when nothing is to be learned; ``k`` caps the
        drafted steps of this run's plans."""
        if self.planner is None:
            self.planner = asyncio.run(ameasured_planner(self.pair.target, self.pair.draft, ids))
        planner = self.planner.fork()
        if not learn:
            planner.costs, planner.book = copy.deepcopy(planner.costs), copy.deepcopy(planner.book)
        if check_max_k(k) is not None:
            planner.config = replace(planner.config, max_k=k)
        return planner

    def warm(self) -> None:
        self.pair.warm()

    def close(self) -> None:
        self.pair.close()


def refuse_local_options(options: dict[str, Any], precision: Any) -> None:
    """ConfigError naming the loading options given with an engine target (the engine loads its models)."""
    given = sorted(name for name, value in options.items() if value is not None)
    if precision is not None:
        given.append("precision")
    if given:
        raise ConfigError(f"{', '.join(given)}: loading options apply to models this process loads; an engine "
                          f"target loads its own (set them where the engine starts)")


__all__ = ["ENGINE_MODES", "ENGINE_NAMES", "EngineRuntime", "engine_verifier", "is_url", "refuse_local_options"]
