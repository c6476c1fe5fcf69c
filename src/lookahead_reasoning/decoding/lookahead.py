"""Lookahead Reasoning (LR): step-level speculation, one synchronous cycle at a time.

From an accepted prefix x (token ids of the target; the draft holds the same text), one cycle:

  1. draft   the draft model writes up to k steps s^_1..s^_k, one after another, each ending at a
             delimiter, EOS or the step cap (it stops early after a step that does not end on a
             delimiter: what would follow it does not start a step);
  2. target  in ONE batched generation over R = (complete drafted steps) + 1 rows, row j writes the
             target's own step s_j from x + s^_1..s^_{j-1}. The rows are forked from x's KV cache
             (nothing of x is recomputed), each row stops at its own step end;
  3. verify  the verifier judges the pairs (s^_j, s_j) in one call;
  4. accept  s^_1..s^_m up to the first rejection, then the target's s_{m+1} (its correction) - or,
             when all drafted steps pass, the last row's step as a free bonus. The target keeps the
             cache of row m+1, the draft crops its cache back to the accepted text.

EOS or the token budget inside an accepted step ends generation exactly there. With draft == target,
greedy decoding and the exact-match verifier, the output equals greedy autoregressive decoding.

Token-level SD can run inside every step (``TokenSD``): for the draft's steps with an n-gram drafter,
for the target's rows with an n-gram drafter or with the draft model (forked from the draft's own
cache of the drafted steps).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..lm import LM
from ..sampling import SamplingConfig
from ..stopping import StopChecker
from .autoregressive import decode_rows
from .drafters import ModelDrafter, NGramDrafter
from .results import SDStats
from .session import Session
from .speculative import decode_rows_sd
from .steps import Step, StepConfig


@dataclass(frozen=True)
class TokenSD:
    """Token-level SD inside steps. ``target``: None | "ngram" | "draft"; ``draft``: None | "ngram"."""

    target: str | None = None
    draft: str | None = None
    gamma: int = 4
    ngram_max: int = 3
    ngram_min: int = 1


@dataclass
class CycleTrace:
    """Everything one LR cycle did: the steps, the verdicts, what was kept and what it cost."""

    drafted: list[Step]
    target: list[Step]
    verdicts: list  # list[Verdict], one per judged pair
    accepted: int  # drafted steps kept
    appended_target_step: bool
    draft_s: float
    target_s: float
    verify_s: float
    target_rows: int
    alternatives: list = field(default_factory=list)  # width > 1: extra drafts per position
    alt_verdicts: list = field(default_factory=list)


@dataclass
class LRStats:
    """Step-level statistics over a generation; alpha1 and c1 in the paper's sense."""

    k: int = 0
    cycles: list[CycleTrace] = field(default_factory=list)
    target_sd: SDStats | None = None
    draft_sd: SDStats | None = None

    @property
    def judged(self) -> int:
        return sum(len(c.verdicts) for c in self.cycles)

    @property
    def accepted_steps(self) -> int:
        return sum(c.accepted for c in self.cycles)

    @property
    def alpha1(self) -> float:
        """Step acceptance: accepted drafted steps / judged pairs, counting each cycle up to its first reject."""
        looked = sum(min(len(c.verdicts), c.accepted + 1) for c in self.cycles)
        return self.accepted_steps / looked if looked else float("nan")

    @property
    def raw_accept_rate(self) -> float:
        """Share of all judged pairs the verifier accepted (also those after a reject)."""
        yes = sum(v.accepted for c in self.cycles for v in c.verdicts)
        return yes / self.judged if self.judged else float("nan")

    @property
    def c1(self) -> float:
        """Draft time per drafted step over target time per (batched) target step generation."""
        d_steps = sum(len(c.drafted) for c in self.cycles)
        t_runs = sum(1 for c in self.cycles if c.target_rows)
        d_time = sum(c.draft_s for c in self.cycles)
        t_time = sum(c.target_s for c in self.cycles)
        if not d_steps or not t_runs or t_time == 0:
            return float("nan")
        return (d_time / d_steps) / (t_time / t_runs)

    @property
    def steps_per_cycle(self) -> float:
        n = len(self.cycles)
        return sum(c.accepted + c.appended_target_step for c in self.cycles) / n if n else float("nan")

    def summary(self) -> dict:
        def r(x: float) -> float | None:
            return None if x != x else round(x, 4)

        out = {
            "k": self.k,
            "cycles": len(self.cycles),
            "judged_pairs": self.judged,
            "accepted_steps": self.accepted_steps,
            "alpha1": r(self.alpha1),
            "raw_accept_rate": r(self.raw_accept_rate),
            "steps_per_cycle": r(self.steps_per_cycle),
            "c1": r(self.c1),
            "draft_s": r(sum(c.draft_s for c in self.cycles)),
            "target_s": r(sum(c.target_s for c in self.cycles)),
            "verify_s": r(sum(c.verify_s for c in self.cycles)),
        }
        if self.target_sd is not None and self.target_sd.drafted:
            out["alpha"] = r(self.target_sd.alpha)
            out["gamma"] = self.target_sd.gamma
            out["target_sd_mean_accepted"] = r(self.target_sd.mean_accepted)
            out["c"] = r(self.target_sd.c)
        if self.draft_sd is not None and self.draft_sd.drafted:  # prompt lookup inside the draft's steps
            out["draft_sd_alpha"] = r(self.draft_sd.alpha)
            out["draft_sd_mean_accepted"] = r(self.draft_sd.mean_accepted)
        return out


