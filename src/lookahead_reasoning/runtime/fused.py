"""Fused products: linear layers that read the same input, run as one matrix product.

A decoder layer of a Llama-family model reads its input through three projections (query, key and value)
and its MLP's input through two (gate and up). At batch 1 on a GPU each is a small product, launched on
its own; stacked, they are one. :class:`FusedProducts` stacks them once for the compiled path
(:mod:`.compiled`), makes the model's own weights views into the stacks (nothing is held twice, and the
eager path, which still calls each projection, reads the same memory), and for a compiled forward puts
a :class:`_Part` where each projection was.

RMS norms, too (:class:`FusedNorms`): transformers writes a Llama-family norm as eight small
operations (cast up, square, mean, add, rsqrt, multiply, cast back, scale), eight kernels on a GPU, twice
a layer; PyTorch's ``F.rms_norm`` runs it as one fused kernel there (and as the same operations on a CPU).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F

from ..errors import ConfigError, require


class _Stack:
    """Linear layers that read the same input, as one product: ``weight`` (sum of outputs, in) holds their
    weights stacked in order, ``bias`` theirs or None; ``pending`` the parts not yet handed out."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, sizes: list[int]):
        self.weight, self.bias, self.sizes = weight, bias, sizes
        self.pending: dict[int, torch.Tensor] = {}


class _Part(torch.nn.Module):
    """Part ``index`` of a :class:`_Stack`, put where one of its linear layers was. The first part called
    runs the one product over (B, n, in) and keeps the others' slices for their calls (each is called once
    per forward, with the same input: the model's own code, e.g. ``q_proj(x)``, ``k_proj(x)``, ``v_proj(x)``)."""

    def __init__(self, stack: _Stack, index: int):
        super().__init__()
        self.stack, self.index = stack, index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stack = self.stack
        if self.index not in stack.pending:
            parts = F.linear(x, stack.weight, stack.bias).split(stack.sizes, dim=-1)
            stack.pending = dict(enumerate(parts))
        return stack.pending.pop(self.index)


def _stacked_already(owner: torch.nn.Module, linears: list[torch.nn.Linear]) -> _Stack | None:
    """The stack an earlier :class:`FusedProducts` made of ``linears``, if their weights still live in it."""
    stack = getattr(owner, "_lookahead_stack", None)
    if stack is None or stack.sizes != [m.weight.shape[0] for m in linears]:
        return None
    starts = [sum(stack.sizes[:i]) for i in range(len(linears))]
    same = all(m.weight.data_ptr() == stack.weight[s].data_ptr() for m, s in zip(linears, starts))
    biased = stack.bias is None or all(m.bias.data_ptr() == stack.bias[s:].data_ptr() for m, s in zip(linears, starts))
    return stack if same and biased else None


def _stack(linears: list[torch.nn.Linear]) -> _Stack:
    """Stack ``linears``' weights (and biases) into one tensor and make theirs views into it (no copy is
    kept: the eager path reads the same memory)."""
    sizes = [m.weight.shape[0] for m in linears]
    weight = torch.cat([m.weight.detach() for m in linears])
    bias = None if linears[0].bias is None else torch.cat([m.bias.detach() for m in linears])
    for i, (m, part) in enumerate(zip(linears, weight.split(sizes))):
        m.weight.data = part
        if bias is not None:
            m.bias.data = bias.split(sizes)[i]
    return _Stack(weight, bias, sizes)


@contextlib.contextmanager
def _swapped(swaps: list[tuple[torch.nn.Module, str, torch.nn.Module, torch.nn.Module]]) -> Iterator[None]:
    """For the block, each (owner, name, own, stand-in) has the stand-in as ``owner.name``; ``own`` after."""
    for owner, name, _, stand_in in swaps:
        setattr(owner, name, stand_in)
    try:
        yield
    finally:
        for owner, name, own, _ in swaps:
            setattr(owner, name, own)


