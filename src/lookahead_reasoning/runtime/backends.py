"""How the compiled path's forward runs on a bucket shape: compiled by inductor (:class:`Compiler`), and recorded
once and replayed (:class:`Recordings`).

Both wrap one function, :meth:`FastPath.body <.compiled.FastPath.body>` ``(ids, mask, cols) -> out``, which
writes the new tokens' keys and values into the arena's working rows and reads them there.

Inductor compiles it once per rows x tokens bucket, and what a run changes later is left symbolic, so that
nothing compiles again (a compile takes 25-40 s a shape for a real model on a GPU): the columns attention
reads (the span, which grows with the rows) and the length of the working rows (the arena grows past its
first allocation, or is sized for a run's budget). Inductor also keeps what it compiled on disk (its cache,
``TORCHINDUCTOR_CACHE_DIR``), so a later process loads the kernels instead of compiling them.

A recording (:class:`~.graphs.Graph`, a CUDA graph; :class:`~.graphs.RehearsedGraph` on any device) has fixed
shapes and addresses: one is made per rows x tokens x span, of the compiled forward or of the body as it is,
and made again after the working rows were reallocated.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable

import torch

from ..cache.static import StaticArena
from .graphs import Graph, RehearsedGraph

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Any]  # (ids, mask, cols) -> out


class Compiler:
    """``fn`` compiled by inductor, lazily, one graph per rows x tokens bucket; ``compiles`` counts the graphs
    inductor made (the no-recompile tests read it). ``shapes``: the buckets there are (all compiles kept)."""

    def __init__(self, fn: Forward, shapes: int):
        self.fn, self.shapes = fn, shapes
        self.compiles = 0
        self._compiled: Forward | None = None

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor, cols: torch.Tensor) -> Any:
        """``fn(ids, mask, cols)`` compiled: ``mask`` (R, W) with W, the attended columns, symbolic."""
        import torch._dynamo

        compiled = self._compiled or self._compile()
        torch._dynamo.maybe_mark_dynamic(mask, 1)  # one compile serves every attended span
        return compiled(ids, mask, cols)

    def _compile(self) -> Forward:
        import torch._dynamo

        def counting(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            from torch._inductor.compile_fx import compile_fx

            self.compiles += 1
            return compile_fx(gm, example_inputs)

        # A compile per bucket shape, all kept, for every fast path a process makes (each compiles its own): past
        # these limits torch would run the forward uncompiled, without a word.
        config = torch._dynamo.config
        for name, floor in (("recompile_limit", 256), ("cache_size_limit", 256), ("accumulated_recompile_limit", 4096),
                            ("accumulated_cache_size_limit", 4096)):
            if hasattr(config, name):
                setattr(config, name, max(getattr(config, name), floor, 8 * self.shapes))
        self._compiled = torch.compile(self.fn, backend=counting, dynamic=False)
        return self._compiled

    @staticmethod
    def mark(arena: StaticArena) -> None:
        """Leave the working rows' length symbolic in what is compiled: dim 2 of every keys and values tensor
        (R_max, H_kv, L + 1, D) and dim 1 of the device's mask (R_max, L + 1). Called on every new allocation."""
        import torch._dynamo

        for tensor in arena.keys + arena.values:
            torch._dynamo.maybe_mark_dynamic(tensor, 2)
        torch._dynamo.maybe_mark_dynamic(arena.mask, 1)


class Recordings:
    """One recorded forward per (rows, new tokens, attended columns), in one CUDA memory pool; ``captures``
    counts the recordings made. ``rehearsed``: :class:`~.graphs.RehearsedGraph` (any device) instead of CUDA graphs."""

    def __init__(self, rehearsed: bool):
        self.rehearsed = rehearsed
        self.graphs: dict[tuple[int, int, int], Graph] = {}
        self.captures = 0
        self._pool: Any = None

    def run(self, fn: Forward, inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
            model_code: Callable[[], AbstractContextManager], check: Callable[[], None]) -> Any:
        """``fn(*inputs)`` ((ids (R, n), mask (R, W), cols (n,)): the mask read where it lies, the others copied
        into the recording's tensors), recorded on first use of its shape and replayed after. ``model_code``: what
        the model's Python code needs while it runs (a recording, a rehearsal's replay); ``check``: what a
        replay that runs no Python checks instead."""
        ids, mask, _ = inputs
        key = (ids.shape[0], ids.shape[1], mask.shape[1])
        graph = self.graphs.get(key)
        if graph is None:
            kind = RehearsedGraph if self.rehearsed else Graph
            if self._pool is None and not self.rehearsed:  # one memory pool, shared by every CUDA recording
                self._pool = torch.cuda.graph_pool_handle()
            with model_code():
                graph = self.graphs[key] = kind(fn, inputs, self._pool, fixed=(False, True, False))
            self.captures += 1
            return graph.output
        if not graph.runs_python:  # nothing of the model's code runs, but stale weights are refused all the same
            check()
            return graph.replay(*inputs)
        with model_code():
            return graph.replay(*inputs)


__all__ = ["Compiler", "Recordings"]
