"""What a Lookahead Reasoning generation carries from cycle to cycle: where it stands (:class:`LRState`)
and the collaborators every cycle works with (:class:`CycleTools`, wired by :func:`make_tools`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..runtime.lm import LM
from ..runtime.session import Session
from ..sampling import SamplingConfig
from ..verifiers.base import Verifier
from ..plan import CyclePlan
from .drafters import Drafter, ModelDrafter, NGramDrafter
from .results import LRStats, SDStats
from ..settings import Settings, TokenSD
from .writers import StepWriter, Translator

log = logging.getLogger(__name__)


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

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - self.generated


RowDrafter = Callable[[LRState, int, "float | None"], Drafter]
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


@dataclass(frozen=True)
class ToolOptions:
    """How a generation is wired beyond its settings (:func:`make_tools`, and the draft's start).

    ``draft_ids``: the prompt in the draft's tokenizer (None: the target's prompt ids, for a shared
    vocabulary); ``same_vocab``: the pair shares one tokenizer (drafted steps cross as ids; token-level
    SD with the draft model is possible); ``share_single``: one target row drafts on the draft's own
    session; ``confidence``: the row drafter reports each drafted token's top probability (what mode
    auto learns the best confidence stop from, off each SD iteration the run's counters log).
    """

    draft_ids: Sequence[int] | None = None
    same_vocab: bool = True
    share_single: bool = False
    confidence: bool = False


def make_tools(target_lm: LM, draft_lm: LM, verifier: Verifier, settings: Settings | None = None, *,
               generator: torch.Generator, stats: LRStats, options: ToolOptions = ToolOptions()) -> CycleTools:
    """Wire the writers, drafters and translator of one generation.

    ``settings`` (default ``Settings()``; change fields with :meth:`~..settings.Settings.with_overrides`):
    ``settings.token_sd`` None: no SD in steps. ``options``: :class:`ToolOptions`.
    """
    settings = settings or Settings()
    token_sd, sampling = settings.token_sd, settings.sampling
    target_drafter = draft_drafter = row_drafter = None
    gamma = token_sd.gamma if token_sd is not None else TokenSD().gamma  # without token SD, no writer drafts
    if token_sd is not None:
        stats.target_sd, stats.draft_sd = SDStats(gamma=token_sd.gamma), SDStats(gamma=token_sd.gamma)
        ngram = NGramDrafter(max_n=token_sd.ngram_max, min_n=token_sd.ngram_min)
        draft_drafter = ngram if token_sd.draft == "ngram" else None
        if token_sd.target == "ngram":
            target_drafter = ngram
        elif token_sd.target == "draft" and options.same_vocab:
            row_drafter = ModelRows(draft_lm, sampling, generator, options.share_single, options.confidence)
        elif token_sd.target == "draft":
            log.warning("token-level SD with the draft model needs one vocabulary: off for this pair")
    # alternatives (plans of width > 1) must differ from the main draft: they are sampled
    alt_sampling = sampling if not sampling.greedy else SamplingConfig(temperature=settings.alt_temperature)
    alt_writer = StepWriter(draft_lm, settings.steps, alt_sampling, generator, draft_drafter, gamma)
    return CycleTools(
        draft_writer=StepWriter(draft_lm, settings.steps, sampling, generator, draft_drafter, gamma, stats.draft_sd),
        target_writer=StepWriter(target_lm, settings.steps, sampling, generator, target_drafter, gamma,
                                 stats.target_sd),
        verifier=verifier, translator=Translator(target_lm, draft_lm, options.same_vocab), row_drafter=row_drafter,
        alt_writer=alt_writer, draft_stop_below=settings.draft_stop_below)


class ModelRows:
    """Token-level drafting for the target's R rows with the draft model, forked from the draft's
    own cache of x + the drafted steps (so the draft re-reads nothing it has already seen).
    ``share_single``: one row drafts on the draft's own session instead of a copy of it. Each cycle
    builds its drafter with the stop of its plan."""

    def __init__(self, draft_lm: LM, sampling: SamplingConfig, generator: torch.Generator,
                 share_single: bool = False, confidence: bool = False):
        self.draft_lm, self.sampling, self.generator = draft_lm, sampling, generator
        self.share_single, self.confidence = share_single, confidence

    def __call__(self, state: LRState, n_rows: int, draft_stop_below: float | None) -> Drafter:
        drafter = ModelDrafter(self.draft_lm, self.sampling, self.generator, draft_stop_below=draft_stop_below,
                               confidence=self.confidence)
        drafter.attach(state.draft if self.share_single and n_rows == 1 else state.draft.fork(n_rows))
        return drafter