class StepWriter:
    """Writes steps for one model: plain AR, or token-level SD inside the step."""

    def __init__(self, lm: LM, steps: StepConfig, sampling: SamplingConfig, generator: torch.Generator,
                 sd_drafter=None, gamma: int = 4, sd_stats: SDStats | None = None):
        self.lm, self.steps, self.sampling, self.generator = lm, steps, sampling, generator
        self.sd_drafter, self.gamma, self.sd_stats = sd_drafter, gamma, sd_stats

    def write(self, session: Session, budgets: Sequence[int], drafter=None, starts: Sequence[int] | None = None,
              on_done=None) -> list[Step]:
        """Extend every row of ``session`` by one step (each within its own token budget).

        ``starts[b]`` is where row b's step begins (default: its current end; tokens already after it
        count as the step's first tokens). ``on_done`` is passed to the decoding loop.
        """
        starts = [len(r) for r in session.rows] if starts is None else list(starts)
        checkers = [StopChecker(self.steps.stop_condition(self.lm.eos_ids, b), self.lm.decode) for b in budgets]
        drafter = drafter or self.sd_drafter
        if drafter is None:
            hits = decode_rows(session, starts, checkers, self.sampling, self.generator, on_done=on_done)
        else:
            hits = decode_rows_sd(session, starts, checkers, self.sampling, drafter, self.gamma,
                                  self.generator, self.sd_stats, on_done=on_done)
        return [Step(session.rows[b][starts[b]:], self.lm.decode(session.rows[b][starts[b]:]), hit.reason)
                for b, hit in enumerate(hits)]


@dataclass
class LRState:
    """Where a generation stands: both sessions (one row each), the text so far, the budget."""

    target: Session
    draft: Session
    prompt_len_target: int
    prompt_len_draft: int
    max_new_tokens: int
    at_boundary: bool = True  # the start of the answer counts as a step boundary
    done: str | None = None  # the stop reason once finished

    @property
    def generated(self) -> int:
        return len(self.target.rows[0]) - self.prompt_len_target


class Translator:
    """Moves step text between the draft's and the target's tokenizers (ids pass through when equal)."""

    def __init__(self, target: LM, draft: LM, same_vocab: bool):
        self.target, self.draft, self.same_vocab = target, draft, same_vocab

    def to_target(self, step: Step) -> list[int]:
        """Target ids of a drafted step."""
        if self.same_vocab:
            return step.ids
        if step.ids_other is None:
            step.ids_other = self.target.encode(step.text)
        return step.ids_other

    def to_draft(self, target_generated: list[int]) -> list[int]:
        """Draft ids of the target's generated text."""
        if self.same_vocab:
            return list(target_generated)
        return self.draft.encode(self.target.decode(target_generated, skip_special_tokens=False))


