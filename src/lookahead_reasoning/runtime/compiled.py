"""The compiled path: forwards of a few fixed shapes over a static KV cache (:class:`FastPath`).

On a GPU the eager loops are launch-bound: a forward of the 1.5B launches some 400 small kernels,
and Python queues them more slowly than the GPU runs them. The cure (gpt-fast, vLLM, SGLang) is to
record a forward once and replay it: a CUDA graph replays every kernel in one launch. A recorded
forward has fixed shapes and fixed addresses, so this path changes two things and nothing else:

* the cache is static (:mod:`lookahead_reasoning.cache.static`): preallocated rows of L columns, new
  keys and values written at columns T .. T + n - 1, rows rolled back by moving T or masking;
* every forward runs at a *bucket* shape: R rows rounded up to the next of ``row_buckets`` (the extra
  rows are scratch rows that attend to themselves only), n new tokens per row rounded up to the next
  of ``token_buckets`` (dummy tokens after the real ones, cropped off the cache afterwards, as
  :class:`~.lm.LM`'s ``pad_to`` does), and the cache columns attention reads rounded up to the next
  *width* (:func:`attended_columns`: 256, 512, ... 4096, then steps of 4096), so that a token's
  attention costs what the used columns cost, not the allocation. A shape beyond the buckets (a long
  prompt) runs the same code uncompiled.

The cache needs no sizing: when a row would outgrow the allocated columns, the working rows are
reallocated longer (twice as long, or as long as the free memory allows) and the recorded forwards,
which read the old tensors, are made again (:meth:`FastPath.make_room`).

One function, :meth:`FastPath.body`, is what runs: ``(ids, mask, cols) -> hidden``, with the causal
mask and the positions built inside from the (R, L) mask of real columns. The ``backend`` says how:

* ``"eager"``: called as it is, at the bucket shapes (the static cache without compiling: the
  reference of the compiled backends);
* ``"inductor"``: ``torch.compile`` (inductor's fused kernels; on CPU, the same compiler);
* ``"cuda-graphs"``: recorded by hand as one CUDA graph per bucket (needs no compiler);
* ``"inductor+cuda-graphs"``: inductor's kernels, recorded as CUDA graphs;
* ``"rehearsed-graphs"``: the CUDA graphs' bookkeeping on any device, without a GPU: a bucket's inputs
  are copied into the recording's own tensors and its result read from its one output tensor, as a
  replay does, but each replay runs the forward again. The tests check the graphs' input copies with
  it, and a walkthrough can show them on a CPU.

Attention runs through PyTorch's SDPA with the mask, grouped-query heads folded into the query
(no copy of the keys per query head). flash-attn's kernels take no mask with holes, so this path
does not use them. The language-model head runs outside the graph on the positions a loop keeps.
"""

from __future__ import annotations

import contextlib
import os
from contextlib import AbstractContextManager, nullcontext
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..cache.static import ArenaShape, StaticArena, StaticKVState
from ..errors import ConfigError, require

BACKENDS = ("eager", "inductor", "cuda-graphs", "inductor+cuda-graphs", "rehearsed-graphs")
GRAPH_BACKENDS = ("cuda-graphs", "inductor+cuda-graphs", "rehearsed-graphs")  # a recording per bucket shape
ROW_BUCKETS = (1, 2, 4, 8)
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32)
FIRST_WIDTH, WIDTH_STEP = 256, 4096  # attended columns: 256, 512, ... doubling to 4096, then steps of 4096
ATTENTION_NAME = "lookahead-static-sdpa"


# The attention kernels a CUDA forward may use: every one PyTorch has but cuDNN's (see :mod:`.lm`).
CUDA_ATTENTION = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def attention_kernels(device: torch.device) -> AbstractContextManager:
    """The attention kernels a forward on ``device`` may use: :data:`CUDA_ATTENTION` on CUDA, any elsewhere."""
    return sdpa_kernel(list(CUDA_ATTENTION)) if device.type == "cuda" else nullcontext()


