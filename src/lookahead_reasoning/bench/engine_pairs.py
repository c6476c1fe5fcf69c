"""``lookahead-reasoning pairs --target-url URL --draft-url URL``: the bank of step pairs of
:mod:`lookahead_reasoning.bench.pairs`, written by serving engines.

The same protocol: follow the target's own greedy solution step by step; at each step boundary the
draft writes its next step from the prefix and the target writes its own (two requests sent at once,
each stopped at the step delimiters); the prefix grows by the target's step. After a step cut at the
cap the target writes on alone (no pair). The file is the local one, written and resumed by the same
helpers (:func:`~lookahead_reasoning.bench.pairs.run_pairs`, the runner's ``append_record`` and
``done_pairs``), so ``lookahead-reasoning verifiers pairs.jsonl`` reads it as it is.

What an engine does not give is null: ``draft_probs``, ``target_probs`` and ``target_probs_of_draft``
(an OpenAI-compatible engine scores no given continuation). ``agreed_tokens`` is the common prefix
of the two steps' ids: with greedy decoding and one tokenizer, the drafted tokens the target would
write itself. No verifier of the ablation reads the probabilities (``target-score`` scores each pair
with the model ``verifiers --target`` loads), so every verifier runs on an engine's pairs file.

Every record also names the endpoints (``target_url``, ``draft_url``) and the models they serve
(``target_model``, ``draft_model``, from ``/v1/models``); a rerun refuses a file written by other
models.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import ConfigError, require
from ..prompts import math_messages
from ..runtime.engine.pair import EnginePair
from ..runtime.engine.steps import EngineSteps
from ..steps import Step, StepRequest
from ..stopping import common_prefix
from ..verifiers.text import normalize_step, step_numbers
from .datasets import Problem
from .grading import grade
from .pairs import PairsConfig, run_pairs
from .results import read_records


class EnginePairRecorder:
    """:class:`~lookahead_reasoning.bench.pairs.PairRecorder`'s ``follow`` over an :class:`EnginePair`
    whose sampling is greedy (module docstring)."""

    def __init__(self, pair: EnginePair, max_new_tokens: int):
        require(pair.draft is not None, "pairs over engines need a draft: give --draft-url (or --draft-model)")
        require(pair.settings.sampling.greedy, "pairs over engines follow the target's greedy solution: "
                                               "the engine pair must sample greedily")
        self.pair, self.max_new_tokens = pair, max_new_tokens
        self.urls = {"target_url": pair.target.client.endpoint.url, "draft_url": pair.draft.client.endpoint.url}
        self.models = {"target_model": pair.target.client.model_name(),
                       "draft_model": pair.draft.client.model_name()}

    def check_resumable(self, path: Path) -> None:
        """ConfigError when ``path`` holds records of models other than these endpoints serve."""
        for rec in read_records(path):
            other = {k: rec[k] for k, v in self.models.items() if rec.get(k) not in (None, v)}
            if other:
                raise ConfigError(f"{path} holds pairs of other models ({other}; these endpoints serve "
                                  f"{self.models}): give another --out")

    def follow(self, problem: Problem, skip_steps: set[int] = frozenset()) -> Iterator[dict[str, Any]]:
        """The pair records of one problem as they are made (those of ``skip_steps`` are made again
        to reach the later ones, but not yielded), then its summary record."""
        prompt = self.pair.prompt_ids(math_messages(problem.question))
        ids: list[int] = []
        texts: list[str] = []
        index, pairs, stop, start = 0, 0, "budget", time.perf_counter()
        boundary = True
        while len(ids) < self.max_new_tokens:
            request = StepRequest(tuple(prompt + ids), self.max_new_tokens - len(ids))
            if boundary:
                (drafted, draft_s), (own, target_s) = _written([(self.pair.draft, request),
                                                                (self.pair.target, request)])
                pairs += 1
                if index not in skip_steps:
                    yield self._record(problem, index, (ids, "".join(texts)), (drafted, own), (draft_s, target_s))
            else:  # after a step cut at the cap, the target writes on alone
                [(own, _)] = _written([(self.pair.target, request)])
            ids, index, boundary = ids + own.ids, index + 1, own.boundary
            texts.append(own.text)
            if own.end == "eos" or not own.ids:
                stop = "eos" if own.end == "eos" else stop
                break
        yield self._summary(problem, ids, "".join(texts), (index, pairs, stop), time.perf_counter() - start)

    def _record(self, problem: Problem, index: int, prefix: tuple[list[int], str], steps: tuple[Step, Step],
                seconds: tuple[float, float]) -> dict[str, Any]:
        drafted, own = steps
        same_numbers = step_numbers(drafted.text) == step_numbers(own.text)
        return {"kind": "pair", "problem_id": problem.id, "index": problem.index, "mode": f"step-{index}",
                "step": index, "prefix": prefix[1], "prefix_tokens": len(prefix[0]),
                "draft": drafted.text, "draft_end": drafted.end, "draft_ids": list(drafted.ids),
                "target": own.text, "target_end": own.end, "target_ids": list(own.ids),
                "agreed_tokens": common_prefix(drafted.ids, own.ids, len(drafted.ids)),
                "draft_probs": None, "target_probs": None, "target_probs_of_draft": None,
                "exact": normalize_step(drafted.text) == normalize_step(own.text), "same_numbers": same_numbers,
                "draft_s": round(seconds[0], 4), "target_s": round(seconds[1], 4), **self.models, **self.urls,
                "engine": True, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}

    def _summary(self, problem: Problem, ids: list[int], text: str, counts: tuple[int, int, str],
                 wall: float) -> dict[str, Any]:
        steps, pairs, stop = counts
        graded = grade(text, problem.answer)
        return {"kind": "problem", "problem_id": problem.id, "index": problem.index, "mode": "problem",
                "question": problem.question, "gold": problem.answer, "predicted": graded.predicted,
                "correct": graded.correct, "text": text, "steps": steps, "pairs": pairs, "new_tokens": len(ids),
                "stop_reason": stop, "wall_s": round(wall, 3), **self.models, **self.urls, "engine": True,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def _written(jobs: Sequence[tuple[EngineSteps, StepRequest]]) -> list[tuple[Step, float]]:
    """Each (writer, request) answered by one step, the requests sent at once; with each step the
    seconds its own request took."""
    async def timed(writer: EngineSteps, request: StepRequest) -> tuple[Step, float]:
        start = time.perf_counter()
        step = await writer.awrite(request)
        return step, time.perf_counter() - start

    async def all_of() -> list[tuple[Step, float]]:
        try:
            return list(await asyncio.gather(*(timed(w, r) for w, r in jobs)))
        finally:
            for writer, _ in jobs:
                await writer.aclose()
    return asyncio.run(all_of())


def run_engine_pairs(pair: EnginePair, config: PairsConfig, progress: bool = True) -> Path:
    """Record the pairs of every problem of ``config`` not finished in ``config.out`` yet, over the
    engines of ``pair`` (``config``'s model names, dtype and SD settings are not used); returns the path."""
    recorder = EnginePairRecorder(pair, config.max_new_tokens)
    recorder.check_resumable(Path(config.out))
    return run_pairs(config, recorder=recorder, progress=progress)


__all__ = ["EnginePairRecorder", "run_engine_pairs"]
