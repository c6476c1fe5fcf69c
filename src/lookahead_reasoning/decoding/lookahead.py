"""Lookahead Reasoning (LR): step-level speculation, one synchronous cycle at a time.

From an accepted prefix x (token ids of the target; the draft holds the same text), one cycle runs
the paper's four steps, each a function below:

  1. :func:`draft`   the draft model writes up to k steps s^_1..s^_k, one after another, each ending
                     at a delimiter, EOS or the step cap (it stops early after a step that does not
                     end on a delimiter: what would follow it does not start a step);
  2. :func:`target`  in ONE batched generation over R rows (one per drafted step that ends on a
                     delimiter and leaves budget, plus one), row j
                     writes the target's own step s_j from x + s^_1..s^_{j-1}. The rows start from
                     copies of x's KV cache (nothing of x is recomputed); each stops at its own step end;
  3. :func:`verify`  the verifier judges each pair (s^_j, s_j), row by row as the rows finish; a
                     rejection cancels the rows after it, whose work can no longer be used;
  4. :func:`accept`  keep s^_1..s^_m up to the first rejection, then the target's s_{m+1} (its
                     correction) - or, when all drafted steps pass, the last row's step as a free
                     bonus. The target keeps the cache of the row it took, the draft crops its cache
                     back to the accepted text.

EOS or the token budget inside an accepted step ends generation exactly there. With draft == target,
greedy decoding and the exact-match verifier, the output equals greedy autoregressive decoding.

Two refinements over the paper's Algorithm 1 (whose plain form is :mod:`.reference`):

* *head start*: before forking, one forward of the target over x + s^_1..s^_k scores every drafted
  token; row j starts with the prefix of s^_j the target accepts token by token (so a drafted step
  the target would write identically costs no further forward);
* *width* W > 1: W - 1 alternative drafts per position; one may stand in for the target's
  correction where the main draft is rejected (:func:`rescue`).

Token-level SD can run inside every step (``TokenSD``): for the draft's steps with an n-gram drafter,
for the target's rows with an n-gram drafter or with the draft model (forked from the draft's own
cache of the drafted steps). The loop of cycles is :func:`.driver.run_lr`; :func:`.driver.generate_lr`
is the one-prompt front door, shaped like ``generate`` and ``generate_sd``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..runtime.session import Session
from ..sampling import probs_from_logits, token_scores
from ..verifiers.base import Verdict, Verifier
from ..verifiers.likelihood import TokenScores, uses_scores, verify_pairs
from .cycle import CycleTools, Gate, LRState
from ..plan import CyclePlan
from .rejection import greedy_accept, speculative_accept
from .results import CycleTrace
from ..steps import Step
from .timing import Laps
from .writers import StepWriter, Translator


@dataclass
class TargetPass:
    """Step 2's outcome: the R row contexts, the branches that wrote on them, the target's steps,
    and the verdicts the early judge gave while the rows ran."""

    rows: list[list[int]]
    branches: Session
    steps: list[Step]
    verdicts: dict[int, Verdict]
    judge_s: float = 0.0  # time spent judging while the rows ran (counted as verification)
    judged: list[Step] = field(default_factory=list)  # the drafted steps with a row to be judged on
    agreements: list[float] = field(default_factory=list)  # per drafted step with a row (see score_chain)


def run_cycle(state: LRState, plan: CyclePlan | int, tools: CycleTools, gate: Gate | None = None) -> CycleTrace:
    """One synchronous LR cycle, the paper's four steps; updates ``state`` in place.

    ``plan``: what the cycle runs (:class:`~.cycle.CyclePlan`: k, the rows' gamma and the draft's
    stop), or just k (``tools.plan(k)``). ``gate`` may drop rows after the scoring pass (:data:`Gate`).
    """
    plan = tools.plan(plan) if isinstance(plan, int) else plan
    laps, before = Laps(), state.generated
    with laps:  # the whole span, bookkeeping included (wall_s)
        with laps("draft"):
            drafted = draft(state, plan.k, tools)
            alternatives = draft_alternatives(state, drafted, tools)
        with laps("target"):
            written = target(state, drafted, tools, plan, gate)
        with laps("verify"):
            verdicts, m = verify(written)
            alt_verdicts, rescued = rescue(alternatives, verdicts, m, written, tools)
        m, appended = accept(state, written.judged, written, m, rescued, tools.translator)
    laps.move("target", "verify", written.judge_s)  # the early verdicts were given during step 2
    return CycleTrace(drafted if rescued is None else drafted[:m - 1] + [rescued], written.steps, verdicts, m,
                      appended, laps["draft"], laps["target"], laps["verify"], len(written.rows),
                      alternatives=alternatives, alt_verdicts=alt_verdicts, tokens=state.generated - before,
                      wall_s=laps.total(), agreements=written.agreements)


# ---------------------------------------------------------------------------------------- 1. draft

def draft(state: LRState, k: int, tools: CycleTools) -> list[Step]:
    """Step 1: the draft writes up to k steps after x; stops after a step that does not end on a delimiter."""
    drafted: list[Step] = []
    used = 0
    while state.at_boundary and len(drafted) < k and used < state.remaining:
        [step] = tools.draft_writer.write(state.draft, [state.remaining - used])
        step.author = "draft"
        drafted.append(step)
        used += len(tools.translator.to_target(step))
        if not step.boundary:
            break
    return drafted


def draft_alternatives(state: LRState, drafted: list[Step], tools: CycleTools) -> list[list[Step]]:
    """With width W > 1: W - 1 extra drafts at each complete drafted position, in one batched draft pass."""
    chain = [s for s in drafted if s.complete]
    if tools.width <= 1 or tools.alt_writer is None or not chain:
        return [[] for _ in chain]
    base = state.draft.rows[0][:len(state.draft.rows[0]) - sum(len(s.ids) for s in drafted)]
    contexts, budgets, prefix, used = [], [], list(base), 0
    for step in chain:
        contexts += [list(prefix)] * (tools.width - 1)
        budgets += [state.remaining - used] * (tools.width - 1)
        prefix += step.ids
        used += len(tools.translator.to_target(step))
    branches = state.draft.fork(len(contexts))
    branches.set_rows(contexts)
    steps = tools.alt_writer.write(branches, budgets)
    for step in steps:
        step.author = "draft-alt"
    per = tools.width - 1
    return [steps[j * per:(j + 1) * per] for j in range(len(chain))]


# ---------------------------------------------------------------------------------------- 2. target

def target(state: LRState, drafted: list[Step], tools: CycleTools, plan: CyclePlan | None = None,
           gate: Gate | None = None) -> TargetPass:
    """Step 2: the target writes its own step on every row x + s^_1..s^_j, all rows in one batch.

    One forward first scores every drafted token (the rows' head starts, :func:`score_chain`); a
    ``gate`` may then keep only the first R rows. Rows are judged as they finish
    (:class:`EarlyJudge`), so a rejection stops the rows after it. ``plan`` (default
    ``tools.plan(len(drafted))``) gives the rows' gamma (0: token by token), the draft's stop, and
    whether an SD iteration may run past the step's end (only when nothing is drafted).
    """
    plan = plan or tools.plan(len(drafted))
    rows, budgets = target_rows(state, drafted, tools.translator)
    scores: list[TokenScores] = []
    openings, agreements = score_chain(state, rows, drafted, tools.translator, tools.target_writer,
                                       scores if uses_scores(tools.verifier) else None)
    keep = len(rows)
    if gate is not None and len(rows) > 1:
        keep = max(1, min(len(rows), gate([len(tools.translator.to_target(s)) for s in drafted], agreements)))
    judged = drafted if keep == len(rows) else drafted[:keep - 1]
    rows, budgets, openings = rows[:keep], budgets[:keep], openings[:keep]
    branches = state.target if len(rows) == 1 else state.target.fork(len(rows))
    starts = [len(row) for row in rows]
    branches.set_rows([row + first for row, first in zip(rows, openings)])
    judge = EarlyJudge(judged, branches, starts, tools.translator, tools.verifier, scores)
    use_rows = tools.row_drafter is not None and plan.gamma != 0
    row_drafter = tools.row_drafter(state, len(rows), plan.draft_stop_below) if use_rows else None
    steps = tools.target_writer.write(branches, budgets, drafter=row_drafter, starts=starts, on_done=judge,
                                      gamma=plan.gamma if use_rows else None,
                                      overshoot=plan.overshoot and not drafted)
    return TargetPass(rows, branches, steps, judge.verdicts, judge.seconds, judged, agreements)


def target_rows(state: LRState, drafted: list[Step], translator: Translator) -> tuple[list[list[int]], list[int]]:
    """Row contexts x, x+s^_1, ... (one per drafted step that ends on a delimiter, plus one) and budgets."""
    rows, budgets = [list(state.target.rows[0])], [state.remaining]
    for step in drafted:
        ids = translator.to_target(step)
        if not step.boundary or budgets[-1] - len(ids) <= 0:
            break
        rows.append(rows[-1] + ids)
        budgets.append(budgets[-1] - len(ids))
    return rows, budgets


def score_chain(state: LRState, rows: list[list[int]], drafted: list[Step], translator: Translator,
                writer: StepWriter, scores: list[TokenScores] | None = None) -> tuple[list[list[int]], list[float]]:
    """Score all drafted tokens in ONE forward of the prefix row: each row's opening tokens.

    The forward over [x's last token, s^_1 .. s^_n] gives the target's distribution at every drafted
    position. Row j starts with the longest prefix of s^_j that the target accepts token by token
    (greedy: its argmax agrees; sampled: rejection sampling with a one-hot q, which is lossless),
    plus one token of its own. A drafted step the target would write identically costs no further
    forward at all. Returns the openings and, per drafted step with a row, its *agreement*: the
    share of its tokens the target accepted (1.0: the target would write it exactly). Given a list
    ``scores``, appends to it, per drafted step with a row, the target's probability and rank of each
    of its tokens (what a likelihood verifier judges by; no further forward).
    With nothing drafted there is nothing to score: the row starts as it is.
    """
    chain = [t for s in drafted for t in translator.to_target(s)]
    if not chain:
        return [[] for _ in rows], []
    base_len = len(rows[0])
    logits = state.target.logits(extra=[chain], keep=len(chain) + 1)[0]  # (len(chain) + 1, V)
    openings, agreements = [], []
    for j, row in enumerate(rows):
        offset = len(row) - base_len
        own = translator.to_target(drafted[j]) if j < len(drafted) else []
        window = logits[offset:offset + len(own) + 1]
        if writer.sampling.greedy:
            acc = greedy_accept(own, window.argmax(dim=-1).tolist())
        else:
            acc = speculative_accept(own, None, probs_from_logits(window, writer.sampling), writer.generator)
        openings.append(own[:acc.n_accepted] + [acc.next_token])
        if scores is not None and j < len(drafted):
            scores.append(TokenScores.of(*token_scores(window[:len(own)], own)))
        if own:
            agreements.append(acc.n_accepted / len(own))
    return openings, agreements


class EarlyJudge:
    """Judges row j as soon as the target's step j is finished; a rejection cancels rows after j."""

    def __init__(self, drafted: list[Step], branches: Session, starts: list[int], translator: Translator,
                 verifier: Verifier, scores: list[TokenScores] | None = None):
        self.drafted, self.branches, self.starts = drafted, branches, starts
        self.translator, self.verifier, self.scores = translator, verifier, scores or []
        self.verdicts: dict[int, Verdict] = {}
        self.seconds = 0.0

    def __call__(self, row: int) -> list[int]:
        step = self.drafted[row] if row < len(self.drafted) else None
        if step is None or not step.complete or any(not v.accepted for r, v in self.verdicts.items() if r < row):
            return []  # nothing to judge, or an earlier row was rejected (this one is then of no use)
        with Laps() as lap:
            target_text = self.translator.target.decode(self.branches.rows[row][self.starts[row]:])
            scores = [self.scores[row]] if row < len(self.scores) else None
            [verdict] = verify_pairs(self.verifier, [(step.text, target_text)], scores)
        self.seconds += lap.total()
        self.verdicts[row] = verdict
        return [] if verdict.accepted else list(range(row + 1, self.branches.batch_size))


# ---------------------------------------------------------------------------------------- 3. verify

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
           tools: CycleTools) -> tuple[list[Verdict], Step | None]:
    """With width > 1: judge the alternatives at position m (the first rejected draft); the first one
    the verifier accepts stands in for the target's correction there. Nothing happens when no
    drafted step was rejected (row m is then a bonus row, not a correction)."""
    rejected = m < len(verdicts) and not verdicts[m].accepted
    if not rejected or m >= len(alternatives) or m >= len(written.steps) or not alternatives[m]:
        return [], None
    candidates = [a for a in alternatives[m] if a.complete]
    if not candidates:
        return [], None
    pairs = [(a.text, written.steps[m].text) for a in candidates]
    scores = score_alternatives(written, m, candidates, tools.translator) if uses_scores(tools.verifier) else None
    verdicts = verify_pairs(tools.verifier, pairs, scores)
    return verdicts, next((a for a, v in zip(candidates, verdicts) if v.accepted), None)


def score_alternatives(written: TargetPass, m: int, candidates: list[Step], translator: Translator) -> list[TokenScores]:
    """The target's scores of alternative drafts at position m (not in the scored chain): one forward
    of copies of row m's cache, one row per alternative."""
    own = [translator.to_target(a) for a in candidates]
    probe = written.branches.fork(1).select([m]).fork(len(own))
    probe.set_rows([written.rows[m]] * len(own))
    logits = probe.logits(extra=own, keep=max(len(o) for o in own) + 1)  # (n, keep, V), right-aligned
    return [TokenScores.of(*token_scores(logits[b, logits.shape[1] - len(o) - 1:-1], o)) for b, o in enumerate(own)]


# ---------------------------------------------------------------------------------------- 4. accept

def accept(state: LRState, drafted: list[Step], written: TargetPass, m: int, rescued: Step | None,
           translator: Translator) -> tuple[int, bool]:
    """Step 4: keep s^_1..s^_m, then the target's step of row m (or the rescuing alternative).

    Returns (drafted steps kept, whether the target's step was appended). The target keeps the cache
    of the row it takes; the draft crops its cache back to the accepted text.
    """
    rows, branches = written.rows, written.branches
    appended = m < len(rows) and rescued is None
    if rescued is not None:  # an alternative draft replaces the target's correction at position m
        state.target = branches.select([m])
        state.target.set_rows([rows[m] + translator.to_target(rescued)])
        last, m = rescued, m + 1
    elif appended:  # row m holds x + s^_1..s^_m + the target's own next step: keep its cache
        state.target = branches.select([m])
        last = written.steps[m]
    else:  # every drafted step kept, the last ends the generation (EOS or budget)
        state.target = branches.select([len(rows) - 1])
        room = state.max_new_tokens - (len(rows[-1]) - state.prompt_len_target)  # another tokenizer may need more
        state.target.set_rows([rows[-1] + translator.to_target(drafted[m - 1])[:room]])
        last = drafted[m - 1]
    generated = state.target.rows[0][state.prompt_len_target:]
    state.draft.set_rows([state.draft.rows[0][:state.prompt_len_draft] + translator.to_draft(generated)])
    state.at_boundary = last.boundary
    if last.end == "eos":
        state.done = "eos"
    elif state.generated >= state.max_new_tokens:
        state.done = "budget"
    return m, appended


__all__ = ["EarlyJudge", "TargetPass", "accept", "draft", "draft_alternatives", "rescue", "run_cycle", "score_alternatives",
           "score_chain", "target", "target_rows", "verify"]

