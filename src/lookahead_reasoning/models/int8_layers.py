"""The int8 linear layers behind the ``"int8"`` and ``"w8a8"`` precisions, their slow references,
and the probes that say whether their kernels run (and run exactly) on this machine.

:mod:`lookahead_reasoning.models.precision` chooses a precision and applies it; this module holds what it
applies: :class:`Int8WeightOnlyLinear` (int8 weights, bf16-rounded activations,
``torch._weight_int8pack_mm``) and :class:`Int8PerTokenLinear` (int8 weights and per-row int8
activations, an exact int8 x int8 -> int32 product, ``torch._int_mm``), and
:func:`quantize_linears_int8`, which swaps a model's ``nn.Linear`` layers for one of them.

Why not torchao. torchao 0.18 installs next to torch 2.13 (``pip install --no-deps torchao==0.18.0``)
and its ``Int8WeightOnlyConfig`` quantises correctly, but in eager mode its linear casts the whole
int8 weight to the activation dtype on every call and then runs a dense matmul: more bytes moved
than float32, several times slower (benchmarks/precision_kernels.py times it when torchao is
installed). Its fast path needs
``torch.compile`` to fuse the cast into ``_weight_int8pack_mm``; that needs a C++ compiler at run
time and recompiles for each new (rows, new tokens per row, cache length) pattern a decoding loop
makes. Its CPU int4 path calls ``torch._weight_int4pack_mm_for_cpu``, which is slower than float32 on AVX2.
So ``"int8"`` here calls torch's own ``_weight_int8pack_mm`` from a small module
(:class:`Int8WeightOnlyLinear`), with no extra dependency.
"""

from __future__ import annotations

import functools

import torch

from ..errors import require

INT8_KERNEL = "torch._weight_int8pack_mm"
W8A8_KERNEL = "torch._int_mm"


# --------------------------------------------------------------------------------- the int8 layer

