"""What an engine's requests cost: the cost table of mode ``auto`` over engines, measured per endpoint.

The table has the form of this process's (:class:`~.costs.CostTable`, a grid T(R, n)), with one
unit changed: a point is the time of R concurrent step requests that each write n tokens after a
shared, cached prefix (the request, the prefix lookup, the engine's forwards), not of one forward.
:func:`ameasure` times R = 1..``rows`` requests of two lengths each (greedy, ``ignore_eos``, no
stop), one point per (R, n), the median of a few tries; the draft's endpoint the same for R = 1;
and the ``overlap``: what a draft and a target request cost sent at once, over the dearer one alone
(1 where the two endpoints share nothing; about ``(T_t + T_d) / max`` where they share a CPU's cores
fairly; far more where each server's threads spin while the other's hold the cores).

The grid reads a request's time as it reads a forward's (:class:`~.costs.CostGrid`: linear in n, a fixed
part plus a part per token, and in R). A run's own sync cycles move the grid toward what their rows took
(:meth:`~.costs.CostGrid.observe`, through the policy's ``learn``).
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from ..runtime.engine.steps import EngineSteps
from ..presets import PRESET_K
from .costs import CostGrid, CostTable
from .estimates import Book
from .planner import Planner, PlannerConfig

PROBE_TOKENS = (8, 40)  # the two lengths ameasure() times per row count


async def _timed(steps: EngineSteps, context: list[int], rows: int, n: int) -> tuple[int, float]:
    """(tokens of the longest row, seconds) of ``rows`` concurrent greedy requests of ``n`` tokens."""
    start = time.perf_counter()
    done = await asyncio.gather(*(steps.client.acomplete(context, n, ()) for _ in range(rows)))
    return max(d.completion_tokens or n for d in done), time.perf_counter() - start


async def _point(steps: EngineSteps, context: list[int], rows: int, n: int, repeats: int) -> tuple[int, float]:
    """(tokens, seconds) of one probe point: the median of ``repeats`` tries (a passing load only
    slows a try, and one slow try must not bend the grid)."""
    tries = [await _timed(steps, context, rows, n) for _ in range(repeats)]
    return max(1, round(float(np.median([t for t, _ in tries])))), float(np.median([s for _, s in tries]))


async def _together(target: EngineSteps, draft: EngineSteps, context: list[int], n: int, repeats: int) -> float:
    """Seconds of one target and one draft request of ``n`` tokens sent at once: the median of ``repeats``."""
    async def once() -> float:
        start = time.perf_counter()
        await asyncio.gather(_timed(target, context, 1, n), _timed(draft, context, 1, n))
        return time.perf_counter() - start
    return float(np.median([await once() for _ in range(repeats)]))


def request_grid(points: dict[int, dict[int, float]]) -> CostGrid:
    """A grid of request times (no context term, no padding: an engine runs what it is sent)."""
    return CostGrid(points, prefix=0, per_context=0.0, padding=False)


async def ameasure(target: EngineSteps, draft: EngineSteps | None, context: list[int], rows: int = 4,
                   repeats: int = 3, lengths: tuple[int, ...] = PROBE_TOKENS) -> CostTable:
    """The request cost table of these endpoints after ``context`` (module docstring); a warm-up
    request caches the prefix first. The overlap is timed at the shortest length (a bad overlap can
    be very slow); without a draft there is nothing to overlap (1)."""
    await target.client.acomplete(context, 1, ())
    points = {r: dict([await _point(target, context, r, n, repeats) for n in lengths]) for r in range(1, rows + 1)}
    table = CostTable(request_grid(points), None, per="request")
    if draft is not None:
        await draft.client.acomplete(context, 1, ())
        table.draft = request_grid({1: dict([await _point(draft, context, 1, n, repeats) for n in lengths])})
        n = min(lengths)
        alone = max(table.target(1, n), table.draft(1, n))
        together = await _together(target, draft, context, n, repeats)
        table.overlap = max(1.0, together / alone) if alone > 0 else 1.0
    return table


async def ameasured_planner(target: EngineSteps, draft: EngineSteps | None, context: list[int],
                            max_k: int = PRESET_K["auto"]) -> Planner:
    """Mode ``auto``'s planner over these endpoints: their costs measured after ``context``
    (:func:`ameasure`), the book's priors, :meth:`PlannerConfig.over_engine`, the load read from the
    target's client (its requests in flight)."""
    return Planner(await ameasure(target, draft, context), Book(), PlannerConfig.over_engine(max_k),
                   load=lambda: target.client.in_flight)


__all__ = ["PROBE_TOKENS", "ameasure", "ameasured_planner", "request_grid"]
