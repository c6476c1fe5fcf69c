"""How long a forward took, without making the host wait for it: :class:`HostClock` and :class:`EventClock`,
and a model's forward counters on their way to its listeners (:class:`Timings`, :class:`ForwardStats`).

On a CPU a forward's work is done when the call returns, so the host's clock before and after it is the
forward's time. A GPU runs the work after the call that queued it has returned: timing it with the host's
clock would mean waiting for the device after every forward (``torch.cuda.synchronize``), and the host
would sit idle instead of queueing what comes next. An :class:`EventClock` puts two CUDA events in the
stream, one before the forward's work and one after it; the GPU stamps each as it reaches it, and the
time between them is read later, once the second has been reached, which costs nothing by then: a
decoding loop reads the forward's tokens before it starts the next forward, and that read waits for the
GPU anyway.

A clock's :meth:`~HostClock.stop` gives a :class:`Lap`: ``ready()`` says whether its seconds can be read
without waiting, ``seconds()`` reads them (waiting if they cannot). :class:`Timings` hands a model's
listeners each forward's time once its lap is ready, in the order the forwards ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch


class Lap(Protocol):
    """One timed stretch of work."""

    def ready(self) -> bool: ...

    def seconds(self) -> float: ...


class _Done:
    """A lap measured already (the host's clock)."""

    def __init__(self, seconds: float):
        self._seconds = seconds

    def ready(self) -> bool:
        return True

    def seconds(self) -> float:
        return self._seconds


class HostClock:
    """``time.perf_counter`` around the call: a forward's time where its work is done when it returns (a CPU)."""

    def start(self) -> float:
        return time.perf_counter()

    def stop(self, mark: float) -> Lap:
        return _Done(time.perf_counter() - mark)


class _EventLap:
    """Two CUDA events (or anything with ``query``, ``synchronize`` and ``elapsed_time`` in ms)."""

    def __init__(self, first: Any, last: Any):
        self.first, self.last = first, last

    def ready(self) -> bool:
        return bool(self.last.query())

    def seconds(self) -> float:
        self.last.synchronize()
        return self.first.elapsed_time(self.last) / 1000.0


class EventClock:
    """CUDA events in ``device``'s current stream around the work: the GPU's own time for it, read once
    the GPU has reached the second event. ``event`` makes an event (``torch.cuda.Event`` by default; the
    tests pass a stand-in to check the bookkeeping on a CPU)."""

    def __init__(self, device: torch.device | None = None, event: Any = None):
        self.device = device
        self.event = event or (lambda: torch.cuda.Event(enable_timing=True))

    def start(self) -> Any:
        event = self.event()
        event.record(torch.cuda.current_stream(self.device) if self.device is not None else None)
        return event

    def stop(self, mark: Any) -> Lap:
        return _EventLap(mark, self.start())


@dataclass
class ForwardStats:
    """How often and how long a model ran: the raw material of the cost ratio c.

    A loop reads its own window of these counters: ``before = lm.stats.copy()`` at its start,
    ``lm.stats.since(before)`` at its end.
    """

    calls: int = 0
    tokens: int = 0  # real (unmasked) tokens fed, summed over rows
    seconds: float = 0.0

    def copy(self) -> "ForwardStats":
        return ForwardStats(self.calls, self.tokens, self.seconds)

    def since(self, before: "ForwardStats") -> "ForwardStats":
        """The calls, tokens and seconds added after ``before`` was copied."""
        return ForwardStats(self.calls - before.calls, self.tokens - before.tokens, self.seconds - before.seconds)


@dataclass(frozen=True)
class ForwardTiming:
    """One timed forward: ``rows`` x ``n`` new token positions (n as run, padding included) after
    ``cached`` cache columns."""

    rows: int
    n: int
    cached: int
    seconds: float


ForwardListener = Callable[[ForwardTiming], None]


class Timings:
    """A model's forwards on their way to its counters (``stats``) and its ``listeners``: counted when they
    run, timed when their lap is ready, handed on in the order they ran."""

    def __init__(self) -> None:
        self.stats = ForwardStats()
        self.listeners: list[ForwardListener] = []
        self.laps: list[tuple[ForwardTiming, Lap]] = []  # timed forwards whose seconds are not read yet

    def start(self, clock: "HostClock | EventClock") -> Any:
        """Settle what is ready, then start ``clock`` on a forward; give the mark to :meth:`stop`."""
        self.settle(wait=False)
        return clock, clock.start()

    def stop(self, started: Any, timing: ForwardTiming, tokens: int) -> None:
        """The forward ``started`` is queued: count it (``tokens`` real tokens) and queue its lap."""
        clock, mark = started
        self.stats.calls += 1
        self.stats.tokens += tokens
        self.laps.append((timing, clock.stop(mark)))
        self.settle(wait=False)  # at once on a CPU; on a GPU when the forward has run

    def settle(self, wait: bool = True) -> None:
        """Hand the forwards whose time is known to ``stats`` and the listeners, in the order they ran; with
        ``wait``, all of them (waiting for the device where one has not finished). A forward settles those
        that are ready without waiting: on a GPU a forward's time arrives at the next forward, by when the
        loop has read its tokens and the GPU has finished it."""
        while self.laps and (wait or self.laps[0][1].ready()):
            timing, lap = self.laps.pop(0)
            timing = ForwardTiming(timing.rows, timing.n, timing.cached, lap.seconds())
            self.stats.seconds += timing.seconds
            for listener in self.listeners:
                listener(timing)


def wait_for(device: torch.device) -> None:
    """Return once ``device`` has run all it was given (a GPU); at once elsewhere. For a host clock read around
    work whose time is wanted in full, such as a profile's forward (a model's forwards do not wait)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock_for(device: torch.device) -> HostClock | EventClock:
    """The clock a model on ``device`` is timed with: events on a CUDA device, the host's clock elsewhere."""
    return EventClock(device) if device.type == "cuda" else HostClock()


__all__ = ["EventClock", "ForwardListener", "ForwardStats", "ForwardTiming", "HostClock", "Lap", "Timings", "clock_for", "wait_for"]
