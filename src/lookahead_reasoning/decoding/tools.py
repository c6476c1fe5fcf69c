"""What a Lookahead Reasoning generation carries from cycle to cycle: where it stands (:class:`CycleState`)
and the collaborators every cycle works with (:class:`CycleTools`, wired by :func:`make_tools`): who writes
a step (:class:`StepWriter`: one model, plain decoding or token SD inside the step), how step text moves
between two tokenizers (:class:`Translator`), and who drafts tokens for the target's rows
(:class:`ModelRows`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..presets import TOKEN_GAMMA
from ..runtime.lm import LM
from ..runtime.pair import ModelPair
from ..runtime.session import Session
from ..sampling import SamplingConfig
from ..settings import CyclePlan, Settings, TokenSD
from ..steps import Step, StepConfig
from ..stopping import StopChecker, StopCondition
from ..verifiers.base import Verifier
from .autoregressive import decode_rows
from .drafters import Drafter, ModelDrafter, NGramDrafter
from .results import CycleStats, SDStats
from .speculative import TokenSDRun, decode_rows_sd

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class WriteRule:
    """How one :meth:`StepWriter.write` call writes: ``gamma`` drafted tokens an SD iteration (None: the
    writer's own), ``overshoot`` (an SD iteration keeps what it accepted past the step's delimiter, the step
    then ending with ``end="overshoot"``, mid-step), ``free`` (no step ends, only EOS and the budget: a
    "step" of the whole budget, plain decoding or token SD with nothing step-level about it)."""

    gamma: int | None = None
    overshoot: bool = False
    free: bool = False


class StepWriter:
    """Writes steps for one model: plain AR, or token-level SD inside the step."""

    def __init__(self, lm: LM, steps: StepConfig, sampling: SamplingConfig, generator: torch.Generator,
                 sd_drafter: Drafter | None = None, gamma: int = TOKEN_GAMMA, sd_stats: SDStats | None = None):
        self.lm, self.steps, self.sampling, self.generator = lm, steps, sampling, generator
        self.sd_drafter, self.gamma, self.sd_stats = sd_drafter, gamma, sd_stats

    def write(self, session: Session, budgets: Sequence[int], drafter: Drafter | None = None,
              starts: Sequence[int] | None = None, on_done=None, on_token=None, rule: WriteRule = WriteRule()) -> list[Step]:
        """Extend every row of ``session`` by one step (each within its own token budget).

        ``starts[b]`` is where row b's step begins (default: its current end; tokens already after it
        count as the step's first tokens). ``on_done`` is passed to the decoding loop; ``on_token(b, new)``
        hears row b's step so far after every token (or accepted block) it gains. ``drafter`` and
        ``rule.gamma`` override the writer's own token-level SD for this call (:class:`WriteRule`).
        """
        starts = [len(r) for r in session.rows] if starts is None else list(starts)
        checkers = [StopChecker(StopCondition(self.lm.eos_ids, (), b) if rule.free
                                else self.steps.stop_condition(self.lm.eos_ids, b), self.lm.decode) for b in budgets]
        drafter = drafter or self.sd_drafter
        if drafter is None:
            hits = decode_rows(session, starts, checkers, self.sampling, self.generator, on_token=on_token,
                               on_done=on_done)
        else:
            run = TokenSDRun(self.sampling, drafter, rule.gamma or self.gamma, self.generator, self.sd_stats,
                             rule.overshoot)
            hits = decode_rows_sd(session, starts, checkers, run, on_token=on_token, on_done=on_done)
        return [Step(session.rows[b][starts[b]:], self.lm.decode(session.rows[b][starts[b]:]), hit.reason)
                for b, hit in enumerate(hits)]


@dataclass
class CycleState:
    """Where a generation stands: both sessions (one row each), the text so far, the budget."""

    target: Session
    draft: Session
    prompt_len_target: int
    prompt_len_draft: int
    max_new_tokens: int
    at_boundary: bool = True  # the start of the answer counts as a step boundary
    done: str | None = None  # the stop reason once finished
    on_tokens: Callable[[], None] | None = None  # hears the answer grow inside a cycle whose every token is kept

    @property
    def generated(self) -> int:
        return len(self.target.rows[0]) - self.prompt_len_target

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - self.generated


RowDrafter = Callable[[CycleState, int, "float | None"], Drafter]
# gate(target tokens of each drafted step, agreement of each drafted step with a row) -> how many target
# rows to run (>= 1).
# Rows beyond are dropped before any of them runs; the last kept row is then a bonus row (not judged).
Gate = Callable[[list[int], list[float]], int]


@dataclass
class CycleTools:
    """What every cycle works with: who writes steps, who judges them, how text crosses tokenizers.

    ``row_drafter(state, R, draft_stop_below)`` builds the token-level drafter for the target's R rows,
    with the plan's confidence stop (None: the rows decode token by token). ``alt_writer`` samples the W - 1
    alternative drafts of a plan of width W > 1. ``draft_stop_below``: the draft's confidence stop of a cycle
    run without a plan of its own (:meth:`plan`).
    """

    draft_writer: StepWriter
    target_writer: StepWriter
    verifier: Verifier
    translator: Translator
    row_drafter: RowDrafter | None = None
    alt_writer: StepWriter | None = None
    draft_stop_below: float | None = None

    def plan(self, k: int) -> CyclePlan:
        """The plain plan of ``k`` drafted steps: the writers' own gamma and the settings' stop."""
        return CyclePlan(k, draft_stop_below=self.draft_stop_below)


def make_tools(pair: ModelPair, verifier: Verifier, settings: Settings, *, generator: torch.Generator,
               stats: CycleStats) -> CycleTools:
    """Wire the writers, drafters and translator of one generation over ``pair`` (the target p, the draft q,
    and whether they share one vocabulary: drafted steps then cross as ids, and token-level SD with the
    draft model is possible).

    ``settings.token_sd`` None: no SD in steps; the draft model drafts for the target's rows as :class:`ModelRows`.
    """
    token_sd, sampling = settings.token_sd, settings.sampling
    target_drafter = draft_drafter = row_drafter = None
    gamma = token_sd.gamma if token_sd is not None else TokenSD().gamma  # without token SD, no writer drafts
    if token_sd is not None:
        stats.target_sd, stats.draft_sd = SDStats(gamma=token_sd.gamma), SDStats(gamma=token_sd.gamma)
        ngram = NGramDrafter(max_n=token_sd.ngram_max, min_n=token_sd.ngram_min)
        draft_drafter = ngram if token_sd.draft == "ngram" else None
        if token_sd.target == "ngram":
            target_drafter = ngram
        elif token_sd.target == "draft" and pair.same_vocab:
            row_drafter = ModelRows(pair.draft, sampling, generator)
        elif token_sd.target == "draft":
            log.warning("token-level SD with the draft model needs one vocabulary: off for this pair")
    # alternatives (plans of width > 1) must differ from the main draft: they are sampled
    alt_sampling = sampling if not sampling.greedy else SamplingConfig(temperature=settings.alt_temperature)
    alt_writer = StepWriter(pair.draft, settings.steps, alt_sampling, generator, draft_drafter, gamma)
    return CycleTools(
        draft_writer=StepWriter(pair.draft, settings.steps, sampling, generator, draft_drafter, gamma, stats.draft_sd),
        target_writer=StepWriter(pair.target, settings.steps, sampling, generator, target_drafter, gamma,
                                 stats.target_sd),
        verifier=verifier, translator=Translator(pair.target, pair.draft, pair.same_vocab), row_drafter=row_drafter,
        alt_writer=alt_writer, draft_stop_below=settings.draft_stop_below)


class ModelRows:
    """Token-level drafting for the target's R rows with the draft model, forked from the draft's
    own cache of x + the drafted steps (so the draft re-reads nothing it has already seen); a single row
    drafts on the draft's own session instead of a copy of it. Each cycle builds its drafter with the stop
    of its plan; the drafter reports each drafted token's top probability."""

    def __init__(self, draft_lm: LM, sampling: SamplingConfig, generator: torch.Generator):
        self.draft_lm, self.sampling, self.generator = draft_lm, sampling, generator

    def __call__(self, state: CycleState, n_rows: int, draft_stop_below: float | None) -> Drafter:
        drafter = ModelDrafter(self.draft_lm, self.sampling, self.generator, draft_stop_below=draft_stop_below,
                               confidence=True)
        drafter.attach(state.draft if n_rows == 1 else state.draft.fork(n_rows))
        return drafter

