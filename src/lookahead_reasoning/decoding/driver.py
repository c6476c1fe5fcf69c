"""One driver for the step-level modes: :func:`run_lr` runs cycles until EOS or the budget, each cycle
the plan a :class:`CyclePolicy` gives.

  1. plan    ``policy.plan(state)``: what the next cycle runs (:class:`~.cycle.CyclePlan`: k drafted
             steps, gamma drafted tokens per SD iteration in the target's rows, ``draft_stop_below``);
  2. run     :func:`~.lookahead.run_cycle`; ``policy.gate(state, plan)`` may drop target rows after
             the scoring pass;
  3. learn   ``policy.learn(state, plan, trace)`` sees the finished cycle.

Fixed-k Lookahead Reasoning (:class:`FixedK`, modes ``lr`` and ``lr-sd``) plans the same cycle every
time and learns nothing; mode ``auto`` (:class:`lookahead_reasoning.planning.auto.AutoPolicy`) prices
every plan before each cycle and learns from each. :func:`generate_lr` is fixed-k LR's one-prompt
front door.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from ..errors import require
from ..runtime.lm import LM
from ..sampling import make_generator
from ..verifiers.base import Verifier
from .cycle import CycleTools, Gate, LRState, ToolOptions, make_tools
from ..plan import CyclePlan
from .lookahead import run_cycle
from .results import CycleTrace, GenerationResult, LRStats
from ..settings import Settings
from .streaming import TextStreamer
from .timing import Laps


class CyclePolicy(Protocol):
    """Decides what every cycle of a step-level run does, and learns from what it did."""

    mode: str  # the mode the result reports ("lr", "lr-sd", "auto")

    def start(self, state: LRState, stats: LRStats) -> None: ...

    def plan(self, state: LRState) -> CyclePlan: ...

    def gate(self, state: LRState, plan: CyclePlan) -> Gate | None: ...

    def learn(self, state: LRState, plan: CyclePlan, trace: CycleTrace) -> None: ...

    def finish(self, completed: bool) -> None: ...


class FixedK:
    """Every cycle drafts ``k`` steps; the target's rows use the writers' own gamma and the draft
    stops below ``draft_stop_below``. No gate, nothing learned."""

    def __init__(self, k: int, draft_stop_below: float | None = None, mode: str = "lr"):
        self.k, self.draft_stop_below, self.mode = k, draft_stop_below, mode

    def start(self, state: LRState, stats: LRStats) -> None:
        pass

    def plan(self, state: LRState) -> CyclePlan:
        return CyclePlan(self.k, draft_stop_below=self.draft_stop_below)

    def gate(self, state: LRState, plan: CyclePlan) -> Gate | None:
        return None

    def learn(self, state: LRState, plan: CyclePlan, trace: CycleTrace) -> None:
        pass

    def finish(self, completed: bool) -> None:
        pass


def run_lr(state: LRState, tools: CycleTools, policy: CyclePolicy, stats: LRStats,
           on_text: Callable[[str], None] | None = None) -> GenerationResult:
    """Cycles of ``policy``'s plans from ``state`` until EOS or the budget (module docstring); the
    cycles' traces go to ``stats``, the accepted text to ``on_text`` as it grows."""
    target_lm, draft_lm = state.target.lm, state.draft.lm
    streamer = TextStreamer(target_lm.decode, on_text) if on_text else None
    t_before, d_before = target_lm.stats.copy(), draft_lm.stats.copy()
    policy.start(state, stats)
    completed = False
    try:
        with Laps() as wall:
            while state.done is None and state.remaining > 0:
                plan = policy.plan(state)
                trace = run_cycle(state, plan, tools, policy.gate(state, plan))
                policy.learn(state, plan, trace)
                stats.cycles.append(trace)
                if streamer:
                    streamer.update(state.target.rows[0][state.prompt_len_target:])
        completed = True
    finally:
        policy.finish(completed)
    if state.done is None:
        state.done = "budget"
    t_used, d_used = target_lm.stats.since(t_before), draft_lm.stats.since(d_before)
    if stats.target_sd is not None:
        stats.target_sd.target_forwards, stats.target_sd.target_seconds = t_used.calls, t_used.seconds
        stats.target_sd.draft_forwards, stats.target_sd.draft_seconds = d_used.calls, d_used.seconds
    new = state.target.rows[0][state.prompt_len_target:]
    if streamer:
        streamer.finish(new)
    return GenerationResult(new, target_lm.decode(new), state.target.rows[0][:state.prompt_len_target], state.done,
                            t_used.calls, wall.total(), mode=policy.mode, stats=stats)