def run_cycle(
    state: LRState,
    k: int,
    draft_writer: StepWriter,
    target_writer: StepWriter,
    verifier,
    translator: Translator,
    target_row_drafter: Callable[[LRState, int], object] | None = None,
    width: int = 1,
    alt_writer: StepWriter | None = None,
) -> CycleTrace:
    """One synchronous LR cycle (steps 1-4 of the module docstring); updates ``state`` in place.

    ``width`` W > 1 adds W-1 alternative drafts (written by ``alt_writer``, which samples) at every
    drafted position, in one batched draft pass after the main chain. Only the main chain is
    extended and sent to the target; an alternative can rescue the first position whose main draft
    is rejected: it is then kept in place of the target's correction and the cycle ends there.
    """
    remaining = state.max_new_tokens - state.generated
    # 1. draft up to k steps; stop after a step that does not end on a delimiter
    t0 = time.perf_counter()
    drafted: list[Step] = []
    draft_base = list(state.draft.rows[0])
    used = 0
    while state.at_boundary and len(drafted) < k and used < remaining:
        [step] = draft_writer.write(state.draft, [remaining - used])
        step.author = "draft"
        drafted.append(step)
        used += len(translator.to_target(step))
        if not step.boundary:
            break
    ta = time.perf_counter()
    alternatives = _draft_alternatives(state, draft_base, [s for s in drafted if s.complete], width, alt_writer,
                                       remaining, translator)
    t1 = time.perf_counter()
    # 2. the target writes its own step on row j = x + s^_1..s^_j (all rows in one batch)
    rows, budgets = _target_rows(state, drafted, remaining, translator)
    branches, starts = _fork_branches(state, rows, drafted, translator, target_writer)
    judge = _EarlyJudge(drafted, branches, starts, translator, verifier)
    row_drafter = target_row_drafter(state, len(rows)) if target_row_drafter else None
    target_steps = target_writer.write(branches, budgets, drafter=row_drafter, starts=starts, on_done=judge)
    t2 = time.perf_counter()
    # 3. the verdicts were given as rows finished; a rejection cancelled the rows after it
    verdicts = judge.leading_verdicts()
    m = next((i for i, v in enumerate(verdicts) if not v.accepted), len(verdicts))
    alt_verdicts, rescue = _judge_alternatives(alternatives, m, target_steps, verifier)
    t3 = time.perf_counter()
    # 4. keep s^_1..s^_m (m = first rejection), then the target's step m+1 when it exists
    appended = m < len(rows) and rescue is None
    if rescue is not None:  # an alternative draft replaces the target's correction at position m
        state.target = branches.select([m])
        state.target.set_rows([rows[m] + translator.to_target(rescue)])
        drafted = drafted[:m] + [rescue]
        m += 1
        last = rescue
    elif appended:  # row m holds x + s^_1..s^_m + the target's own next step: keep its cache
        state.target = branches.select([m])
        last = target_steps[m]
    else:  # every drafted step kept, the last ends the generation (EOS or budget)
        state.target = branches.select([len(rows) - 1])
        state.target.set_rows([rows[-1] + translator.to_target(drafted[m - 1])])
        last = drafted[m - 1]
    generated = state.target.rows[0][state.prompt_len_target:]
    state.draft.set_rows([state.draft.rows[0][:state.prompt_len_draft] + translator.to_draft(generated)])
    state.at_boundary = last.boundary
    if last.end == "eos":
        state.done = "eos"
    elif state.generated >= state.max_new_tokens:
        state.done = "budget"
    return CycleTrace(drafted, target_steps, verdicts, m, appended, t1 - t0, t2 - t1 - judge.seconds,
                      t3 - t2 + judge.seconds, len(rows), alternatives=alternatives, alt_verdicts=alt_verdicts)


def _target_rows(state: LRState, drafted: list[Step], remaining: int,
                 translator: Translator) -> tuple[list[list[int]], list[int]]:
    """Row contexts x, x+s^_1, ... (one per drafted step that ends on a delimiter, plus one) and budgets."""
    rows, budgets = [list(state.target.rows[0])], [remaining]
    for step in drafted:
        ids = translator.to_target(step)
        if not step.boundary or budgets[-1] - len(ids) <= 0:
            break
        rows.append(rows[-1] + ids)
        budgets.append(budgets[-1] - len(ids))
    return rows, budgets


