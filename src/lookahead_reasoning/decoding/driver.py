"""One driver for every step-level mode, over every runtime: :func:`drive` runs cycles until EOS or
the budget, each cycle the plan a :class:`CyclePolicy` gives, on a runtime's :class:`Cycles`.

  1. plan    ``policy.plan(position)``: what the next cycle runs (:class:`~lookahead_reasoning.settings.CyclePlan`),
             from where the generation stands (:class:`Position`);
  2. run     ``run_cycle(verbs, plan)`` on the verbs the runtime gives for this cycle (``cycles.verbs``); a
             runtime that scores the drafted tokens before its rows start asks ``policy.rows(...)`` how
             many rows to run; ``cycles.keep(trace)`` adds what the runtime measured;
  3. learn   ``policy.learn(trace)``: the finished cycle's :class:`~.results.CycleTrace` carries all a
             policy learns from (steps, verdicts, timings, forward seconds, SD iterations).

Two runtimes implement :class:`Cycles` (their verbs: :mod:`.lookahead`): :class:`TorchCycles` (this process's
models) and :class:`~.stepwise.StepCycles` (any :class:`~lookahead_reasoning.steps.StepModel`, such as a serving
engine), where the driver, plain Python, runs in a thread of its own beside the caller's event loop that runs
the requests (:func:`~.stepwise.agenerate_stepwise`).

A mode is a plan. :class:`FixedPolicy` plans the same cycle every time and learns nothing: ``ar`` is k = 0
with no token SD, ``sd`` and ``sd-ngram`` are k = 0 with token SD in the target's row, each one cycle
that writes the whole answer (``chunk``: no step ends); ``lr`` and ``lr-sd`` draft k steps a cycle
(:func:`mode_plan` builds each mode's). Mode ``auto``
(:class:`lookahead_reasoning.planning.policy.AutoPolicy`, here and over engines: one planner, pricing
forwards or requests) prices every plan before each cycle and learns from each. :func:`generate_cycles` is the
one front door of this process's runtime, for every mode; EOS, the budget and the stop reason are the
runtime's, in one place (:class:`~.tools.CycleState`, the step writer's stop condition).
"""

from __future__ import annotations

import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Callable, ContextManager, Iterator, Protocol, Sequence

from ..errors import require
from ..runtime.lm import ForwardTiming, PadPolicy
from ..runtime.pair import ModelPair
from ..sampling import make_generator
from ..presets import LR_SD_TOKEN_SD, mode_gamma, mode_k
from ..settings import CyclePlan, Settings, TokenSD, local_settings
from ..verifiers.base import Verifier
from .tools import CycleTools, CycleState, make_tools
from .lookahead import CycleVerbs, run_cycle
from .torch_verbs import TorchVerbs
from .results import CycleTrace, GenerationResult, CycleStats
from .progress import OnText, stream_for


@dataclass(frozen=True)
class Position:
    """Where a generation stands before a cycle: tokens ``generated`` and ``remaining`` in the budget,
    whether the text ends on a step boundary, the ``context`` length (prompt + text) and, per model
    (target, draft), the tokens it has not read yet (``prefill``: the whole prompt before the first
    cycle in this process; 0 where an engine's prefix cache holds it)."""

    generated: int
    remaining: int
    at_boundary: bool
    context: int
    prefill: tuple[int, int] = (0, 0)


class CyclePolicy:
    """Decides what every cycle of a step-level run does, and learns from what it did. A policy gives
    :meth:`plan`; everything else a driver reads of it has a default here: the ``mode`` the result reports,
    ``k`` (the most drafted steps a plan may use, what the run's stats report; 0: no plan drafts a step, so
    the run is a plain one, with no step statistics and no draft endpoint needed), ``pads`` (target's,
    draft's: the n each model runs a forward of n new tokens at in this process, see :class:`TorchCycles`),
    every row run, nothing learned."""

    mode: str = "lr"
    k: int = 1
    pads: tuple[PadPolicy | None, PadPolicy | None] = (None, None)

    def plan(self, position: Position) -> CyclePlan:
        raise NotImplementedError

    def rows(self, plan: CyclePlan, drafted_tokens: list[int], agreements: list[float]) -> int:
        """How many target rows to run (>= 1), once the drafted tokens are scored (see :data:`~.tools.Gate`)."""
        return len(drafted_tokens) + 1

    def learn(self, trace: CycleTrace) -> None:
        pass

    def finish(self, completed: bool) -> None:
        pass