FAST_PATH_CHOICES = ("auto", "off", *BACKENDS)


def check_fast_path(choice: Any) -> None:
    """ConfigError unless ``choice`` is a :class:`FastPathConfig`, None, or one of :data:`FAST_PATH_CHOICES`."""
    require(choice is None or isinstance(choice, FastPathConfig) or choice in FAST_PATH_CHOICES,
            f"fast_path must be one of {', '.join(FAST_PATH_CHOICES)}, None or a FastPathConfig, got {choice!r}")


def default_backend(device: torch.device) -> str | None:
    """The backend a model on ``device`` runs by default: CUDA graphs on a GPU; none (the eager
    ``DynamicCache`` loops) on a CPU, where no compiled backend has been measured faster."""
    return "cuda-graphs" if device.type == "cuda" else None


def attended_columns(used: int, length: int) -> int:
    """The columns a forward's attention reads when its rows hold ``used`` columns (these tokens
    included) in an arena of ``length``: the next of 256, 512, 1024, 2048, 4096, 8192, 12288, ... (at
    most twice the used ones below 4096, at most 4095 more above), capped at ``length``."""
    width = FIRST_WIDTH
    while width < used:
        width = width * 2 if width < WIDTH_STEP else width + WIDTH_STEP
    return min(width, length)


def free_bytes(device: torch.device) -> int | None:
    """Bytes ``device`` can still allocate: the GPU's free memory; the host's free memory for a CPU
    (None where the system does not say)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class FastPathConfig:
    """How the compiled path runs: ``backend`` (one of :data:`BACKENDS`), the most rows one forward
    runs (``rows``), the columns a row holds at first (``length``, prompt and answer and the holes of
    ragged rows; the cache grows past it while memory allows), and the bucket shapes that are compiled."""

    backend: str = "cuda-graphs"
    rows: int = 8
    length: int = 4096
    row_buckets: tuple[int, ...] = ROW_BUCKETS
    token_buckets: tuple[int, ...] = TOKEN_BUCKETS

    def __post_init__(self) -> None:
        require(self.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        require(isinstance(self.rows, int) and self.rows >= 1, f"rows must be an integer >= 1, got {self.rows!r}")
        require(isinstance(self.length, int) and self.length >= 16,
                f"length (columns per row) must be an integer >= 16, got {self.length!r}")
        for name, buckets in (("row_buckets", self.row_buckets), ("token_buckets", self.token_buckets)):
            require(len(buckets) > 0 and all(isinstance(b, int) and b >= 1 for b in buckets)
                    and list(buckets) == sorted(set(buckets)), f"{name} must be increasing integers >= 1, got {buckets!r}")
        require(max(self.row_buckets) <= self.rows,
                f"row_buckets go up to {max(self.row_buckets)} but the cache runs at most rows={self.rows}")


def _bucket(value: int, buckets: tuple[int, ...]) -> int | None:
    return next((b for b in buckets if b >= value), None)


class _Writes:
    """The cache the model's attention layers see in one static forward: ``update`` writes the new
    keys and values of the first R working rows at columns ``cols`` (n,) and returns all L columns."""

    def __init__(self, arena: StaticArena, rows: int, width: int, heads: int, cols: torch.Tensor):
        self.arena, self.rows, self.width = arena, rows, width
        device = cols.device  # where each (row, head, new token) goes: built once, used by every layer
        self.at = (torch.arange(rows, device=device)[:, None, None], torch.arange(heads, device=device)[None, :, None],
                   cols[None, None, :])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, cache_kwargs: Any = None,
               kwargs: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(transformers 5.17 passes ``cache_kwargs``, 5.24 ``kwargs=``: neither says anything needed here.)"""
        return self.arena.write(layer_idx, self.rows, self.width, self.at, key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:  # positions are always given: never used for them
        return 0


def masked_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """SDPA under an additive mask, grouped-query heads folded into the query.

    Shapes: query (B, H_q, n, D), key and value (B, H_kv, L, D). The g = H_q / H_kv query heads of each
    key head become g * n query rows of that head (row gi * n + t: query head kv_head * g + gi, token t),
    so no key is copied per query head; ``attention_mask`` is (B, 1, g * n, L) in that row order, or
    (B, 1, 1, L) when n = 1 (0 where a query may look, a large negative number elsewhere;
    :meth:`FastPath.body` builds it once for all layers). Returns ((B, n, H_q, D), None), as
    transformers' attention functions do.
    """
    require(attention_mask is not None, "the static path's attention needs its mask")
    b, hq, n, d = query.shape
    hkv = key.shape[1]
    q = query.reshape(b, hkv, hq // hkv * n, d)
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask, scale=scaling)  # (B, H_kv, g n, D)
    return out.reshape(b, hq, n, d).transpose(1, 2).contiguous(), None


@functools.cache
def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, masked_attention)


