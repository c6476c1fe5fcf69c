"""Who writes a step: :class:`StepWriter` (one model, plain decoding or token SD inside the step) and
:class:`Translator` (step text between two tokenizers)."""

from __future__ import annotations

from typing import Sequence

import torch

from ..presets import TOKEN_GAMMA
from ..runtime.lm import LM
from ..runtime.session import Session
from ..sampling import SamplingConfig
from ..stopping import StopChecker
from .autoregressive import decode_rows
from .drafters import Drafter
from .results import SDStats
from .speculative import TokenSDRun, decode_rows_sd
from ..steps import Step, StepConfig


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


class StepWriter:
    """Writes steps for one model: plain AR, or token-level SD inside the step."""

    def __init__(self, lm: LM, steps: StepConfig, sampling: SamplingConfig, generator: torch.Generator,
                 sd_drafter: Drafter | None = None, gamma: int = TOKEN_GAMMA, sd_stats: SDStats | None = None):
        self.lm, self.steps, self.sampling, self.generator = lm, steps, sampling, generator
        self.sd_drafter, self.gamma, self.sd_stats = sd_drafter, gamma, sd_stats

    def write(self, session: Session, budgets: Sequence[int], drafter: Drafter | None = None,
              starts: Sequence[int] | None = None, on_done=None, gamma: int | None = None,
              overshoot: bool = False) -> list[Step]:
        """Extend every row of ``session`` by one step (each within its own token budget).

        ``starts[b]`` is where row b's step begins (default: its current end; tokens already after it
        count as the step's first tokens). ``on_done`` is passed to the decoding loop. ``drafter``
        and ``gamma`` override the writer's own token-level SD for this call; ``overshoot`` lets an
        SD iteration keep the tokens it accepted past the step's delimiter (the step then ends with
        ``end="overshoot"``, mid-step).
        """
        starts = [len(r) for r in session.rows] if starts is None else list(starts)
        checkers = [StopChecker(self.steps.stop_condition(self.lm.eos_ids, b), self.lm.decode) for b in budgets]
        drafter = drafter or self.sd_drafter
        if drafter is None:
            hits = decode_rows(session, starts, checkers, self.sampling, self.generator, on_done=on_done)
        else:
            run = TokenSDRun(self.sampling, drafter, gamma or self.gamma, self.generator, self.sd_stats, overshoot)
            hits = decode_rows_sd(session, starts, checkers, run, on_done=on_done)
        return [Step(session.rows[b][starts[b]:], self.lm.decode(session.rows[b][starts[b]:]), hit.reason)
                for b, hit in enumerate(hits)]
