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
The benchmark over engines runs its problems through the same runtime (:meth:`EngineRuntime.agenerate`,
many runs on one event loop sharing one planner).

Under the runtime, over an :class:`~lookahead_reasoning.runtime.engine.pair.EnginePair`, every mode is a
policy of the one loop (:func:`alr`: the driver over the step-model runtime of
:mod:`lookahead_reasoning.decoding.stepwise`, each cycle :func:`lookahead_reasoning.decoding.lookahead.run_cycle`):

* ``ar``    a fixed plan of no drafted step whose one cycle writes the whole answer: one completion
            request (the engine's own speed, with the engine's own token-level speculation if it was
            started with it); :func:`ar` is it, and :func:`window_plan` (requests of a fixed number of tokens);
* ``lr``    a fixed plan of k drafted steps, the rows sent as concurrent requests (``sync`` or ``async``);
* ``auto``  every cycle planned by mode ``auto``'s planner, pricing requests.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

from .decoding.driver import CyclePolicy, FixedPolicy, mode_plan
from .decoding.results import GenerationResult
from .decoding.stepwise import agenerate_stepwise
from .errors import EngineError, require
from .planning.endpoints import ameasured_planner
from .planning.planner import Planner
from .planning.policy import AutoPolicy
from .presets import DEFAULT_MAX_NEW_TOKENS, check_k
from .prompts import math_messages
from .runtime.engine.pair import EnginePair, Messages
from .settings import Settings
from .steps import closing
from .verifiers.options import VerifierSettings, any_verifier
from .verifiers.registry import make_verifier

ENGINE_MODES = ("auto", "lr", "ar")
# Settings an engine target cannot honour: token SD inside the rows runs in this process (an engine started with
# its own SD drafts its tokens itself, and mode ar runs it)
LOCAL_ONLY_SETTINGS = ("gamma", "draft_stop_below", "token_sd")
ENGINE_NAMES = ("template", "target_model", "draft_model", "scorer")  # options that only an engine target takes
Prompt = str | Messages | Sequence[int]


def is_url(model: Any) -> bool:
    """Whether ``model`` is an engine's URL: http(s) and a host."""
    return isinstance(model, str) and model.startswith(("http://", "https://")) and bool(urlsplit(model).netloc)


def check_scheme(value: Any, option: str) -> None:
    """ConfigError naming ``option`` for an address of another scheme than http(s) (``ftp://``, ``ws://``, ...):
    an engine is reached over HTTP, and a model name holds no "://"."""
    require(not isinstance(value, str) or "://" not in value or is_url(value), f"{option} {value!r}: an engine's "
            "URL is http:// or https:// and a host (a model is named without a scheme)")


def engine_verifier(verifier: Any, verifier_kwargs: dict | None = None) -> Any:
    """The verifier object for a run over engines: a judge over HTTP works; a verifier that reads the
    target's weights (``target-score``) cannot, since an engine shares none."""
    name = verifier.name if isinstance(verifier, VerifierSettings) else verifier if isinstance(verifier, str) else None
    require(name is None or "target-score" not in name, "the target-score verifier reads the target's weights, "
            "which an engine does not share: pick another verifier over engines")
    return any_verifier(verifier, verifier_kwargs)


