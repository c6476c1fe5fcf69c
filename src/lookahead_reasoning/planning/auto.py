"""Mode ``auto``: Lookahead Reasoning whose every cycle runs the plan the planner prices fastest.

The loop (compare :func:`lookahead_reasoning.decoding.lookahead.generate_lr`):

  1. choose   the planner prices every plan (k drafted steps, gamma drafted tokens per SD iteration,
              the draft's confidence stop) with the cost table at the current context length and
              the rates learned so far (the first cycle also pays for feeding the prompt);
  2. run      one cycle of that plan (:func:`~lookahead_reasoning.decoding.lookahead.run_cycle`):
              k = 0 is the target writing the next step alone (with SD at gamma, or plainly), and an
              SD iteration may run past the step's end (nothing is wasted); k >= 1 is an LR cycle
              whose rows the step gate may cut after the scoring pass;
  3. learn    the cycle's SD iterations, verdicts, lengths and unexplained time update the book,
              and every timed forward updates the cost table.

Every forward runs at the width the cost table prices it at: where a wider measured forward is
cheaper than the one asked for, it is padded to that width (``PlannerConfig.pad``, ``LM.widths``).

A drafted step must start at a step boundary: when a plan with k >= 1 wins but the text is mid-step
(after an overshooting cycle), the target first finishes the step alone. With draft == target, the
exact verifier and greedy decoding the output is greedy autoregressive decoding's, whatever the
plans (every plan is lossless under those conditions). What the run learned is saved for the next
run of the same pair (``PlannerConfig.learn``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..decoding.cycle import CycleTools, LRState, ModelRows, TokenSD, make_tools
from ..decoding.lookahead import finish_lr, run_cycle
from ..decoding.results import CycleTrace, GenerationResult, LRStats, PlanNote
from ..decoding.session import Session
from ..decoding.steps import StepConfig
from ..decoding.streaming import TextStreamer
from ..decoding.timing import Laps
from ..lm import LM
from ..presets import DRAFT_STOP_BELOW
from ..sampling import SamplingConfig, make_generator
from .costs import DRAFT_GRID, TARGET_GRID, CostTable, load_or_profile, save
from .estimates import Book, load_book, save_book
from .planner import Plan, Planner, PlannerConfig, Prefill

from ..verifiers.base import Verifier

log = logging.getLogger(__name__)


@dataclass
class Planning:
    """What ``auto`` keeps between generations of one pair: the cost table and the book, and where
    they are saved."""

    costs: CostTable
    book: Book
    # target table, draft table, book, the pair's rates with this verifier in any regime, and with any verifier
    paths: tuple[Path, Path, Path, Path, Path]

    @classmethod
    def load(cls, target_lm: LM, draft_lm: LM, verifier_name: str, config: PlannerConfig) -> "Planning":
        """Read (or measure) both cost tables and the book of this pair in this cost regime. A regime
        the pair has not run in yet starts from the acceptance rates it learned in the last regime it
        ran in with this verifier (:meth:`Book.rates_only`); a verifier new to the pair starts from the
        token rates it learned with the last verifier (:meth:`Book.token_rates_only`: token acceptance
        is the draft's, step acceptance the verifier's); else the priors."""
        t_grid, t_path = load_or_profile(target_lm, TARGET_GRID, reprofile=config.reprofile, progress=config.progress,
                                         label=f"target {target_lm.name}", root=config.cache_dir)
        d_grid, d_path = load_or_profile(draft_lm, DRAFT_GRID, reprofile=config.reprofile, progress=config.progress,
                                         label=f"draft {draft_lm.name}", root=config.cache_dir)

        def digest(parts: list) -> str:
            return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
        book_path = t_path.parent / f"book-{digest([t_grid.key, d_grid.key, verifier_name])}.json"
        rates_path = t_path.parent / f"rates-{digest([target_lm.name, draft_lm.name, verifier_name])}.json"
        token_path = t_path.parent / f"rates-{digest([target_lm.name, draft_lm.name])}.json"
        if book_path.exists():
            book = load_book(book_path)
        elif rates_path.exists():
            log.info("no rates learned in this cost regime yet: starting from the pair's rates in %s", rates_path)
            book = load_book(rates_path).rates_only()
        elif token_path.exists():
            log.info("no rates learned with verifier %s yet: starting from the pair's token rates in %s",
                     verifier_name, token_path)
            book = load_book(token_path).token_rates_only()
        else:
            book = Book()
        return cls(CostTable(t_grid, d_grid), book, (t_path, d_path, book_path, rates_path, token_path))

    def save(self) -> None:
        save(self.costs.target, self.paths[0])
        save(self.costs.draft, self.paths[1])
        for path in self.paths[2:]:
            save_book(self.book, path)


def generate_auto(
    target_lm: LM,
    draft_lm: LM,
    prompt_ids: Sequence[int],
    verifier: Verifier,
    *,
    draft_prompt_ids: Sequence[int] | None = None,
    max_k: int | None = None,
    config: PlannerConfig | None = None,
    planning: Planning | None = None,
    steps: StepConfig | None = None,
    sampling: SamplingConfig | None = None,
    draft_stop_below: float | None = DRAFT_STOP_BELOW,
    same_vocab: bool = True,
    max_new_tokens: int = 256,
    seed: int | None = 0,
    on_text: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Adaptive speculation for one prompt (module docstring). ``planning`` carries the cost table and
    book across calls (loaded, or measured, when None); ``max_k`` caps the drafted steps of a plan."""
    config = config or PlannerConfig()
    if max_k is not None:
        config = PlannerConfig(**{**vars(config), "max_k": max_k})
    planning = planning or Planning.load(target_lm, draft_lm, getattr(verifier, "name", type(verifier).__name__),
                                         config)
    sampling = sampling or SamplingConfig()
    generator = make_generator(seed)
    stats = LRStats(k=config.max_k)
    tools = make_tools(target_lm, draft_lm, verifier, steps=steps or StepConfig(), sampling=sampling,
                       generator=generator, stats=stats, same_vocab=same_vocab,
                       token_sd=TokenSD(target="draft", draft=None, gamma=max(config.gammas, default=4)),
                       width=1, draft_stop_below=draft_stop_below, share_single=True, confidence=True)
    stats.target_sd.observers.append(planning.book.token.record)
    draft_ids = list(prompt_ids if draft_prompt_ids is None else draft_prompt_ids)
    state = LRState(Session(target_lm, [list(prompt_ids)]), Session(draft_lm, [draft_ids]),
                    len(prompt_ids), len(draft_ids), max_new_tokens)
    planner = Planner(planning.costs, planning.book, config, can_draft=True, can_sd=tools.row_drafter is not None,
                      stop=draft_stop_below)
    streamer = TextStreamer(target_lm.decode, on_text) if on_text else None
    t_before, d_before = target_lm.stats.copy(), draft_lm.stats.copy()
    for grid in (planning.costs.target, planning.costs.draft):
        grid.padding = config.pad
    planning.costs.attach(target_lm, draft_lm, refine=config.refine)
    try:
        with Laps() as wall:
            while state.done is None and state.remaining > 0:
                stats.cycles.append(_cycle(state, planner, tools, target_lm, draft_lm, stats))
                if streamer:
                    streamer.update(state.target.rows[0][len(prompt_ids):])
    finally:
        planning.costs.detach(target_lm, draft_lm)
    if state.done is None:
        state.done = "budget"
    if config.learn:
        planning.save()
    return finish_lr(state, stats, target_lm, draft_lm, t_before, d_before, wall.total(), streamer, "auto")


