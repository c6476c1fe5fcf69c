"""What a Lookahead Reasoning generation carries from cycle to cycle: where it stands (:class:`LRState`)
and the collaborators every cycle works with (:class:`CycleTools`, wired by :func:`make_tools`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import require
from ..lm import LM
from ..sampling import SamplingConfig
from ..verifiers.base import Verifier
from .drafters import Drafter, ModelDrafter, NGramDrafter
from .results import LRStats, SDStats
from .session import Session
from .steps import Step, StepConfig
from .writers import StepWriter, Translator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenSD:
    """Token-level SD inside steps. ``target``: None | "ngram" | "draft"; ``draft``: None | "ngram"."""

    target: str | None = None
    draft: str | None = None
    gamma: int = 4
    ngram_max: int = 3
    ngram_min: int = 1

    def __post_init__(self) -> None:
        require(self.target in (None, "ngram", "draft"),
                f"TokenSD target (who drafts tokens for the target's rows) must be None, 'ngram' or 'draft', got {self.target!r}")
        require(self.draft in (None, "ngram"),
                f"TokenSD draft (who drafts tokens inside the draft's steps) must be None or 'ngram', got {self.draft!r}")
        require(isinstance(self.gamma, int) and self.gamma >= 1, f"TokenSD gamma must be an integer >= 1, got {self.gamma!r}")


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


RowDrafter = Callable[[LRState, int], Drafter]
# gate(drafted steps, agreement of each drafted step with a row) -> how many target rows to run (>= 1).
# Rows beyond are dropped before any of them runs; the last kept row is then a bonus row (not judged).
Gate = Callable[[list[Step], list[float]], int]


@dataclass
class CycleTools:
    """What every cycle works with: who writes steps, who judges them, how text crosses tokenizers.

    ``row_drafter(state, R)`` builds the token-level drafter for the target's R rows (None: the rows
    decode token by token). ``alt_writer`` samples the W - 1 alternative drafts when ``width`` > 1.
    """

    draft_writer: StepWriter
    target_writer: StepWriter
    verifier: Verifier
    translator: Translator
    row_drafter: RowDrafter | None = None
    width: int = 1
    alt_writer: StepWriter | None = None


def make_tools(target_lm: LM, draft_lm: LM, verifier: Verifier, *, steps: StepConfig, sampling: SamplingConfig,
               generator: torch.Generator, stats: LRStats, same_vocab: bool, token_sd: TokenSD | None = None,
               width: int = 1, alt_temperature: float = 0.7,
               draft_stop_below: float | None = None, share_single: bool = False,
               confidence: bool = False) -> CycleTools:
    """Wire the writers, drafters and translator of one generation (``token_sd`` None: no SD in steps;
    ``confidence``: the row drafter reports each drafted token's top probability, for mode auto)."""
    target_drafter = draft_drafter = row_drafter = None
    gamma = token_sd.gamma if token_sd is not None else TokenSD().gamma  # without token SD, no writer drafts
    if token_sd is not None:
        stats.target_sd, stats.draft_sd = SDStats(gamma=token_sd.gamma), SDStats(gamma=token_sd.gamma)
        ngram = NGramDrafter(token_sd.ngram_max, token_sd.ngram_min)
        draft_drafter = ngram if token_sd.draft == "ngram" else None
        if token_sd.target == "ngram":
            target_drafter = ngram
        elif token_sd.target == "draft" and same_vocab:
            row_drafter = draft_model_rows(draft_lm, sampling, generator, draft_stop_below, share_single, confidence)
        elif token_sd.target == "draft":
            log.warning("token-level SD with the draft model needs one vocabulary: off for this pair")
    alt_writer = None
    if width > 1:  # alternatives must differ from the main draft: they are sampled
        alt_sampling = sampling if not sampling.greedy else SamplingConfig(temperature=alt_temperature)
        alt_writer = StepWriter(draft_lm, steps, alt_sampling, generator, draft_drafter, gamma)
    return CycleTools(
        draft_writer=StepWriter(draft_lm, steps, sampling, generator, draft_drafter, gamma, stats.draft_sd),
        target_writer=StepWriter(target_lm, steps, sampling, generator, target_drafter, gamma, stats.target_sd),
        verifier=verifier, translator=Translator(target_lm, draft_lm, same_vocab), row_drafter=row_drafter,
        width=width, alt_writer=alt_writer)


class ModelRows:
    """Token-level drafting for the target's R rows with the draft model, forked from the draft's
    own cache of x + the drafted steps (so the draft re-reads nothing it has already seen).
    ``share_single``: one row drafts on the draft's own session instead of a copy of it.
    ``stop_below`` is read when a cycle builds its drafter, so it may change between cycles."""

    def __init__(self, draft_lm: LM, sampling: SamplingConfig, generator: torch.Generator,
                 stop_below: float | None, share_single: bool = False, confidence: bool = False):
        self.draft_lm, self.sampling, self.generator = draft_lm, sampling, generator
        self.stop_below, self.share_single, self.confidence = stop_below, share_single, confidence

    def __call__(self, state: LRState, n_rows: int) -> Drafter:
        drafter = ModelDrafter(self.draft_lm, self.sampling, self.generator, stop_below=self.stop_below,
                               confidence=self.confidence)
        drafter.attach(state.draft if self.share_single and n_rows == 1 else state.draft.fork(n_rows))
        return drafter


def draft_model_rows(draft_lm: LM, sampling: SamplingConfig, generator: torch.Generator,
                     stop_below: float | None, share_single: bool = False, confidence: bool = False) -> ModelRows:
    """The row drafter of the draft model (:class:`ModelRows`)."""
    return ModelRows(draft_lm, sampling, generator, stop_below, share_single, confidence)
