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
cache of the drafted steps). :func:`generate_lr` is the one-prompt front door, shaped like
``generate`` and ``generate_sd``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..errors import require
from ..lm import LM
from ..sampling import SamplingConfig, make_generator, probs_from_logits
from .rejection import greedy_accept, speculative_accept
from .results import CycleTrace, GenerationResult, LRStats
from .session import Session
from .cycle import CycleTools, Gate, LRState, TokenSD, make_tools
from .steps import Step, StepConfig
from .writers import StepWriter, Translator
from .streaming import TextStreamer
from .timing import Laps

from ..verifiers.base import Verdict, Verifier


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


def run_cycle(state: LRState, k: int, tools: CycleTools, gamma: int | None = None, gate: Gate | None = None,
              overshoot: bool = False) -> CycleTrace:
    """One synchronous LR cycle, the paper's four steps; updates ``state`` in place.

    ``gamma`` overrides the drafted tokens per SD iteration inside the target's rows for this cycle
    (0: the rows decode token by token even when ``tools.row_drafter`` is set). ``gate`` may drop
    rows after the scoring pass (see :data:`Gate`). ``overshoot`` (only when nothing is drafted):
    an SD iteration that runs past the step's end keeps what it accepted there.
    """
    laps, before = Laps(), state.generated
    with laps:  # the whole span, bookkeeping included (wall_s)
        with laps("draft"):
            drafted = draft(state, k, tools)
            alternatives = draft_alternatives(state, drafted, tools)
        with laps("target"):
            written = target(state, drafted, tools, gamma, gate, overshoot and not drafted)
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

def target(state: LRState, drafted: list[Step], tools: CycleTools, gamma: int | None = None,
           gate: Gate | None = None, overshoot: bool = False) -> TargetPass:
    """Step 2: the target writes its own step on every row x + s^_1..s^_j, all rows in one batch.

    One forward first scores every drafted token (the rows' head starts, :func:`score_chain`); a
    ``gate`` may then keep only the first R rows. Rows are judged as they finish
    (:class:`EarlyJudge`), so a rejection stops the rows after it.
    """
    rows, budgets = target_rows(state, drafted, tools.translator)
    openings, agreements = score_chain(state, rows, drafted, tools.translator, tools.target_writer)
    keep = len(rows) if gate is None or len(rows) == 1 else max(1, min(len(rows), gate(drafted, agreements)))
    judged = drafted if keep == len(rows) else drafted[:keep - 1]
    rows, budgets, openings = rows[:keep], budgets[:keep], openings[:keep]
    branches = state.target if len(rows) == 1 else state.target.fork(len(rows))
    starts = [len(row) for row in rows]
    branches.set_rows([row + first for row, first in zip(rows, openings)])
    judge = EarlyJudge(judged, branches, starts, tools.translator, tools.verifier)
    use_rows = tools.row_drafter is not None and gamma != 0
    row_drafter = tools.row_drafter(state, len(rows)) if use_rows else None
    steps = tools.target_writer.write(branches, budgets, drafter=row_drafter, starts=starts, on_done=judge,
                                      gamma=gamma if use_rows else None, overshoot=overshoot)
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
                 writer: StepWriter) -> tuple[list[list[int]], list[float]]:
    """Score all drafted tokens in ONE forward of the prefix row: each row's opening tokens.

    The forward over [x's last token, s^_1 .. s^_n] gives the target's distribution at every drafted
    position. Row j starts with the longest prefix of s^_j that the target accepts token by token
    (greedy: its argmax agrees; sampled: rejection sampling with a one-hot q, which is lossless),
    plus one token of its own. A drafted step the target would write identically costs no further
    forward at all. Returns the openings and, per drafted step with a row, its *agreement*: the
    share of its tokens the target accepted (1.0: the target would write it exactly).
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
        if own:
            agreements.append(acc.n_accepted / len(own))
    return openings, agreements


class EarlyJudge:
    """Judges row j as soon as the target's step j is finished; a rejection cancels rows after j."""

    def __init__(self, drafted: list[Step], branches: Session, starts: list[int], translator: Translator,
                 verifier: Verifier):
        self.drafted, self.branches, self.starts = drafted, branches, starts
        self.translator, self.verifier = translator, verifier
        self.verdicts: dict[int, Verdict] = {}
        self.seconds = 0.0

    def __call__(self, row: int) -> list[int]:
        step = self.drafted[row] if row < len(self.drafted) else None
        if step is None or not step.complete or any(not v.accepted for r, v in self.verdicts.items() if r < row):
            return []  # nothing to judge, or an earlier row was rejected (this one is then of no use)
        with Laps() as lap:
            target_text = self.translator.target.decode(self.branches.rows[row][self.starts[row]:])
            [verdict] = self.verifier.verify([(step.text, target_text)])
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
    verdicts = tools.verifier.verify([(a.text, written.steps[m].text) for a in candidates])
    return verdicts, next((a for a, v in zip(candidates, verdicts) if v.accepted), None)


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