def _cycle(state: LRState, planner: Planner, tools: CycleTools, target_lm: LM, draft_lm: LM,
           stats: LRStats) -> CycleTrace:
    """Steps 1-3 of the module docstring for one cycle."""
    context = len(state.target.rows[0])
    prefill = Prefill(*(len(s.rows[0]) if s.cached[0] == 0 else 0 for s in (state.target, state.draft)))
    choice = planner.choose(context, prefill)
    plan, rate = choice.plan, choice.rate
    if plan.k > 0 and not state.at_boundary:  # finish the current step alone first
        plan, rate = planner.best_alone(context, prefill)

    def gate(drafted, agreements):
        return planner.rows_to_run(plan, context, [len(tools.translator.to_target(s)) for s in drafted], agreements)

    if isinstance(tools.row_drafter, ModelRows):
        tools.row_drafter.stop_below = plan.stop
    forwards = target_lm.stats.copy(), draft_lm.stats.copy()
    iterations = stats.target_sd.iterations
    trace = run_cycle(state, plan.k, tools, gamma=plan.gamma, gate=gate, overshoot=choice.plan.k == 0)
    trace.plan = PlanNote(plan.label, rate, trace.target_rows)
    planner.book.record_cycle(plan.label, trace.tokens, trace.wall_s, rate / planner.book.factor(plan.label))
    _learn(planner.book, trace, tools.target_writer.steps.delimiters, target_lm.stats.since(forwards[0]).seconds
           + draft_lm.stats.since(forwards[1]).seconds, stats.target_sd.iterations - iterations, plan)
    return trace


def _learn(book: Book, trace: CycleTrace, delimiters: Sequence[str], forward_s: float, iterations: int,
           plan: Plan) -> None:
    """Update the book from one finished cycle (token-level rates were recorded as it ran)."""
    step = book.step
    for verdict, agreement in zip(trace.verdicts, trace.agreements):
        step.record_verdict(agreement, verdict.accepted)
        step.verify_s.add(verdict.latency_s)
    for drafted, agreement in zip(trace.drafted, trace.agreements):
        step.draft_tokens.add(len(drafted.ids))
        step.agreement.add(agreement)
    for target_step in trace.target:
        if target_step.complete and target_step.ids:
            step.target_tokens.add(len(target_step.ids))
        elif target_step.end == "overshoot":  # the end of one step and the start of the next
            crossed = sum(target_step.text.count(d) for d in delimiters)
            if crossed:
                step.target_tokens.add(len(target_step.ids) / crossed, crossed)
    unexplained = max(0.0, trace.wall_s - forward_s - trace.verify_s)
    if plan.k == 0 and iterations > 0:
        book.token.iteration_overhead.add(unexplained / iterations, 0.2)
    elif plan.k > 0:
        step.cycle_overhead.add(unexplained, 0.5)


__all__ = ["Planning", "generate_auto"]
