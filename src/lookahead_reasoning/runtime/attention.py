"""The compiled path's attention: what a decoder layer's attention runs on the static cache.

The compiled path (:mod:`.compiled`) hands transformers' attention layers an attention function of its
own, registered under a name, for the length of one forward (:func:`using`), and one mask built once for
all layers from the (R, W) mask of the columns each row holds (:func:`attended`: those columns up to each
new token's own, and its own). Both functions take the layer's queries and the cache's keys and values over
the W columns attention reads, and fold the g = H_q / H_kv query heads of each key head into query rows,
so no key is copied per query head:

* ``"sdpa"`` (:func:`masked_attention`, mask :func:`additive_mask`): PyTorch's scaled-dot-product
  attention under an additive mask. Every one of the W columns is read, used or not; on a GPU the masked
  kernel gives one decoded token (rows x key heads) thread blocks: 2 for the 1.5B's shape, on a GPU of
  over a hundred multiprocessors. The reference, and what a forward outside the bucket shapes runs.
* ``"flex"`` (:func:`flex_masked_attention`, mask :func:`block_mask`): PyTorch's flex attention under a
  *block mask*: the key columns in blocks (:data:`BLOCK` by default) and, for each row, the list of blocks that hold a
  column it attends; the rest are never read, so a token's attention costs the used columns, not the
  span. Inside a block the same rule is applied column by column (a ``mask_mod`` reading the mask).
  Compiled (inductor, in the compiled backends), its decoding kernel also splits the key blocks over
  thread blocks as flash-decoding does; inductor's C++ kernel on a CPU skips the unlisted blocks too, while
  flex attention's uncompiled reference code applies the rule to every column (correct, slow, for the tests).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from ..errors import require

ATTENTION_NAME = "lookahead-static-sdpa"
FLEX_NAME = "lookahead-static-flex"
ATTENTIONS = ("auto", "sdpa", "flex")  # FastPathConfig.attention; "auto": flex where inductor compiles on CUDA
BLOCK = 128  # key columns (and folded query rows) per block of flex attention's block mask (FastPathConfig.block)

# The attention kernels a CUDA forward may use: every one PyTorch has but cuDNN's (see :mod:`.lm`).
CUDA_ATTENTION = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def attention_kernels(device: torch.device) -> AbstractContextManager:
    """The attention kernels a forward on ``device`` may use: :data:`CUDA_ATTENTION` on CUDA, any elsewhere."""
    return sdpa_kernel(list(CUDA_ATTENTION)) if device.type == "cuda" else nullcontext()


# ---------------------------------------------------------------------------------------------- masks
def attended(mask: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """(R, n, W) bool: which of the W columns each of the n new tokens of each row attends to. ``mask``
    (R, W) is 1 at the columns a row holds once these tokens are in, ``cols`` (n,) the columns the new tokens
    take: a token sees the held columns up to its own (causal), and always its own (no query sees nothing:
    the scratch rows a bucket adds hold no column)."""
    key_cols = torch.arange(mask.shape[1], device=mask.device)
    before = key_cols[None, None, :] <= cols[None, :, None]  # (1, n, W)
    itself = key_cols[None, None, :] == cols[None, :, None]
    return (mask.bool()[:, None, :] & before) | itself


def additive_mask(mask: torch.Tensor, cols: torch.Tensor, groups: int, dtype: torch.dtype) -> torch.Tensor:
    """SDPA's mask of :func:`attended`: 0 where a query looks, the dtype's lowest number elsewhere, (R, 1, g * n, W)
    in the folded query rows' order (:func:`masked_attention`), or (R, 1, 1, W) for one new token a row."""
    attend = attended(mask, cols)
    bias = torch.zeros(attend.shape, dtype=dtype, device=mask.device)
    bias = bias.masked_fill(~attend, torch.finfo(dtype).min)[:, None]  # (R, 1, n, W)
    return bias.repeat(1, 1, groups, 1) if cols.shape[0] > 1 and groups > 1 else bias


