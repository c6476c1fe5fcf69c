"""A run's forward schedule: what every :class:`~.session.Session` verb did, recorded and replayed.

Which forwards a speculative run makes (how many rows, how many new tokens each, after how many
cached columns, which forks, selections and rollbacks) depends on what was accepted, and acceptance
needs the real weights. The time those forwards take depends on the machine. A schedule separates the
two: it is recorded where the real weights run (:class:`ScheduleRecorder`, attached to the models of a
run) and replayed anywhere with models of the same shapes (:func:`replay`), random weights included.

A schedule is a list of events, each a short list (JSON-friendly):

* ``["new", model, sid, lengths]``: ``model.session(rows)`` with rows of these lengths;
* ``["fwd", model, sid, extra, active, keep, fed, columns, start_s, seconds]``: ``logits(extra=...,
  keep=..., active=...)`` with ``extra[b]`` drafted tokens on row b; ``fed[b]`` tokens were fed on row b
  (its uncached ones and the extra ones), after ``columns`` cache columns (holes included); it started
  ``start_s`` after the recording began and took ``seconds`` (the model's forward, as the runtime times it);
* ``["fork", sid, child, k]``, ``["select", sid, rows]``;
* ``["set", sid, cached, lengths]``: ``set_rows`` left row b with ``cached[b]`` cached tokens and
  ``lengths[b]`` tokens in all;
* ``["ext", sid, row, count]``: ``extend(row, count tokens)``.

The host time between two forwards (the loop's Python, the verifier, the tokenizer) is the gap between
one forward's end and the next one's start. A replay feeds made-up token ids: the cache's shapes, not
its contents, decide what a forward costs, and :func:`replay` checks that every forward fed what the
recorded one did.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from ..errors import require
from .session import ForwardCall, Session

Event = list  # one of the module docstring's lists


@dataclass
class ScheduleRecorder:
    """Records the session verbs of the models it is attached to (``attach(lm, "target")``).

    ``events`` holds what happened since :meth:`recording` last began; sessions are numbered in the
    order they appear (``sid``).
    """

    events: list[Event] = field(default_factory=list)
    start: float = field(default_factory=time.perf_counter)
    _next_sid: int = 0

    def attach(self, lm: Any, model: str) -> None:
        """Record ``lm``'s sessions under the name ``model`` (e.g. "target", "draft")."""
        lm.recorder = (self, model)

    @staticmethod
    def detach(lm: Any) -> None:
        lm.recorder = None

    @contextmanager
    def recording(self) -> Iterator[list[Event]]:
        """A fresh schedule for the block: the list it yields fills as the block runs."""
        self.events, self.start, self._next_sid = [], time.perf_counter(), 0
        yield self.events

    # ------------------------------------------------------------------ what a session reports
    def sid(self, session: Session) -> int:
        """The number of ``session``, given when it is first seen."""
        sid = getattr(session, "sid", None)
        if sid is None:
            sid = session.sid = self._next_sid
            self._next_sid += 1
        return sid

    def new(self, model: str, session: Session) -> None:
        self.events.append(["new", model, self.sid(session), [len(r) for r in session.rows]])

    def forward(self, model: str, session: Session, call: ForwardCall) -> None:
        self.events.append(["fwd", model, self.sid(session), [len(e) for e in call.extra], [int(a) for a in call.active],
                            call.keep, call.fed, call.columns, round(call.started - self.start, 6), round(call.seconds, 6)])

    def fork(self, parent: Session, child: Session, k: int) -> None:
        self.events.append(["fork", self.sid(parent), self.sid(child), k])

    def select(self, session: Session, rows: list[int]) -> None:
        self.events.append(["select", self.sid(session), list(rows)])

    def set_rows(self, session: Session) -> None:
        self.events.append(["set", self.sid(session), list(session.cached), [len(r) for r in session.rows]])

    def extend(self, session: Session, row: int, count: int) -> None:
        self.events.append(["ext", self.sid(session), row, count])


def forwards(events: Sequence[Event], model: str | None = None) -> list[Event]:
    """The forward events of a schedule (of one ``model`` when given)."""
    return [e for e in events if e[0] == "fwd" and (model is None or e[1] == model)]


def host_gaps(events: Sequence[Event]) -> list[float]:
    """Seconds between one forward's end and the next one's start (any model): the host's share of a run."""
    fwd = forwards(events)
    return [max(0.0, b[8] - (a[8] + a[9])) for a, b in zip(fwd, fwd[1:])]


@dataclass(frozen=True)
class Replayed:
    """What a replay took: ``wall_s`` from the first event to the last (the device done), of which
    ``forward_s`` inside the models' forwards; ``forwards`` per model."""

    wall_s: float
    forward_s: float
    forwards: dict[str, int]


