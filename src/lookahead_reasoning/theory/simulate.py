"""Seeded Monte Carlo simulators of token SD and LR, under the assumptions of the closed forms.

They play the processes out (acceptance coin flips, a draft clock, target slots) and never call the
closed forms, so a formula and its simulation can disagree when either is wrong. Each returns a
:class:`SimResult`: the measured speedup (output per unit time; plain target decoding = 1) with its
standard error, so a check can say "within z standard errors".

Time units: a target pass (token level) or a target step (step level) takes 1; a draft pass takes
``c``, a draft step ``c1``. Acceptance is i.i.d. with the given rate. Verification is free.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..errors import require
from .formulas import Mode, check_batch_cost, check_cost, check_count, check_mode, check_rate

__all__ = [
    "AsyncSchedule", "LRSDPlay", "SimResult", "async_event_timeline", "async_schedule", "sample_run_lengths",
    "simulate_lr_async", "simulate_lr_sd", "simulate_lr_sync", "simulate_sd",
]


@dataclass(frozen=True)
class SimResult:
    """A simulated speedup: ``output / time`` over ``cycles`` renewal cycles, with its standard error.

    ``output`` counts tokens (token SD) or steps (LR); ``time`` is in target-pass / target-step units.
    ``stderr`` is the delta-method standard error of the ratio estimator (cycles are i.i.d.).
    """

    speedup: float
    stderr: float
    cycles: int
    output: float
    time: float

    def agrees(self, value: float, z: float = 5.0) -> bool:
        """``|speedup - value| <= z * max(stderr, |value| / cycles)``. At z = 5 a correct formula fails
        with probability below 1e-6 under the normal approximation. The floor ``|value| / cycles`` stands
        in for the standard error when an event rarer than 1/cycles (an acceptance at alpha = 1e-7,
        say) left no trace in the sample, so the measured spread is zero."""
        return abs(self.speedup - value) <= z * max(self.stderr, abs(value) / self.cycles)


def _ratio(output: np.ndarray, time: np.ndarray) -> SimResult:
    output, time = np.asarray(output, dtype=float), np.asarray(time, dtype=float)
    n = output.size
    r = output.sum() / time.sum()
    resid = output - r * time
    se = float(np.sqrt((resid ** 2).sum() / (n * max(n - 1, 1))) / time.mean())
    return SimResult(float(r), se, n, float(output.sum()), float(time.sum()))


def _leading_accepts(rng: np.random.Generator, alpha: float, cycles: int, drafts: int) -> np.ndarray:
    """Per cycle: how many of ``drafts`` coin flips (heads with prob. alpha) come up heads before the first tail."""
    if drafts == 0:
        return np.zeros(cycles, dtype=np.int64)
    heads = rng.random((cycles, drafts)) < alpha
    return np.where(heads.all(axis=1), drafts, np.argmin(heads, axis=1))


def sample_run_lengths(alpha: float, n: int, seed: int = 0) -> np.ndarray:
    """``n`` i.i.d. run lengths X: accepted drafts before the first rejection, ``P(X = x) = alpha^x (1 - alpha)``."""
    a = float(check_rate(alpha, "alpha"))
    n = int(check_count(n, "n"))
    return np.random.default_rng(seed).geometric(1.0 - a, size=n).astype(np.int64) - 1


def _sync_cycles(alpha: float, drafts: int, draft_cost: float, cycles: int, seed, target_cost: float = 1.0) -> SimResult:
    """One draft-then-verify cycle, repeated: ``drafts`` draft units (each ``draft_cost``), one target
    pass (``target_cost``, 1 unless the batch is not free), keep the leading accepted drafts plus the
    target's own unit."""
    accepted = _leading_accepts(np.random.default_rng(seed), alpha, cycles, drafts)
    time = np.full(cycles, drafts * draft_cost + target_cost)
    return _ratio(accepted + 1, time)


def simulate_sd(alpha: float, gamma: int, c: float, *, iterations: int = 100_000, seed: int = 0) -> SimResult:
    """Token SD over ``iterations`` iterations: per iteration the draft writes ``gamma`` tokens (time
    ``gamma c``), the target scores them in one pass (time 1); the leading accepted drafts are kept plus
    one target token."""
    a, n, cost = float(check_rate(alpha, "alpha")), int(check_count(gamma, "gamma", 0)), float(check_cost(c, "c"))
    return _sync_cycles(a, n, cost, int(check_count(iterations, "iterations")), seed)


