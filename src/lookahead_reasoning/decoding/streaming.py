"""Streaming decoded text as tokens arrive, without splitting a multi-byte character."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence


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