class Cycles(Protocol):
    """A runtime's side of the driver: one generation's cycles (module docstring)."""

    @property
    def done(self) -> str | None: ...  # the stop reason once finished ("eos", "budget")

    def position(self) -> Position: ...

    def verbs(self, plan: CyclePlan, policy: CyclePolicy) -> ContextManager[CycleVerbs]:
        """The verbs of one cycle from the accepted prefix (:class:`~.lookahead.CycleVerbs`); on leaving, the
        runtime stops what the cycle did not wait for."""
        ...

    def keep(self, trace: CycleTrace) -> None:
        """Add what the runtime measured to a finished cycle's trace, and extend the text by its kept steps."""
        ...


class FixedPolicy(CyclePolicy):
    """Every cycle runs the same plan, ``every`` (a :class:`~lookahead_reasoning.settings.CyclePlan` of ``k`` drafted
    steps, ``width`` drafts per position, on the ``schedule``, the target's rows drafting ``gamma`` tokens an SD
    iteration (0: none) with the draft's confidence stop ``draft_stop_below``). Mid-step the target first writes
    to the next boundary alone, at the same gamma. With k = 0 the target writes ``chunk`` tokens a cycle with no
    step ends (None: the rest of the answer in one cycle: ``ar``, ``sd``). Every row runs; nothing is learned.
    A mode's fixed policy comes from :func:`mode_plan`."""

    def __init__(self, k: int, draft_stop_below: float | None = None, mode: str = "lr", *, width: int = 1,
                 schedule: str = "sync", gamma: int | None = None, chunk: int | None = None):
        self.k, self.mode = k, mode
        self.every = CyclePlan(k, width, schedule, gamma, draft_stop_below, chunk=chunk or 0)  # checks the numbers

    @property
    def gamma(self) -> int | None:
        return self.every.gamma

    def plan(self, position: Position) -> CyclePlan:
        every = self.every
        if every.k == 0:
            return replace(every, chunk=max(1, min(every.chunk or position.remaining, position.remaining)))
        if not position.at_boundary:
            return CyclePlan(0, gamma=every.gamma, draft_stop_below=every.draft_stop_below)
        return every


def drive(cycles: Cycles, policy: CyclePolicy, stats: CycleStats,
          on_cycle: Callable[[CycleTrace], None] | None = None) -> None:
    """Cycles of ``policy``'s plans on ``cycles`` until it is done (module docstring); every trace goes
    to ``stats`` and then to ``on_cycle``. ``policy.finish`` hears whether the run completed."""
    completed = False
    try:
        while cycles.done is None:
            plan = policy.plan(cycles.position())
            with cycles.verbs(plan, policy) as verbs:
                trace = run_cycle(verbs, plan)
            cycles.keep(trace)
            policy.learn(trace)
            stats.cycles.append(trace)
            if on_cycle is not None:
                on_cycle(trace)
        completed = True
    finally:
        policy.finish(completed)


class TorchCycles:
    """This process's PyTorch runtime (module docstring): cycles of :func:`~.lookahead.run_cycle` on
    ``state``'s sessions with ``tools`` (:class:`~.torch_verbs.TorchVerbs`). Each trace also carries what
    the cycle measured: the forward seconds of both models, every timed forward, and the SD iterations
    of the target's rows (counted, and each one's outcome, from ``stats.target_sd``). Each model runs its
    forwards at the policy's ``pads`` (:data:`~lookahead_reasoning.runtime.lm.PadPolicy`; None: as asked; one LM
    in both roles pads as the target). ``on_text`` hears the accepted text as it grows (:meth:`streamed` after every cycle, and
    token by token inside a cycle that keeps every token); :meth:`result` is the run's result."""

    def __init__(self, state: CycleState, tools: CycleTools, stats: CycleStats, on_text: OnText | None = None):
        self.state, self.tools, self.stats = state, tools, stats
        self.streamer = stream_for(on_text, state.target.lm.decode)
        state.on_tokens = self.streamed if self.streamer else None
        self.lms = (state.target.lm, state.draft.lm)
        self.run_before = [lm.stats.copy() for lm in self.lms]  # the whole run's counters at its start
        self.before = self.run_before  # the current cycle's (set as each cycle starts)
        self.timed: tuple[list[ForwardTiming], list[ForwardTiming]] = ([], [])
        self.logged = 0
        self.start = time.perf_counter()

    @property
    def done(self) -> str | None:
        return self.state.done or ("budget" if self.state.remaining <= 0 else None)

    def position(self) -> Position:
        target, draft = self.state.target, self.state.draft
        unread = tuple(len(s.rows[0]) if s.cached[0] == 0 else 0 for s in (target, draft))
        return Position(self.state.generated, self.state.remaining, self.state.at_boundary, len(target.rows[0]),
                        unread)

    @contextmanager
    def verbs(self, plan: CyclePlan, policy: CyclePolicy) -> Iterator[TorchVerbs]:
        lms = self.lms
        self.before = [lm.stats.copy() for lm in lms]
        self.logged = len(self.stats.target_sd.log) if self.stats.target_sd is not None else 0
        self.timed = ([], [])
        with ExitStack() as stack:
            for role in ((1, 0) if lms[0] is not lms[1] else (0,)):  # the target's padding innermost
                stack.enter_context(lms[role].metered(self.timed[role].append, policy.pads[role]))
            yield TorchVerbs(self.state, self.tools, lambda tokens, agreements: policy.rows(plan, tokens, agreements))

    def keep(self, trace: CycleTrace) -> None:
        """The cycle's forward seconds, timed forwards and SD iterations (the sessions hold its text already)."""
        trace.forward_s = sum(lm.stats.since(b).seconds for lm, b in zip(self.lms, self.before))
        trace.target_forwards, trace.draft_forwards = self.timed
        if self.stats.target_sd is not None:  # one log entry per SD iteration of a row
            trace.token_outcomes = self.stats.target_sd.log[self.logged:]
        trace.sd_iterations = len(trace.token_outcomes)

    def streamed(self, *_: object) -> None:
        if self.streamer:
            self.streamer.update(self.state.target.rows[0][self.state.prompt_len_target:])

    def result(self, policy: CyclePolicy) -> GenerationResult:
        """The run's result, reporting ``policy``'s mode: a fixed plan that drafts no step reports the token
        loop's own statistics, if any (mode ``sd``), else none (``ar``)."""
        state, stats, target_lm = self.state, self.stats, self.lms[0]
        state.done = state.done or "budget"
        t_used, d_used = (lm.stats.since(b) for lm, b in zip(self.lms, self.run_before))
        if stats.target_sd is not None:
            stats.target_sd.target_forwards, stats.target_sd.target_seconds = t_used.calls, t_used.seconds
            stats.target_sd.draft_forwards, stats.target_sd.draft_seconds = d_used.calls, d_used.seconds
        new = state.target.rows[0][state.prompt_len_target:]
        if self.streamer:
            self.streamer.finish(new)
        plain = isinstance(policy, FixedPolicy) and policy.k == 0
        return GenerationResult(new, target_lm.decode(new), state.target.rows[0][:state.prompt_len_target], state.done,
                                t_used.calls, time.perf_counter() - self.start, mode=policy.mode,
                                stats=stats.target_sd if plain else stats)