def simulate_lr_sync(k1: int, alpha1: float, c1: float, *, cycles: int = 100_000, seed: int = 0,
                     beta: float = 1.0) -> SimResult:
    """Synchronous LR: the draft writes ``k1 - 1`` steps one after another (``c1`` each), the target
    writes ``k1`` steps in one batched pass (``beta``: 1 when the batch is free); the drafted steps up
    to the first rejection are kept, then the target's step of the next row (correction, or bonus when
    all pass)."""
    k = int(check_count(k1, "k1"))
    a, cost = float(check_rate(alpha1, "alpha1")), float(check_cost(c1, "c1"))
    batch = float(check_batch_cost(beta)) if k > 1 else 1.0  # one row is no batch
    return _sync_cycles(a, k - 1, cost, int(check_count(cycles, "cycles")), seed, batch)


@dataclass(frozen=True)
class AsyncSchedule:
    """The async timeline of one cycle, rows ``j = 1..rows`` (index ``j - 1``), from the cycle start at 0.

    ``drafted[j-1]``: the draft finishes step j (``j c1``; the draft never waits);
    ``start[j-1]``:   the target starts row j: its prefix (drafts 1..j-1) exists and a slot is free;
    ``end[j-1]``:     the target's step j is written (``start + 1``);
    ``settled[j-1]``: both step j versions exist, so the verifier can judge it (``max(end, drafted)``).
    """

    drafted: np.ndarray
    start: np.ndarray
    end: np.ndarray
    settled: np.ndarray


def async_schedule(k1: int, c1: float, rows: int) -> AsyncSchedule:
    """Play out the first ``rows`` rows of an async cycle with ``k1`` target slots (event by event).

    Row j needs its prefix, ready when the draft has written steps 1..j-1 (time ``(j-1) c1``), and a
    free slot: with k1 slots and every row taking 1, that is the slot row ``j - k1`` releases. The rows
    do not depend on the verdicts; a cycle with X accepted steps ends when row ``X + 1`` is settled.
    """
    k = int(check_count(k1, "k1"))
    cost = float(check_cost(c1, "c1"))
    rows = int(check_count(rows, "rows"))
    drafted = cost * np.arange(1, rows + 1)
    start, end = np.empty(rows), np.empty(rows)
    for j in range(rows):  # row j + 1
        prefix_ready = j * cost
        slot_free = end[j - k] if j >= k else 0.0
        start[j] = max(prefix_ready, slot_free)
        end[j] = start[j] + 1.0
    return AsyncSchedule(drafted, start, end, np.maximum(end, drafted))


def simulate_lr_async(k1: int, alpha1: float, c1: float, *, cycles: int = 100_000, seed: int = 0) -> SimResult:
    """Asynchronous LR: the draft writes steps back to back, each target row starts as soon as its
    prefix exists and one of the ``k1`` slots is free, the verifier judges step j once both versions
    exist. At the first rejection the target's step is kept, the speculative rows are dropped and both
    clocks restart. Each cycle's run length X is drawn, its end time read off :func:`async_schedule`.
    """
    x = sample_run_lengths(float(check_rate(alpha1, "alpha1")), int(check_count(cycles, "cycles")), seed)
    return _ratio(x + 1, async_schedule(k1, c1, int(x.max()) + 1).settled[x])  # which checks k1 and c1


def async_event_timeline(verdicts: Iterable[bool], k1: int, c1: float) -> tuple[int, float]:
    """Slow reference for :func:`simulate_lr_async`: one global clock, a heap of target slots.

    Feeds the verdicts one by one (True = the drafted step passed) through the async pipeline and
    returns (steps written, time when the last one was settled). A rejection keeps the target's step,
    frees every slot (the rows beyond it continue a wrong prefix and are cancelled) and restarts the
    draft from that moment.
    """
    k = int(check_count(k1, "k1"))
    cost = float(check_cost(c1, "c1"))
    cycle_start, depth, steps, now = 0.0, 0, 0, 0.0
    slots = [0.0] * k  # times at which each slot is free
    for ok in verdicts:
        prefix_ready = cycle_start + depth * cost  # the draft has written this cycle's steps 1..depth
        start = max(prefix_ready, heapq.heappop(slots))
        end = start + 1.0
        heapq.heappush(slots, end)
        now = max(end, cycle_start + (depth + 1) * cost)  # both versions of the step exist
        steps += 1
        if ok:
            depth += 1
        else:
            cycle_start, depth, slots = now, 0, [now] * k
    return steps, now


@dataclass(frozen=True)
class LRSDPlay:
    """How :func:`simulate_lr_sd` plays: ``mode`` ("sync" or "async"), ``cycles`` renewal cycles from
    ``seed``, target steps of ``step_tokens`` tokens: an int, or a sequence of observed step lengths
    that each row's step is drawn from (None: the composition ``h_combined`` assumes)."""

    mode: Mode = "async"
    cycles: int = 100_000
    seed: int | np.random.SeedSequence = 0
    step_tokens: int | tuple[int, ...] | None = 40


