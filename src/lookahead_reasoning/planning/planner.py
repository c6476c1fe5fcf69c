"""Before every cycle, price every plan in seconds and pick the fastest.

A plan (:class:`~..settings.CyclePlan`) is (k, gamma, draft_stop_below): k drafted steps per cycle (0: the target writes the
next step alone), gamma drafted tokens per SD iteration inside the target's rows (0: plain decoding) and
the draft's confidence stop (the draft stops after a token it gives less than ``draft_stop_below``). So
(0, 0) is autoregressive decoding, (0, 12) token SD, (2, 0) Lookahead Reasoning, (1, 8) both layers.
The stop is priced like gamma: the book knows the acceptance of drafted tokens per band of the draft's
confidence, so it can say what any stop would give (Hugging Face's assisted generation re-fits such a
threshold between calls; here it is chosen per cycle, with gamma, by the same prices).
Each plan's tokens per second come from :mod:`lookahead_reasoning.theory.costed`, priced by the
measured :class:`~.costs.CostTable` at the current context length and fed with what the
:class:`~.estimates.Book` has learned. The planner keeps its current plan unless another is predicted
faster by more than ``margin`` (hysteresis: estimates move a little every cycle, and a plan that
flaps pays for its switches in forks and cold caches).

Over an engine the same planner prices requests instead of forwards (the table's ``per`` is
"request", :mod:`.endpoints`): its plans are a chunk of plain decoding (``PlannerConfig.chunk``
tokens in one request, where no speculation pays), or LR with k = 1..max_k drafted steps in each of
``PlannerConfig.schedules``, priced by :func:`~lookahead_reasoning.theory.costed.request_cycle` at
the engine's load (``load``: the requests of other runs in flight at the target when a cycle is
planned; they share the engine's batch, so R rows cost what R + load rows cost alone). Where rows
are nearly free (a GPU below its batch budget) load leaves LR's price alone until R + load passes the
budget; where every row costs (a CPU) it makes every plan dearer. The planner prices its own
request's latency: far past the budget one more row adds only about 1/(R + load) to every forward,
so LR can pay again for this request while it slows the others (a service that prices its total
throughput would charge rows in full).

After a cycle's scoring pass, :meth:`Planner.rows_to_run` is the step-level analogue of the draft's
confidence stop: it keeps a target row only when the expected tokens it adds (its drafted step's
acceptance, read off the step's agreement with the target) are worth its cost at the rate the best
plan without drafted steps would give.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..errors import require
from ..settings import CyclePlan
from ..presets import PRESET_K, SCHEDULES
from ..theory.breakeven import BreakEven, Machine, break_even, break_even_requests
from ..theory.costed import CycleEstimate, ScoredChain, chunk_cycle, gated_cycle, lr_cycle, request_cycle, step_cycle
from .costs import CostGrid, CostTable
from .estimates import Book


Prefill = tuple[int, int]
"""Tokens the target and the draft have never been fed when a cycle starts (the prompt, before the first
cycle). The first forward of each model feeds them along with the cycle's own tokens, so the first cycle
pays ``T(1, prompt)`` for the target and, when the plan drafts, ``draft(1, prompt)`` for the draft: a
fixed cost for every plan, priced so that the first cycle's predicted speed is the one it can realise
(and what it realises does not teach the calibration a wrong lesson)."""


@dataclass(frozen=True)
class PlannerConfig:
    """Settings of mode ``auto``.

    ``max_k``: the most drafted steps a plan may use (0: token level only); ``gammas``: SD gammas
    tried when the target writes alone; ``row_gammas``: gammas tried inside LR's rows (0: plain rows);
    ``draft_stop_below_choices``: the draft confidence stops tried with every gamma, besides the
    generator's ``draft_stop_below`` (empty: that one only; no stop at all when it is None);
    ``margin``: hysteresis (a plan must be predicted this much faster to replace the current one);
    ``gate``: let :meth:`Planner.rows_to_run` drop rows; ``pad``: pad a forward of n tokens per row to
    a larger measured n where the cost table says that is cheaper (and price it so;
    :meth:`~.costs.CostGrid.padded_n`); ``reprofile``: measure the cost table again even when a cached
    one matches; ``refine``: move the cost table toward the run's own timed forwards; ``learn``: save
    what the run learned (table and rates) for the next run of the pair (in another cost regime, its
    acceptance rates only);
    ``progress``: show the profile's progress bar; ``cache_dir``: where tables and books live
    (default: the model cache, ``$LOOKAHEAD_REASONING_CACHE``); ``schedules``: the LR schedules
    tried (async needs a runtime that runs rows as their prefixes appear: an engine); ``chunk`` > 0:
    the plain plan writes that many tokens past step ends in one go (an engine's request) instead of
    one step. :meth:`over_engine` gives the settings of ``auto`` over engines.
    """

    max_k: int = PRESET_K["auto"]
    gammas: tuple[int, ...] = (4, 6, 8, 12, 16, 20, 24)
    row_gammas: tuple[int, ...] = (0, 4, 8, 12)
    draft_stop_below_choices: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
    margin: float = 0.05
    gate: bool = True
    pad: bool = True
    reprofile: bool = False
    refine: bool = True
    learn: bool = True
    progress: bool = True
    cache_dir: str | None = None
    schedules: tuple[str, ...] = ("sync",)
    chunk: int = 0

    @classmethod
    def over_engine(cls, max_k: int = PRESET_K["auto"], chunk: int = 256) -> "PlannerConfig":
        """Mode ``auto`` over engines: no token SD in this process (an engine drafts its own tokens),
        both schedules, plain decoding in chunks of ``chunk`` tokens, every row run (an engine runs
        them as they are sent), no padding, no hysteresis (one plan is as cheap to switch to as
        another), nothing saved (the endpoints are measured when a run starts)."""
        return cls(max_k=max_k, gammas=(), row_gammas=(0,), draft_stop_below_choices=(), margin=0.0, gate=False,
                   pad=False, learn=False, progress=False, schedules=SCHEDULES, chunk=chunk)

    def __post_init__(self) -> None:
        require(isinstance(self.max_k, int) and self.max_k >= 0, f"planner max_k must be an integer >= 0, got {self.max_k!r}")
        require(all(isinstance(g, int) and g >= 1 for g in self.gammas), f"planner gammas must be integers >= 1, got {self.gammas!r}")
        require(all(isinstance(g, int) and g >= 0 for g in self.row_gammas),
                f"planner row gammas must be integers >= 0, got {self.row_gammas!r}")
        require(0 <= self.margin < 1, f"planner margin must be in [0, 1), got {self.margin!r}")
        require(all(isinstance(x, (int, float)) and 0 < x < 1 for x in self.draft_stop_below_choices),
                "planner draft_stop_below_choices (draft confidences) must be numbers in (0, 1), "
                f"got {self.draft_stop_below_choices!r}")
        require(bool(self.schedules) and set(self.schedules) <= set(SCHEDULES),
                f"planner schedules must be among {SCHEDULES}, got {self.schedules!r}")
        require(isinstance(self.chunk, int) and self.chunk >= 0, f"planner chunk must be an integer >= 0, got {self.chunk!r}")


@dataclass
class Choice:
    """The plan picked for a cycle and its predicted speed."""

    plan: CyclePlan
    rate: float


class Planner:
    """Prices plans with a cost table and a book; picks one per cycle with hysteresis. ``draft_stop_below``: the
    generator's (see ``PlannerConfig.draft_stop_below_choices``); ``load`` (over an engine): the requests of other
    runs in flight at the target now (module docstring; None: nothing else runs)."""

    def __init__(self, costs: CostTable, book: Book, config: PlannerConfig, can_sd: bool = True,
                 draft_stop_below: float | None = None, load: Callable[[], int] | None = None):
        self.costs, self.book, self.config, self.can_sd, self.load = costs, book, config, can_sd, load
        self.draft_stop_below = draft_stop_below
        choices = sorted({draft_stop_below, *config.draft_stop_below_choices}) if draft_stop_below is not None else []
        self.draft_stop_below_choices: tuple[float | None, ...] = tuple(choices) or (None,)
        self.current: CyclePlan | None = None
        self.busy = 0  # the load the last choice was priced at
        self._memo: dict[tuple[str, int, int, int], float] = {}  # costs read since the last choice

    def fork(self) -> "Planner":
        """A planner for one more run at the same time: the same cost table and book (every run learns
        for all, and each prices its plans at the load the others make), its own current plan."""
        return Planner(self.costs, self.book, self.config, self.can_sd, self.draft_stop_below, self.load)

    @property
    def per_request(self) -> bool:
        """Whether the table prices an engine's requests (else this process's forwards)."""
        return self.costs.per == "request"

    def _costs_at(self, context: int):
        """T(R, n) of target and draft at ``context``, each read from the table once per choice."""
        def priced(which: str, grid: CostGrid | None):
            def cost(r: int, n: int) -> float:
                if grid is None:  # no draft's table (an engine measured alone): drafts are free
                    return 0.0
                key = (which, r, n, context)
                if key not in self._memo:
                    self._memo[key] = grid(r, n, context)
                return self._memo[key]
            return cost
        return priced("t", self.costs.target), priced("d", self.costs.draft)

    def candidates(self) -> list[CyclePlan]:
        gammas = self.config.gammas if self.can_sd else ()
        choices = self.draft_stop_below_choices
        plans = [CyclePlan(0, gamma=0, chunk=self.config.chunk)]
        plans += [CyclePlan(0, gamma=g, draft_stop_below=s) for g in gammas for s in choices]
        row_gammas = [g for g in self.config.row_gammas if g == 0 or self.can_sd]
        plans += [CyclePlan(k, gamma=g, draft_stop_below=s, schedule=schedule) for k in range(1, self.config.max_k + 1)
                  for schedule in self.config.schedules for g in row_gammas for s in (choices if g else (None,))]
        return plans

    def estimate(self, plan: CyclePlan, context: int, prefill: Prefill = (0, 0)) -> CycleEstimate:
        """Expected tokens and seconds of one cycle of ``plan`` with ``context`` tokens cached (and
        ``prefill`` tokens that a model has never been fed, paid by this cycle)."""
        target, draft = self._costs_at(context)
        step = self.book.step.model()
        if self.per_request:  # over an engine, at the load of this choice (the prompt is in its prefix cache already)
            if plan.k == 0:
                return chunk_cycle(plan.chunk or step.target_tokens, target, self.busy)
            return request_cycle(plan.k, plan.schedule, step, target, draft, self.busy, self.costs.overlap)
        token = self.book.token.model(plan.draft_stop_below)  # token SD inside the rows runs in this process only
        if plan.k == 0:
            cycle = step_cycle(plan.gamma, step, token, target, draft, self.book.token.iteration_overhead.value)
        else:
            cycle = lr_cycle(plan.k, plan.gamma, step, token, target, draft, self.book.step.cycle_overhead.value)
        if any(prefill):
            cycle = CycleEstimate(cycle.tokens, cycle.seconds + self.prefill_seconds(plan, prefill))
        return cycle

    def prefill_seconds(self, plan: CyclePlan, prefill: Prefill) -> float:
        """What feeding ``prefill`` costs ``plan``: the target's tokens always, the draft's when it drafts
        (read from the tables at an empty cache, once per choice)."""
        (target, draft), (to_target, to_draft) = self._costs_at(0), prefill
        seconds = target(1, to_target) if to_target > 0 else 0.0
        if to_draft > 0 and (plan.k > 0 or plan.gamma > 0):
            seconds += draft(1, to_draft)
        return seconds

    def rate(self, plan: CyclePlan, context: int, prefill: Prefill = (0, 0)) -> float:
        """Predicted tokens per second of ``plan``: the formula's, times what this kind of plan has
        realised against it so far (``Book.factor``)."""
        return self.estimate(plan, context, prefill).rate * self.book.factor(plan.label)

    def choose(self, context: int, prefill: Prefill = (0, 0)) -> Choice:
        """The plan for the next cycle: the fastest predicted, unless the current one is within the margin."""
        self._memo.clear()  # the table may have learned from the last cycle's forwards
        self.busy = max(0, int(self.load())) if self.load is not None else 0
        rates = {plan: self.rate(plan, context, prefill) for plan in self.candidates()}
        best = max(rates, key=rates.get)
        if self.current in rates and rates[self.current] * (1 + self.config.margin) >= rates[best]:
            best = self.current
        self.current = best
        return Choice(best, rates[best])

    def break_even(self, context: int, ks: tuple[int, ...] = (1, 2)) -> BreakEven:
        """The step acceptance above which k drafted steps a cycle beat the best plan without them, priced
        by the formulas on this table at ``context`` and the token rates learned so far (at the
        generator's confidence stop): :mod:`lookahead_reasoning.theory.breakeven`."""
        target, draft = self._costs_at(context)
        if self.per_request:  # over an engine: requests, not forwards
            return break_even_requests(self.book.step.model(), target, draft if self.costs.draft else None, ks,
                                       overlap=self.costs.overlap)
        token = self.book.token.model(self.draft_stop_below)
        gammas = (0, *self.config.gammas) if self.can_sd and self.draft_stop_below_choices else (0,)
        machine = Machine(target, draft, self.book.token.iteration_overhead.value, self.book.step.cycle_overhead.value)
        return break_even(self.book.step.model(), token, machine, ks, gammas)

    def best_alone(self, context: int, prefill: Prefill = (0, 0)) -> tuple[CyclePlan, float]:
        """The fastest plan without drafted steps that writes one step at most (a chunk cut to one step),
        and its speed: what runs mid-step when LR wins, and the rate a dropped row is measured against."""
        alone = dict.fromkeys(replace(plan, chunk=0) for plan in self.candidates() if plan.k == 0)
        rates = {plan: self.rate(plan, context, prefill) for plan in alone}
        best = max(rates, key=rates.get)
        return best, rates[best]

    def rows_to_run(self, plan: CyclePlan, context: int, drafted_tokens: list[int], agreements: list[float]) -> int:
        """How many of the cycle's target rows to run, given what the scoring pass showed.

        With R rows, rows 0..R-2 are judged against their drafted steps and row R-1 is a bonus row.
        For each R, :func:`~lookahead_reasoning.theory.costed.gated_cycle` prices the rest of the cycle
        (``p_j`` from drafted step j's agreement band; a row whose drafted step the target fully agreed
        with needs no iteration). The R that maximises ``tokens - r0 * seconds`` wins, r0 the best rate
        without drafted steps: a row must earn more than the time it takes would earn without it.
        """
        if not self.config.gate or not agreements:
            return len(agreements) + 1
        self._memo.clear()
        _, r0 = self.best_alone(context)
        target, draft = self._costs_at(context)
        token, step = self.book.token.model(plan.draft_stop_below), self.book.step.model()
        need = [0.0 if a >= 1.0 else max(1.0, step.target_tokens - a * n) for a, n in zip(agreements, drafted_tokens)]
        scored = ScoredChain(tuple(self.book.step.accept_probability(a) for a in agreements), tuple(drafted_tokens),
                             tuple(need))

        def value(rows: int) -> float:
            cycle = gated_cycle(rows, plan.gamma, step, token, scored, target, draft)
            return cycle.tokens - r0 * cycle.seconds
        return max(range(1, len(agreements) + 2), key=value)


__all__ = ["Choice", "CyclePlan", "Planner", "PlannerConfig", "Prefill"]
