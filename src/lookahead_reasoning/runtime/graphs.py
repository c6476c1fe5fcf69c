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

    A replay reads its inputs from the tensors the recording read (``ids``, ``mask``, ``cols``: each
    forward's are copied into them) and writes its result into the one tensor the recording wrote
    (``output``, overwritten by the next replay). Recording runs the forward twice first (on a side
    stream, as CUDA requires) with the real inputs of the forward that asked for it, so the keys and
    values it writes are the right ones.
    """

    def __init__(self, fn: Callable, ids: torch.Tensor, mask: torch.Tensor, cols: torch.Tensor, pool: Any):
        self.ids, self.mask, self.cols = ids.clone(), mask.clone(), cols.clone()
        self.output = self._record(fn, pool)

    def _record(self, fn: Callable, pool: Any) -> torch.Tensor:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn(self.ids, self.mask, self.cols)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            output = fn(self.ids, self.mask, self.cols)
        self.graph.replay()
        return output

    def _launch(self) -> None:
        self.graph.replay()

    def replay(self, ids: torch.Tensor, mask: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        self.ids.copy_(ids)
        self.mask.copy_(mask)
        self.cols.copy_(cols)
        self._launch()
        return self.output


class RehearsedGraph(Graph):
    """A :class:`Graph` without a GPU (backend ``"rehearsed-graphs"``): "recording" keeps the function,
    a "replay" runs it again on the recording's own input tensors and copies its result into the one
    output tensor. What a replay would read and return is the same; only the launch is not one."""

    def _record(self, fn: Callable, pool: Any) -> torch.Tensor:
        self.fn = fn
        return fn(self.ids, self.mask, self.cols).clone()

    def _launch(self) -> None:
        self.output.copy_(self.fn(self.ids, self.mask, self.cols))


__all__ = ["Graph", "RehearsedGraph"]
