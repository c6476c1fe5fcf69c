"""The target's probabilities of given tokens from a model in this process: :class:`SessionScorer`.

The likelihood verifiers judge a drafted step s^ by the target's probability of each of its tokens
after the context x. Behind an engine that returns prompt log-probabilities (vLLM) the target's own
endpoint scores; llama.cpp's server cannot, so a run over it may name a *scorer*: the same target
loaded here (in PyTorch), asked ``score(x, s^)`` for every drafted step.

One cached :class:`~.session.Session` serves every call: a cycle's calls walk one chain (x, then
x + s^_1, ...) and the next cycle starts from an accepted extension of x, so each call forwards only
the tokens its context does not share with the previous one, plus s^.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Sequence

from ..errors import require
from ..sampling import token_scores
from ..steps import TokenScores


class SessionScorer:
    """``score(context, ids)``: the model's probability and rank of each of ``ids`` after ``context``
    (token ids), from one forward on one cache kept across calls (module docstring).

    ``lm``: an :class:`~.lm.LM`. Calls from several threads or tasks run one at a time."""

    def __init__(self, lm: Any):
        self.lm, self.name = lm, getattr(lm, "name", "scorer")
        self.session = None
        self.calls = 0
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        return self.lm.encode(text)

    def score(self, context: Sequence[int], ids: Sequence[int]) -> TokenScores:
        require(len(context) > 0, "scoring needs a context of at least one token")
        with self._lock:
            if self.session is None:
                self.session = self.lm.session([list(context)])
            else:
                self.session.set_rows([list(context)])  # the cache keeps what the two contexts share
            logits = self.session.logits(extra=[list(ids)], keep=len(ids) + 1)[0]  # (len(ids) + 1, V)
            self.calls += 1
        return TokenScores.of(*token_scores(logits[:len(ids)], list(ids)))

    async def ascore(self, context: Sequence[int], ids: Sequence[int]) -> TokenScores:
        """:meth:`score` in a worker thread: the event loop keeps serving the engine requests meanwhile."""
        return await asyncio.to_thread(self.score, context, ids)


__all__ = ["SessionScorer"]