# ---------------------------------------------------------------------------------------- front door

def generate_lr(
    target_lm: LM,
    draft_lm: LM,
    prompt_ids: Sequence[int],
    verifier: Verifier,
    *,
    draft_prompt_ids: Sequence[int] | None = None,
    k: int = 2,
    steps: StepConfig | None = None,
    sampling: SamplingConfig | None = None,
    token_sd: TokenSD | None = None,
    width: int = 1,
    alt_temperature: float = 0.7,
    draft_stop_below: float | None = None,
    same_vocab: bool = True,
    max_new_tokens: int = 256,
    seed: int | None = 0,
    on_text: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Lookahead Reasoning for one prompt: cycles of :func:`run_cycle` until EOS or the budget.

    ``draft_prompt_ids`` is the prompt in the draft's tokenizer (default: ``prompt_ids``, for a
    shared vocabulary). ``token_sd`` turns on token-level SD inside steps (mode "lr-sd").
    """
    require(isinstance(k, int) and k >= 1, f"k (drafted steps per cycle) must be an integer >= 1, got {k!r}")
    require(isinstance(width, int) and width >= 1, f"width (drafts per position) must be an integer >= 1, got {width!r}")
    require(isinstance(max_new_tokens, int) and max_new_tokens >= 0,
            f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    sampling = sampling or SamplingConfig()
    generator = make_generator(seed)
    stats = LRStats(k=k)
    tools = make_tools(target_lm, draft_lm, verifier, steps=steps or StepConfig(), sampling=sampling,
                       generator=generator, stats=stats, same_vocab=same_vocab, token_sd=token_sd, width=width,
                       alt_temperature=alt_temperature, draft_stop_below=draft_stop_below)
    draft_ids = list(prompt_ids if draft_prompt_ids is None else draft_prompt_ids)
    state = LRState(Session(target_lm, [list(prompt_ids)]), Session(draft_lm, [draft_ids]),
                    len(prompt_ids), len(draft_ids), max_new_tokens)
    streamer = TextStreamer(target_lm.decode, on_text) if on_text else None
    t_before, d_before = target_lm.stats.copy(), draft_lm.stats.copy()
    with Laps() as wall:
        while state.done is None and state.remaining > 0:
            stats.cycles.append(run_cycle(state, k, tools))
            if streamer:
                streamer.update(state.target.rows[0][len(prompt_ids):])
    if state.done is None:
        state.done = "budget"
    return finish_lr(state, stats, target_lm, draft_lm, t_before, d_before, wall.total(), streamer,
                     "lr-sd" if token_sd else "lr")


def finish_lr(state: LRState, stats: LRStats, target_lm: LM, draft_lm: LM, t_before, d_before, wall: float,
              streamer: TextStreamer | None, mode: str) -> GenerationResult:
    """The GenerationResult of a step-level run: the forwards of both models in the run's window."""
    t_used, d_used = target_lm.stats.since(t_before), draft_lm.stats.since(d_before)
    if stats.target_sd is not None:
        stats.target_sd.target_forwards, stats.target_sd.target_seconds = t_used.calls, t_used.seconds
        stats.target_sd.draft_forwards, stats.target_sd.draft_seconds = d_used.calls, d_used.seconds
    new = state.target.rows[0][state.prompt_len_target:]
    if streamer:
        streamer.finish(new)
    return GenerationResult(new, target_lm.decode(new), state.target.rows[0][:state.prompt_len_target], state.done,
                            t_used.calls, wall, mode=mode, stats=stats)


__all__ = ["EarlyJudge", "TargetPass", "accept", "draft", "draft_alternatives", "finish_lr", "generate_lr", "rescue",
           "run_cycle", "score_chain", "target", "target_rows", "verify"]