def simulate_lr_sd(k1: int, k2: int, alpha1: float, c1: float, alpha2: float, c2: float,
                   play: LRSDPlay = LRSDPlay()) -> SimResult:
    """LR with token SD inside every step, played as ``play`` says (:class:`LRSDPlay`).

    ``play.mode="sync"`` plays the *joint* process that :func:`~.joint.h_joint` prices (its module docstring
    has the cycle): the k1 rows of a cycle are one batch of SD iterations (``gamma = k2 - 1``) that lasts as
    long as its slowest row, and what a row's last iteration writes past its step's end is dropped. Output
    counts tokens, so the result is comparable with ``h_combined`` (plain decoding = 1), which misses both
    effects: ``theory/check.py`` reports the gap.

    ``play.mode="async"``, or ``play.step_tokens=None``, plays the composition ``h_combined`` assumes instead:
    the token layer on its own (:func:`simulate_sd`, ``gamma = k2 - 1``) gives the mean time of a
    target step written with SD, ``tau = 1 / g_hat`` of a plain one, and the step layer
    (:func:`simulate_lr_sync` / :func:`simulate_lr_async`) is played with steps of that length.
    Asynchronous target steps run on their own, not as one batch, so they wait for no slowest row.
    """
    mode, cycles, seed, step_tokens = play.mode, play.cycles, play.seed, play.step_tokens
    check_mode(mode)
    k1, k2 = int(check_count(k1, "k1")), int(check_count(k2, "k2"))
    n = int(check_count(cycles, "cycles"))
    if mode == "sync" and step_tokens is not None:
        rates = (float(check_rate(alpha1, "alpha1")), float(check_cost(c1, "c1")), float(check_rate(alpha2, "alpha2")),
                 float(check_cost(c2, "c2")))
        lengths = np.atleast_1d(np.asarray(step_tokens, dtype=np.int64))
        require(lengths.size > 0 and (lengths >= 1).all(), f"step_tokens must be >= 1, got {step_tokens!r}")
        return _joint_lr_sd(k1, k2, rates, n, seed, lengths)
    s_tok, s_step = np.random.SeedSequence(seed).spawn(2)
    token = simulate_sd(alpha2, k2 - 1, c2, iterations=n, seed=s_tok)
    run = simulate_lr_sync if mode == "sync" else simulate_lr_async
    step = run(k1, alpha1, c1, cycles=n, seed=s_step)
    require(token.speedup > 0, "token layer produced nothing")
    tau = 1.0 / token.speedup  # plain target step = 1
    time = step.time * tau  # every step-timeline duration scales with tau (draft steps are c1 * tau)
    speedup = step.output / time
    rel = np.hypot(step.stderr / step.speedup, token.stderr / token.speedup)
    return SimResult(float(speedup), float(speedup * rel), step.cycles, step.output, float(time))


def _step_iterations(rng: np.random.Generator, gamma: int, alpha: float, tokens: np.ndarray) -> np.ndarray:
    """SD iterations each row needs to write its ``tokens[row]`` tokens (each adds 1 + accepted drafts)."""
    if gamma == 0:
        return tokens.astype(np.int64)
    width = int(tokens.max())
    gains = 1 + _leading_accepts(rng, alpha, tokens.size * width, gamma).reshape(tokens.size, width)
    return np.argmax(np.cumsum(gains, axis=1) >= tokens[:, None], axis=1) + 1


def _joint_lr_sd(k1: int, k2: int, rates: tuple[float, float, float, float], cycles: int, seed,
                 lengths: np.ndarray) -> SimResult:
    """The sync joint process of :func:`simulate_lr_sd` (plain target pass = 1, output in tokens);
    ``rates``: (alpha1, c1, alpha2, c2); each row's step length drawn from ``lengths``."""
    alpha1, c1, alpha2, c2 = rates
    rng = np.random.default_rng(seed)
    gamma = k2 - 1
    iteration = 1 + gamma * c2
    tokens = lengths[rng.integers(0, lengths.size, cycles * k1)] if lengths.size > 1 else np.full(cycles * k1, lengths[0])
    batch = _step_iterations(rng, gamma, alpha2, tokens).reshape(cycles, k1)
    tau = batch.mean() * iteration  # one row's step, on average
    steps = np.minimum(_leading_accepts(rng, alpha1, cycles, k1 - 1) + 1, k1)
    time = (k1 - 1) * c1 * tau + batch.max(axis=1) * iteration
    written = tokens.reshape(cycles, k1)
    output = np.where(np.arange(k1)[None, :] < steps[:, None], written, 0).sum(axis=1)  # the kept steps' tokens
    return _ratio(output, time)