class EngineRuntime:
    """Target and draft endpoints, and mode ``auto``'s planner for them (measured on first use, once for
    every run that shares the runtime)."""

    def __init__(self, target: str, draft: Any, settings: Settings, verifier: Any, names: dict[str, Any]):
        require(draft is None or is_url(draft), f"with an engine target the draft must be an engine URL too (or "
                f"None, or draft_model= on the target's engine), got {type(draft).__name__} {draft!r}")
        self.pair = EnginePair(target, draft, target_model=names.get("target_model"),
                               draft_model=names.get("draft_model"), settings=settings, template=names.get("template"),
                               scorer=names.get("scorer"))
        self.planner: Planner | None = None
        self.verifier = verifier
        self._measuring = asyncio.Lock()

    def generate(self, prompt: str | Sequence, mode: str, settings: Settings, *,
                 k: int | None = None, learn: bool = True, raw: bool = False,
                 on_text: Callable[[str], None] | None = None) -> GenerationResult:
        """One answer in ``mode`` with ``settings`` (a question string is wrapped as a math problem
        unless ``raw``); ``k``: mode lr's drafted steps, mode auto's cap on them; ``on_text`` receives
        the kept text as each cycle ends (mode ar: the whole answer, its one cycle's, at its end)."""
        self.check(mode, settings)  # before the first request (a tokenization is one)
        ids = self.prompt_ids(prompt, raw)

        def each(trace, run) -> None:
            for step in trace.kept_steps if on_text else ():
                on_text(step.text)

        return asyncio.run(closing(self.agenerate(ids, mode, settings, k=k, learn=learn, on_cycle=each), self.pair))

    async def agenerate(self, ids: list[int], mode: str, settings: Settings, *, k: int | None = None,
                        learn: bool = True, on_cycle: Callable | None = None,
                        window: int | None = None) -> GenerationResult:
        """:meth:`generate` for asyncio, from the prompt's token ids; ``on_cycle(trace, run)`` each cycle;
        ``window``: mode ar in requests of that many tokens (None: one request; the benchmark's timelines).
        Runs on one event loop may share the runtime (their connections are closed by whoever runs the
        loop); mode ``auto``'s runs then fork one planner, measured by the first to ask."""
        self.check(mode, settings)
        require(window is None or mode == "ar", f"window: only mode ar decodes in windows, not {mode}")
        self.pair.use(settings)
        settings, policy = mode_plan(mode, settings.with_overrides(k=k), engine=True)
        if window is not None:
            policy = window_plan(window)
        if policy is None:
            policy = AutoPolicy(await self.aplanner(ids, k, learn), settings.steps.delimiters, mode="engine-auto")
        return await alr(self.pair, ids, self.verifier, policy, settings.max_new_tokens, on_cycle)

    @staticmethod
    def check(mode: str, settings: Settings) -> None:
        """ConfigError for a mode or a setting an engine cannot honour (before anything is sent)."""
        require(mode in ENGINE_MODES, f"mode {mode} runs token-level SD in this process; over an engine the modes "
                f"are {', '.join(ENGINE_MODES)} (for the engine's own token SD, start it with its SD and use ar)")
        refuse_local_settings({"gamma": settings.gamma})

    async def aplanner(self, ids: list[int], k: int | None = None, learn: bool = True) -> Planner:
        """A planner for one run: the endpoints are measured once, after the prompt ``ids``, by the first
        run to ask (the others wait, so nothing else is in flight while it measures); its cost table and
        book are the runtime's, or copies when nothing is to be learned; ``k`` caps the drafted steps."""
        async with self._measuring:
            if self.planner is None:
                self.planner = await ameasured_planner(self.pair.target, self.pair.draft, ids)
        planner = self.planner.fork()
        if not learn:
            planner.costs, planner.book = copy.deepcopy(planner.costs), copy.deepcopy(planner.book)
        if check_k(k, "auto") is not None:  # k caps a plan's drafted steps
            planner.config = replace(planner.config, max_k=k)
        return planner

    def prompt_ids(self, prompt: Prompt, raw: bool = False) -> list[int]:
        """The prompt's token ids (a question string is wrapped as a math problem unless ``raw``)."""
        return self.pair.prompt_ids(prompt if raw or not isinstance(prompt, str) else math_messages(prompt))

    def warm(self) -> None:
        self.pair.warm()


def ar(pair: EnginePair, prompt: Prompt, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> GenerationResult:
    """Plain decoding by the target's engine, for synchronous callers: the ``ar`` plan of the one loop (one
    completion request, no stop string)."""
    return asyncio.run(closing(alr(pair, prompt, make_verifier("exact"), window_plan(None), max_new_tokens), pair))


def window_plan(window: int | None) -> FixedPolicy:
    """Mode ar's plan in requests of ``window`` tokens (None: one request), each cycle one request: no mode of
    its own, the plain decoding a benchmark's timeline times."""
    return FixedPolicy(0, mode="engine-ar", gamma=0, chunk=window)


async def alr(pair: EnginePair, prompt: Prompt, verifier, policy: CyclePolicy | None = None,
              max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, on_cycle=None) -> GenerationResult:
    """The one loop over the engines, for asyncio: cycles of ``policy``'s plans (default: sync LR with mode
    lr's k); the result reports the policy's mode. The caller that runs the event loop closes the pair's
    connections on it (other runs may share them). Only a policy that drafts needs a draft endpoint."""
    policy = policy or mode_plan("lr", Settings(), engine=True)[1]
    require(pair.draft is not None or policy.k == 0,
            "Lookahead Reasoning over engines needs a draft endpoint or draft model", EngineError)
    return await agenerate_stepwise(pair.target, pair.draft, pair.prompt_ids(prompt), verifier, policy,
                                    max_new_tokens, on_cycle)


def refuse_local_settings(given: dict[str, Any]) -> None:
    """ConfigError naming the settings of :data:`LOCAL_ONLY_SETTINGS` given (not None) for an engine target."""
    named = sorted(name for name in LOCAL_ONLY_SETTINGS if given.get(name) is not None)
    require(not named, f"{', '.join(named)}: token-level SD inside the rows runs in this process; over an engine "
            "each row is one request (start the engine with its own SD and use mode ar for token SD there)")


def refuse_local_options(options: dict[str, Any], precision: Any) -> None:
    """ConfigError naming the loading options given with an engine target (the engine loads its models)."""
    given = sorted(name for name, value in options.items() if value is not None)
    given += ["precision"] if precision is not None else []
    require(not given, f"{', '.join(given)}: loading options apply to models this process loads; an engine target "
            "loads its own (set them where the engine starts)")


__all__ = ["ENGINE_MODES", "ENGINE_NAMES", "LOCAL_ONLY_SETTINGS", "EngineRuntime", "refuse_local_settings", "alr", "ar", "check_scheme", "engine_verifier", "is_url",
           "refuse_local_options"]
