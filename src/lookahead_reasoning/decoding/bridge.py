"""The driver in a thread of its own beside an event loop: how the one loop, plain Python, runs over step
models whose requests are asyncio tasks (:mod:`.stepwise`).

:func:`in_thread` runs the driver in a new thread and awaits it; from there a :class:`Bridge` runs each of the
runtime's coroutines (a drafted step, the rows, their scores) on the caller's event loop and waits for it, and
:class:`OnLoop` runs every call of the policy there too (a planner reads its endpoints' load on the loop, beside
other runs' policies). Cancelling the awaiting task stops the thread at its next wait.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Coroutine, TypeVar

from ..settings import CyclePlan
from .driver import CyclePolicy, Position
from .results import CycleTrace

T = TypeVar("T")


class Bridge:
    """The driver's thread's way to the caller's event loop: :meth:`run` a coroutine there, :meth:`call` a
    function there, and wait for it; once the caller gives up (:meth:`stop`: its task was cancelled), the
    next wait raises :class:`asyncio.CancelledError` in the driver's thread, which then ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.stopped = loop, threading.Event()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        while True:
            try:
                return future.result(timeout=0.05)  # returns as soon as it is done; the timeout bounds a stop
            except TimeoutError:
                if self.stopped.is_set():
                    future.cancel()
                    raise asyncio.CancelledError("the caller stopped waiting for this generation") from None

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        async def on_loop() -> T:
            return fn(*args)
        return self.run(on_loop())

    def stop(self) -> None:
        self.stopped.set()


class OnLoop(CyclePolicy):
    """A policy whose every call runs on the caller's event loop (where a planner reads its endpoints'
    load and other runs' policies run), for a driver in a thread of its own."""

    def __init__(self, policy: CyclePolicy, bridge: Bridge):
        self.policy, self.bridge = policy, bridge
        self.mode, self.k, self.pads = policy.mode, policy.k, policy.pads

    def plan(self, position: Position) -> CyclePlan:
        return self.bridge.call(self.policy.plan, position)

    def rows(self, plan: CyclePlan, drafted_tokens: list[int], agreements: list[float]) -> int:
        return self.bridge.call(self.policy.rows, plan, drafted_tokens, agreements)

    def learn(self, trace: CycleTrace) -> None:
        self.bridge.call(self.policy.learn, trace)

    def finish(self, completed: bool) -> None:
        if self.bridge.stopped.is_set():  # the loop no longer waits for this run: nothing is kept of it
            return
        self.bridge.call(self.policy.finish, completed)


async def in_thread(work: Callable[[Bridge], T]) -> T:
    """``work(bridge)`` in a thread of its own while this event loop runs what it sends through the bridge;
    cancelling the caller stops the thread at its next wait."""
    loop = asyncio.get_running_loop()
    bridge, done = Bridge(loop), loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if not done.done():
            done.set_result(value) if error is None else done.set_exception(error)

    def body() -> None:
        value, failed = None, None
        try:
            value = work(bridge)
        except BaseException as error:  # noqa: BLE001 (handed to the awaiting task)
            failed = error
        try:
            loop.call_soon_threadsafe(settle, value, failed)
        except RuntimeError:  # the loop is closed: nobody waits
            pass

    threading.Thread(target=body, name="lookahead-driver", daemon=True).start()
    try:
        return await done
    finally:
        bridge.stop()


__all__ = ["Bridge", "OnLoop", "in_thread"]
