"""How busy an endpoint is: the completion requests this process has in flight there.

An engine batches every request it serves at once, so a cycle's rows share each forward with the
requests of other runs: R rows sent while B others are in flight cost about what R + B rows cost
alone (:func:`~...theory.costed.request_cycle` with ``load=B``). The client counts its requests as they go out and
come back (:attr:`~.client.EngineClient.in_flight`); a planner reads the count when it plans a
cycle, between its own requests, so what it reads is the others' load.

Requests of other processes do not show here; an engine's own metrics would (llama.cpp's ``/slots``,
vLLM's ``/metrics``), at one more request per plan.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class InFlight:
    """A count of requests under way, safe across threads (plain modes run requests in threads) and
    coroutines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0

    @contextmanager
    def request(self) -> Iterator[None]:
        """Count one request for as long as the block runs (until it returns or fails)."""
        with self._lock:
            self.now += 1
        try:
            yield
        finally:
            with self._lock:
                self.now -= 1


__all__ = ["InFlight"]