def _fork_branches(state: LRState, rows: list[list[int]], drafted: list[Step], translator: Translator,
                   writer: "StepWriter") -> tuple[Session, list[int]]:
    """Score all drafted tokens in ONE forward of the prefix row, then fork it into the branch rows.

    The forward over [x's last token, s^_1 .. s^_n] gives the target's distribution at every drafted
    position. Row j starts with the longest prefix of s^_j that the target accepts token by token
    (greedy: its argmax agrees; sampled: rejection sampling with a one-hot q, which is lossless),
    plus one token of its own. A drafted step the target would write identically costs no further
    forward at all. Returns the branches and each row's start (where its step begins).
    """
    from .rejection import greedy_accept, speculative_accept
    from ..sampling import probs_from_logits

    prefix = state.target
    base_len = len(rows[0])
    chain = [t for s in drafted for t in translator.to_target(s)]
    logits = prefix.logits(extra=[chain], keep=len(chain) + 1)[0]  # (len(chain) + 1, V)
    starts, opening = [], []
    for j, row in enumerate(rows):
        offset = len(row) - base_len
        own = translator.to_target(drafted[j]) if j < len(drafted) else []
        window = logits[offset:offset + len(own) + 1]
        if writer.sampling.greedy:
            acc = greedy_accept(own, window.argmax(dim=-1).tolist())
        else:
            acc = speculative_accept(own, None, probs_from_logits(window, writer.sampling), writer.generator)
        starts.append(len(row))
        opening.append(own[:acc.n_accepted] + [acc.next_token])
    branches = prefix.fork(len(rows))
    branches.set_rows([row + first for row, first in zip(rows, opening)])
    return branches, starts


class _EarlyJudge:
    """Judges row j as soon as the target's step j is finished; a rejection cancels rows after j."""

    def __init__(self, drafted: list[Step], branches: Session, starts: list[int], translator: Translator, verifier):
        self.drafted, self.branches, self.starts = drafted, branches, starts
        self.translator, self.verifier = translator, verifier
        self.verdicts: dict[int, object] = {}
        self.seconds = 0.0

    def __call__(self, row: int) -> list[int]:
        step = self.drafted[row] if row < len(self.drafted) else None
        if step is None or not step.complete:
            return []
        t = time.perf_counter()
        target_text = self.translator.target.decode(self.branches.rows[row][self.starts[row]:])
        [verdict] = self.verifier.verify([(step.text, target_text)])
        self.seconds += time.perf_counter() - t
        self.verdicts[row] = verdict
        return [] if verdict.accepted else list(range(row + 1, self.branches.batch_size))

    def leading_verdicts(self) -> list:
        """Verdicts for rows 0, 1, ... up to the first row without one (cancelled, or not judgeable)."""
        out = []
        while len(out) in self.verdicts:
            out.append(self.verdicts[len(out)])
        return out


def _judge_alternatives(alternatives: list[list[Step]], m: int, target_steps: list[Step],
                        verifier) -> tuple[list, Step | None]:
    """With width > 1: judge the alternatives at position m (the first rejected draft), if any."""
    if m >= len(alternatives) or m >= len(target_steps) or not alternatives[m]:
        return [], None
    candidates = [a for a in alternatives[m] if a.complete]
    if not candidates:
        return [], None
    verdicts = verifier.verify([(a.text, target_steps[m].text) for a in candidates])
    rescue = next((a for a, v in zip(candidates, verdicts) if v.accepted), None)
    return verdicts, rescue


def _draft_alternatives(state: LRState, base: list[int], chain: list[Step], width: int,
                        writer: StepWriter | None, remaining: int, translator: Translator) -> list[list[Step]]:
    """W-1 extra drafts for each position of ``chain``, all written in one batched draft pass."""
    if width <= 1 or writer is None or not chain:
        return [[] for _ in chain]
    contexts, budgets, prefix, used = [], [], list(base), 0
    for step in chain:
        contexts += [list(prefix)] * (width - 1)
        budgets += [remaining - used] * (width - 1)
        prefix += step.ids
        used += len(translator.to_target(step))
    branches = state.draft.fork(len(contexts))
    branches.set_rows(contexts)
    steps = writer.write(branches, budgets)
    for step in steps:
        step.author = "draft-alt"
    return [steps[j * (width - 1):(j + 1) * (width - 1)] for j in range(len(chain))]