@contextlib.contextmanager
def _attention(config: Any) -> Iterator[None]:
    """Run the model's attention layers through :func:`masked_attention` for the block."""
    saved = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = saved


class FastPath:
    """One model's compiled forwards over its static cache, and what they cost to make.

    ``compiles`` counts the graphs a compiler produced, ``captures`` the CUDA graphs recorded; once
    every bucket a run uses has been seen, neither grows (the no-recompile test checks this).
    """

    def __init__(self, model: Any, config: FastPathConfig, pad_id: int, cache_arg: str):
        require(config.backend in BACKENDS, f"unknown backend {config.backend!r}")
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        require("cuda-graphs" not in config.backend or self.device.type == "cuda",
                f"backend {config.backend!r} needs the model on a CUDA device; it is on {self.device.type}",
                ConfigError)
        mc = model.config
        layer_types = set(getattr(mc, "layer_types", None) or ["full_attention"])
        require(layer_types == {"full_attention"}, f"the compiled path runs full attention only; this model has "
                f"{sorted(layer_types)} layers: run it with the eager path (fast_path=None)", ConfigError)
        require(getattr(mc, "final_logit_softcapping", None) is None,
                "the compiled path does not apply final logit softcapping: run this model eagerly", ConfigError)
        self.model, self.config, self.pad_id = model, config, pad_id
        self.decoder = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.cache_arg = cache_arg  # the keyword the decoder takes its cache by (LM.cache_arg)
        heads = mc.num_attention_heads
        head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // heads
        kv_heads = getattr(mc, "num_key_value_heads", None) or heads
        shape = ArenaShape(mc.num_hidden_layers, kv_heads, head_dim, config.rows, config.length)
        free = free_bytes(self.device) if self.device.type == "cuda" else None
        require(free is None or shape.bytes(self.dtype) < 0.9 * free, f"the static cache of {config.rows} rows x "
                f"{config.length} columns needs {shape.bytes(self.dtype) / 1e9:.1f} GB and the GPU has "
                f"{(free or 0) / 1e9:.1f} GB free: give FastPathConfig fewer rows or a shorter length", ConfigError)
        self.arena = StaticArena(shape, self.dtype, self.device)
        self.grown = 0  # times the working rows were reallocated longer
        self.kv_heads, self.groups = kv_heads, heads // kv_heads
        self.compiles = 0
        self.captures = 0
        self._compiled: Callable | None = None
        self._graphs: dict[tuple[int, int, int], _Graph] = {}
        self._pool = None
        _register_attention()

    # ------------------------------------------------------------------ shapes
    def shape(self, rows: int, n: int) -> tuple[int, int, bool]:
        """(R, n) as run, and whether that is a compiled bucket shape (else it runs uncompiled at (rows, n))."""
        rb, nb = _bucket(rows, self.config.row_buckets), _bucket(n, self.config.token_buckets)
        if rb is None or nb is None:
            return rows, n, False
        return rb, nb, True

    def new_state(self, rows: int) -> StaticKVState:
        return self.arena.state(rows)

    def make_room(self, state: StaticKVState, n: int) -> None:
        """Make sure ``state`` can take ``n`` more columns: when it cannot, reallocate the working rows
        twice as long (or just long enough, in steps of 1024, where twice does not fit in the free
        memory) and forget the recordings, which read the old tensors. ConfigError only when the device
        cannot hold even that."""
        if state.room(n):
            return
        old = self.arena.shape
        need = -(-(state.length + n) // 1024) * 1024
        free = free_bytes(self.device)
        budget = None if free is None else 0.9 * (free + old.bytes(self.dtype))

        def fits(length: int) -> bool:
            return budget is None or ArenaShape(old.layers, old.kv_heads, old.head_dim, old.rows, length).bytes(
                self.dtype) < budget

        length = max(need, 2 * old.length) if fits(max(need, 2 * old.length)) else need
        require(fits(length), f"the static cache needs {length} columns per row for {state.length + n} tokens "
                f"({ArenaShape(old.layers, old.kv_heads, old.head_dim, old.rows, length).bytes(self.dtype) / 1e9:.1f} GB "
                f"for {old.rows} rows) and the {self.device.type} has {(free or 0) / 1e9:.1f} GB free: generate "
                "fewer tokens, give the compiled path fewer rows (FastPathConfig(rows=...)), or run eagerly "
                "(fast_path='off')", ConfigError)
        self._graphs.clear()  # recorded over the old tensors
        self._compiled = None
        self.arena.grow(length)
        self.grown += 1

    # ------------------------------------------------------------------ the forward
    def body(self, ids: torch.Tensor, mask: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """The forward of R rows x n new tokens: ``ids`` (R, n), ``mask`` (R, W) 1 at the columns a row
        holds once these tokens are in (the new ones included), over the W columns attention reads
        (:func:`attended_columns`), ``cols`` (n,) the columns the new tokens take. Writes their keys and
        values into the working rows; returns the hidden states (R, n, H)."""
        rows, length = mask.shape
        n = cols.shape[0]
        key_cols = torch.arange(length, device=mask.device)
        before = key_cols[None, None, :] <= cols[None, :, None]  # (1, n, L): causal
        itself = key_cols[None, None, :] == cols[None, :, None]  # a query always sees its own column (no empty row)
        attend = (mask.bool()[:, None, :] & before) | itself  # (R, n, L)
        bias = torch.zeros(attend.shape, dtype=self.dtype, device=mask.device)
        bias = bias.masked_fill(~attend, torch.finfo(self.dtype).min)[:, None]  # (R, 1, n, L), additive
        if n > 1 and self.groups > 1:
            bias = bias.repeat(1, 1, self.groups, 1)  # the folded query's rows (masked_attention)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0).index_select(1, cols)  # (R, n): real tokens before
        out = self.decoder(input_ids=ids, attention_mask={"full_attention": bias}, position_ids=positions,
                           use_cache=True, **{self.cache_arg: _Writes(self.arena, rows, length, self.kv_heads, cols)})
        return out.last_hidden_state

    def run(self, ids: torch.Tensor, full_mask: torch.Tensor, state: StaticKVState) -> torch.Tensor:
        """Forward ``ids`` (B, n) of the resident ``state`` whose mask, these tokens included, is
        ``full_mask`` (B, T + n) (:meth:`make_room` first). Returns hidden states (B, n, H)."""
        bsz, n = ids.shape
        used = full_mask.shape[1]
        start = used - n
        rb, nb, bucketed = self.shape(bsz, n)
        require(nb == n, f"run takes its tokens padded to a bucket already: n={n}, bucket {nb}")
        require(used <= self.arena.shape.length, f"{used} columns do not fit in {self.arena.shape.length}: make_room first")
        width = attended_columns(used, self.arena.shape.length)
        mask = torch.zeros(rb, width, dtype=torch.long, device=self.device)
        mask[:bsz, :used] = full_mask
        if rb > bsz:
            ids = torch.cat([ids, ids.new_full((rb - bsz, n), self.pad_id)])
        cols = torch.arange(start, start + n, device=self.device)
        with torch.no_grad(), _attention(self.model.config), attention_kernels(self.device):
            if not bucketed or self.config.backend == "eager":
                return self.body(ids, mask, cols)[:bsz]
            if self.config.backend in GRAPH_BACKENDS:
                return self._replay(ids, mask, cols)[:bsz]
            return self._compiled_body()(ids, mask, cols)[:bsz]

    # ------------------------------------------------------------------ backends
    def _compiled_body(self) -> Callable:
        if self._compiled is None:
            import torch._dynamo

            def counting(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
                from torch._inductor.compile_fx import compile_fx

                self.compiles += 1
                return compile_fx(gm, example_inputs)

            config = torch._dynamo.config
            limit = 8 * len(self.config.row_buckets) * len(self.config.token_buckets)
            for name in ("recompile_limit", "cache_size_limit"):  # a compile per bucket shape, all kept
                if hasattr(config, name):
                    setattr(config, name, max(getattr(config, name), limit))
            self._compiled = torch.compile(self.body, backend=counting, dynamic=False)
        return self._compiled

    def _replay(self, ids: torch.Tensor, mask: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        key = (ids.shape[0], ids.shape[1], mask.shape[1])  # rows, new tokens, attended columns
        graph = self._graphs.get(key)
        if graph is None:
            fn = self._compiled_body() if self.config.backend.startswith("inductor") else self.body
            if self.config.backend == "rehearsed-graphs":
                graph = self._graphs[key] = _RehearsedGraph(fn, ids, mask, cols, None)
            else:
                if self._pool is None:
                    self._pool = torch.cuda.graph_pool_handle()
                graph = self._graphs[key] = _Graph(fn, ids, mask, cols, self._pool)
            self.captures += 1
            return graph.output
        return graph.replay(ids, mask, cols)

    def warm(self, rows: tuple[int, ...] | None = None, tokens: tuple[int, ...] | None = None,
             widths: tuple[int, ...] = (FIRST_WIDTH,)) -> None:
        """Compile (or record) the bucket shapes now, on scratch rows, so that no run pays for it: every
        row and token bucket (or those given) at each of ``widths`` attended columns (a width is rounded
        as :func:`attended_columns` rounds it; others are made when a run first needs them)."""
        if self.config.backend == "eager":
            return
        for width in sorted({attended_columns(w, self.arena.shape.length) for w in widths}):
            for rb in rows or self.config.row_buckets:
                for nb in tokens or self.config.token_buckets:
                    state = self.new_state(rb)
                    ids = torch.full((rb, nb), self.pad_id, dtype=torch.long, device=self.device)
                    held = torch.ones(rb, max(width, nb), dtype=torch.long, device=self.device)
                    self.run(ids, held, state)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The language-model head on (B, keep, H) hidden states: (B, keep, V) float32."""
        return self.head(hidden).float()


class _Graph:
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


class _RehearsedGraph(_Graph):
    """A :class:`_Graph` without a GPU (backend ``"rehearsed-graphs"``): "recording" keeps the function,
    a "replay" runs it again on the recording's own input tensors and copies its result into the one
    output tensor. What a replay would read and return is the same; only the launch is not one."""

    def _record(self, fn: Callable, pool: Any) -> torch.Tensor:
        self.fn = fn
        return fn(self.ids, self.mask, self.cols).clone()

    def _launch(self) -> None:
        self.output.copy_(self.fn(self.ids, self.mask, self.cols))


__all__ = ["ATTENTION_NAME", "BACKENDS", "FAST_PATH_CHOICES", "GRAPH_BACKENDS", "attended_columns", "free_bytes", "check_fast_path", "FastPath", "FastPathConfig", "ROW_BUCKETS", "TOKEN_BUCKETS",
           "default_backend", "masked_attention"]
