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
  *span* (:func:`~lookahead_reasoning.cache.static.attended_columns`: 256, 512, ... 4096, then steps of 4096).
  A shape beyond the buckets (a long prompt) runs the same code uncompiled.

The cache needs no sizing: a run is given the columns its prompt and budget need at its start
(:meth:`FastPath.reserve`, within the free memory), and a row that would outgrow them makes them grow
(:meth:`FastPath.make_room`); either way the compiled code serves the new length and only the recordings,
which read the old tensors, are made again.

One function, :meth:`FastPath.body`, is what runs: ``(ids, mask, cols) -> out``, with the attention mask
and the positions built inside from the (R, W) mask of real columns. The ``backend`` says how
(:mod:`.backends`):

* ``"eager"``: called as it is, at the bucket shapes (the static cache without compiling: the
  reference of the compiled backends);
* ``"inductor"``: ``torch.compile`` (inductor's fused kernels; on CPU, the same compiler), one compile per
  rows x tokens bucket that serves every span and cache length (:class:`~.backends.Compiler`);
* ``"inductor+cuda-graphs"`` (the default on a GPU): inductor's kernels, recorded as CUDA graphs;
* ``"cuda-graphs"``: recorded by hand as one CUDA graph per bucket (needs no compiler);
* ``"rehearsed-graphs"``: the CUDA graphs' bookkeeping on any device (:mod:`.graphs`), each replay
  running the forward again: how the tests check the graphs' input copies without a GPU.

Attention (:mod:`.attention`) runs the bucket shapes through flex attention under a block mask
(``attention="flex"``: key blocks that hold no used column are never read) or PyTorch's SDPA under an additive
mask (``"sdpa"``); ``"auto"`` (the default) is flex where inductor compiles on a GPU, SDPA elsewhere (flex's
uncompiled reference code is slow); a forward beyond the buckets runs SDPA, the reference. (flash-attn's
kernels take no mask with holes.)

A forward of one new token a row (every decoding step) runs the language-model head and its argmax inside
the recording, so a greedy token costs no launch after the graph's and its ids can feed the next forward where
they lie (:meth:`~.session.Session.argmax_ahead`); the head of a forward of several runs after it, on the kept
positions only. The host hands a forward its ids and columns, and the arena its mask's new column, without
waiting for the device (:func:`~lookahead_reasoning.cache.static.upload`).

With ``fuse`` (the default) each layer's q/k/v projections run as one matrix product over their stacked
weights, and so do the MLP's gate and up projections (:class:`~.fused.FusedProducts`; the model's own weights
become views into the stacks), and each RMS norm runs as one ``F.rms_norm`` kernel (:class:`~.fused.FusedNorms`).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch

from ..cache.static import FIRST_SPAN, ArenaShape, StaticArena, StaticKVState, attended_columns, free_bytes, upload
from ..errors import ConfigError, require
from .attention import (ATTENTION_NAME, ATTENTIONS, BLOCK, CUDA_ATTENTION, additive_mask, attention_kernels,
                        block_mask, masked_attention, using)
from .backends import Compiler, Recordings
from .fused import FusedNorms, FusedProducts

BACKENDS = ("eager", "inductor", "cuda-graphs", "inductor+cuda-graphs", "rehearsed-graphs")
GRAPH_BACKENDS = ("cuda-graphs", "inductor+cuda-graphs", "rehearsed-graphs")  # a recording per bucket shape
CUDA_BACKEND = "inductor+cuda-graphs"  # what a model on a GPU runs by default
ROW_BUCKETS = (1, 2, 4, 8)
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32)


FAST_PATH_CHOICES = ("auto", "off", *BACKENDS)


def check_fast_path(choice: Any) -> None:
    """ConfigError unless ``choice`` is a :class:`FastPathConfig`, None, or one of :data:`FAST_PATH_CHOICES`."""
    require(choice is None or isinstance(choice, FastPathConfig) or choice in FAST_PATH_CHOICES,
            f"fast_path must be one of {', '.join(FAST_PATH_CHOICES)}, None or a FastPathConfig, got {choice!r}")


def default_backend(device: torch.device) -> str | None:
    """The backend a model on ``device`` runs by default: inductor's kernels recorded as CUDA graphs on a GPU
    (:data:`CUDA_BACKEND`); none (the eager ``DynamicCache`` loops) on a CPU, where no compiled backend has been
    measured faster."""
    return CUDA_BACKEND if device.type == "cuda" else None


