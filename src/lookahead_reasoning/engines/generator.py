"""``LookaheadGenerator`` over serving engines: what ``LookaheadGenerator(target="http://...")`` returns.

    gen = LookaheadGenerator(target="http://127.0.0.1:8080", draft="http://127.0.0.1:8081")
    result = gen.generate("A bakery sells muffins ...", max_new_tokens=512)          # mode auto
    same = gen.generate("A bakery sells muffins ...", mode="lr", k=2, schedule="async")
    base = gen.generate("A bakery sells muffins ...", mode="ar")                     # the engine alone

The modes are the engine's: ``ar`` (one completion), ``lr`` (fixed k, sync or async schedule) and
``auto`` (:class:`~.planning.EnginePlanner`, which measures the endpoints on its first call and keeps
what it learns across calls).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

from ..decoding.results import GenerationResult
from ..decoding.stepwise import fixed_plan
from ..errors import require
from ..presets import DEFAULT_MAX_NEW_TOKENS, DEFAULT_VERIFIER
from ..prompts import math_messages
from .pair import EnginePair, EngineSettings
from .planning import EnginePlanner, ameasured_planner

ENGINE_MODES = ("auto", "lr", "ar")


def is_url(model: Any) -> bool:
    return isinstance(model, str) and model.startswith(("http://", "https://"))


class EngineGenerator:
    """Generation over a target engine and a draft engine (module docstring)."""

    def __init__(self, target: str, draft: str | None = None, verifier: Any = DEFAULT_VERIFIER, *,
                 settings: EngineSettings | None = None, **names: Any):
        from ..verifiers.registry import make_verifier

        self.pair = EnginePair(target, draft, settings=settings, target_model=names.get("target_model"),
                               draft_model=names.get("draft_model"), template=names.get("template"))
        self.verifier = make_verifier(verifier) if isinstance(verifier, str) else verifier
        self.planner: EnginePlanner | None = None

    def _prompt(self, prompt: str | Sequence, raw: bool):
        return prompt if raw or not isinstance(prompt, str) else math_messages(prompt)

    def generate(self, prompt: str | Sequence, *, mode: str = "auto", max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                 k: int = 2, schedule: str = "sync", raw: bool = False,
                 on_text: Callable[[str], None] | None = None) -> GenerationResult:
        """One answer in ``mode``; a question string is wrapped as a math problem unless ``raw``."""
        require(mode in ENGINE_MODES, f"over engines the mode must be one of {', '.join(ENGINE_MODES)}, got {mode!r}")
        messages = self._prompt(prompt, raw)
        if mode == "ar":
            return self.pair.ar(messages, max_new_tokens, on_text)
        if mode == "lr":
            return self.pair.lr(messages, self.verifier, fixed_plan(k, 1, schedule), max_new_tokens, on_text)
        if self.planner is None:
            self.planner = asyncio.run(ameasured_planner(self.pair.target, self.pair.draft,
                                                         self.pair.prompt_ids(messages)))
        result = self.pair.lr(messages, self.verifier, self.planner, max_new_tokens, on_text, self.planner.learn)
        result.mode = "engine-auto"
        return result

    def close(self) -> None:
        self.pair.close()


__all__ = ["ENGINE_MODES", "EngineGenerator", "is_url"]
