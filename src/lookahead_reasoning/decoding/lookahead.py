"""Lookahead Reasoning (LR): step-level speculation, one cycle, the same for every runtime.

From an accepted prefix x, one cycle (:func:`run_cycle`) runs the paper's four steps:

  1. draft   the draft model writes up to k steps s^_1..s^_k, one after another, each ending at a
             delimiter, EOS or the step cap (it stops after a step that does not end on a delimiter:
             what would follow it does not start a step); with width W > 1, W - 1 alternative drafts
             (sampled) at each position of that chain;
  2. target  the target writes its own step s_j on every row x + s^_1..s^_{j-1} (one row per drafted
             step that ends on a delimiter and leaves budget, plus one: :func:`row_contexts`); the rows
             run at once, and each is judged as soon as it finishes (:class:`Judge`): a rejection
             makes the rows after it useless, so the runtime stops them;
  3. verify  :func:`verify` reads the verdicts in order up to the first rejection, m; with W > 1,
             :func:`rescue` judges the alternatives at m against the target's step there;
  4. accept  keep s^_1..s^_m, then the target's s_{m+1} (its correction), or the rescuing alternative,
             or, when every drafted step passes, the last row's step as a free bonus.

Width has one meaning everywhere: W - 1 alternatives beside each drafted step of the chain, none of
which is drafted further; one may stand in for the target's correction where the main draft is
rejected, and the cycle ends there. With greedy decoding and the exact verifier the kept text is the
target's greedy text whatever k and W (an alternative is kept only where it equals the target's step).

What runs the models is a runtime, :class:`CycleVerbs`, with the verbs above: this process's PyTorch
runtime (:class:`~.torch_verbs.TorchVerbs`: KV forks of x, rows batched in one forward, a head start from
one scoring forward, token SD inside rows) and any pair of step models
(:class:`~.stepwise.StepVerbs`: a serving engine's concurrent requests, or :class:`~.reference.LocalSteps`).
A runtime's schedule changes only the order of work: over step models ``async`` sends a row as soon
as its prefix exists. The paper's Algorithm 1, written plainly, is :mod:`.reference` (the slow oracle).
EOS or the token budget inside an accepted step ends generation exactly there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from ..settings import CyclePlan
from ..steps import Step
from ..verifiers.base import Verdict, Verifier
from ..verifiers.likelihood import TokenScores, uses_scores, verify_pairs
from .results import CycleTrace
from .progress import Laps


@dataclass
class TargetPass:
    """Step 2's outcome: the R row contexts (target ids), the target's step on each row that ran (at
    least up to the first rejected row), the verdicts the judge gave while the rows ran, and what the
    runtime keeps of the rows (``held``: the PyTorch runtime's KV branches)."""

    rows: list[list[int]]
    steps: list[Step]
    verdicts: dict[int, Verdict]
    judge_s: float = 0.0  # time spent judging while the rows ran (counted as verification)
    judged: list[Step] = field(default_factory=list)  # the drafted steps with a row to be judged on
    agreements: list[float] = field(default_factory=list)  # per drafted step with a row (PyTorch's head start)
    held: Any = None


class CycleVerbs(Protocol):
    """A runtime's side of one cycle (module docstring), from the accepted prefix it holds."""

    verifier: Verifier

    @property
    def generated(self) -> int: ...  # tokens of the answer so far

    def draft(self, plan: CyclePlan) -> list[Step]:
        """Step 1: up to ``plan.k`` drafted steps (none when the text does not end on a step boundary)."""
        ...

    def alternatives(self, drafted: list[Step], width: int) -> list[list[Step]]:
        """``width`` - 1 sampled drafts beside each complete drafted step (one list per such step)."""
        ...

    def rows(self, drafted: list[Step], plan: CyclePlan) -> TargetPass:
        """Step 2: the target's step on every row, judged as each finishes (a :class:`Judge`)."""
        ...

    def scores(self, written: TargetPass, m: int, candidates: list[Step]) -> list[TokenScores]:
        """The target's scores of ``candidates`` after row m's context (likelihood verifiers only)."""
        ...

    def accept(self, written: TargetPass, m: int, rescued: Step | None) -> tuple[int, bool]:
        """Step 4: keep the drafted steps up to m and what ends the cycle; (steps kept, target step appended)."""
        ...


def run_cycle(verbs: CycleVerbs, plan: CyclePlan) -> CycleTrace:
    """One LR cycle of ``plan`` (k, width, the rows' gamma and stop) on a runtime; its trace. A stage with
    nothing to do for the plan is not entered: with k = 0 (``ar``, ``sd``) the cycle is the target's row
    and its acceptance; alternatives only with width > 1; no verdicts without a drafted step."""
    laps, before = Laps(), verbs.generated
    drafted: list[Step] = []
    alternatives: list[list[Step]] = []
    verdicts: list[Verdict] = []
    alt_verdicts: list[Verdict] = []
    m, rescued = 0, None
    with laps:  # the whole span, bookkeeping included (wall_s)
        if plan.k > 0:
            with laps("draft"):
                drafted = verbs.draft(plan)
                if plan.width > 1:
                    alternatives = verbs.alternatives(drafted, plan.width)
        with laps("target"):
            written = verbs.rows(drafted, plan)
        if drafted:
            with laps("verify"):
                verdicts, m = verify(written)
                if alternatives:
                    alt_verdicts, rescued = rescue(alternatives, verdicts, m, written, verbs)
        m, appended = verbs.accept(written, m, rescued)
    laps.move("target", "verify", written.judge_s)  # the early verdicts were given during step 2
    return CycleTrace(drafted if rescued is None else drafted[:m - 1] + [rescued], written.steps, verdicts, m,
                      appended, laps["draft"], laps["target"], laps["verify"], len(written.rows),
                      alternatives=alternatives, alt_verdicts=alt_verdicts, tokens=verbs.generated - before,
                      wall_s=laps.total(), agreements=written.agreements)


def row_contexts(x: Sequence[int], remaining: int, drafted: list[Step],
                 to_target: Callable[[Step], list[int]] = lambda s: s.ids) -> tuple[list[list[int]], list[int]]:
    """The rows' contexts x, x + s^_1, ... (one per drafted step that ends on a delimiter and leaves
    budget, plus one) in the target's ids, and each row's budget."""
    rows, budgets = [list(x)], [remaining]
    for step in drafted:
        ids = to_target(step)
        if not step.boundary or budgets[-1] - len(ids) <= 0:
            break
        rows.append(rows[-1] + ids)
        budgets.append(budgets[-1] - len(ids))
    return rows, budgets


class Judge:
    """Judges row j's step against drafted step j as soon as row j is finished (step 2's early verdicts).

    Call it for a row it :meth:`wants`, with the target's text on it and, for a likelihood verifier, the
    drafted step's scores; it answers whether the rows after j are still of use (False after a
    rejection). A row is judged once: a second call answers from its verdict."""

    def __init__(self, drafted: list[Step], verifier: Verifier):
        self.drafted, self.verifier = drafted, verifier
        self.verdicts: dict[int, Verdict] = {}
        self.seconds = 0.0

    def wants(self, row: int) -> bool:
        """Whether row ``row`` has a drafted step to judge and no earlier row was rejected."""
        step = self.drafted[row] if row < len(self.drafted) else None
        return step is not None and step.complete and all(v.accepted for r, v in self.verdicts.items() if r < row)

    def __call__(self, row: int, target_text: str, scores: TokenScores | None = None) -> bool:
        if row in self.verdicts:
            return self.verdicts[row].accepted
        with Laps() as lap:
            [verdict] = verify_pairs(self.verifier, [(self.drafted[row].text, target_text)],
                                     [scores] if scores is not None else None)
        self.seconds += lap.total()
        self.verdicts[row] = verdict
        return verdict.accepted


def verify(written: TargetPass) -> tuple[list[Verdict], int]:
    """Step 3: the verdicts of rows 0..m (given as the rows finished) and m, the first rejected row.

    Rows are judged as they finish, so a row that finished before an earlier row was rejected may
    have been judged too; its verdict is of no use and is left out here. m = len(verdicts) when none
    was rejected.
    """
    verdicts = []
    while len(verdicts) in written.verdicts and (not verdicts or verdicts[-1].accepted):
        verdicts.append(written.verdicts[len(verdicts)])
    m = next((i for i, v in enumerate(verdicts) if not v.accepted), len(verdicts))
    return verdicts, m


def rescue(alternatives: list[list[Step]], verdicts: list[Verdict], m: int, written: TargetPass,
                 verbs: CycleVerbs) -> tuple[list[Verdict], Step | None]:
    """With width > 1: judge the alternatives at position m (the first rejected draft); the first one
    the verifier accepts stands in for the target's correction there. Nothing happens when no
    drafted step was rejected (row m is then a bonus row, not a correction)."""
    rejected = m < len(verdicts)  # verdicts end at the first rejection
    candidates = [a for a in alternatives[m] if a.complete] if rejected and m < len(alternatives) else []
    if not candidates:
        return [], None
    pairs = [(a.text, written.steps[m].text) for a in candidates]
    scores = verbs.scores(written, m, candidates) if uses_scores(verbs.verifier) else None
    verdicts = verify_pairs(verbs.verifier, pairs, scores)
    return verdicts, next((a for a, v in zip(candidates, verdicts) if v.accepted), None)


__all__ = ["CycleVerbs", "Judge", "TargetPass", "rescue", "row_contexts", "run_cycle", "verify"]