def start_state(pair: ModelPair, prompt_ids: Sequence[int], draft_ids: Sequence[int] | None,
                max_new_tokens: int) -> CycleState:
    """Both sessions at the prompt. ``draft_ids``: the prompt in the draft's tokenizer; None: ``prompt_ids``
    where the pair shares one vocabulary, else the target's prompt text cut by the draft's tokenizer. A model
    on the compiled path sizes its cache for the prompt and the budget now (and a bucket's padding)."""
    if draft_ids is None:
        draft_ids = prompt_ids if pair.same_vocab else pair.draft.encode(
            pair.target.decode(list(prompt_ids), skip_special_tokens=False))
    for lm, prompt in ((pair.target, prompt_ids), (pair.draft, draft_ids)):
        lm.reserve(len(prompt) + max_new_tokens + 64)
    return CycleState(pair.target.session([list(prompt_ids)]), pair.draft.session([list(draft_ids)]), len(prompt_ids),
                   len(draft_ids), max_new_tokens)


FIXED_MODES = ("ar", "sd", "sd-ngram", "lr", "lr-sd")
ENGINE_FIXED_MODES = ("ar", "lr")  # over an engine; its token SD is the engine's own, run by mode ar


def check_auto_width(settings: Settings) -> None:
    """Mode ``auto``'s one rule on width: its plans draft one step per position (the planner prices no
    alternatives), on every runtime."""
    require(settings.width == 1, f"width {settings.width}: mode auto prices one draft per position (width 1); "
            "use mode lr (or lr-sd in this process) for several drafts per position")