def used_blocks(mask: torch.Tensor, cols: torch.Tensor, groups: int, block: int = BLOCK) -> torch.Tensor:
    """(R, ceil(g * n / block), ceil(W / block)) bool: the blocks of ``block`` folded query rows x ``block`` key
    columns in which some query attends some column (:func:`attended`); the only blocks flex attention reads."""
    attend = attended(mask, cols).repeat(1, groups, 1).to(torch.int32)  # (R, g * n, W); folded row i: token i % n
    rows, queries, width = attend.shape
    q_blocks, kv_blocks = -(-queries // block), -(-width // block)
    padded = F.pad(attend, (0, kv_blocks * block - width, 0, q_blocks * block - queries))
    return padded.view(rows, q_blocks, block, kv_blocks, block).amax(dim=(2, 4)) > 0


def block_mask(mask: torch.Tensor, cols: torch.Tensor, groups: int, block: int = BLOCK) -> Any:
    """Flex attention's ``BlockMask`` of :func:`attended`, for the folded queries (g * n rows) and W key columns:
    per row the key blocks that hold an attended column (:func:`used_blocks`: ``kv_num_blocks`` (R, 1, q blocks)
    and, first in ``kv_indices`` (R, 1, q blocks, kv blocks), their indices), and inside them the same rule
    column by column, reading ``mask`` and ``cols`` where they lie. One key head's mask serves every head."""
    hit = used_blocks(mask, cols, groups, block)
    count = hit.sum(dim=-1, dtype=torch.int32)
    order = torch.argsort(hit.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)  # used first
    n = cols.shape[0]

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        own = cols[q % n]  # folded query row q is token q % n
        return ((mask[b, kv] != 0) & (kv <= own)) | (kv == own)

    return BlockMask.from_kv_blocks(count[:, None], order[:, None], BLOCK_SIZE=block, mask_mod=mask_mod,
                                    seq_lengths=(groups * n, mask.shape[1]), compute_q_blocks=False)  # no backward


# ---------------------------------------------------------------------------------------------- attention
def _folded(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """(B, H_q, n, D) queries as (B, H_kv, g * n, D): row gi * n + t is query head kv_head * g + gi, token t."""
    b, hq, n, d = query.shape
    hkv = key.shape[1]
    return query.reshape(b, hkv, hq // hkv * n, d)


def _unfolded(out: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """(B, H_kv, g * n, D) back to (B, n, H_q, D), as transformers' attention functions return it."""
    b, hq, n, d = query.shape
    return out.reshape(b, hq, n, d).transpose(1, 2).contiguous()


def masked_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """SDPA under an additive mask, grouped-query heads folded into the query.

    Shapes: query (B, H_q, n, D), key and value (B, H_kv, L, D); ``attention_mask`` is (B, 1, g * n, L) in
    the folded row order, or (B, 1, 1, L) when n = 1 (0 where a query may look, a large negative number
    elsewhere: :func:`additive_mask`). Returns ((B, n, H_q, D), None), as transformers' attention functions do.
    """
    require(attention_mask is not None, "the static path's attention needs its mask")
    out = F.scaled_dot_product_attention(_folded(query, key), key, value, attn_mask=attention_mask, scale=scaling)
    return _unfolded(out, query), None


@functools.cache
def _flex(compiled: bool) -> Callable:
    """PyTorch's flex attention, compiled on its own (once) or as its reference code."""
    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


def flex_masked_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: Any, scaling: float | None = None,
                          **kwargs: Any) -> tuple[torch.Tensor, None]:
    """:func:`masked_attention`'s arguments and result, computed by flex attention under a ``BlockMask``
    (:func:`block_mask`: R rows, the g * n folded queries, L key columns). Inside a compiled forward the compiler
    writes the kernel; called as it is, compiled on its own on a GPU, flex attention's reference code elsewhere."""
    require(attention_mask is not None, "the static path's attention needs its mask")
    flex = flex_attention if torch.compiler.is_compiling() else _flex(query.is_cuda)
    out = flex(_folded(query, key), key, value, block_mask=attention_mask, scale=scaling)
    return _unfolded(out, query), None


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, masked_attention)
    AttentionInterface.register(FLEX_NAME, flex_masked_attention)


@contextlib.contextmanager
def using(config: Any, kind: str) -> Iterator[None]:
    """Run the model's attention layers through ``kind``'s ("sdpa" or "flex"), as registered, for the block."""
    _register()
    saved = config._attn_implementation
    config._attn_implementation = FLEX_NAME if kind == "flex" else ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = saved


__all__ = ["ATTENTIONS", "ATTENTION_NAME", "BLOCK", "CUDA_ATTENTION", "FLEX_NAME", "additive_mask", "attended",
           "attention_kernels", "block_mask", "flex_masked_attention", "masked_attention", "used_blocks", "using"]
