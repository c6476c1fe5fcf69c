"""What a forward pass costs on this machine: a measured table T(R, n), refined as the run goes.

Every forward the library makes has one shape: R rows, each feeding n new tokens after a cached
prefix. Plain decoding is (1, 1); token SD's verification (1, gamma + 1); LR's scoring pass over the
drafted chain (1, k L_d + 1); LR's batched rows (k + 1, 1) or, with SD inside, (k + 1, gamma + 1).
:func:`profile` times a grid of these shapes once (20-50 s for a 1.5B model in float32 on two
cores, with a progress bar) and times again the points a passing load on the machine put out of
order (:func:`out_of_order`), :class:`CostGrid` interpolates between grid points, and
:meth:`CostGrid.observe` moves the table toward what the run's own timed forwards measure (mode
``auto``'s policy reads them off each cycle's trace).

Tables are cached on disk, keyed by everything that changes a forward's time (:func:`~.auto.load_or_profile`).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import combinations, pairwise
from typing import Any

from tqdm.auto import tqdm

from ..errors import ConfigError, require
from ..runtime.clock import wait_for
from ..runtime.lm import LM, ForwardTiming
from ..runtime.schedule import forwards

log = logging.getLogger(__name__)

TARGET_GRID: dict[int, tuple[int, ...]] = {1: (*range(1, 26), 48, 96), 2: (1, 3, 6, 9, 13, 17),
                                           3: (1, 3, 6, 9, 13)}
DRAFT_GRID: dict[int, tuple[int, ...]] = {1: (1, 4, 16, 48), 2: (1, 4), 3: (1, 4)}
PREFIX = 256  # cached prefix tokens of the profile
LONG_PREFIX = 512  # a second prefix length, for the cost of attending to more context
RECHECK_ROUNDS = 2  # passes over out-of-order points after the profile
SETTLED = 1.05  # a re-timed point within this factor of its first time is believed (not timed again)
DRIFT = 1.25  # a one-token forward this much slower or faster at the end than at the start: profile again
FORMAT = 2  # 2: a grid point's n is the forward's n (format 1 measured one token more)
PAD_GAIN = 0.05  # pad a forward to a larger measured n only when that is this much cheaper


@dataclass
class CostGrid:
    """Seconds of one forward of R rows x n new tokens per row, after a cached prefix.

    ``points[R][n]`` holds measured seconds at prefix length ``prefix``; ``per_context`` the seconds
    each further cached token adds per row (attention and cache reads grow with the context).
    Between grid points the time is linear in n; past the largest n of a row count, that row count's
    curve follows the 1-row curve's shape; between and past row counts it is linear in R.
    With ``padding`` a forward is priced (and run, through the policy's ``pads``) at the n :meth:`padded_n` picks.
    """

    points: dict[int, dict[int, float]]
    prefix: int = PREFIX
    per_context: float = 0.0
    key: dict[str, Any] = field(default_factory=dict)
    padding: bool = True

    def __call__(self, rows: int, tokens: int, context: int | None = None) -> float:
        """Predicted seconds of a forward of ``rows`` x ``tokens`` after ``context`` cached tokens, run
        at the n :meth:`padded_n` picks."""
        return self.seconds(rows, self.padded_n(rows, tokens), context)

    def seconds(self, rows: int, n: int, context: int | None = None) -> float:
        """Predicted seconds T(rows, n) of a forward of exactly ``n`` new tokens per row (no padding)."""
        base = self._rows(max(1, rows), max(1, n))
        extra = 0.0 if context is None else self.per_context * max(1, rows) * (context - self.prefix)
        return max(base + extra, 1e-6)

    def padded_n(self, rows: int, tokens: int) -> int:
        """The n to run a forward of ``tokens`` new tokens per row at (padded): the measured n = m of this
        row count in (tokens, 2 tokens] with the lowest time, when it undercuts T(rows, tokens) by more
        than ``PAD_GAIN``; else ``tokens`` itself."""
        curve = self.points.get(rows)
        if not self.padding or curve is None or tokens < 1:
            return tokens
        best, best_t = tokens, self._curve(rows, tokens) * (1 - PAD_GAIN)
        for m, t in curve.items():
            if tokens < m <= 2 * tokens and t < best_t:
                best, best_t = m, t
        return best

    def _curve(self, rows: int, n: float) -> float:
        """T(rows, n) on one measured row count: linear between its points, 1-row shape beyond."""
        curve = self.points[rows]
        ns = sorted(curve)
        if n <= ns[0]:
            return curve[ns[0]] * n / ns[0] if n < ns[0] else curve[ns[0]]
        if n >= ns[-1]:
            if rows == 1 or 1 not in self.points:
                last, before = ns[-1], ns[-2] if len(ns) > 1 else ns[-1]
                slope = (curve[last] - curve[before]) / (last - before) if last > before else 0.0
                return curve[last] + slope * (n - last)
            return curve[ns[-1]] * self._curve(1, n) / self._curve(1, ns[-1])
        i = bisect_left(ns, n)
        lo, hi = ns[i - 1], ns[i]
        return curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)

    def _rows(self, rows: int, n: float) -> float:
        measured = sorted(self.points)
        if rows in self.points:
            return self._curve(rows, n)
        if rows < measured[0] or len(measured) == 1:
            return self._curve(measured[0], n) * rows / measured[0]
        i = min(bisect_left(measured, rows), len(measured) - 1)
        lo, hi = measured[i - 1], measured[i]
        t_lo, t_hi = self._curve(lo, n), self._curve(hi, n)
        return t_lo + (t_hi - t_lo) * (rows - lo) / (hi - lo)

    def observe(self, timing: ForwardTiming, weight: float = 0.1) -> None:
        """Move the table toward one timed forward: the nearest grid points of its row count (or the
        nearest measured one) are scaled by ``(seen / predicted) ** weight``, split between the two
        grid points around its n."""
        predicted = self.seconds(timing.rows, timing.n, timing.cached)
        if not (timing.seconds > 0 and predicted > 0 and math.isfinite(timing.seconds)):
            return
        ratio = min(max(timing.seconds / predicted, 0.25), 4.0)  # one odd forward cannot wreck the table
        curve = self.points[min(self.points, key=lambda r: abs(r - timing.rows))]
        ns = sorted(curve)
        i = bisect_left(ns, timing.n)
        if i in (0, len(ns)) or ns[i] == timing.n:
            shares = {ns[min(i, len(ns) - 1)]: 1.0}
        else:
            lo, hi = ns[i - 1], ns[i]
            share_hi = (timing.n - lo) / (hi - lo)
            shares = {lo: 1 - share_hi, hi: share_hi}
        for n, share in shares.items():
            curve[n] *= ratio ** (weight * share)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "prefix": self.prefix, "per_context": self.per_context, "key": self.key,
                "points": {str(r): {str(n): s for n, s in curve.items()} for r, curve in self.points.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CostGrid":
        if data.get("format") != FORMAT:
            raise ValueError(f"cost table format {data.get('format')!r}, expected {FORMAT}")
        points = {int(r): {int(n): float(s) for n, s in curve.items()} for r, curve in data["points"].items()}
        if not points or 1 not in points or any(not c or any(not (s > 0) for s in c.values()) for c in points.values()):
            raise ValueError("cost table without a valid 1-row curve")
        return cls(points, int(data["prefix"]), float(data["per_context"]), dict(data.get("key", {})))


COST_UNITS = ("forward", "request")


@dataclass
class CostTable:
    """The target's and the draft's cost grids, what the planner prices plans with.

    ``per``: what a grid point times. "forward": one forward pass of R rows x n new tokens in this
    process (:func:`profile`). "request": R concurrent requests to an engine that each write n
    tokens after a cached prefix (:func:`~.endpoints.ameasure`); ``overlap`` is then what a draft
    and a target request cost run at once, over the dearer one alone (1: the endpoints share
    nothing), and ``draft`` may be None (no draft endpoint measured)."""

    target: CostGrid
    draft: CostGrid | None
    overlap: float = 1.0
    per: str = "forward"

    def __post_init__(self) -> None:
        require(self.per in COST_UNITS, f"a cost table prices one of {COST_UNITS}, got {self.per!r}")
        require(self.overlap > 0, f"a cost table's overlap must be > 0, got {self.overlap!r}")
        require(self.draft is not None or self.per == "request", "a table of forwards needs the draft's grid")

    def to_json(self) -> dict[str, Any]:
        return {"per": self.per, "overlap": self.overlap, "target": self.target.to_json(),
                "draft": self.draft.to_json() if self.draft is not None else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CostTable":
        """The table :meth:`to_json` wrote; ConfigError naming what is wrong with any other."""
        try:
            target = CostGrid.from_json(data["target"])
            draft = CostGrid.from_json(data["draft"]) if data.get("draft") is not None else None
            table = cls(target, draft, float(data.get("overlap", 1.0)), str(data.get("per", "forward")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"not a cost table ({exc})") from None
        for grid in (table.target, table.draft):
            if grid is not None:
                grid.padding = table.per == "forward"
        return table


# ---------------------------------------------------------------------------------------- measuring

def forward_seconds(lm: LM, prefix_session, rows: int, tokens: int, repeats: int, keep: int = 1) -> float:
    """Median seconds of one forward of ``rows`` forks of the prefix, each feeding ``tokens`` tokens
    and returning logits at the last ``keep`` positions.

    The prefix is fully cached, so ``Session.logits`` feeds each fork's last prefix token again before
    the extra ones (the same shape as decoding, which feeds the newest token plus any drafted ones):
    ``tokens - 1`` extra tokens make a forward of exactly n = ``tokens``.
    """
    times = []
    base = 1000 % max(2, min(len(lm.tokenizer), lm.vocab_size) - tokens)
    for _ in range(repeats):
        branches = prefix_session.fork(rows)
        extra = [[base + i for i in range(tokens - 1)] for _ in range(rows)]
        start = time.perf_counter()
        branches.logits(extra=extra, keep=keep)
        wait_for(lm.device)  # the forward's work done, not only queued
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile(lm: LM, grid: dict[int, tuple[int, ...]] = TARGET_GRID, *, prefix: int = PREFIX, repeats: int = 1,
            progress: bool = True, label: str = "") -> CostGrid:
    """Time ``lm`` on ``grid`` ({rows: n values}) after a cached prefix; also the cost of a longer context."""
    vocab = max(2, min(len(lm.tokenizer), lm.vocab_size))
    ids = [(7 + 31 * i) % vocab for i in range(LONG_PREFIX)]
    short = lm.session([ids[:prefix]])
    short.logits()
    forward_seconds(lm, short, 1, 1, 1)  # warm-up: first calls of a shape set up kernels
    shapes = [(r, n) for r in sorted(grid) for n in grid[r]]
    bar = tqdm(total=len(shapes) + 2, disable=not progress, desc=f"measuring {label or lm.name}", unit="shape")
    points: dict[int, dict[int, float]] = {}
    for rows, n in shapes:
        points.setdefault(rows, {})[n] = forward_seconds(lm, short, rows, n, repeats + (n == 1))
        bar.update(1)
    # A forward slowed by something else on the machine would stay in the table for good (the planner
    # never runs the shapes it believes slow, so it never learns otherwise): time every point that
    # breaks the order a forward's cost must keep once more, and keep the faster time.
    again = forward_seconds(lm, short, 1, 1, 2)  # the first point once more: did the machine change meanwhile?
    if not 1 / DRIFT <= again / points[1][1] <= DRIFT:
        log.warning("forward times changed while profiling (%.3f s, then %.3f s); timing every shape again",
                    points[1][1], again)
        for rows, n in shapes:
            points[rows][n] = min(points[rows][n], forward_seconds(lm, short, rows, n, 1))
    # A point that comes out as slow the second time is the kernel's real cost (a BLAS's poor shape):
    # only points that got faster are timed in the next round.
    settled: set[tuple[int, int]] = set()
    for _ in range(RECHECK_ROUNDS):
        suspects = out_of_order(points) - settled
        if not suspects:
            break
        for rows, n in sorted(suspects):
            before = points[rows][n]
            points[rows][n] = min(before, forward_seconds(lm, short, rows, n, 1))
            if points[rows][n] > before / SETTLED:
                settled.add((rows, n))
    long = lm.session([ids])
    long.logits()
    bar.update(1)
    t_long = forward_seconds(lm, long, 1, 1, 2)
    bar.update(1)
    bar.close()
    per_context = max(0.0, (t_long - points[1][1]) / (LONG_PREFIX - prefix))
    return CostGrid(points, prefix, per_context)


def price_schedule(events: list, costs: CostTable) -> float:
    """The seconds ``costs`` puts on a recorded run's forwards (:mod:`lookahead_reasoning.runtime.schedule`):
    T(R, n) of each forward, R its active rows, n the most tokens a row fed, at the cache columns it had
    (the target's or the draft's grid by the model that ran it). Forwards only: no host time between them."""
    total = 0.0
    for event in forwards(events):
        grid = costs.target if event[1] == "target" else costs.draft
        total += grid.seconds(sum(event[4]), max(event[6]), event[7])
    return total


def out_of_order(points: dict[int, dict[int, float]], slack: float = 0.05) -> set[tuple[int, int]]:
    """Grid points that break what any forward's cost obeys, beyond ``slack``: more tokens per row
    never cost less (T(R, n) <= T(R, n') for n < n'), and more rows never cost less (T(R, n) <=
    T(R', n) for R < R', read off the interpolated curve of R' within its measured n). Of each
    broken pair the dearer point is returned: a passing load only ever makes a forward slower."""
    bad = {(rows, a) for rows, curve in points.items() for a, b in pairwise(sorted(curve))
           if curve[a] > curve[b] * (1 + slack)}
    grid = CostGrid(points)  # read only
    return bad | {(small, n) for small, big in combinations(sorted(points), 2) for n, t in points[small].items()
                  if min(points[big]) <= n <= max(points[big]) and t > grid._curve(big, n) * (1 + slack)}


__all__ = ["COST_UNITS", "CostGrid", "CostTable", "DRAFT_GRID", "TARGET_GRID", "forward_seconds", "out_of_order", "price_schedule",
           "profile"]
