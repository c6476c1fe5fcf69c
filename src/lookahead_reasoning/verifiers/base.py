"""The verifier contract: :class:`Verdict`, the :class:`Verifier` protocol and the shared base class.

This module imports nothing heavy (no torch, no sentence-transformers, no HTTP client), so the
decoding loops and the command line can name the types without loading a model's dependencies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

from ..errors import require

Pair = tuple[str, str]

# Verdict.error values: why a judgement failed (the pair is then rejected, never raised).
FAILURE_KINDS = ("timeout", "http", "connection", "unparsable", "unclear", "exception")


@dataclass
class Verdict:
    """One judgement of a (draft_step, target_step) pair.

    Attributes:
        accepted: keep the drafted step.
        score: the verifier's number (cosine, P(yes) share, 0-9 score, 1.0/0.0 for exact match);
            None when there is none (random verifier, a judge call that failed).
        reason: a short human-readable cause, e.g. ``"cosine 0.912 >= 0.85"`` or ``"timeout after 10s"``.
        latency_s: this pair's share of the verifier call's wall time, in seconds.
        verifier: name of the verifier that decided (in a cascade, the stage that decided).
        error: None for a real judgement; for a failed one (the pair is rejected) its kind, one of
            :data:`FAILURE_KINDS`: "timeout", "http", "connection", "unparsable" (an answer that
            could not be read), "unclear" (the judge answered neither word), "exception".
    """

    accepted: bool
    score: float | None
    reason: str
    latency_s: float
    verifier: str
    error: str | None = None


@runtime_checkable
class Verifier(Protocol):
    """Anything with a ``name`` and a batched ``verify``."""

    name: str

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        """One :class:`Verdict` per ``(draft_step, target_step)`` pair, in order; never raises on a failed judgement."""
        ...


class BaseVerifier:
    """Shared helpers: the ``failures`` counter and the failed-verdict constructor.

    ``failures`` counts the pairs this verifier rejected because a judgement failed (a timeout, an
    HTTP error, an unreadable or unclear answer, an exception); ``Verdict.error`` says which.
    """

    name = "verifier"
    failures = 0

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:  # pragma: no cover - overridden
        raise NotImplementedError

    def failed(self, kind: str, reason: str) -> Verdict:
        """A rejection because the judgement failed; counted in ``failures``."""
        require(kind in FAILURE_KINDS, f"unknown failure kind {kind!r}")
        self.failures += 1
        return Verdict(False, None, reason, 0.0, self.name, error=kind)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def check_pairs(pairs: Sequence[Pair]) -> list[Pair]:
    """``pairs`` as a list of ``(str, str)``; ConfigError naming the first malformed pair."""
    pairs = list(pairs)
    for i, pair in enumerate(pairs):
        require(isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(s, str) for s in pair),
                f"pair {i} must be a (draft_step, target_step) tuple of two strings, got {pair!r}")
    return [(d, t) for d, t in pairs]


def with_latency(verdicts: list[Verdict], start: float) -> list[Verdict]:
    """Set every verdict's ``latency_s`` to its share of the time since ``start`` (a ``time.perf_counter()``
    reading: the call's wall time per pair) and return them."""
    latency_s = (time.perf_counter() - start) / max(len(verdicts), 1)
    for v in verdicts:
        v.latency_s = latency_s
    return verdicts


def verifier_fields(verifier: Any) -> dict[str, Any]:
    """What a results record says of the verifier that judged its run: its name (the rule included,
    e.g. ``likelihood:min-prob``) and its threshold (None for a verifier without one, such as ``exact``)."""
    threshold = getattr(verifier, "threshold", None)
    return {"verifier": getattr(verifier, "name", type(verifier).__name__),
            "verifier_threshold": float(threshold) if isinstance(threshold, (int, float)) else None}


__all__ = ["BaseVerifier", "FAILURE_KINDS", "Pair", "Verdict", "Verifier", "check_pairs", "verifier_fields",
           "with_latency"]
