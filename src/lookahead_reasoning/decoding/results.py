"""Typed results of every decoding loop. Stats live in the result, never in globals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GenerationResult:
    """What a decoding loop produced and what it cost.

    ``token_ids`` are the new tokens only (an EOS that ended generation included); ``text`` is their
    decoded text without special tokens. ``target_forwards`` counts forward passes of the target
    model (prefill included), the number speculative decoding tries to make small.
    """

    token_ids: list[int]
    text: str
    prompt_ids: list[int]
    stop_reason: str
    target_forwards: int
    wall_time_s: float
    mode: str = "ar"
    stats: Any = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.num_tokens / self.wall_time_s if self.wall_time_s > 0 else float("nan")

    def summary(self) -> dict[str, Any]:
        """A flat dict for logs and JSONL: counts, speed and the loop's own stats."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "new_tokens": self.num_tokens,
            "stop_reason": self.stop_reason,
            "target_forwards": self.target_forwards,
            "wall_time_s": round(self.wall_time_s, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
        }
        if self.stats is not None and hasattr(self.stats, "summary"):
            out.update(self.stats.summary())
        return out


@dataclass
class SDStats:
    """Token-level speculative decoding counters.

    alpha is measured as accepted / drafted over all drafted tokens (per-token acceptance); c as the
    mean draft forward time over the mean target forward time.
    """

    gamma: int = 0
    drafted: int = 0
    accepted: int = 0
    iterations: int = 0
    accept_histogram: list[int] = field(default_factory=list)  # index n: iterations that accepted n drafts
    target_forwards: int = 0
    target_seconds: float = 0.0
    draft_forwards: int = 0
    draft_seconds: float = 0.0

    def record(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.iterations += 1
        while len(self.accept_histogram) <= accepted:
            self.accept_histogram.append(0)
        self.accept_histogram[accepted] += 1

    def merge(self, other: "SDStats") -> None:
        self.gamma = max(self.gamma, other.gamma)
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.iterations += other.iterations
        for n, count in enumerate(other.accept_histogram):
            while len(self.accept_histogram) <= n:
                self.accept_histogram.append(0)
            self.accept_histogram[n] += count
        self.target_forwards += other.target_forwards
        self.target_seconds += other.target_seconds
        self.draft_forwards += other.draft_forwards
        self.draft_seconds += other.draft_seconds

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.iterations if self.iterations else float("nan")

    @property
    def c(self) -> float:
        if not (self.draft_forwards and self.target_forwards and self.target_seconds):
            return float("nan")
        return (self.draft_seconds / self.draft_forwards) / (self.target_seconds / self.target_forwards)

    def summary(self) -> dict[str, Any]:
        return {
            "gamma": self.gamma,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "alpha": round(self.alpha, 4) if self.drafted else None,
            "mean_accepted": round(self.mean_accepted, 3) if self.iterations else None,
            "accept_histogram": list(self.accept_histogram),
            "c": round(self.c, 4) if self.c == self.c else None,
            "draft_forwards": self.draft_forwards,
        }