def start_state(target_lm: LM, draft_lm: LM, prompt_ids: Sequence[int], draft_prompt_ids: Sequence[int] | None,
                max_new_tokens: int) -> LRState:
    """Both sessions at the prompt (``draft_prompt_ids``: the prompt in the draft's tokenizer; None:
    ``prompt_ids``, for a shared vocabulary)."""
    draft_ids = list(prompt_ids if draft_prompt_ids is None else draft_prompt_ids)
    return LRState(target_lm.session([list(prompt_ids)]), draft_lm.session([draft_ids]), len(prompt_ids),
                   len(draft_ids), max_new_tokens)


@dataclass(frozen=True)
class DraftPrompt:
    """The prompt as the draft reads it: ``ids`` in the draft's tokenizer (None: the target's
    ``prompt_ids``, for a shared vocabulary), and ``same_vocab`` (the pair shares one tokenizer: see
    :class:`~.cycle.ToolOptions`)."""

    ids: Sequence[int] | None = None
    same_vocab: bool = True


def local_settings(settings: Settings | None) -> Settings:
    """``settings`` (None: ``Settings()``) for a loop of this process. Those loops run a cycle's rows in
    one batched forward, so they refuse the async schedule (it would only reorder work)."""
    settings = settings or Settings()
    require(settings.schedule == "sync", "schedule 'async' runs over engines only: in this process a cycle's rows "
            "run in one batched forward, where async would change nothing but the order of work")
    return settings


def generate_lr(target_lm: LM, draft_lm: LM, prompt_ids: Sequence[int], verifier: Verifier,
                settings: Settings | None = None, *, on_text: Callable[[str], None] | None = None,
                draft_prompt: DraftPrompt = DraftPrompt()) -> GenerationResult:
    """Lookahead Reasoning for one prompt: cycles of k drafted steps until EOS or the budget.

    ``settings`` (:class:`~.settings.Settings`, default ``Settings()``; its k, width, steps, sampling,
    ``token_sd``, ``draft_stop_below``, budget and seed; change fields with
    ``settings.with_overrides(k=3, ...)``). ``settings.token_sd`` turns on token-level SD inside steps
    (mode "lr-sd"). ``draft_prompt``: the prompt in the draft's tokenizer and whether the pair shares
    one (:class:`DraftPrompt`; default: ``prompt_ids``, one shared vocabulary). ``on_text`` hears the
    accepted text as it grows.
    """
    settings = local_settings(settings)
    stats = LRStats(k=settings.drafted_steps)
    tools = make_tools(target_lm, draft_lm, verifier, settings, generator=make_generator(settings.seed), stats=stats,
                       options=ToolOptions(same_vocab=draft_prompt.same_vocab))
    state = start_state(target_lm, draft_lm, prompt_ids, draft_prompt.ids, settings.max_new_tokens)
    policy = FixedK(settings.drafted_steps, settings.draft_stop_below, "lr-sd" if settings.token_sd else "lr")
    return run_lr(state, tools, policy, stats, on_text)


__all__ = ["CyclePolicy", "DraftPrompt", "FixedK", "generate_lr", "local_settings", "run_lr", "start_state"]
