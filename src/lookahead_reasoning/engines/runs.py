"""What runs over an :class:`~lookahead_reasoning.runtime.engine.pair.EnginePair`:

* :func:`ar`   plain decoding: one completion request for the whole answer (the engine's own speed,
               with the engine's own token-level speculation if it was started with it);
* :func:`lr`   Lookahead Reasoning, every cycle planned by a policy (fixed k, or mode ``auto``'s planner),
               the rows sent as concurrent requests (``sync`` or ``async`` schedule), by the
               one cycle (:func:`lookahead_reasoning.decoding.lookahead.run_cycle`) on the step-model runtime of
               :mod:`lookahead_reasoning.decoding.stepwise`.

The pair's settings (sampling, seed, steps) apply; ``max_new_tokens`` is per call.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Sequence

from ..decoding.driver import CyclePolicy, FixedK
from ..decoding.results import GenerationResult
from ..decoding.stepwise import agenerate_stepwise
from ..errors import EngineError, require
from ..presets import DEFAULT_MAX_NEW_TOKENS, mode_k
from ..runtime.engine.client import Sampling
from ..runtime.engine.pair import EnginePair, Messages
from ..steps import closing

Prompt = str | Messages | Sequence[int]


def ar(pair: EnginePair, prompt: Prompt, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
       on_text: Callable[[str], None] | None = None) -> GenerationResult:
    """Plain decoding by the target's engine: one completion request, no stop string."""
    require(isinstance(max_new_tokens, int) and max_new_tokens >= 1,
            f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    ids, s = pair.prompt_ids(prompt), pair.settings
    seed = s.seed if not s.sampling.greedy else None
    start = time.perf_counter()
    done = pair.target.client.complete(ids, max_new_tokens, (), Sampling(s.sampling.temperature, s.sampling.top_p, seed))
    wall = time.perf_counter() - start
    new = done.token_ids if done.token_ids is not None else pair.target.encode(done.text)
    if on_text:
        on_text(done.text)
    return GenerationResult(list(new), done.text, ids, "eos" if done.end != "budget" else "budget", 0, wall,
                            mode="engine-ar")


def ar_windows(pair: EnginePair, prompt: Prompt, max_new_tokens: int,
               window: int) -> tuple[GenerationResult, list[tuple[int, float]]]:
    """Plain decoding in requests of ``window`` tokens, each continuing the ids so far (the engine's
    prefix cache holds them, so a request costs its new tokens): the result and, after each request,
    (tokens so far, seconds since the start): the cost of decoding at each position of a long answer."""
    require(isinstance(window, int) and window >= 1, f"window must be an integer >= 1, got {window!r}")
    ids, new, text, timeline = pair.prompt_ids(prompt), [], "", []
    start, end = time.perf_counter(), "budget"
    while len(new) < max_new_tokens and end == "budget":
        part = ar(pair, ids + new, min(window, max_new_tokens - len(new)))
        new, text, end = new + part.token_ids, text + part.text, part.stop_reason
        timeline.append((len(new), round(time.perf_counter() - start, 4)))
    wall = time.perf_counter() - start
    return GenerationResult(new, text, ids, end, 0, wall, mode="engine-ar"), timeline


async def alr(pair: EnginePair, prompt: Prompt, verifier, policy: CyclePolicy | None = None,
              max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, on_cycle=None) -> GenerationResult:
    """Lookahead Reasoning over the engines, for asyncio (default plan: sync, mode lr's k); the caller
    that runs the event loop closes the pair's connections on it (other runs may share them)."""
    require(pair.draft is not None, "Lookahead Reasoning over engines needs a draft endpoint or draft model",
            EngineError)
    ids = pair.prompt_ids(prompt)
    result = await agenerate_stepwise(pair.target, pair.draft, ids, verifier, policy or FixedK(mode_k("lr")),
                                      max_new_tokens, on_cycle)
    result.text = "".join(s.text for c in result.stats.cycles for s in c.kept_steps)
    result.mode = "engine-lr"
    return result


def lr(pair: EnginePair, prompt: Prompt, verifier, policy: CyclePolicy | None = None,
       max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, on_text: Callable[[str], None] | None = None,
       on_cycle: Callable | None = None) -> GenerationResult:
    """:func:`alr` for synchronous callers; ``on_text`` receives the kept text as each cycle ends,
    ``on_cycle(trace, run)`` each cycle, after the policy learned from it."""
    def each(trace, run) -> None:
        if on_cycle is not None:
            on_cycle(trace, run)
        for step in trace.kept_steps if on_text else ():
            on_text(step.text)

    return asyncio.run(closing(alr(pair, prompt, verifier, policy, max_new_tokens, each), pair))


__all__ = ["alr", "ar", "ar_windows", "lr"]
