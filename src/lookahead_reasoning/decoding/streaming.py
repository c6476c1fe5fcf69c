"""Streaming decoded text as tokens arrive, without splitting a multi-byte character."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, runtime_checkable


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

    def update(self, tokens: Sequence[int]) -> None:
        text = self.decode(list(tokens))
        if text.endswith("\ufffd"):
            return
        if len(text) > self._sent:
            self.emit(text[self._sent:])
            self._sent = len(text)

    def finish(self, tokens: Sequence[int]) -> None:
        text = self.decode(list(tokens))
        if len(text) > self._sent:
            self.emit(text[self._sent:])
            self._sent = len(text)
