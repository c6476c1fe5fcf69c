"""Mode ``auto`` over engines: measure what the endpoints cost, learn the pair's step rates as the run
goes, and run each cycle with the plan priced fastest.

Costs (:class:`EngineCosts`). One step request of n tokens, R of them at once after a shared,
cached prefix, costs ``T_t(R, n) = a_R + b_R n`` seconds on the target's endpoint (a fixed part:
the request, the prefix lookup, the first forward; a part per token, which grows with R where the
engine's batch is not free, as on a CPU). :func:`measure` times R = 1..``rows`` requests of two
lengths each (``ignore_eos``, no stop) and fits a_R, b_R; the draft's endpoint the same for R = 1.
The fit is updated online: every finished cycle's rows are a measurement of ``T_t(R, L)``.

Rates (:class:`StepRates`). alpha1 (a Beta posterior over the judged pairs, counting each cycle up to
its first rejection, as ``LRStats.alpha1`` does), the mean tokens of a target step L_t and of a
drafted step L_d, and the verifier's seconds per pair.

Prices (``theory``-style, pure): a cycle with k drafted steps keeps m ~ truncated geometric(alpha1)
drafts and one target step, ``E[tokens] = E[m] L_d + L_t``;

* sync:  ``k T_d(1, L_d) + T_t(k + 1, L_t)`` (draft everything, then all rows at once);
* async: row j starts when drafted step j exists, ``j T_d``; the cycle ends when the row that decides
  it (row m) finishes, ``E[m T_d] + T_t(R, L_t)`` with R the rows in flight together, at most k + 1,
  times the measured ``overlap``: what a draft request and a target request cost run at once, over
  the dearer one run alone (1 where the two endpoints share nothing; ``(T_t + T_d) / max`` where they
  share a CPU's cores fairly; far more where each server's threads spin while the other's hold them);
* ar (k = 0): ``T_t(1, L_t)`` per step; a chunk of c tokens in one request ``T_t(1, c)`` (the fixed
  part paid once: where no step speculation pays, the planner stands aside in chunks and only comes
  back to a step boundary when an LR plan is priced above the chunk).

Load. The engine batches every request it serves at once: with B requests of other runs in flight
(``EnginePlanner.load``, read when a cycle is planned; :mod:`~.load`), R rows cost ``T_t(R + B, n)``
and a plain request ``T_t(1 + B, n)``; a sync cycle's drafts then run beside the others' rows, so they
pay the ``overlap`` as an async cycle's do. Where rows are nearly free (a GPU below its batch budget)
load leaves LR's price alone until R + B passes the budget; where every row costs (a CPU) it makes
every plan dearer. A sync cycle's rows teach the fit at R + B. The planner prices its own request's
latency: far past the budget one more row adds only about 1/(R + B) to every forward, so LR can pay
again for this request while it slows the others (a service that prices its total throughput would
charge rows in full).

A measured calibration factor per plan kind (realised over predicted seconds, weighted by time)
corrects what the model leaves out (draft and target sharing one machine's cores, HTTP, judging).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..decoding.driver import Position
from ..decoding.results import CycleTrace, PlanNote
from ..errors import ConfigError, require
from ..plan import CyclePlan
from ..presets import PRESETS
from ..runtime.engine.client import Sampling
from ..runtime.engine.steps import EngineSteps

PROBE_TOKENS = (8, 40)  # the two lengths measure() times per row count


@dataclass
class Line:
    """``a + b n`` fitted by least squares over (n, seconds) points, with a floor on both terms."""

    points: list[tuple[float, float]] = field(default_factory=list)

    def add(self, n: float, seconds: float) -> None:
        self.points.append((float(n), float(seconds)))
        del self.points[:-64]  # the latest points: the engine's load may change

    def coefficients(self) -> tuple[float, float]:
        if not self.points:
            return float("nan"), float("nan")
        n, s = np.array(self.points).T
        if len(set(n)) < 2:
            return 0.0, float(s.sum() / max(n.sum(), 1.0))
        b, a = np.polyfit(n, s, 1)
        return max(a, 0.0), max(b, 1e-6)

    def __call__(self, n: float) -> float:
        a, b = self.coefficients()
        return a + b * n


@dataclass
class EngineCosts:
    """``T_t(R, n)`` of the target's endpoint per row count R, and ``T_d(n)`` of the draft's."""

    target: dict[int, Line] = field(default_factory=dict)
    draft: Line = field(default_factory=Line)
    overlap: float = 1.0  # a draft and a target request at once, over the dearer alone (module docstring)

    def target_s(self, rows: float, n: float) -> float:
        """Seconds of ``rows`` concurrent step requests of ``n`` tokens: a measured R as fitted,
        between two measured R linear in R, beyond the widest the widest scaled by the mean per-row
        slope (rows are never cheaper than that), below the narrowest the narrowest."""
        known = sorted(self.target)
        require(bool(known), "the engine's costs have not been measured")
        if rows in self.target:
            return self.target[rows](n)
        lo, hi = known[0], known[-1]
        if rows < lo:
            return self.target[lo](n)
        if rows > hi:
            per_row = (self.target[hi](n) - self.target[lo](n)) / max(hi - lo, 1)
            return self.target[hi](n) + per_row * (rows - hi)
        below = max(r for r in known if r < rows)
        above = min(r for r in known if r > rows)
        share = (rows - below) / (above - below)
        return (1 - share) * self.target[below](n) + share * self.target[above](n)

    def record_rows(self, rows: int, n: float, seconds: float) -> None:
        self.target.setdefault(rows, Line()).add(n, seconds)

    def to_json(self) -> dict:
        """The measured points: ``{"target": {R: [[n, seconds], ...]}, "draft": [[n, seconds], ...]}``."""
        return {"target": {str(r): [list(p) for p in line.points] for r, line in sorted(self.target.items())},
                "draft": [list(p) for p in self.draft.points], "overlap": self.overlap}

    @classmethod
    def from_json(cls, data: dict) -> "EngineCosts":
        """The costs :meth:`to_json` wrote (fitted again from the points)."""
        try:
            target = {int(r): Line([(float(n), float(t)) for n, t in pts]) for r, pts in data["target"].items()}
            draft = Line([(float(n), float(t)) for n, t in data.get("draft", [])])
            overlap = float(data.get("overlap", 1.0))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"not an engine cost table ({exc!r})") from None
        require(bool(target), "an engine cost table needs at least one row count")
        require(overlap > 0, f"an engine cost table's overlap must be > 0, got {overlap}")
        return cls(target, draft, overlap)


async def _timed(steps: EngineSteps, context: list[int], rows: int, n: int) -> tuple[int, float]:
    """(tokens of the longest row, seconds) of ``rows`` concurrent greedy requests of ``n`` tokens."""
    start = time.perf_counter()
    done = await asyncio.gather(*(steps.client.acomplete(context, n, (), Sampling()) for _ in range(rows)))
    return max(d.completion_tokens or n for d in done), time.perf_counter() - start


async def _point(steps: EngineSteps, context: list[int], rows: int, n: int, repeats: int) -> tuple[float, float]:
    """(tokens, seconds) of one probe point: the median of ``repeats`` tries (a passing load only
    slows a try, and one slow try must not bend the fit)."""
    tries = [await _timed(steps, context, rows, n) for _ in range(repeats)]
    return float(np.median([t for t, _ in tries])), float(np.median([s for _, s in tries]))


async def _together(target: EngineSteps, draft: EngineSteps, context: list[int], n: int, repeats: int) -> float:
    """Seconds of one target and one draft request of ``n`` tokens sent at once: the median of ``repeats``."""
    async def once() -> float:
        start = time.perf_counter()
        await asyncio.gather(_timed(target, context, 1, n), _timed(draft, context, 1, n))
        return time.perf_counter() - start
    return float(np.median([await once() for _ in range(repeats)]))


async def ameasure(target: EngineSteps, draft: EngineSteps | None, context: list[int], rows: int = 4,
                   repeats: int = 3, lengths: tuple[int, ...] = PROBE_TOKENS) -> EngineCosts:
    """Time R = 1..``rows`` concurrent requests of each of ``lengths`` tokens after ``context`` (a
    warm-up request caches the prefix first); one point per (R, n), the median of ``repeats`` tries.
    With a draft, also its cost alone and the ``overlap`` of a draft and a target request at once
    (at the shortest length: a bad overlap can be very slow)."""
    costs = EngineCosts()
    await target.client.acomplete(context, 1, ())
    for r in range(1, rows + 1):
        for n in lengths:
            costs.record_rows(r, *await _point(target, context, r, n, repeats))
    if draft is not None:
        await draft.client.acomplete(context, 1, ())
        for n in lengths:
            costs.draft.add(*await _point(draft, context, 1, n, repeats))
        n = min(lengths)
        alone = max(costs.target_s(1, n), costs.draft(n))
        costs.overlap = max(1.0, await _together(target, draft, context, n, repeats) / alone) if alone > 0 else 1.0
    return costs


@dataclass
class StepRates:
    """What the pair's cycles showed so far (module docstring); starts from weak priors."""

    accepted: float = 1.0  # Beta(accepted, rejected) over alpha1
    rejected: float = 1.0
    target_tokens: float = 40.0
    draft_tokens: float = 40.0
    verify_s: float = 0.0
    seen: int = 0

    @property
    def alpha1(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def learn(self, trace: CycleTrace) -> None:
        looked = trace.verdicts[:trace.accepted + 1]
        self.accepted += sum(v.accepted for v in looked)
        self.rejected += sum(not v.accepted for v in looked)
        lengths = [len(s.ids) for s in trace.target if s.complete and s.ids]
        drafted = [len(s.ids) for s in trace.drafted if s.ids]
        w = 0.2
        for value in lengths:
            self.target_tokens += w * (value - self.target_tokens)
        for value in drafted:
            self.draft_tokens += w * (value - self.draft_tokens)
        if trace.verdicts:
            self.verify_s += w * (trace.verify_s / len(trace.verdicts) - self.verify_s)
        self.seen += 1


def kept_pmf(k: int, alpha1: float) -> np.ndarray:
    """P(m drafted steps kept), m = 0..k: ``alpha1^m (1 - alpha1)`` below k, ``alpha1^k`` at k."""
    m = np.arange(k + 1)
    pmf = alpha1 ** m * (1 - alpha1)
    pmf[k] = alpha1 ** k
    return pmf


def price(plan: CyclePlan, costs: EngineCosts, rates: StepRates, load: float = 0.0) -> tuple[float, float]:
    """(expected tokens, expected seconds) of one cycle of ``plan`` while ``load`` requests of other
    runs are in flight at the target (module docstring)."""
    lt, ld = rates.target_tokens, rates.draft_tokens
    if plan.k == 0:
        n = plan.chunk or lt
        return n, costs.target_s(1 + load, n)
    pmf = kept_pmf(plan.k, rates.alpha1)
    m = np.arange(plan.k + 1)
    tokens = float(pmf @ (m * ld)) + lt
    td = costs.draft(ld) if costs.draft.points else 0.0
    judged = float(pmf @ np.minimum(m + 1, plan.k))
    if plan.schedule == "sync":  # under load the drafts run beside the other runs' rows: they overlap too
        seconds = plan.k * td * (costs.overlap if load > 0 else 1.0) + costs.target_s(plan.k + 1 + load, lt)
    else:
        row = costs.target_s(1 + load, lt)
        in_flight = min(plan.k + 1, 1 + (math.ceil(row / td) if td > 0 else plan.k))
        seconds = (float(pmf @ (np.minimum(m, plan.k) * td)) + costs.target_s(in_flight + load, lt)) * costs.overlap
    return tokens, seconds + judged * rates.verify_s


@dataclass
class EnginePlanner:
    """Mode ``auto``'s cycle policy over engines (a :class:`~lookahead_reasoning.decoding.driver.CyclePolicy`):
    picks each cycle's plan among ``ar`` and LR with k = 1..``max_k`` in both schedules, and learns from
    each finished cycle (:meth:`learn`)."""

    costs: EngineCosts
    rates: StepRates = field(default_factory=StepRates)
    max_k: int = PRESETS["auto"].k  # the most drafted steps a plan may use (mode auto's preset)
    schedules: tuple[str, ...] = ("sync", "async")
    chunk: int = 256  # tokens of plain decoding one standing-aside request writes (0: never chunk)
    calibration: dict[str, list[float]] = field(default_factory=dict)  # plan kind -> [realised s, predicted s]
    load: Callable[[], int] = lambda: 0  # requests of other runs in flight at the target now (module docstring)
    last: tuple[CyclePlan, float, float, float] | None = None  # the plan; its priced tokens, seconds; its speed
    first: bool = False  # whether the last plan was a run's first cycle
    busy: int = 0  # the load the last plan was priced at

    def fork(self) -> "EnginePlanner":
        """A planner for one more run at the same time: its own last plan, the same cost fit, rates and
        calibration (so every run learns for all, and plans are priced at the load the runs make)."""
        return replace(self, last=None, first=False, busy=0)

    def speculative(self) -> list[CyclePlan]:
        return [CyclePlan(k, 1, s) for k in range(1, self.max_k + 1) for s in self.schedules]

    def factor(self, plan: CyclePlan) -> float:
        realised, predicted = self.calibration.get(self._kind(plan), (0.0, 0.0))
        return realised / predicted if predicted > 0 and realised > 0 else 1.0

    @staticmethod
    def _kind(plan: CyclePlan) -> str:
        """The calibration a plan shares: plain decoding (a step or a chunk), sync LR or async LR."""
        return "plain" if plan.k == 0 else plan.schedule

    def rate(self, plan: CyclePlan) -> float:
        """Predicted tokens per second of ``plan`` at the load the current plan is priced at."""
        tokens, seconds = price(plan, self.costs, self.rates, self.busy)
        return tokens / (seconds * self.factor(plan)) if seconds > 0 else 0.0

    mode = "engine-auto"

    def plan(self, position: Position) -> CyclePlan:
        """Plain decoding (a chunk; one plain step where chunks are off) or the best LR plan, whichever
        is priced faster; mid-step, where LR cannot start, one plain step to the next boundary when LR
        wins. At a boundary one plain step is never chosen over a chunk: it is a chunk cut short, and
        one more request (a tie goes to plain decoding too)."""
        generated, at_boundary = position.generated, position.at_boundary
        self.busy = max(0, int(self.load()))
        plain = CyclePlan(0, chunk=self.chunk) if self.chunk else CyclePlan(0)
        lr_best = max(self.speculative(), key=self.rate, default=None)
        if lr_best is None or self.rate(lr_best) <= self.rate(plain):
            best = plain
        else:
            best = lr_best if at_boundary else CyclePlan(0)
        self.last = (best, *price(best, self.costs, self.rates, self.busy), self.rate(best))
        self.first = generated == 0
        return best

    def rows(self, plan: CyclePlan, drafted_tokens: list[int], agreements: list[float]) -> int:
        return len(drafted_tokens) + 1  # an engine's rows run as they are sent: nothing to gate

    def finish(self, completed: bool) -> None:
        pass

    def learn(self, trace: CycleTrace) -> None:
        """Fold one finished cycle into the rates, the cost fit and the calibration; note its plan.

        A chunk is no step (it runs past step ends, or stops at EOS short of its length), so it teaches
        the step rates nothing. The calibration compares the cycle's seconds with the time the plan's
        price gives the tokens the cycle wrote (a chunk that met EOS after 75 of its 256 tokens was
        priced for 75), weighting cycles by time as the local planner's book does."""
        plan, tokens, seconds, rate = self.last
        trace.plan = PlanNote(plan.label, rate, trace.target_rows, self.busy)
        if not plan.chunk:
            self.rates.learn(trace)
        if self.first:  # a run's first cycle also feeds the prompt, which no price holds
            return
        complete = [s for s in trace.target if s.ids]
        if plan.schedule == "sync" and not plan.chunk and complete and trace.target_s > 0:
            self.costs.record_rows(trace.target_rows + self.busy, max(len(s.ids) for s in complete), trace.target_s)
        if tokens > 0 and seconds > 0 and trace.tokens > 0:
            entry = self.calibration.setdefault(self._kind(plan), [0.0, 0.0])
            entry[0] += trace.wall_s
            entry[1] += trace.tokens * seconds / tokens


async def ameasured_planner(target: EngineSteps, draft: EngineSteps | None, context: list[int]) -> EnginePlanner:
    """An :class:`EnginePlanner` for these endpoints: their costs measured after ``context``
    (:func:`ameasure`), the load read from the target's client."""
    client = target.client
    return EnginePlanner(await ameasure(target, draft, context), load=lambda: client.in_flight)


__all__ = ["EngineCosts", "EnginePlanner", "Line", "StepRates", "ameasure", "ameasured_planner", "kept_pmf", "price"]
