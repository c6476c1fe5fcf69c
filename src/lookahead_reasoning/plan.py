"""What one Lookahead Reasoning cycle runs: :class:`CyclePlan`, the one contract between every policy
(fixed ``lr``, mode ``auto`` in this process or over an engine) and every runtime that runs cycles.

Symbols as in the paper: k drafted steps (k1), W drafts per position (``width``), gamma drafted
tokens per token-SD iteration inside the target's rows. A runtime uses the fields it can honour
and refuses the others (see each runtime's docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require
from .presets import SCHEDULES, check_draft_stop_below


@dataclass(frozen=True)
class CyclePlan:
    """One cycle's plan.

    ``k``: drafted steps (0: the target writes the next step alone); ``width``: drafts per position
    (W >= 1); ``schedule``: "sync" (draft every step, then run every target row) or "async" (a row
    starts as soon as its prefix exists); ``gamma``: drafted tokens per SD iteration in the target's
    rows (None: the runtime's own; 0: the rows decode token by token); ``draft_stop_below``: the
    draft's confidence stop in those iterations; ``overshoot`` (k = 0 only): an SD iteration that runs
    past the step's end keeps what it accepted; ``chunk`` > 0 (k = 0 only): the target writes up to
    ``chunk`` tokens of plain decoding past step ends (fewer requests where nothing speculative pays).
    """

    k: int
    width: int = 1
    schedule: str = "sync"
    gamma: int | None = None
    draft_stop_below: float | None = None
    overshoot: bool = False
    chunk: int = 0

    def __post_init__(self) -> None:
        require(isinstance(self.k, int) and self.k >= 0, f"k (drafted steps per cycle) must be an integer >= 0, got {self.k!r}")
        require(isinstance(self.width, int) and self.width >= 1,
                f"width (drafts per position) must be an integer >= 1, got {self.width!r}")
        require(self.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        require(self.gamma is None or (isinstance(self.gamma, int) and self.gamma >= 0),
                f"gamma (drafted tokens per SD iteration) must be None or an integer >= 0, got {self.gamma!r}")
        check_draft_stop_below(self.draft_stop_below)  # the Settings' rule: a plan runs what Settings let through
        require(isinstance(self.chunk, int) and self.chunk >= 0 and (self.chunk == 0 or self.k == 0),
                f"chunk must be an integer >= 0, and only with k = 0, got chunk {self.chunk!r} with k {self.k!r}")

    @property
    def label(self) -> str:
        """A short name: "ar", "ar@c256", "sd@g8s0.4", "lr@k2", "lr-sd@k1g8", "lr@k2w2-async"."""
        stop = f"s{self.draft_stop_below:g}" if self.draft_stop_below is not None else ""
        if self.k == 0:
            if self.chunk:
                return f"ar@c{self.chunk}"
            return f"sd@g{self.gamma}{stop}" if self.gamma else "ar"
        head = f"lr-sd@k{self.k}g{self.gamma}{stop}" if self.gamma else f"lr@k{self.k}"
        return head + (f"w{self.width}" if self.width > 1 else "") + ("-async" if self.schedule == "async" else "")


__all__ = ["CyclePlan"]
