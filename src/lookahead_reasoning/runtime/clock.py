"""How long a forward took, without making the host wait for it: :class:`HostClock` and :class:`EventClock`.

On a CPU a forward's work is done when the call returns, so the host's clock before and after it is the
forward's time. A GPU runs the work after the call that queued it has returned: timing it with the host's
clock would mean waiting for the device after every forward (``torch.cuda.synchronize``), and the host
would sit idle instead of queueing what comes next. An :class:`EventClock` puts two CUDA events in the
stream, one before the forward's work and one after it; the GPU stamps each as it reaches it, and the
time between them is read later, once the second has been reached, which costs nothing by then: a
decoding loop reads the forward's tokens before it starts the next forward, and that read waits for the
GPU anyway.

A clock's :meth:`~HostClock.stop` gives a :class:`Lap`: ``ready()`` says whether its seconds can be read
without waiting, ``seconds()`` reads them (waiting if they cannot). :class:`~.lm.LM` hands its listeners
each forward's time once its lap is ready, in the order the forwards ran.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

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

    def _stamp(self) -> Any:
        event = self.event()
        event.record(torch.cuda.current_stream(self.device) if self.device is not None else None)
        return event

    def start(self) -> Any:
        return self._stamp()

    def stop(self, mark: Any) -> Lap:
        return _EventLap(mark, self._stamp())


def clock_for(device: torch.device) -> HostClock | EventClock:
    """The clock a model on ``device`` is timed with: events on a CUDA device, the host's clock elsewhere."""
    return EventClock(device) if device.type == "cuda" else HostClock()


__all__ = ["EventClock", "HostClock", "Lap", "clock_for"]
