"""A bucket's forward recorded once and replayed: :class:`Graph` (a CUDA graph) and :class:`RehearsedGraph`
(the same bookkeeping on any device, for the tests and the walkthroughs).

A recorded forward reads fixed tensors and writes fixed tensors: to run it on new inputs, the inputs are
copied into the tensors the recording read, and its result is read from the one tensor it wrote (which the
next replay overwrites). :mod:`.compiled` keeps one per bucket shape.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


class Graph:
    """One bucket's forward recorded as a CUDA graph, with the static tensors it reads and writes.

    A replay reads its inputs from the tensors the recording read (``inputs``, one per argument of the
    forward: each forward's are copied into them, except the ``fixed`` ones, which the caller keeps at one
    address and writes in place, such as the arena's mask) and writes its result into the tensors the recording
    wrote (``output``: a tensor or a tuple of them, overwritten by the next replay). Recording runs the
    forward twice first (on a side stream, as CUDA requires) with the real inputs of the forward that
    asked for it, so the keys and values it writes are the right ones.
    """

    runs_python = False  # a replay launches the recorded kernels: none of the forward's Python code runs

    def __init__(self, fn: Callable, inputs: tuple[torch.Tensor, ...], pool: Any, fixed: tuple[bool, ...] | None = None):
        self.fixed = fixed or (False,) * len(inputs)
        self.inputs = tuple(x if keep else x.clone() for x, keep in zip(inputs, self.fixed, strict=True))
        self.output = self._record(fn, pool)

    def _record(self, fn: Callable, pool: Any) -> Any:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn(*self.inputs)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            output = fn(*self.inputs)
        self.graph.replay()
        return output

    def _launch(self) -> None:
        self.graph.replay()

    def replay(self, *inputs: torch.Tensor) -> Any:
        for static, value, keep in zip(self.inputs, inputs, self.fixed, strict=True):
            if not keep:
                static.copy_(value)
            elif value.data_ptr() != static.data_ptr() or value.stride() != static.stride():
                raise RuntimeError("a fixed input of a recorded forward was handed at another address")
        self._launch()
        return self.output


class RehearsedGraph(Graph):
    """A :class:`Graph` without a GPU (backend ``"rehearsed-graphs"``): "recording" keeps the function,
    a "replay" runs it again on the recording's own input tensors and copies its result into the
    output tensors. What a replay would read and return is the same; only the launch is not one."""

    runs_python = True  # a replay runs the forward's code again (which needs what its recording needed)

    def _record(self, fn: Callable, pool: Any) -> Any:
        self.fn = fn
        out = fn(*self.inputs)
        return tuple(o.clone() for o in out) if isinstance(out, tuple) else out.clone()

    def _launch(self) -> None:
        for static, value in zip(_tensors(self.output), _tensors(self.fn(*self.inputs)), strict=True):
            static.copy_(value)


def _tensors(output: Any) -> tuple[torch.Tensor, ...]:
    """A forward's result as a tuple of tensors (one tensor, or a tuple of them)."""
    return output if isinstance(output, tuple) else (output,)


__all__ = ["Graph", "RehearsedGraph"]