def quantize_rows_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 quantisation: ``weight ~= q * scale[:, None]``.

    Args:
        weight: (N, K) floating.

    Returns:
        (q, scale): q (N, K) int8 in [-127, 127]; scale (N,) bfloat16, the dtype the kernel takes.
        The scale is rounded to bf16 *before* q is computed, so q * scale reconstructs the weight
        with the bf16 scale the kernel will really use (only q's rounding is lost).
    """
    w = weight.detach().float()
    amax = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny)
    scale = (amax / 127.0).to(torch.bfloat16)
    q = torch.round(w / scale.float().unsqueeze(1)).clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8WeightOnlyLinear(torch.nn.Module):
    """``y = linear(x)`` with an int8 weight (one scale per output row) and unquantised activations.

    ``forward``: x (..., K) in any float dtype -> (..., N) in x's dtype. The input is rounded to
    bfloat16 (the kernel's activation type), multiplied with the int8 weight by
    ``torch._weight_int8pack_mm`` (float accumulation, scale per output row), cast back to x's dtype,
    then the bias (kept in float32) is added. Every row is computed from that row alone.

    ``weight`` is the (N, K) int8 tensor, so code that reads ``layer.weight.shape`` still works.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        require(weight.dim() == 2, f"Int8WeightOnlyLinear needs a 2-D weight, got shape {tuple(weight.shape)}")
        q, scale = quantize_rows_int8(weight)
        self.out_features, self.in_features = q.shape
        self.register_buffer("weight", q)
        self.register_buffer("scale", scale)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        scale = self.scale.to(torch.bfloat16)  # exact: a later model.to(dtype) may have cast the buffer
        y = torch._weight_int8pack_mm(rows, self.weight, scale)
        y = y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight, bias={self.bias is not None}"


def reference_int8_linear(layer: Int8WeightOnlyLinear, x: torch.Tensor) -> torch.Tensor:
    """The slow obvious version of ``layer(x)``: bf16-rounded input times the dequantised weight in float32.

    x (..., K) -> (..., N) float32.
    """
    y = x.to(torch.bfloat16).float() @ (layer.weight.float() * layer.scale.float().unsqueeze(1)).T
    return y if layer.bias is None else y + layer.bias


class Int8PerTokenLinear(Int8WeightOnlyLinear):
    """``y = linear(x)`` with an int8 weight and int8 activations, each row of x with its own scale.

    ``forward``: x (..., K) in any float dtype -> (..., N) in x's dtype. Per row r of x:
    ``s_r = max|x_r| / 127``, ``q_r = round(x_r / s_r)`` in int8; then ``acc = q @ W_int8^T``
    (int32, exact: |acc| <= 127 * 127 * K, far from overflow for any model's K), and
    ``y[r, n] = acc[r, n] * s_r * scale[n]`` in float32, cast to x's dtype, plus the bias. No row
    sees another row's numbers, and integer sums do not depend on their order.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()
        q, row_scale = quantize_activations_int8(rows)
        acc = torch._int_mm(q, self.weight.t())
        y = acc.float() * row_scale * self.scale.float()
        y = y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr().replace("int8 weight", "int8 weight, int8 activations per row")


def quantize_activations_int8(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 quantisation of activations: ``rows ~= q * scale``.

    rows (M, K) float32 -> (q (M, K) int8 in [-127, 127], scale (M, 1) float32). An all-zero row
    gets a tiny scale and quantises to zeros.
    """
    scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny) / 127.0
    return torch.round(rows / scale).clamp(-127, 127).to(torch.int8), scale


def reference_w8a8_linear(layer: Int8PerTokenLinear, x: torch.Tensor) -> torch.Tensor:
    """The slow obvious version of ``layer(x)`` (float64): quantised rows times the dequantised weight.

    x (..., K) -> (..., N) float32.
    """
    rows = x.reshape(-1, layer.in_features).float()
    q, row_scale = quantize_activations_int8(rows)
    y = (q.double() * row_scale.double()) @ (layer.weight.double() * layer.scale.double().unsqueeze(1)).T
    y = y.float().reshape(*x.shape[:-1], layer.out_features)
    return y if layer.bias is None else y + layer.bias


@functools.cache
def w8a8_kernel_available() -> bool:
    """True when ``torch._int_mm`` runs here on the CPU and multiplies int8 products exactly.

    Checked on random values and on the extremes (rows of +-127), laid out as the layer lays them
    out (the weight transposed). Exactness is not a given: on a CPU without int8 dot-product
    instructions oneDNN's AVX2 path sums pairs of products in saturating int16 (with oneDNN capped
    at AVX2 on an EPYC, a random 3 x 40 x 24 product came out up to 25114 off), and then this is False.
    """
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randint(-127, 128, (4, 64), generator=gen, dtype=torch.int8)
        b = torch.randint(-127, 128, (24, 64), generator=gen, dtype=torch.int8)
        a[0], a[1], b[0], b[1] = 127, -127, 127, -127
        return bool(torch.equal(torch._int_mm(a, b.t()), a.int() @ b.int().t()))
    except (RuntimeError, NotImplementedError):
        return False


@functools.cache
def int8_kernel_available() -> bool:
    """True when ``torch._weight_int8pack_mm`` computes a small product correctly here (CPU)."""
    try:
        gen = torch.Generator().manual_seed(0)
        layer = Int8WeightOnlyLinear(torch.randn(24, 64, generator=gen))
        x = torch.randn(3, 64, generator=gen)
        with torch.no_grad():
            return bool(torch.allclose(layer(x), reference_int8_linear(layer, x), rtol=2e-2, atol=2e-2))
    except (RuntimeError, NotImplementedError):
        return False


# ------------------------------------------------------------------------- swapping the layers in

def quantize_linears_int8(model: torch.nn.Module, *, include_output_layer: bool = True,
                          layer: type[Int8WeightOnlyLinear] = Int8WeightOnlyLinear) -> int:
    """Replace the ``nn.Linear`` layers of ``model`` by ``layer`` (:class:`Int8WeightOnlyLinear`, or
    :class:`Int8PerTokenLinear`), in place.

    The output layer (LM head) too unless ``include_output_layer`` is False; a head tied to the
    embedding is untied first (the embedding keeps its float weight). Other parameters keep their
    dtype: :func:`~.precision.apply_precision` then casts them to the compute dtype. Returns how many layers
    were replaced.
    """
    head = getattr(model, "get_output_embeddings", lambda: None)()
    if include_output_layer:
        emb = getattr(model, "get_input_embeddings", lambda: None)()
        if isinstance(head, torch.nn.Linear) and head.weight is getattr(emb, "weight", None):
            head.weight = torch.nn.Parameter(emb.weight.detach(), requires_grad=False)  # same storage, own Parameter
        if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
            model.config.tie_word_embeddings = False  # so no later tie_weights() points the head back at the embedding
    targets = [(parent, child_name, child)
               for parent in model.modules()
               for child_name, child in parent.named_children()
               if isinstance(child, torch.nn.Linear) and (include_output_layer or child is not head)]
    for parent, child_name, child in targets:
        setattr(parent, child_name, layer(child.weight, child.bias))
    return len(targets)


__all__ = ["INT8_KERNEL", "Int8PerTokenLinear", "Int8WeightOnlyLinear", "W8A8_KERNEL", "int8_kernel_available",
           "quantize_activations_int8", "quantize_linears_int8", "quantize_rows_int8", "reference_int8_linear",
           "reference_w8a8_linear", "w8a8_kernel_available"]