class FusedProducts:
    """Each decoder layer's q/k/v projections and gate/up projections as one product each, for the
    compiled path's forwards (:meth:`installed`); a group is left as it is unless its members are plain
    ``nn.Linear`` layers over one input size (a quantised draft, for one, keeps its own layers). A group
    whose model has them fused already (stacked weights still in place) is not stacked again."""

    GROUPS = (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))

    def __init__(self, decoder: torch.nn.Module):
        self.swaps: list[tuple[torch.nn.Module, str, torch.nn.Module, torch.nn.Module]] = []
        self.stacks: list[_Stack] = []
        for layer in getattr(decoder, "layers", []):
            for owner_name, names in self.GROUPS:
                owner = getattr(layer, owner_name, None)
                linears = [getattr(owner, n, None) for n in names]
                if (owner is None or not all(type(m) is torch.nn.Linear for m in linears)
                        or len({(m.in_features, m.bias is None) for m in linears}) != 1  # one input, all biased or none
                        or any(hasattr(m, "_hf_hook") for m in linears)):
                    continue
                stack = _stacked_already(owner, linears) or _stack(linears)
                owner._lookahead_stack = stack
                self.stacks.append(stack)
                self.swaps += [(owner, n, m, _Part(stack, i)) for i, (n, m) in enumerate(zip(names, linears))]

    def check(self) -> None:
        """ConfigError when the model's weights were replaced since the stacks were made (cast, moved,
        quantised): the stacks, and any forward recorded over them, are stale. One layer is looked at."""
        if self.swaps:
            owner, name, own, part = self.swaps[0]
            require(getattr(owner, name) is own and own.weight.data_ptr() == part.stack.weight.data_ptr(),
                    "this model's weights changed since its "
                    "fast path was made (cast, moved or quantised): call use_fast_path again", ConfigError)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """For the block, every fused group's layers are its :class:`_Part` s; the model's own come back after.
        A model whose weights were replaced since (cast, moved, quantised) is refused (:meth:`check`)."""
        self.check()
        for stack in self.stacks:
            stack.pending = {}
        with _swapped(self.swaps):
            yield


# Norms written as transformers' Llama one: weight * (x / rms(x) in float32, cast back). Gemma's (1 + weight)
# and others differ, and stay as they are.
RMS_NORMS = frozenset({"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen2MoeRMSNorm",
                       "Qwen3MoeRMSNorm"})


class _FusedNorm(torch.nn.Module):
    """One RMS norm as ``F.rms_norm`` over the norm's own weight and epsilon (one kernel on a GPU). The
    model's code casts the normalised input back before scaling it; here the scale comes first and the
    cast once: within a rounding of the model's in bf16, the same in float32. An input of another dtype
    than the weight goes to the model's own norm (the fused kernel takes one dtype)."""

    def __init__(self, norm: torch.nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.norm.weight
        if x.dtype != weight.dtype:
            return self.norm(x)
        return F.rms_norm(x, weight.shape, weight, self.norm.variance_epsilon)


class FusedNorms:
    """Every RMS norm of the decoder (:data:`RMS_NORMS`) as a :class:`_FusedNorm`, for the compiled path's
    forwards (:meth:`installed`): before each layer's attention and MLP, the last one, and a Qwen3 layer's
    query and key norms."""

    def __init__(self, decoder: torch.nn.Module):
        self.swaps: list[tuple[torch.nn.Module, str, torch.nn.Module, _FusedNorm]] = []
        for owner in decoder.modules():
            for name, child in owner.named_children():
                if type(child).__name__ in RMS_NORMS and hasattr(child, "variance_epsilon"):
                    self.swaps.append((owner, name, child, _FusedNorm(child)))

    def installed(self) -> contextlib.AbstractContextManager:
        """For the block, every norm is its :class:`_FusedNorm`; the model's own come back after."""
        return _swapped(self.swaps)


__all__ = ["FusedNorms", "FusedProducts", "RMS_NORMS"]