def mode_plan(mode: str, settings: Settings, *, engine: bool = False) -> tuple[Settings, FixedPolicy | None]:
    """The one home of "mode -> plan", for every entry and both runtimes: the settings the runtime reads and
    the fixed policy of ``mode``, or None for ``auto`` (whose planner prices every cycle; its width rule checked
    here, :func:`check_auto_width`).

    In this process (``engine=False``): ``token_sd`` as the mode drafts tokens (none for ``ar`` and ``lr``, the
    draft model for ``sd``, prompt lookup for ``sd-ngram``, the given one for ``lr-sd``), each at the mode's
    gamma; ``settings.k`` and ``gamma`` None take the mode's presets (:func:`~..presets.mode_k`,
    :func:`~..presets.mode_gamma`). Over an engine (``engine=True``): ``ar`` (one request) or ``lr`` on the
    settings' schedule, reported as ``engine-ar`` and ``engine-lr``. gamma means one thing everywhere: the
    drafted tokens per SD iteration of a plan that runs token SD; a plan without token SD has gamma 0."""
    if mode == "auto":
        check_auto_width(settings)
        return settings, None
    if engine:
        require(mode in ENGINE_FIXED_MODES, f"mode {mode!r} is not a plan over an engine; there: auto, "
                f"{', '.join(ENGINE_FIXED_MODES)}")
        if mode == "ar":
            return settings, FixedPolicy(0, mode="engine-ar", gamma=0)
        return settings, FixedPolicy(mode_k("lr", settings.k), mode="engine-lr", width=settings.width,
                                     schedule=settings.schedule, gamma=0)
    require(mode in FIXED_MODES, f"mode {mode!r} is not a fixed plan; fixed plans: {', '.join(FIXED_MODES)}")
    stop = settings.draft_stop_below
    if mode == "ar":
        return settings.with_overrides(token_sd=None), FixedPolicy(0, None, "ar", gamma=0)
    if mode in ("sd", "sd-ngram"):
        gamma = mode_gamma(mode, settings.gamma)
        drafter = "draft" if mode == "sd" else "ngram"
        token_sd = replace(settings.token_sd or TokenSD(), target=drafter, draft=None, gamma=gamma)
        return (settings.with_overrides(token_sd=token_sd),
                FixedPolicy(0, stop if mode == "sd" else None, mode, gamma=gamma))
    k = mode_k(mode, settings.k)
    if mode == "lr":
        return settings.with_overrides(token_sd=None, k=k), FixedPolicy(k, stop, "lr", width=settings.width, gamma=0)
    given = settings.token_sd or TokenSD(**LR_SD_TOKEN_SD)
    gamma = mode_gamma(mode, settings.gamma, given.target)
    return (settings.with_overrides(token_sd=replace(given, gamma=gamma), k=k),
            FixedPolicy(k, stop, "lr-sd", width=settings.width, gamma=gamma))


def prepare(pair: ModelPair, prompt_ids: Sequence[int], verifier: Verifier, settings: Settings | None = None,
            policy: CyclePolicy | str | None = None, *, on_text: OnText | None = None,
            draft_ids: Sequence[int] | None = None) -> tuple[TorchCycles, CyclePolicy]:
    """One prompt's cycles on this process's runtime, ready for :func:`drive`, and the policy that plans them
    (the arguments: :func:`generate_cycles`)."""
    settings = local_settings(settings)
    if policy is None or isinstance(policy, str):
        mode = policy or ("lr-sd" if settings.token_sd is not None else "lr")
        settings, policy = mode_plan(mode, settings)
    if policy.mode == "sd":
        require(pair.same_vocab, "mode sd drafts tokens with the draft model, which needs the target's tokenizer: "
                "use sd-ngram, or a draft of the target's family")
    stats = CycleStats(k=policy.k)
    tools = make_tools(pair, verifier, settings, generator=make_generator(settings.seed), stats=stats)
    state = start_state(pair, prompt_ids, draft_ids, settings.max_new_tokens)
    return TorchCycles(state, tools, stats, on_text), policy


def generate_cycles(pair: ModelPair, prompt_ids: Sequence[int], verifier: Verifier, settings: Settings | None = None,
                    policy: CyclePolicy | str | None = None, *, on_text: OnText | None = None,
                    draft_ids: Sequence[int] | None = None) -> GenerationResult:
    """One prompt, any mode, on this process's runtime: cycles of ``policy``'s plans until EOS or the budget.

    ``pair``: the target and the draft (:func:`~..runtime.pair.model_pair`), which knows whether they share
    one vocabulary. ``settings`` (:class:`~..settings.Settings`, default ``Settings()``; its k, width, steps,
    sampling, ``token_sd``, ``draft_stop_below``, budget and seed; change fields with
    ``settings.with_overrides(k=3, ...)``). ``policy``: a mode name (a :class:`FixedPolicy` from
    :func:`mode_plan`, which also sets the token SD the mode runs), a policy (mode ``auto``'s), or None
    (``lr``, or ``lr-sd`` where ``settings.token_sd`` is given). ``draft_ids``: the prompt in the draft's
    tokenizer (:func:`start_state`). ``on_text`` hears the accepted text as it grows. The policy's ``pads``
    (:class:`TorchCycles`): mode ``auto`` runs forwards at the n its cost table prices them at.
    """
    cycles, policy = prepare(pair, prompt_ids, verifier, settings, policy, on_text=on_text, draft_ids=draft_ids)
    drive(cycles, policy, cycles.stats, cycles.streamed)
    return cycles.result(policy)


__all__ = ["CyclePolicy", "Cycles", "FIXED_MODES", "FixedPolicy", "Position", "TorchCycles", "drive", "generate_cycles",
           "ENGINE_FIXED_MODES", "check_auto_width", "mode_plan", "prepare", "start_state"]
