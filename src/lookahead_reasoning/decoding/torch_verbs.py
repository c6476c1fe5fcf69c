"""This process's PyTorch runtime for the one LR cycle (:func:`.lookahead.run_cycle`): its verbs on KV
sessions, gathered by :class:`TorchVerbs`.

  1. :func:`draft`      the draft continues its own session, one step after another;
     :meth:`TorchVerbs.alternatives`  the W - 1 alternatives per position in one batched draft pass;
  2. :meth:`TorchVerbs.rows`  ONE batched generation over the R rows, which start from copies of x's KV cache
                        (nothing of x is recomputed); each stops at its own step end and is judged as
                        it finishes (:class:`EarlyJudge`), a rejection stopping the rows after it;
  4. :func:`accept`     the target keeps the cache of the row it took, the draft crops its cache back to
                        the accepted text.

What this runtime adds (none of it changes the text, :mod:`.reference` says why): the head start
(:func:`score_chain`), the row gate (:data:`~.tools.Gate`) and token SD inside steps (``TokenSD``: for the
draft's steps with an n-gram drafter, for the target's rows with an n-gram drafter or with the draft model,
forked from the draft's own cache of the drafted steps); drafts with another tokenizer cross as text
(:class:`~.tools.Translator`).
"""

from __future__ import annotations

from ..errors import require
from ..settings import CyclePlan
from ..runtime.session import Session
from ..sampling import probs_from_logits, token_scores
from ..steps import Step
from ..verifiers.likelihood import TokenScores, uses_scores
from .tools import CycleTools, Gate, CycleState, StepWriter, Translator, WriteRule
from .lookahead import Judge, TargetPass, row_contexts, run_cycle
from .speculative import greedy_accept, speculative_accept
from .results import CycleTrace


class TorchVerbs:
    """The cycle's verbs (:class:`~.lookahead.CycleVerbs`) over ``state``'s sessions with ``tools``;
    ``gate`` may drop rows after the scoring pass."""

    def __init__(self, state: CycleState, tools: CycleTools, gate: Gate | None = None):
        self.state, self.tools, self.gate, self.verifier = state, tools, gate, tools.verifier

    @property
    def generated(self) -> int:
        return self.state.generated

    def draft(self, plan: CyclePlan) -> list[Step]:
        return draft(self.state, plan.k, self.tools)

    def alternatives(self, drafted: list[Step], width: int) -> list[list[Step]]:
        """With width W > 1: W - 1 extra drafts at each complete drafted position, in one batched draft pass."""
        state, tools = self.state, self.tools
        chain = [s for s in drafted if s.complete]
        if width <= 1 or not chain:
            return [[] for _ in chain]
        base = state.draft.rows[0][:len(state.draft.rows[0]) - sum(len(s.ids) for s in drafted)]
        contexts, budgets, prefix, used = [], [], list(base), 0
        for step in chain:
            contexts += [list(prefix)] * (width - 1)
            budgets += [state.remaining - used] * (width - 1)
            prefix += step.ids
            used += len(tools.translator.to_target(step))
        branches = state.draft.fork(len(contexts))
        branches.set_rows(contexts)
        steps = tools.alt_writer.write(branches, budgets)
        for step in steps:
            step.author = "draft-alt"
        return [steps[j:j + width - 1] for j in range(0, len(steps), width - 1)]

    def rows(self, drafted: list[Step], plan: CyclePlan) -> TargetPass:
        """Step 2 (module docstring): the head starts (:func:`score_chain`), the ``gate``, then every row in one
        batch. ``plan`` gives the rows' gamma (0: token by token), the draft's stop, whether an SD iteration may
        run past the step's end, and ``chunk``: with nothing drafted, the target writes up to that many tokens
        regardless of step ends (the whole answer, for plans that speculate on no step), unscored and unjudged."""
        require(plan.schedule == "sync", f"plan {plan.label}: this process's runtime runs the sync schedule "
                "(its rows run in one batched forward)")
        state, tools, gate = self.state, self.tools, self.gate
        rows, budgets = target_rows(state, drafted, tools.translator)
        free = bool(plan.chunk) and not drafted
        if free:
            budgets = [min(plan.chunk, budgets[0])]
        scores: list[TokenScores] = []
        openings, agreements = ([[]], []) if not drafted else score_chain(
            state, rows, drafted, tools.translator, tools.target_writer, scores if uses_scores(tools.verifier) else None)
        keep = min(len(rows), plan.rows or len(rows))  # the plan's cap on rows, then the policy's gate
        if gate is not None and keep > 1:
            keep = max(1, min(keep, gate([len(tools.translator.to_target(s)) for s in drafted], agreements)))
        judged = drafted if keep == len(rows) else drafted[:keep - 1]
        rows, budgets, openings = rows[:keep], budgets[:keep], openings[:keep]
        branches = state.target if len(rows) == 1 else state.target.fork(len(rows))
        starts = [len(row) for row in rows]
        branches.set_rows([row + first for row, first in zip(rows, openings)])
        judge = EarlyJudge(judged, branches, starts, tools.translator, tools.verifier, scores)
        use_rows = tools.row_drafter is not None and plan.gamma != 0
        row_drafter = tools.row_drafter(state, len(rows), plan.draft_stop_below) if use_rows else None
        rule = WriteRule(plan.gamma if use_rows else None, plan.overshoot and not drafted, free)
        # with nothing drafted and one row every token the target writes is kept: a stream hears each one
        streams = state.on_tokens is not None and not drafted and len(rows) == 1
        steps = tools.target_writer.write(branches, budgets, drafter=row_drafter, starts=starts, on_done=judge,
                                          on_token=(lambda row, new: state.on_tokens()) if streams else None, rule=rule)
        return TargetPass(rows, steps, judge.verdicts, judge.seconds, judged, agreements, held=branches)

    def scores(self, written: TargetPass, m: int, candidates: list[Step]) -> list[TokenScores]:
        """The target's scores of alternative drafts at position m (not in the scored chain): one forward
        of copies of row m's cache, one row per alternative."""
        own = [self.tools.translator.to_target(a) for a in candidates]
        probe = written.held.fork(1).select([m]).fork(len(own))
        probe.set_rows([written.rows[m]] * len(own))
        logits = probe.logits(extra=own, keep=max(len(o) for o in own) + 1)  # (n, keep, V), right-aligned
        return [TokenScores.of(*token_scores(logits[b, logits.shape[1] - len(o) - 1:-1], o))
                for b, o in enumerate(own)]

    def accept(self, written: TargetPass, m: int, rescued: Step | None) -> tuple[int, bool]:
        return accept(self.state, written.judged, written, m, rescued, self.tools.translator)


