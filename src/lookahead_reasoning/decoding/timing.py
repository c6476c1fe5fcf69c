"""Named stopwatch laps for the decoding loops: ``with laps("draft"): ...``, then ``laps["draft"]``."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator


class Laps:
    """Seconds spent under each name; as a context manager of its own, the whole span (``total()``).

    ``move(a, b, seconds)`` re-books time from lap a to lap b (for work done inside a's span that
    belongs to b, such as a verifier called from inside the target's decoding loop).
    """

    def __init__(self) -> None:
        self._seconds: defaultdict[str, float] = defaultdict(float)
        self._start: float | None = None
        self._total: float | None = None

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[name] += time.perf_counter() - start

    def __getitem__(self, name: str) -> float:
        return self._seconds[name]

    def move(self, source: str, dest: str, seconds: float) -> None:
        self._seconds[source] -= seconds
        self._seconds[dest] += seconds

    def __enter__(self) -> "Laps":
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._total = time.perf_counter() - self._start

    def total(self) -> float:
        """The whole span when used as a context manager (so far, while inside it), else the sum of the laps."""
        if self._start is None:
            return sum(self._seconds.values())
        return self._total if self._total is not None else time.perf_counter() - self._start
