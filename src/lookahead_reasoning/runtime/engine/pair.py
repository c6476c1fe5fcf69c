"""A target and a draft served by engines: the engine runtime's pair of step writers.

:class:`EnginePair` connects to one or two OpenAI-compatible endpoints (the draft may be a second
endpoint or, with ``draft_model``, a second model of the target's endpoint), checks that they share
one tokenizer, turns prompts into token ids and warms the servers. What runs over it (plain
decoding, Lookahead Reasoning) is :mod:`lookahead_reasoning.engine_runtime`.

Prompts are chat messages, text or token ids. Messages get the served model's chat template: from
``template`` where one is given (a tokenizer, or the offline name, directory or hub id of one), else
from the engine's own route (:meth:`~.dialects.Dialect.chat_ids`: vLLM's ``/tokenize`` with messages,
llama.cpp's ``/apply-template``), else from the tokenizer of the model name the engine serves, loaded
here.

The likelihood verifiers need the target's probabilities of drafted tokens: the target's endpoint gives
them where it scores prompts (vLLM); ``scorer`` names what gives them instead (:func:`make_scorer`: another
endpoint, or the target's model loaded in this process, as for llama.cpp's server, which cannot).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ...errors import LookaheadError, ModelLoadError, PromptError, require
from ...models import load_model
from ...models.loading import load_tokenizer
from ...settings import Settings
from ..lm import LM
from ..scorer import SessionScorer
from ..vocab import ENGINE_LR_NEEDS, SCORER_NEEDS, check_same_tokenizer
from .client import Endpoint, EngineClient
from .steps import EngineSteps

Messages = Sequence[dict[str, str]]


class EnginePair:
    """Target and draft step writers over engines (module docstring). Of ``settings`` (the library's one
    :class:`~...settings.Settings`) it reads the steps, the sampling, the seed, ``alt_temperature``
    and the requests' ``timeout_s`` and ``retries``."""

    def __init__(self, target_url: str, draft_url: str | None = None, *, target_model: str | None = None,
                 draft_model: str | None = None, settings: Settings | None = None, template: Any = None,
                 scorer: Any = None):
        self.settings = settings or Settings()
        s = self.settings

        def steps_at(url: str, model: str | None) -> EngineSteps:
            client = EngineClient(Endpoint(url, model, timeout_s=s.timeout_s, retries=s.retries))
            return EngineSteps(client, s.steps, s.sampling, s.seed, s.alt_temperature)

        self.target = steps_at(target_url, target_model)
        has_draft = draft_url is not None or draft_model is not None
        self.draft = steps_at(draft_url or target_url, draft_model) if has_draft else None
        try:
            self.template = load_tokenizer(template) if isinstance(template, (str, os.PathLike)) else template
        except LookaheadError as exc:
            raise type(exc)(f"template (--template) {template!r}: {exc}") from None
        self.check()
        if scorer is not None:  # the likelihood verifiers' scores, where the target's engine gives none
            self.target.scorer = scorer if hasattr(scorer, "ascore") else make_scorer(scorer, s)
            check_same_tokenizer(self.target.scorer, self.target, SCORER_NEEDS, roles=("the scorer", "the target"))

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
            check_same_tokenizer(self.draft, self.target, ENGINE_LR_NEEDS)

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
            return self.chat_ids(prompt)
        require(len(prompt) > 0, "the prompt is empty", PromptError)
        return [int(t) for t in prompt]

    def chat_ids(self, messages: Messages) -> list[int]:
        """Token ids of ``messages`` with the chat template applied and the assistant's turn opened
        (module docstring: the given template, the engine's route, or the served model's tokenizer)."""
        if self.template is None:
            ids = self.target.client.chat_ids(messages)
            if ids is not None:
                return ids
            self.template = self._served_tokenizer()
        text = self.template.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return self.target.encode(text)

    def _served_tokenizer(self) -> Any:
        name = self.target.client.model_name()
        try:
            return load_tokenizer(name)
        except ModelLoadError as exc:
            raise PromptError(f"{self.target.client.where} applies no chat template itself, and the model it serves "
                              f"({name!r}) is no tokenizer found here ({exc}); name the served model's tokenizer "
                              f"with --template (an offline name, a directory or a hub id; in Python: template=), "
                              f"or send a text prompt") from None

    def close(self) -> None:
        for steps in (self.target, self.draft, self.target.scorer):
            if isinstance(steps, EngineSteps):
                steps.client.close()

    async def aclose(self) -> None:
        """Close this event loop's connections to both endpoints (once no run on the loop needs them)."""
        for steps in (self.target, self.draft):
            if steps is not None:
                await steps.aclose()


def make_scorer(name: str | os.PathLike, settings: Settings) -> Any:
    """What scores drafted tokens for a run over engines: an engine URL that returns prompt
    log-probabilities (vLLM), or a model loaded in this process (offline name, directory or hub id),
    scored on one cached session (:class:`~..scorer.SessionScorer`)."""
    if isinstance(name, str) and name.startswith(("http://", "https://")):
        return EngineSteps(EngineClient(Endpoint(name, None, timeout_s=settings.timeout_s, retries=settings.retries)))
    return SessionScorer(LM.from_loaded(load_model(str(name))))


__all__ = ["EnginePair", "make_scorer"]
