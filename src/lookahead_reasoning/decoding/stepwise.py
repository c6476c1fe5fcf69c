"""Lookahead Reasoning over any pair of step models: the one cycle's runtime for engines.

The cycle (:func:`.lookahead.run_cycle`) needs one thing of a model here: *write one step after this
prefix* (token ids), ending at a delimiter, EOS or a token cap. :class:`~lookahead_reasoning.steps.StepModel`
is that protocol. ``lookahead_reasoning.runtime.engine.EngineSteps`` implements it over an
OpenAI-compatible server (the prefixes go out as concurrent requests that the engine batches over
its prefix cache) and :class:`~.reference.LocalSteps` over this library's PyTorch loops (one fresh
session per prefix, the plain form of Algorithm 1).

:class:`StepVerbs` gives the cycle its verbs over two step models: drafted steps one after another,
alternatives and rows as concurrent requests, each row judged as its reply comes back (in row order;
a rejection cancels the requests after it). Two schedules, same text (with greedy decoding and the exact
verifier, the target's greedy text whatever k, width and schedule):

* ``sync``  draft every step, then send every row at once (Algorithm 1; f_sync in the theory);
* ``async`` a row is sent as soon as its prefix exists, while the draft goes on writing deeper
            (f_async): the target's work overlaps the draft's. Drafting stops early once a row that
            came back already rejected its drafted step.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from ..errors import require
from ..settings import CyclePlan
from ..presets import DEFAULT_MAX_NEW_TOKENS, mode_k
from ..steps import Step, StepModel, StepRequest, closing
from ..verifiers.base import Verifier
from ..verifiers.likelihood import TokenScores, uses_scores
from .bridge import Bridge, OnLoop, in_thread
from .driver import CyclePolicy, FixedPolicy, Position, drive
from .lookahead import Judge, TargetPass, row_contexts, run_cycle
from .results import CycleTrace, GenerationResult, CycleStats, PlanNote
from .progress import OnText, stream_for


def _check_scorer(target: StepModel, verifier: Verifier) -> None:
    require(not uses_scores(verifier) or (hasattr(target, "ascore") and getattr(target, "can_score", True)),
            f"the {getattr(verifier, 'name', 'verifier')} verifier judges drafted steps by the target's "
            f"probabilities of their tokens, which {getattr(target, 'name', 'this target')} cannot give "
            "(its runtime has no scoring request; over an engine that scores no prompt, such as llama.cpp's "
            "server, name a scorer: --scorer or scorer=, the target's model loaded in this process)")


class StepVerbs:
    """One cycle's verbs (:class:`~.lookahead.CycleVerbs`) over two step models from the accepted prefix
    ``x`` with ``budget`` tokens left (``at_boundary``: x ends on a step delimiter, so steps may be
    drafted). Rows, scores and alternatives are asyncio tasks on the caller's event loop, reached through
    ``bridge`` (the verbs are called from the driver's thread, :func:`in_thread`); whatever the cycle did not
    wait for is cancelled by :meth:`close`."""

    def __init__(self, target: StepModel, draft: StepModel, verifier: Verifier, x: Sequence[int], budget: int,
                 at_boundary: bool = True, *, bridge: Bridge):
        _check_scorer(target, verifier)
        self.bridge = bridge
        self.target_model, self.draft_model, self.verifier = target, draft, verifier
        self.x, self.budget, self.at_boundary = tuple(x), budget, at_boundary
        self.kept: list[int] = []  # the ids the cycle added (accept)
        self.row_tasks: dict[int, asyncio.Task] = {}
        self.score_tasks: dict[int, asyncio.Task] = {}
        self.judge = Judge([], verifier)

    @property
    def generated(self) -> int:
        return len(self.kept)

    def _start_row(self, j: int, context: Sequence[int], budget: int, chunk: int = 0) -> None:
        if j not in self.row_tasks:
            request = StepRequest(tuple(context), min(budget, chunk) if chunk else budget, free=bool(chunk))
            self.row_tasks[j] = asyncio.ensure_future(self.target_model.awrite(request))

    def _start_scores(self, j: int, context: Sequence[int], step: Step) -> None:
        if uses_scores(self.verifier) and step.complete:
            self.score_tasks[j] = asyncio.ensure_future(self.target_model.ascore(tuple(context), step.ids))

    def _judge_finished(self) -> bool:
        """Judge the rows whose replies (and scores) are in, in order; whether one was rejected."""
        j = 0
        while j in self.row_tasks and self.row_tasks[j].done() and self.judge.wants(j):
            scores = self.score_tasks.get(j)
            if scores is not None and not scores.done():
                break
            if not self.judge(j, self.row_tasks[j].result().text, scores.result() if scores is not None else None):
                return True
            j += 1
        return False

    def draft(self, plan: CyclePlan) -> list[Step]:
        return self.bridge.run(self._draft(plan))

    def alternatives(self, drafted: list[Step], width: int) -> list[list[Step]]:
        return self.bridge.run(self._alternatives(drafted, width))

    def rows(self, drafted: list[Step], plan: CyclePlan) -> TargetPass:
        return self.bridge.run(self._rows(drafted, plan))

    def scores(self, written: TargetPass, m: int, candidates: list[Step]) -> list[TokenScores]:
        return self.bridge.run(self._scores(written, m, candidates))

    async def _draft(self, plan: CyclePlan) -> list[Step]:
        overlap, context, used = plan.schedule == "async", list(self.x), 0
        drafted = self.judge.drafted
        if overlap:
            self._start_row(0, context, self.budget, plan.chunk)
        while self.at_boundary and len(drafted) < plan.k and used < self.budget:
            if overlap and self._judge_finished():
                break
            step = await self.draft_model.awrite(StepRequest(tuple(context), self.budget - used))
            step.author = "draft"
            drafted.append(step)
            self._start_scores(len(drafted) - 1, context, step)
            context, used = context + step.ids, used + len(step.ids)
            if not step.boundary:
                break
            if overlap and used < self.budget:
                self._start_row(len(drafted), context, self.budget - used)
        return drafted

    async def _alternatives(self, drafted: list[Step], width: int) -> list[list[Step]]:
        chain = [s for s in drafted if s.complete]
        if width <= 1 or not chain:
            return [[] for _ in chain]
        asks, context, used = [], list(self.x), 0
        for step in chain:
            asks += [StepRequest(tuple(context), self.budget - used, a) for a in range(1, width)]
            context, used = context + step.ids, used + len(step.ids)
        steps = await asyncio.gather(*(self.draft_model.awrite(r) for r in asks))
        for step in steps:
            step.author = "draft-alt"
        return [steps[j:j + width - 1] for j in range(0, len(steps), width - 1)]

    async def _rows(self, drafted: list[Step], plan: CyclePlan) -> TargetPass:
        contexts, budgets = row_contexts(self.x, self.budget, drafted)
        judged = drafted
        if plan.rows is not None and len(contexts) > plan.rows:  # the last row run is the target's own, unjudged
            contexts, budgets, judged = contexts[:plan.rows], budgets[:plan.rows], drafted[:plan.rows - 1]
            self.judge.drafted = judged
        for j, (context, budget) in enumerate(zip(contexts, budgets)):
            self._start_row(j, context, budget, plan.chunk if j == 0 and not drafted else 0)
        steps: list[Step] = []
        for j in range(len(contexts)):  # in row order: a rejection makes the later rows useless
            steps.append(await self.row_tasks[j])
            scores = self.score_tasks.get(j)
            if self.judge.wants(j) and self.judge(j, steps[j].text, (await scores) if scores is not None else None):
                continue
            break
        self._cancel()
        return TargetPass(contexts, steps, self.judge.verdicts, self.judge.seconds, judged[:len(contexts)])

    async def _scores(self, written: TargetPass, m: int, candidates: list[Step]) -> list[TokenScores]:
        context = tuple(written.rows[m])
        return list(await asyncio.gather(*(self.target_model.ascore(context, a.ids) for a in candidates)))

    def accept(self, written: TargetPass, m: int, rescued: Step | None) -> tuple[int, bool]:
        appended = m < len(written.rows) and rescued is None
        kept = written.judged[:m] + ([rescued] if rescued is not None else [written.steps[m]] if appended else [])
        self.kept = [t for step in kept for t in step.ids][:self.budget]
        return m + (rescued is not None), appended

    def close(self) -> None:
        """Cancel the requests the cycle no longer waits for (on the event loop; it is not waited for)."""
        try:
            self.bridge.loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:  # the loop is closed, and its tasks with it
            pass

    def _cancel(self) -> None:
        """:meth:`close` on the event loop (a finished request's error, if any, is of no use either)."""
        for task in list(self.row_tasks.values()) + list(self.score_tasks.values()):
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # read, so that an unused failed row is not reported as never retrieved


async def cycle_over(target: StepModel, draft: StepModel, verifier: Verifier, plan: CyclePlan, x: Sequence[int],
                     budget: int, at_boundary: bool = True) -> CycleTrace:
    """One cycle (:func:`~.lookahead.run_cycle`) over two step models from the accepted prefix ``x``
    with ``budget`` tokens left, for asyncio."""
    def one(bridge: Bridge) -> CycleTrace:
        verbs = StepVerbs(target, draft, verifier, x, budget, at_boundary, bridge=bridge)
        try:
            return run_cycle(verbs, plan)
        finally:
            verbs.close()
    return await in_thread(one)


# ---------------------------------------------------------------------------------------- the run

@dataclass
class StepwiseRun:
    """A generation over step models: the prompt, the text so far and where it stands."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    new: list[int] = field(default_factory=list)
    at_boundary: bool = True
    done: str | None = None

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.new)

    def keep(self, trace: CycleTrace) -> None:
        """Append the cycle's kept steps; EOS inside them, or the budget, ends the run."""
        kept = trace.kept_steps
        before = len(self.new)
        self.new += [t for step in kept for t in step.ids][:max(0, self.remaining)]
        if kept:
            self.at_boundary = kept[-1].boundary
            if kept[-1].end == "eos":
                self.done = "eos"
        if self.done is None and (self.remaining <= 0 or len(self.new) == before):
            self.done = "budget"  # the budget is spent, or the model wrote nothing more (its context is full)


class StepCycles:
    """The driver's runtime over two step models (:class:`~.driver.Cycles`): each cycle's verbs are a
    :class:`StepVerbs` from the text so far; its kept steps extend the run. It honours a plan's k, width,
    schedule, chunk and rows, and refuses token SD inside the rows (gamma > 0; without it a draft stop and
    overshoot mean nothing). Rows run as the step models run them (concurrent requests for an engine), so
    the driver's ``policy.rows`` is not asked."""

    def __init__(self, target: StepModel, draft: StepModel, verifier: Verifier, run: StepwiseRun, stats: CycleStats,
                 bridge: Bridge):
        self.target, self.draft, self.verifier, self.run, self.stats = target, draft, verifier, run, stats
        self.bridge, self.plan = bridge, None

    @property
    def done(self) -> str | None:
        return self.run.done

    def position(self) -> Position:
        run = self.run
        return Position(len(run.new), run.remaining, run.at_boundary, len(run.prompt) + len(run.new))

    @contextmanager
    def verbs(self, plan: CyclePlan, policy: CyclePolicy) -> Iterator[StepVerbs]:
        require(not plan.gamma, f"plan {plan.label}: token SD inside the rows (gamma > 0) runs in this "
                "process's runtime; over step models each row is one request (an engine started with SD drafts "
                "its own tokens)")
        run, self.plan = self.run, plan
        self.stats.k = max(self.stats.k, plan.k)
        verbs = StepVerbs(self.target, self.draft, self.verifier, run.prompt + tuple(run.new), run.remaining,
                          run.at_boundary, bridge=self.bridge)
        try:
            yield verbs
        finally:
            verbs.close()

    def keep(self, trace: CycleTrace) -> None:
        trace.plan = trace.plan or PlanNote(self.plan.label, float("nan"), trace.target_rows)
        self.run.keep(trace)


async def agenerate_stepwise(target: StepModel, draft: StepModel, prompt_ids: Sequence[int], verifier: Verifier,
                             policy: CyclePolicy, max_new_tokens: int,
                             on_cycle: Callable[[CycleTrace, StepwiseRun], None] | None = None) -> GenerationResult:
    """The one driver (:func:`~.driver.drive`) over :class:`StepCycles` until EOS or ``max_new_tokens``, in a
    thread of its own (:func:`in_thread`); ``policy`` plans each cycle and learns from it, on this event loop
    (:class:`OnLoop`), as ``on_cycle`` hears each; the result reports its mode, and step statistics where the
    policy drafts steps (k > 0). The models' connections stay
    open: other runs on the same event loop may share them, so whoever runs the loop closes them
    (:func:`generate_stepwise` does)."""
    require(isinstance(max_new_tokens, int) and max_new_tokens >= 1,
            f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    require(len(prompt_ids) > 0, "the prompt must hold at least one token")
    run, stats, start = StepwiseRun(tuple(prompt_ids), max_new_tokens), CycleStats(), time.perf_counter()

    def driven(bridge: Bridge) -> None:
        each = (lambda trace: bridge.call(on_cycle, trace, run)) if on_cycle is not None else None
        drive(StepCycles(target, draft, verifier, run, stats, bridge), OnLoop(policy, bridge), stats, each)

    await in_thread(driven)
    wall = time.perf_counter() - start
    text = "".join(step.text for trace in stats.cycles for step in trace.kept_steps)  # as the models wrote it
    return GenerationResult(run.new, text, list(prompt_ids), run.done, 0, wall, mode=policy.mode,
                            stats=stats if policy.k else None)  # k = 0: no step drafted, a plain run's result


def generate_stepwise(target: StepModel, draft: StepModel, prompt_ids: Sequence[int], verifier: Verifier, *,
                      policy: CyclePolicy | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                      on_text: OnText | None = None) -> GenerationResult:
    """:func:`agenerate_stepwise` for synchronous callers (default policy: sync LR with mode lr's k, reported as
    ``lr-stepwise``)."""
    streamer = stream_for(on_text, target.decode)
    on_cycle = (lambda trace, run: streamer.update(run.new)) if streamer else None
    policy = policy or FixedPolicy(mode_k("lr"), mode="lr-stepwise")
    result = asyncio.run(closing(agenerate_stepwise(target, draft, prompt_ids, verifier, policy, max_new_tokens,
                                                    on_cycle), target, draft))
    if streamer:
        streamer.finish(result.token_ids)
    return result


__all__ = ["StepCycles", "StepVerbs", "StepwiseRun", "agenerate_stepwise", "cycle_over", "generate_stepwise"]
