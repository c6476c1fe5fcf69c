"""Steps written by a serving engine: the :class:`~lookahead_reasoning.steps.StepModel`
protocol over an OpenAI-compatible endpoint.

A step is one ``/v1/completions`` request: the prefix as token ids, ``stop`` = the step delimiters,
``max_tokens`` = the step cap or what is left of the budget. The reply's stop string (which the
protocol leaves out of the text) is put back, so a step's text and ids end on their delimiter as they
do in the local loops. The step's ids are the engine's own where it returns them and they decode to
the step's text; otherwise the engine tokenizes the text (one more request).

Sampling: greedy requests are deterministic; sampled ones carry a seed drawn from the run's seed and
a counter, so a run can be repeated. Alternative drafts (width > 1) are sampled at
``alt_temperature`` when the run is greedy.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Sequence

from ...errors import EngineError
from ...presets import ALT_TEMPERATURE
from ...sampling import SamplingConfig
from ...steps import Step, StepConfig, StepRequest, TokenScores
from .client import Completion, EngineClient


class EngineSteps:
    """Steps from one engine endpoint (module docstring). ``name`` is the served model's name."""

    def __init__(self, client: EngineClient, steps: StepConfig | None = None, sampling: SamplingConfig | None = None,
                 seed: int | None = 0, alt_temperature: float = ALT_TEMPERATURE):
        self.client, self.steps = client, steps or StepConfig()
        self.sampling = sampling or SamplingConfig()
        self.alt_temperature, self.seed = alt_temperature, seed
        self._counter = itertools.count()
        self.name = client.endpoint.model or client.endpoint.url
        self.requests = 0
        self.scorer = None  # set: what scores given tokens in this endpoint's stead (EnginePair's ``scorer``)

    # ------------------------------------------------------------------------------- text
    def encode(self, text: str) -> list[int]:
        return self.client.tokenize(text)

    def decode(self, ids: Sequence[int]) -> str:
        """The engine's text of ``ids`` (``/detokenize``)."""
        return self._detokenized(self.client.request("POST", "/detokenize", {"tokens": [int(t) for t in ids]}))

    def _detokenized(self, data) -> str:
        """The text of a ``/detokenize`` reply (llama.cpp's ``content``, vLLM's ``prompt``)."""
        text = data.get("content", data.get("prompt")) if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise EngineError(f"{self.client.where}/detokenize answered no text: {str(data)[:200]}")
        return text

    # ------------------------------------------------------------------------------- requests
    def _sampling(self, request: StepRequest) -> tuple[SamplingConfig, int | None]:
        """How one request samples, and its seed: the run's sampling, or for an alternative draft of a
        greedy run, ``alt_temperature`` (as the local loops' alternative writer)."""
        alternative = request.alternative > 0
        sampling = SamplingConfig(self.alt_temperature) if alternative and self.sampling.greedy else self.sampling
        seed = None if self.seed is None else self.seed * 1_000_003 + next(self._counter)
        return sampling, seed

    def _budget(self, request: StepRequest) -> int:
        return max(1, request.budget if request.free else min(self.steps.max_step_tokens, request.budget))

    def _end_and_text(self, done: Completion) -> tuple[str, str]:
        """Why the step ended and its text with the stop string put back."""
        self.requests += 1
        if done.end != "stop_string":
            return done.end, done.text
        if done.stop is None and done.text == "" and done.completion_tokens <= 1:
            return "eos", ""  # an engine that reports only "stop": an empty stop is end-of-sequence
        return "stop_string", done.text + (done.stop if done.stop is not None else self.steps.delimiters[0])

    def _ids_text(self, done: Completion) -> str | None:
        """The text of the engine's ids where the reply itself tells it (logprobs with bytes), else None."""
        lp = done.logprobs
        if lp and len(lp) == len(done.token_ids) and all(t.bytes is not None for t in lp):
            return b"".join(t.bytes for t in lp).decode("utf-8", errors="replace")
        return None

    async def awrite(self, request: StepRequest) -> Step:
        """One step (module docstring). A step that stopped at a delimiter is checked against the text
        of the engine's ids (``/detokenize``, a short request): where the stop string sat inside a
        token, the token's whole text counts; where the ids say something else, the text is tokenized."""
        done = await self.client.acomplete(list(request.context), self._budget(request),
                                           () if request.free else self.steps.delimiters, *self._sampling(request))
        end, text = self._end_and_text(done)
        if request.free and end == "stop_string":  # no stop string was asked: the engine stopped on its own
            end, text = "eos", done.text
        ids = done.token_ids
        if ids is not None and end == "stop_string":
            whole = self._ids_text(done)
            if whole is None:
                whole = await self.adecode(ids)
            if whole.startswith(text):
                text = whole
            else:
                ids = None
        if ids is None:
            ids = await self.aencode(text) if text else []
        return Step(list(ids), text, end)

    async def adecode(self, ids: Sequence[int]) -> str:
        return self._detokenized(await self.client.arequest("POST", "/detokenize", {"tokens": [int(t) for t in ids]}))

    async def aencode(self, text: str) -> list[int]:
        return await asyncio.to_thread(self.client.tokenize, text)

    @property
    def can_score(self) -> bool:
        """Whether :meth:`score` has something to ask: a ``scorer``, or an engine that scores prompts."""
        return self.scorer is not None or self.client.dialect.scores_prompts

    def score(self, context: Sequence[int], ids: Sequence[int]) -> TokenScores:
        """The engine's probability and rank of each of ``ids`` after ``context``: one prefill request
        (vLLM's prompt log-probabilities; llama.cpp's server cannot, and says so), or the ``scorer``'s."""
        if self.scorer is not None:
            return self.scorer.score(context, ids)
        return TokenScores.of(*self.client.score(list(context) + list(ids), len(context)))

    async def ascore(self, context: Sequence[int], ids: Sequence[int]) -> TokenScores:
        if self.scorer is not None:
            return await self.scorer.ascore(context, ids)
        return TokenScores.of(*await self.client.ascore(list(context) + list(ids), len(context)))

    def write(self, requests: Sequence[StepRequest]) -> list[Step]:
        """The requests sent at once (the engine batches them), answered in order."""
        async def all_of() -> list[Step]:
            try:
                return list(await asyncio.gather(*(self.awrite(r) for r in requests)))
            finally:
                await self.aclose()
        return asyncio.run(all_of())

    async def aclose(self) -> None:
        """Close this event loop's connections (a run calls it when it ends)."""
        await self.client.aclose()


__all__ = ["EngineSteps"]