class _Tokens:
    """Made-up token ids: a fresh one each time, never equal to the id it replaces."""

    def __init__(self, vocab: int):
        self.vocab, self.i = max(vocab, 3), 0

    def take(self, count: int) -> list[int]:
        out = [(7 + 31 * (self.i + j)) % self.vocab for j in range(count)]
        self.i += count
        return out

    def other_than(self, token: int) -> int:
        fresh = self.take(1)[0]
        return fresh if fresh != token else (token + 1) % self.vocab


def replay(events: Sequence[Event], models: dict[str, Any], sync: Any = None) -> Replayed:
    """Run ``events`` (:class:`ScheduleRecorder`'s) again on ``models`` (a name -> LM map with the
    recorded names): the same sessions, forks, selections, rollbacks and forwards, on made-up tokens.

    Raises ValueError when a forward fed other counts than the recorded one (the schedule and the
    replay disagree about the sessions' states). ``sync``: called before the clock is read (a GPU's
    ``torch.cuda.synchronize``), so that the wall time includes the queued work.
    """
    sessions: dict[int, Session] = {}
    tokens = _Tokens(min(min(len(lm.tokenizer), lm.vocab_size) for lm in models.values()))
    counts = {name: 0 for name in models}
    before = {name: lm.stats.copy() for name, lm in models.items()}
    sync = sync or (lambda: None)
    sync()
    start = time.perf_counter()
    for event in events:
        kind = event[0]
        if kind == "new":
            _, model, sid, lengths = event
            sessions[sid] = models[model].session([tokens.take(n) for n in lengths])
        elif kind == "fwd":
            _, model, sid, extra, active, keep, fed = event[:7]
            session = sessions[sid]  # an active row feeds its uncached tokens (or its last one again), then the extra
            got = [max(1, len(r) - c) + n if a else 0
                   for r, c, n, a in zip(session.rows, session.cached, extra, active)]
            logits = session.logits(extra=[tokens.take(n) for n in extra], keep=keep, active=[bool(a) for a in active])
            logits.argmax(dim=-1).tolist()  # what a loop reads before its next forward (it waits for the device)
            require(got == list(fed), f"replay of forward {counts[model]} of the {model} fed {got} tokens per row, "
                    f"the recorded run {fed}", ValueError)
            counts[model] += 1
        elif kind == "fork":
            _, sid, child, k = event
            sessions[child] = sessions[sid].fork(k)
        elif kind == "select":
            _, sid, rows = event
            sessions[sid].select(rows)
        elif kind == "set":
            _set_rows(sessions[event[1]], event[2], event[3], tokens)
        elif kind == "ext":
            _, sid, row, count = event
            sessions[sid].extend(row, tokens.take(count))
        else:
            raise ValueError(f"unknown schedule event {kind!r}")
    sync()
    wall = time.perf_counter() - start
    spent = sum(lm.stats.since(before[name]).seconds for name, lm in models.items())
    return Replayed(wall, spent, counts)


def _set_rows(session: Session, cached: list[int], lengths: list[int], tokens: _Tokens) -> None:
    """A recorded rollback: each row keeps its first ``cached[b]`` tokens and gets made-up ones up to
    ``lengths[b]``, the first of them unlike the token it replaces (so the cache stops exactly there)."""
    rows = []
    for row, keep, length in zip(session.rows, cached, lengths):
        new = row[:keep]
        if len(new) < length:
            new.append(tokens.other_than(row[keep]) if keep < len(row) else tokens.take(1)[0])
            new += tokens.take(length - len(new))
        rows.append(new)
    session.set_rows(rows)
    require(list(session.cached) == list(cached), f"replay of a rollback kept {session.cached} cached tokens, "
            f"the recorded run {cached}", ValueError)


def summary(events: Sequence[Event]) -> dict[str, Any]:
    """Counts of a schedule: forwards per model, the tokens they fed, rows per forward, host time."""
    out: dict[str, Any] = {}
    for model in sorted({e[1] for e in forwards(events)}):
        fwd = forwards(events, model)
        out[model] = {"forwards": len(fwd), "fed": sum(sum(e[6]) for e in fwd),
                      "rows": {str(r): sum(1 for e in fwd if sum(e[4]) == r) for r in sorted({sum(e[4]) for e in fwd})},
                      "forward_s": round(sum(e[9] for e in fwd), 4)}
    gaps = host_gaps(events)
    out["host_s"] = round(sum(gaps), 4)
    out["forks"] = sum(1 for e in events if e[0] == "fork")
    return out


__all__ = ["Event", "ForwardCall", "Replayed", "ScheduleRecorder", "forwards", "host_gaps", "replay", "summary"]
