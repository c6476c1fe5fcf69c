"""The compiled path's attention: what a decoder layer's attention runs on the static cache.

The compiled path (:mod:`.compiled`) hands transformers' attention layers an attention function of its
own, registered under a name, for the length of one forward (:func:`using`). Both take the layer's
queries, the cache's keys and values over the columns attention reads, and one additive mask built once
for all layers (:meth:`~.compiled.FastPath.body`), and fold the g = H_q / H_kv query heads of each key
head into query rows, so no key is copied per query head:

* ``"sdpa"`` (:func:`masked_attention`): PyTorch's scaled-dot-product attention under the mask. On a GPU
  the masked kernel gives one decoded token (rows x key heads) thread blocks: 2 for the 1.5B's shape,
  on a GPU of over a hundred multiprocessors.
* ``"flex"`` (:func:`flex_masked_attention`): PyTorch's flex attention with the mask read as a score
  modification. Compiled (as it is on a GPU), its decoding kernel splits the key columns over thread
  blocks as flash-decoding does. Used for the compiled bucket shapes only; a long prompt's forward runs
  ``"sdpa"``. Off the GPU it runs flex attention's reference code: correct, slow, for the tests.
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

from ..errors import require

ATTENTION_NAME = "lookahead-static-sdpa"
FLEX_NAME = "lookahead-static-flex"
ATTENTIONS = ("sdpa", "flex")  # FastPathConfig.attention

# The attention kernels a CUDA forward may use: every one PyTorch has but cuDNN's (see :mod:`.lm`).
CUDA_ATTENTION = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def attention_kernels(device: torch.device) -> AbstractContextManager:
    """The attention kernels a forward on ``device`` may use: :data:`CUDA_ATTENTION` on CUDA, any elsewhere."""
    return sdpa_kernel(list(CUDA_ATTENTION)) if device.type == "cuda" else nullcontext()


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
    elsewhere). Returns ((B, n, H_q, D), None), as transformers' attention functions do.
    """
    require(attention_mask is not None, "the static path's attention needs its mask")
    out = F.scaled_dot_product_attention(_folded(query, key), key, value, attn_mask=attention_mask, scale=scaling)
    return _unfolded(out, query), None


@functools.cache
def _flex(compiled: bool) -> Callable:
    """PyTorch's flex attention, compiled or as its reference code (imported on first use, once)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


def flex_masked_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, scaling: float | None = None,
                          **kwargs: Any) -> tuple[torch.Tensor, None]:
    """:func:`masked_attention`'s arguments and result, computed by flex attention: the mask is added to
    each score (``score_mod``), compiled on a GPU (flash-decoding's split of the key columns), the
    reference code elsewhere."""
    require(attention_mask is not None, "the static path's attention needs its mask")
    bias = attention_mask
    one_row = bias.shape[2] == 1  # n = 1: every folded query row reads the same mask row

    def add_mask(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return score + bias[b, 0, 0 if one_row else q, kv]

    out = _flex(query.is_cuda)(_folded(query, key), key, value, score_mod=add_mask, scale=scaling)
    return _unfolded(out, query), None


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, masked_attention)
    AttentionInterface.register(FLEX_NAME, flex_masked_attention)


def attention_name(choice: str, bucketed: bool) -> str:
    """The registered attention a forward runs: flex for the compiled bucket shapes when chosen, else SDPA."""
    return FLEX_NAME if choice == "flex" and bucketed else ATTENTION_NAME


@contextlib.contextmanager
def using(config: Any, name: str) -> Iterator[None]:
    """Run the model's attention layers through the attention registered as ``name`` for the block."""
    _register()
    saved = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = saved


__all__ = ["ATTENTIONS", "ATTENTION_NAME", "CUDA_ATTENTION", "FLEX_NAME", "attention_kernels", "attention_name",
           "flex_masked_attention", "masked_attention", "using"]