def torch_cycle(state: CycleState, plan: CyclePlan | int, tools: CycleTools, gate: Gate | None = None) -> CycleTrace:
    """One cycle (:func:`~.lookahead.run_cycle`) on this process's runtime; ``plan`` may be just k
    (``tools.plan(k)``). Updates ``state`` in place."""
    plan = tools.plan(plan) if isinstance(plan, int) else plan
    return run_cycle(TorchVerbs(state, tools, gate), plan)


# ---------------------------------------------------------------------------------------- 1. draft

def draft(state: CycleState, k: int, tools: CycleTools) -> list[Step]:
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


# ---------------------------------------------------------------------------------------- 2. target

def target_rows(state: CycleState, drafted: list[Step], translator: Translator) -> tuple[list[list[int]], list[int]]:
    """Row contexts x, x+s^_1, ... (:func:`~.lookahead.row_contexts`) in the target's ids, and budgets."""
    return row_contexts(state.target.rows[0], state.remaining, drafted, translator.to_target)


def score_chain(state: CycleState, rows: list[list[int]], drafted: list[Step], translator: Translator,
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


class EarlyJudge(Judge):
    """The cycle's :class:`~.lookahead.Judge` as the decoding loop's ``on_done``: it judges row j on its text as
    soon as the target's step j is finished; a rejection cancels the rows after j."""

    def __init__(self, drafted: list[Step], branches: Session, starts: list[int], translator: Translator,
                 verifier, scores: list[TokenScores] | None = None):
        super().__init__(drafted, verifier)
        self.branches, self.starts, self.translator, self.scores = branches, starts, translator, scores or []

    def __call__(self, row: int) -> list[int]:  # type: ignore[override]
        if not self.wants(row):
            return []  # nothing to judge, or an earlier row was rejected (this one is then of no use)
        target_text = self.translator.target.decode(self.branches.rows[row][self.starts[row]:])
        useful = super().__call__(row, target_text, self.scores[row] if row < len(self.scores) else None)
        return [] if useful else list(range(row + 1, self.branches.batch_size))


# ---------------------------------------------------------------------------------------- 4. accept

def accept(state: CycleState, drafted: list[Step], written: TargetPass, m: int, rescued: Step | None,
           translator: Translator) -> tuple[int, bool]:
    """Step 4: keep s^_1..s^_m, then the target's step of row m (or the rescuing alternative).

    Returns (drafted steps kept, whether the target's step was appended). The target keeps the cache
    of the row it takes; the draft crops its cache back to the accepted text.
    """
    rows, branches = written.rows, written.held
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


__all__ = ["EarlyJudge", "TorchVerbs", "accept", "draft", "score_chain", "target_rows", "torch_cycle"]
