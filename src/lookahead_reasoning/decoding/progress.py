"""What a loop reports while it runs: the text it has accepted, streamed as tokens arrive without
splitting a multi-byte character (:class:`TextStreamer`), and where its time went, as named stopwatch
laps (``with laps("draft"): ...``, then ``laps["draft"]``: :class:`Laps`)."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, Sequence, runtime_checkable


@runtime_checkable
class TokenStream(Protocol):
    """What a loop streams to: ``update(all_new_tokens)`` as the accepted tokens grow (never shrinking),
    ``finish(all_new_tokens)`` once at the end."""

    def update(self, tokens: Sequence[int]) -> None: ...

    def finish(self, tokens: Sequence[int]) -> None: ...


OnText = Callable[[str], None] | TokenStream  # text deltas, or the tokens themselves


def stream_for(on_text: OnText | None, decode: Callable[[list[int]], str]) -> TokenStream | None:
    """The stream a loop updates: ``on_text`` itself when it takes tokens (a :class:`TokenStream`), a
    :class:`TextStreamer` that calls it with text deltas when it is a function, None without it."""
    if on_text is None:
        return None
    return on_text if isinstance(on_text, TokenStream) else TextStreamer(decode, on_text)


@dataclass
class TextStreamer:
    """Calls ``emit(delta)`` with the new text each time ``update(all_new_tokens)`` is called.

    Text ending in the Unicode replacement character (an incomplete UTF-8 sequence) is held back
    until the next token completes it. A rollback (fewer tokens than before) is not re-emitted:
    loops stream only accepted text.
    """

    decode: Callable[[list[int]], str]
    emit: Callable[[str], None]
    _sent: int = field(default=0, init=False)

    def update(self, tokens: Sequence[int], final: bool = False) -> None:
        text = self.decode(list(tokens))
        if len(text) > self._sent and (final or not text.endswith("\ufffd")):
            self.emit(text[self._sent:])
            self._sent = len(text)

    def finish(self, tokens: Sequence[int]) -> None:
        self.update(tokens, final=True)


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


__all__ = ["Laps", "OnText", "TextStreamer", "TokenStream", "stream_for"]
