"""A target and a draft served by engines: the engine-side front door of the library.

:class:`EnginePair` connects to one or two OpenAI-compatible endpoints (the draft may be a second
endpoint or, with ``draft_model``, a second model of the target's endpoint), checks that they share
one tokenizer, and runs:

* ``ar``     plain decoding: one completion request for the whole answer (the engine's own speed,
             with the engine's own token-level speculation if it was started with it);
* ``lr``     Lookahead Reasoning, every cycle planned by a fixed plan or by :mod:`.planning`
             (``auto``), the rows sent as concurrent requests (``sync`` or ``async`` schedule).

Prompts are chat messages or text; the chat template is the engine's (llama.cpp's
``/apply-template``) or, for engines without that route, the one of a local tokenizer passed as
``template``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Sequence

from ..decoding.results import GenerationResult
from ..decoding.settings import Settings
from ..decoding.steps import closing
from ..decoding.stepwise import Planner, agenerate_stepwise, fixed_plan
from ..errors import EngineError, PromptError, require
from ..presets import DEFAULT_MAX_NEW_TOKENS, mode_k
from .client import Endpoint, EngineClient, Sampling
from .steps import EngineSteps, check_same_tokenizer

Messages = Sequence[dict[str, str]]


class EnginePair:
    """Target and draft step writers over engines (module docstring). Of ``settings`` (the library's one
    :class:`~..decoding.settings.Settings`) it reads the steps, the sampling, the seed, ``alt_temperature``
    and the requests' ``timeout_s`` and ``retries``."""

    def __init__(self, target_url: str, draft_url: str | None = None, *, target_model: str | None = None,
                 draft_model: str | None = None, settings: Settings | None = None, template: Any = None):
        self.settings = settings or Settings()
        s = self.settings

        def steps_at(url: str, model: str | None) -> EngineSteps:
            client = EngineClient(Endpoint(url, model, timeout_s=s.timeout_s, retries=s.retries))
            return EngineSteps(client, s.steps, s.sampling, s.seed, s.alt_temperature)

        self.target = steps_at(target_url, target_model)
        has_draft = draft_url is not None or draft_model is not None
        self.draft = steps_at(draft_url or target_url, draft_model) if has_draft else None
        self.template = template
        self.check()

    def use(self, settings: Settings) -> None:
        """Run the next requests with ``settings``' steps, sampling, seed and ``alt_temperature``; the
        connections' ``timeout_s`` and ``retries`` were fixed when the pair connected."""
        require(settings.timeout_s == self.settings.timeout_s and settings.retries == self.settings.retries,
                "timeout_s and retries are fixed when the generator connects to its engines: give them to the "
                "constructor, not to one call")
        self.settings = settings
        for steps in (self.target, self.draft):
            if steps is not None:
                steps.steps, steps.sampling = settings.steps, settings.sampling
                steps.seed, steps.alt_temperature = settings.seed, settings.alt_temperature

    def check(self) -> None:
        """EngineError unless every endpoint answers; TokenizerMismatchError unless they share a tokenizer."""
        for steps in (self.target, self.draft):
            if steps is not None and not steps.client.healthy():
                steps.client.model_name()  # raises the endpoint's own error (connection, HTTP status)
        if self.draft is not None:
            check_same_tokenizer(self.target, self.draft)

    def warm(self, tokens: int = 16, draft: bool = True, prompt: str | Messages | Sequence[int] | None = None) -> None:
        """One short completion from the target's endpoint (and the draft's, with ``draft``): a server
        that has just started, or that another server on the same cores has just pushed out of the
        CPU's caches, is slow on its first forward, which no timed run should pay. With ``prompt``, the
        completion continues that prompt, so the server caches it: runs of several modes on one prompt
        then all find it cached (otherwise the first pays its prefill and the others do not)."""
        ids = self.prompt_ids(prompt) if prompt is not None else None
        for steps in (self.target, self.draft if draft else None):
            if steps is not None:
                steps.client.complete(ids if ids is not None else steps.encode("Count from one to ten."), tokens)

    # ------------------------------------------------------------------------------- prompts
    def prompt_ids(self, prompt: str | Messages | Sequence[int]) -> list[int]:
        """Token ids of a prompt: ids pass through, text is tokenized, messages go through the template."""
        if isinstance(prompt, str):
            require(prompt.strip() != "", "the prompt is empty", PromptError)
            return self.target.encode(prompt)
        if prompt and isinstance(prompt[0], dict):
            return self.target.encode(self.chat_text(prompt))
        require(len(prompt) > 0, "the prompt is empty", PromptError)
        return [int(t) for t in prompt]

    def chat_text(self, messages: Messages) -> str:
        """The chat template applied to ``messages`` with the assistant's turn opened."""
        if self.template is not None:
            return self.template.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        try:
            data = self.target.client.request("POST", "/apply-template", {"messages": list(messages)})
        except EngineError as exc:
            raise PromptError(f"{self.target.client.where} applies no chat template ({exc}); pass a local "
                              f"tokenizer with a chat template as `template`, or a text prompt") from None
        return data["prompt"]

    # ------------------------------------------------------------------------------- modes
    def ar(self, prompt: str | Messages | Sequence[int], max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
           on_text: Callable[[str], None] | None = None) -> GenerationResult:
        """Plain decoding by the target's engine: one completion request, no stop string."""
        require(isinstance(max_new_tokens, int) and max_new_tokens >= 1,
                f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        ids, s = self.prompt_ids(prompt), self.settings
        seed = s.seed if not s.sampling.greedy else None
        start = time.perf_counter()
        done = self.target.client.complete(ids, max_new_tokens, (), Sampling(s.sampling.temperature, s.sampling.top_p,
                                                                              seed))
        wall = time.perf_counter() - start
        new = done.token_ids if done.token_ids is not None else self.target.encode(done.text)
        if on_text:
            on_text(done.text)
        return GenerationResult(list(new), done.text, ids, "eos" if done.end != "budget" else "budget", 0, wall,
                                mode="engine-ar")

    def ar_windows(self, prompt: str | Messages | Sequence[int], max_new_tokens: int,
                   window: int) -> tuple[GenerationResult, list[tuple[int, float]]]:
        """Plain decoding in requests of ``window`` tokens, each continuing the ids so far (the engine's
        prefix cache holds them, so a request costs its new tokens): the result and, after each request,
        (tokens so far, seconds since the start): the cost of decoding at each position of a long answer."""
        require(isinstance(window, int) and window >= 1, f"window must be an integer >= 1, got {window!r}")
        ids, new, text, timeline = self.prompt_ids(prompt), [], "", []
        start, end = time.perf_counter(), "budget"
        while len(new) < max_new_tokens and end == "budget":
            part = self.ar(ids + new, min(window, max_new_tokens - len(new)))
            new, text, end = new + part.token_ids, text + part.text, part.stop_reason
            timeline.append((len(new), round(time.perf_counter() - start, 4)))
        wall = time.perf_counter() - start
        return GenerationResult(new, text, ids, end, 0, wall, mode="engine-ar"), timeline

    async def alr(self, prompt: str | Messages | Sequence[int], verifier, planner: Planner | None = None,
                  max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, on_cycle=None) -> GenerationResult:
        """Lookahead Reasoning over the engines, for asyncio (default plan: sync, mode lr's k); the caller that
        runs the event loop closes the pair's connections on it (other runs may share them)."""
        require(self.draft is not None, "Lookahead Reasoning over engines needs a draft endpoint or draft model",
                EngineError)
        ids = self.prompt_ids(prompt)
        result = await agenerate_stepwise(self.target, self.draft, ids, verifier, planner or fixed_plan(mode_k("lr")),
                                          max_new_tokens, on_cycle)
        result.text = "".join(s.text for c in result.stats.cycles for s in c.kept_steps)
        result.mode = "engine-lr"
        return result

    def lr(self, prompt: str | Messages | Sequence[int], verifier, planner: Planner | None = None,
           max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, on_text: Callable[[str], None] | None = None,
           on_cycle: Callable | None = None) -> GenerationResult:
        """:meth:`alr` for synchronous callers; ``on_text`` receives the kept text as each cycle ends,
        ``on_cycle(trace, run)`` each cycle (a planner's ``learn``)."""
        def each(trace, run) -> None:
            if on_cycle is not None:
                on_cycle(trace, run)
            for step in trace.kept_steps if on_text else ():
                on_text(step.text)

        return asyncio.run(closing(self.alr(prompt, verifier, planner, max_new_tokens, each), self))

    def close(self) -> None:
        for steps in (self.target, self.draft):
            if steps is not None:
                steps.client.close()

    async def aclose(self) -> None:
        """Close this event loop's connections to both endpoints (once no run on the loop needs them)."""
        for steps in (self.target, self.draft):
            if steps is not None:
                await steps.aclose()


__all__ = ["EnginePair"]
