"""CPU matmul kernel choice for float32 models: oneDNN's linear instead of the default BLAS call.

Why this exists. Speculative decoding only pays if scoring gamma + 1 tokens in one target forward
costs about as much as scoring one. On a GPU that holds. On a CPU it depends on the BLAS: torch's
default float32 ``nn.Linear`` goes to MKL, and on AVX2-only CPUs (AMD EPYC machines in particular)
MKL's small-row GEMM is slow. Measured on this project's 2-core AVX2 machine, 1.5B model, float32:

    tokens in one forward      1        5        9       16
    default (MKL)           384 ms  1029 ms  1185 ms  1131 ms
    oneDNN linear           286 ms   476 ms   525 ms   713 ms

so with MKL a 5-token verification pass costs 2.7 single-token forwards and token-level SD cannot
win; with oneDNN it costs 1.7. The fix is local: every ``nn.Linear`` of the model runs
``torch.ops.mkldnn._linear_pointwise`` (the op torch's own CPU inference passes use) on the same
weight tensor (no copy, tied weights stay tied). Outputs agree with the default path to float32
rounding (about 1e-4 on logits); the equivalence test compares the two.

``use_onednn_linear(model)`` switches a model over, ``restore_linear(model)`` switches it back.
``load_model(..., cpu_linear="auto")`` does it for float32 models on the CPU when the op works.

A cheaper draft. The draft's share of an SD iteration is gamma * c target forwards, so a draft that
costs less raises the speedup directly, and it cannot cost quality: the target checks every drafted
token, so the output is the target's whatever the draft is. ``quantize_draft_int8(model)`` turns
a CPU draft's linear layers into torch's dynamic int8 linears (weights stored in int8, a quarter of
float32's bytes and half of bfloat16's to read per token). Only drafts: the target stays as loaded,
so AR and SD produce the same text and the comparison stays fair.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ..errors import require

_MARK = "_lookahead_onednn"
CPU_LINEAR_CHOICES = ("auto", "onednn", "default")


def onednn_linear_available() -> bool:
    """True when this torch build has oneDNN's linear op and it runs a float32 product correctly."""
    op = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if op is None or not torch.backends.mkldnn.is_available():
        return False
    try:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(3, 8, generator=gen)
        w = torch.randn(5, 8, generator=gen)
        b = torch.randn(5, generator=gen)
        out = torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
        return bool(torch.allclose(out, torch.nn.functional.linear(x, w, b), atol=1e-5))
    except (RuntimeError, NotImplementedError):
        return False


def _onednn_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """nn.Linear.forward through oneDNN; anything it does not cover goes the default way."""
    w = self.weight
    if (x.device.type == "cpu" and x.dtype == torch.float32 and w.dtype == torch.float32
            and not torch.is_grad_enabled() and x.dim() >= 2):
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), w, self.bias, "none", [], "")
    return torch.nn.functional.linear(x, w, self.bias)


def use_onednn_linear(model: torch.nn.Module) -> int:
    """Make every float32 CPU ``nn.Linear`` in ``model`` use oneDNN. Returns how many were switched.

    Idempotent. Raises ConfigError when this torch build cannot run the op.
    """
    require(onednn_linear_available(), "cpu_linear='onednn' needs torch's oneDNN linear op, which this torch build "
                                       "does not have or cannot run; use cpu_linear='default'")
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and not getattr(module, _MARK, False):
            module.forward = types.MethodType(_onednn_forward, module)
            setattr(module, _MARK, True)
            count += 1
    return count


def restore_linear(model: torch.nn.Module) -> int:
    """Undo :func:`use_onednn_linear`. Returns how many layers were switched back."""
    count = 0
    for module in model.modules():
        if getattr(module, _MARK, False):
            del module.forward
            delattr(module, _MARK)
            count += 1
    return count


def uses_onednn_linear(model: torch.nn.Module) -> bool:
    return any(getattr(m, _MARK, False) for m in model.modules())


def apply_cpu_linear(model: Any, choice: str | None) -> bool:
    """Apply a ``cpu_linear`` choice to a loaded model; returns whether oneDNN is now in use.

    ``"auto"``: oneDNN when the model's weights are float32 on the CPU and the op works here.
    ``"onednn"``: oneDNN (the model must be float32 on the CPU). ``"default"``: leave torch's path.
    """
    choice = "auto" if choice is None else str(choice).strip().lower()
    require(choice in CPU_LINEAR_CHOICES, f"cpu_linear must be one of {', '.join(CPU_LINEAR_CHOICES)}, got {choice!r}")
    if choice == "default":
        return False
    param = next(model.parameters(), None)
    fits = param is not None and param.device.type == "cpu" and param.dtype == torch.float32
    if choice == "onednn":
        require(fits, "cpu_linear='onednn' is for float32 models on the CPU; this model is "
                      f"{getattr(param, 'dtype', 'empty')} on {getattr(param, 'device', '-')}")
    elif not (fits and onednn_linear_available()):
        return False
    use_onednn_linear(model)
    return True


def quantize_draft_int8(model: torch.nn.Module) -> int:
    """Replace every ``nn.Linear`` of a CPU model by a dynamic int8 linear, in place.

    A bfloat16 or float16 model is first cast to float32 (exact), since torch's dynamic int8
    linears take float32 activations. Returns how many layers were replaced. Raises ConfigError for
    a model that is not on the CPU or a torch build without a quantized engine. Tied weights (an
    embedding shared with the output layer) are untied: the embedding stays float32, the output
    layer gets its int8 copy. On this project's avx512 machine a 0.5B draft token costs 20 ms in
    int8 against 55 ms in bf16.
    """
    param = next(model.parameters(), None)
    floats = (torch.float32, torch.bfloat16, torch.float16)
    require(param is not None and param.device.type == "cpu" and param.dtype in floats,
            "int8 draft quantization is for floating-point models on the CPU; this draft is "
            f"{getattr(param, 'dtype', None)} on {getattr(param, 'device', None)}")
    engines = torch.backends.quantized.supported_engines
    require(any(e in engines for e in ("x86", "fbgemm", "qnnpack", "onednn")),
            f"this torch build has no quantized CPU engine (engines: {engines})")
    if param.dtype != torch.float32:  # only once nothing can refuse any more: a refusal leaves the model as it was
        model.float()
    import warnings

    from torch.ao.quantization import quantize_dynamic

    restore_linear(model)  # the oneDNN wrapper would be dropped with the module anyway
    before = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization deprecation notices
        quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    return before - sum(isinstance(m, torch.nn.Linear) for m in model.modules())


__all__ = ["CPU_LINEAR_CHOICES", "quantize_draft_int8", "apply_cpu_linear", "onednn_linear_available", "restore_linear",
           "use_onednn_linear", "uses_onednn_linear"]
