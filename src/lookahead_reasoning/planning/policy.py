"""Mode ``auto``'s cycle policy, the same over this process's models and over an engine: plan each
cycle with the planner's prices, gate its rows by them, learn from its trace.

What a finished cycle teaches (:meth:`AutoPolicy.learn`, the only way anything is learned):

* the book's token rates: every SD iteration in the target's rows (this process's cycles);
* the cost table: every timed forward of either model (this process's cycles, ``PlannerConfig.refine``);
* the book's step rates: verdicts up to the first rejection (each with its agreement band where
  the runtime scored the drafted steps), the tokens of target and drafted steps, the verifier's
  seconds, and the time the formulas leave unexplained (this process's cycles);
* the calibration: the cycle's realised speed against its plan's predicted speed, per kind of plan;
* over an engine, the request table: a sync cycle's rows are a measurement of T(R + load, L).

A chunk (over an engine: plain decoding past step ends) is no step and teaches the step rates
nothing; a run's first cycle over an engine also feeds the prompt, which no request price holds, so
it teaches neither the calibration nor the table.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from ..decoding.driver import CyclePolicy, Position
from ..decoding.results import CycleTrace, PlanNote
from ..settings import CyclePlan
from ..runtime.lm import ForwardTiming, PadPolicy
from .estimates import Book
from .planner import Planner


class AutoPolicy(CyclePolicy):
    """Mode ``auto``'s :class:`~lookahead_reasoning.decoding.driver.CyclePolicy` (module docstring).
    ``delimiters``: the step delimiters (an overshooting SD iteration that crossed one wrote the end of
    one step and the start of the next); ``on_finish``: called when a run completes (saving what it
    learned); ``pads``: the n (target's, draft's) each forward runs at, as the cost table prices it."""

    def __init__(self, planner: Planner, delimiters: Sequence[str], on_finish: Callable[[], None] | None = None,
                 mode: str = "auto", pads: tuple[PadPolicy | None, PadPolicy | None] = (None, None)):
        self.planner, self.delimiters, self.on_finish, self.mode = planner, tuple(delimiters), on_finish, mode
        self.k = planner.config.max_k  # the most drafted steps a plan may use (what a run's stats report as k)
        self.pads = pads
        self.chosen: tuple[CyclePlan, float, Position] | None = None  # this cycle's plan, its predicted speed, where

    def plan(self, position: Position) -> CyclePlan:
        """The fastest plan priced at this position; mid-step, where LR cannot start, the fastest that
        writes one step alone (to the next boundary) when an LR plan won."""
        choice = self.planner.choose(position.context, position.prefill)
        plan, rate = choice.plan, choice.rate
        if plan.k > 0 and not position.at_boundary:
            plan, rate = self.planner.best_alone(position.context, position.prefill)
        self.chosen = (plan, rate, position)
        return replace(plan, overshoot=choice.plan.k == 0)

    def rows(self, plan: CyclePlan, drafted_tokens: list[int], agreements: list[float]) -> int:
        chosen, _, position = self.chosen
        return self.planner.rows_to_run(chosen, position.context, drafted_tokens, agreements)

    def learn(self, trace: CycleTrace) -> None:
        """Fold one finished cycle into the book (and, over an engine, the cost table); note its plan."""
        chosen, rate, position = self.chosen
        planner, book = self.planner, self.planner.book
        trace.plan = PlanNote(chosen.label, rate, trace.target_rows, planner.busy)
        if not chosen.chunk:
            learn_steps(book, trace, self.delimiters)
        if not planner.per_request:
            for sure, drafted, accepted, confidence in trace.token_outcomes:  # every SD iteration, in order
                book.token.record(sure, drafted, accepted, confidence)
            learn_overheads(book, trace, chosen)
            if planner.config.refine:  # each model's cost grid toward the forwards it timed
                for grid, timings in ((planner.costs.target, trace.target_forwards),
                                      (planner.costs.draft, trace.draft_forwards)):
                    for timing in timings:
                        grid.observe(timing)
        elif position.generated == 0:
            return
        book.record_cycle(chosen.label, trace.tokens, trace.wall_s, rate / book.factor(chosen.label))
        if planner.per_request and chosen.k > 0 and chosen.schedule == "sync":
            observe_rows(planner, trace)

    def finish(self, completed: bool) -> None:
        if completed and self.on_finish is not None:
            self.on_finish()


def learn_steps(book: Book, trace: CycleTrace, delimiters: Sequence[str]) -> None:
    """The step layer's rates from one finished cycle: verdicts up to the first rejection (by agreement
    band where the cycle scored its drafted steps), step lengths, the verifier's seconds."""
    step = book.step
    for i, verdict in enumerate(trace.verdicts[:trace.accepted + 1]):
        if i < len(trace.agreements):
            step.record_verdict(trace.agreements[i], verdict.accepted)
        else:
            step.alpha1.add(verdict.accepted, not verdict.accepted)
        step.verify_s.add(verdict.latency_s)
    for drafted in trace.drafted:
        if drafted.ids:
            step.draft_tokens.add(len(drafted.ids))
    for agreement in trace.agreements:
        step.agreement.add(agreement)
    for target_step in trace.target:
        if target_step.complete and target_step.ids:
            step.target_tokens.add(len(target_step.ids))
        elif target_step.end == "overshoot":  # the end of one step and the start of the next
            crossed = sum(target_step.text.count(d) for d in delimiters)
            if crossed:
                step.target_tokens.add(len(target_step.ids) / crossed, crossed)


def learn_overheads(book: Book, trace: CycleTrace, plan: CyclePlan) -> None:
    """The time a cycle in this process took beyond its forwards and its verifier: per SD iteration of
    a plan without drafted steps, per cycle of an LR plan."""
    unexplained = max(0.0, trace.wall_s - trace.forward_s - trace.verify_s)
    if plan.k == 0 and trace.sd_iterations > 0:
        book.token.iteration_overhead.add(unexplained / trace.sd_iterations, 0.2)
    elif plan.k > 0:
        book.step.cycle_overhead.add(unexplained, 0.5)


def observe_rows(planner: Planner, trace: CycleTrace) -> None:
    """A sync cycle's rows over an engine: R + load concurrent requests of the longest row's tokens in
    ``trace.target_s``; the request grid moves toward it where that row count was measured."""
    rows, written = trace.target_rows + planner.busy, [len(s.ids) for s in trace.target if s.ids]
    if written and trace.target_s > 0 and rows in planner.costs.target.points:
        planner.costs.target.observe(ForwardTiming(rows, max(written), 0, trace.target_s))


__all__ = ["AutoPolicy", "learn_overheads", "learn_steps", "observe_rows"]