@dataclass(frozen=True)
class FastPathConfig:
    """How the compiled path runs: ``backend`` (one of :data:`BACKENDS`), the most rows one forward runs
    (``rows``), the columns a row holds at first (``length``, prompt and answer and the holes of ragged rows,
    whole ``block``s under flex; a run sizes it for its budget and it grows past that while memory allows), the
    bucket shapes that are compiled, and the bucket shapes' attention (``"auto"``, ``"flex"``, ``"sdpa"``)."""

    backend: str = CUDA_BACKEND
    rows: int = 8
    length: int = 4096
    row_buckets: tuple[int, ...] = ROW_BUCKETS
    token_buckets: tuple[int, ...] = TOKEN_BUCKETS
    fuse: bool = True  # q/k/v and gate/up as one product each (FusedProducts), RMS norms as one kernel (FusedNorms)
    attention: str = "auto"  # flex where inductor compiles on a GPU, else sdpa (runtime.attention)
    block: int = BLOCK  # key columns a block of flex attention's block mask: the unit of what it skips

    def __post_init__(self) -> None:
        require(self.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        require(isinstance(self.rows, int) and self.rows >= 1, f"rows must be an integer >= 1, got {self.rows!r}")
        require(isinstance(self.length, int) and self.length >= 16,
                f"length (columns per row) must be an integer >= 16, got {self.length!r}")
        require(isinstance(self.fuse, bool), f"fuse must be True or False, got {self.fuse!r}")
        require(self.attention in ATTENTIONS, f"attention must be one of {', '.join(ATTENTIONS)}, got {self.attention!r}")
        require(self.block in (16, 32, 64, 128, 256),
                f"block must be 16, 32, 64, 128 or 256 columns, got {self.block!r}")
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

    def __init__(self, arena: StaticArena, rows: int, span: int, heads: int, cols: torch.Tensor):
        self.arena, self.rows, self.span = arena, rows, span
        device = cols.device  # where each (row, head, new token) goes: built once, used by every layer
        self.at = (torch.arange(rows, device=device)[:, None, None], torch.arange(heads, device=device)[None, :, None],
                   cols[None, None, :])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, cache_kwargs: Any = None,
               kwargs: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(transformers 5.17 passes ``cache_kwargs``, 5.24 ``kwargs=``: neither says anything needed here.)"""
        return self.arena.write(layer_idx, self.rows, self.span, self.at, key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:  # positions are always given: never used for them
        return 0


class FastPath:
    """One model's compiled forwards over its static cache, and what they cost to make: ``compiles`` counts
    the graphs a compiler produced (none once every bucket a run uses was seen: the no-recompile tests),
    ``captures`` the recordings (one more for each new span, all again after the cache grew)."""

    def __init__(self, model: Any, config: FastPathConfig, pad_id: int, cache_arg: str):
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
        auto = "flex" if self.device.type == "cuda" and config.backend.startswith("inductor") else "sdpa"
        self.attention = auto if config.attention == "auto" else config.attention  # the bucket shapes'
        block = config.block if self.attention == "flex" else 1  # flex reads whole blocks: all of them allocated
        shape = ArenaShape(mc.num_hidden_layers, kv_heads, head_dim, config.rows, -(-config.length // block) * block)
        free = free_bytes(self.device) if self.device.type == "cuda" else None
        require(free is None or shape.bytes(self.dtype) < 0.9 * free, f"the static cache of {config.rows} rows x "
                f"{config.length} columns needs {shape.bytes(self.dtype) / 1e9:.1f} GB and the GPU has "
                f"{(free or 0) / 1e9:.1f} GB free: give FastPathConfig fewer rows or a shorter length", ConfigError)
        self.arena = StaticArena(shape, self.dtype, self.device)
        self.grown = 0  # times the working rows were reallocated longer
        self.kv_heads, self.groups = kv_heads, heads // kv_heads
        shapes, graphs = len(config.row_buckets) * len(config.token_buckets), config.backend in GRAPH_BACKENDS
        self.compiler = Compiler(self.body, shapes) if config.backend.startswith("inductor") else None
        self.recordings = Recordings(config.backend == "rehearsed-graphs") if graphs else None
        self.fused = FusedProducts(self.decoder) if config.fuse else None
        self.norms = FusedNorms(self.decoder) if config.fuse else None
        self._allocated()

    @property
    def compiles(self) -> int:
        return 0 if self.compiler is None else self.compiler.compiles

    @property
    def captures(self) -> int:
        return 0 if self.recordings is None else self.recordings.captures

    # ------------------------------------------------------------------ shapes
    def shape(self, rows: int, n: int) -> tuple[int, int, bool]:
        """(R, n) as run, and whether that is a compiled bucket shape (else it runs uncompiled at (rows, n))."""
        rb, nb = _bucket(rows, self.config.row_buckets), _bucket(n, self.config.token_buckets)
        if rb is None or nb is None:
            return rows, n, False
        return rb, nb, True

    def make_room(self, state: StaticKVState, n: int) -> None:
        """Make sure ``state`` can take ``n`` more columns: where it cannot, the arena grows
        (:meth:`StaticArena.reserve <lookahead_reasoning.cache.static.StaticArena.reserve>`, within 90% of the
        free memory)."""
        if state.length + n > self.arena.shape.length:
            self.arena.reserve(state.length + n, self._budget())
            self._allocated()
            self.grown += 1

    def reserve(self, columns: int) -> None:
        """Give every working row ``columns`` columns now (rounded up to 1024: a run's prompt and budget) where
        they fit in 90% of the free memory, so that the run does not grow the cache midway; where they do not,
        the cache grows when a row needs it (:meth:`make_room`), or says why it cannot."""
        length, budget = -(-columns // 1024) * 1024, self._budget()
        if length > self.arena.shape.length and (budget is None or self.arena.columns_within(budget) >= length):
            self.arena.grow(length)
            self._allocated()
            self.grown += 1

    def _budget(self) -> float | None:
        """Bytes the working rows may take: 90% of the free memory and what they take now (None: no limit known)."""
        free = free_bytes(self.device)
        return None if free is None else 0.9 * (free + self.arena.shape.bytes(self.dtype))

    def _allocated(self) -> None:
        """The working rows are new tensors: the recordings, which read the old ones, are made again when next
        needed; what inductor compiled serves them as it is (their length is symbolic in it)."""
        if self.compiler is not None:
            self.compiler.mark(self.arena)
        if self.recordings is not None:
            self.recordings.graphs.clear()

    # ------------------------------------------------------------------ the forward
    def body(self, ids: torch.Tensor, mask: torch.Tensor,
             cols: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The forward of a bucket shape, as compiled and recorded: :meth:`forward` with this path's attention."""
        return self.forward(ids, mask, cols, self.attention)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, cols: torch.Tensor,
                attention: str) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The forward of R rows x n new tokens: ``ids`` (R, n), ``mask`` (R, W) 1 at the columns a row
        holds once these tokens are in (the new ones included; a view of the arena's device mask), over the W
        columns attention reads (:func:`~lookahead_reasoning.cache.static.attended_columns`), ``cols`` (n,)
        the columns the new tokens take, ``attention`` "flex" or "sdpa" (:mod:`.attention`). Writes their keys
        and values into the working rows; returns the hidden states (R, n, H), or, for one new token a row
        (n = 1, every decoding step), the language-model head there: (float32 logits (R, 1, V), their argmax (R, 1))."""
        rows, length = mask.shape
        n = cols.shape[0]
        masks = (block_mask(mask, cols, self.groups, self.config.block) if attention == "flex"  # once, all layers
                 else additive_mask(mask, cols, self.groups, self.dtype))
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0).index_select(1, cols)  # (R, n): real tokens before
        out = self.decoder(input_ids=ids, attention_mask=masks, position_ids=positions,
                           use_cache=True, **{self.cache_arg: _Writes(self.arena, rows, length, self.kv_heads, cols)})
        if n > 1:
            return out.last_hidden_state
        logits = self.head(out.last_hidden_state).float()
        return logits, logits.argmax(dim=-1)

    def run(self, ids: torch.Tensor, full_mask: torch.Tensor, state: StaticKVState,
            keep: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Forward ``ids`` (B, n) of the resident ``state`` whose mask, these tokens included, is
        ``full_mask`` (B, T + n) (:meth:`make_room` first), and apply the language-model head at the
        positions ``keep`` of the n: a (k,) index tensor, or an int for all n (as
        :func:`~.lm._keep_positions` gives them). Returns (float32 logits (B, k, V), their argmax (B, k) or None).

        With one new token a row (every decoding step) the head and its argmax run inside the forward's
        recording; with several, after it, on the kept positions only (the head of every position a bucket
        pads to would cost R x n x V logits), and the argmax is left to the caller (None)."""
        bsz, n = ids.shape
        used = full_mask.shape[1]
        start = used - n
        rb, nb, bucketed = self.shape(bsz, n)
        require(nb == n, f"run takes its tokens padded to a bucket already: n={n}, bucket {nb}")
        require(used <= self.arena.shape.length, f"{used} columns do not fit in {self.arena.shape.length}: make_room first")
        span = attended_columns(used, self.arena.shape.length)
        self.arena.sync_mask(state, full_mask)
        mask = self.arena.mask[:rb, :span]  # read where it lies: a recording's input at a fixed address
        if rb > bsz:
            ids = torch.cat([ids, ids.new_full((rb - bsz, n), self.pad_id)])
        cols = upload(torch.arange(start, start + n), self.device)
        if bucketed and self.recordings is not None:
            out = self.recordings.run(self.compiler or self.body, (ids, mask, cols),
                                      lambda: self._model_code(self.attention), self._check)
        else:
            with self._model_code(self.attention if bucketed else "sdpa"):  # beyond the buckets: the reference
                out = ((self.compiler or self.body)(ids, mask, cols) if bucketed
                       else self.forward(ids, mask, cols, "sdpa"))
        if isinstance(out, tuple):  # one new token a row: the head and its argmax ran in the forward
            logits, top = out
            return logits[:bsz], top[:bsz]
        hidden = out[:bsz]
        return self.logits(hidden if isinstance(keep, int) else hidden.index_select(1, keep)), None

    # ------------------------------------------------------------------ what the model's code needs
    def _model_code(self, attention: str) -> ExitStack:
        """What the model's own Python code needs while it runs (the body, a recording, a compiled call):
        no autograd, the ``attention`` function and kernels, the fused stand-ins in place of the
        model's layers. A CUDA graph's replay runs none of that code and enters none of it: each stand-in
        is a module attribute set and set back (about 400 a token for the 1.5B), host time for nothing."""
        stack = ExitStack()
        stack.enter_context(torch.no_grad())
        stack.enter_context(using(self.model.config, attention))
        stack.enter_context(attention_kernels(self.device))
        for fused in (self.fused, self.norms):
            if fused is not None:
                stack.enter_context(fused.installed())
        return stack

    def _check(self) -> None:
        """What a replay that runs no Python checks: a recording over stacks of replaced weights is refused."""
        if self.fused is not None:
            self.fused.check()

    def warm(self, rows: tuple[int, ...] | None = None, tokens: tuple[int, ...] | None = None,
             spans: tuple[int, ...] = (FIRST_SPAN,)) -> None:
        """Compile (or record) the bucket shapes now, on scratch rows, so that no run pays for it: every
        row and token bucket (or those given) at each of ``spans`` attended columns (a span is rounded
        as :func:`~lookahead_reasoning.cache.static.attended_columns` rounds it; others are made when a run first needs them)."""
        if self.config.backend == "eager":
            return
        for span in sorted({attended_columns(w, self.arena.shape.length) for w in spans}):
            for rb in rows or self.config.row_buckets:
                for nb in tokens or self.config.token_buckets:
                    state = self.arena.state(rb)
                    ids = torch.full((rb, nb), self.pad_id, dtype=torch.long, device=self.device)
                    held = torch.ones(rb, max(span, nb), dtype=torch.long, device=self.device)
                    self.run(ids, held, state, torch.arange(nb - 1, nb, device=self.device))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The language-model head on (B, keep, H) hidden states: (B, keep, V) float32."""
        return self.head(hidden).float()


__all__ = ["ATTENTION_NAME", "BACKENDS", "CUDA_ATTENTION", "CUDA_BACKEND", "FAST_PATH_CHOICES", "GRAPH_BACKENDS",
           "ROW_BUCKETS", "TOKEN_BUCKETS", "FastPath", "FastPathConfig", "attention_kernels", "check_fast_path",
           "default_backend", "masked_attention"]
