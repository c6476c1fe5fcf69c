"""Steps written by a serving engine: the :class:`~lookahead_reasoning.decoding.stepwise.StepModel`
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

from ..decoding.stepwise import StepRequest
from ..decoding.steps import Step, StepConfig
from ..errors import EngineError, TokenizerMismatchError
from ..presets import ALT_TEMPERATURE
from ..sampling import SamplingConfig
from .client import Completion, EngineClient, Sampling

PROBE = "Natalia sold clips to 48 of her friends.\n\nThen she sold half as many in May: 48 / 2 = 24.\n\n"


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
        self.completion_tokens = 0

    # ------------------------------------------------------------------------------- text
    def encode(self, text: str) -> list[int]:
        return self.client.tokenize(text)

    def decode(self, ids: Sequence[int]) -> str:
        """The engine's text of ``ids`` (``/detokenize``)."""
        data = self.client.request("POST", "/detokenize", {"tokens": [int(t) for t in ids]})
        text = data.get("content", data.get("prompt")) if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise EngineError(f"{self.client.where}/detokenize answered no text: {str(data)[:200]}")
        return text

    # ------------------------------------------------------------------------------- requests
    def _sampling(self, request: StepRequest) -> Sampling:
        alternative = request.alternative > 0
        temperature = self.alt_temperature if alternative and self.sampling.greedy else self.sampling.temperature
        seed = None if self.seed is None else self.seed * 1_000_003 + next(self._counter)
        return Sampling(temperature, self.sampling.top_p if temperature > 0 else 1.0, seed if temperature > 0 else None)

    def _budget(self, request: StepRequest) -> int:
        return max(1, min(self.steps.max_step_tokens, request.budget))

    def _step(self, done: Completion) -> Step:
        """A :class:`Step` from a completion: the delimiter put back, ids the engine's or re-tokenized."""
        self.requests += 1
        self.completion_tokens += done.completion_tokens
        end, text = done.end, done.text
        if end == "stop_string":
            if done.stop is None and text == "" and done.completion_tokens <= 1:
                end = "eos"  # an engine that reports only "stop": an empty stop is end-of-sequence
            else:
                text += done.stop if done.stop is not None else self.steps.delimiters[0]
        ids = done.token_ids
        if ids is not None and end == "stop_string":
            whole = self._text_of_ids(done)
            if whole.startswith(text):  # a stop string inside a token: the token's whole text counts
                text = whole
            else:
                ids = None
        if ids is None:
            ids = self.client.tokenize(text) if text else []
        return Step(list(ids), text, end)

    def _text_of_ids(self, done: Completion) -> str:
        """The text of the completion's ids: their bytes where the engine returned them, else ``/detokenize``."""
        if done.logprobs and len(done.logprobs) == len(done.token_ids) and all(t.bytes is not None for t in done.logprobs):
            return b"".join(t.bytes for t in done.logprobs).decode("utf-8", errors="replace")
        return self.decode(done.token_ids)

    async def awrite(self, request: StepRequest) -> Step:
        done = await self.client.acomplete(list(request.context), self._budget(request), self.steps.delimiters,
                                           self._sampling(request), logprobs=1)
        return self._step(done)

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

def check_same_tokenizer(target: EngineSteps, draft: EngineSteps, probe: str = PROBE) -> None:
    """TokenizerMismatchError unless both endpoints cut ``probe`` into the same ids: the cycle passes
    one prefix of ids to both models, which needs one vocabulary."""
    mine, theirs = draft.encode(probe), target.encode(probe)
    if mine != theirs:
        raise TokenizerMismatchError(
            f"the draft at {draft.client.endpoint.url} and the target at {target.client.endpoint.url} tokenize text "
            f"differently ({len(mine)} vs {len(theirs)} ids for a probe sentence; first difference at id "
            f"{next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))}): "
            f"Lookahead Reasoning over engines needs a draft and a target with one tokenizer")


__all__ = ["EngineSteps", "check_same_tokenizer"]
