"""Weight precision: store a loaded model's weights in fewer bytes, so each decoded token reads less.

    from lookahead_reasoning.models.precision import apply_precision, resolve_precision

    loaded = load_model("qwen2.5-coder-1.5b", dtype="bf16")      # bf16 is exact for the offline models
    info = apply_precision(loaded.model, resolve_precision("auto", "cpu"))
    print(info)   # int8: 3.55 GB -> 2.48 GB of weights, 197 linear layers converted, compute torch.float32, ...

Why. Decoding one token reads every weight once, so on a CPU the memory bus sets the pace: the
1.5B target reads 6.2 GB per token in float32 (its untied embedding is only looked up) and decodes
at ~2.7 tokens/s on a 2-core AVX2 machine. In int8 it reads 1.54 GB.

The precisions (:data:`PRECISIONS`):

* ``"float32"``: every weight float32. The reference; on the CPU ``kernels.apply_cpu_linear`` then
  routes the linears through oneDNN.
* ``"bf16"``: every weight bfloat16, activations bfloat16 too. Native on GPUs and on CPUs with
  AVX512-BF16/AMX; on other CPUs torch emulates it and it is *slower* than float32 (the matmuls,
  attention and norms all convert on the fly).
* ``"int8"``: weight-only int8. Every linear layer, the output layer (LM head) included, keeps
  its weight as int8 with one scale per output row (symmetric, absmax / 127); the embedding, norms
  and biases stay in the compute dtype. A linear rounds its input to bfloat16 and runs
  ``torch._weight_int8pack_mm`` (int8 x bf16 products, float accumulation, per-row scale), then
  casts back to the compute dtype. Everything between the linears (attention, RMSNorm, SiLU, the
  residual stream) runs in the compute dtype: float32 on CPUs without native bf16 (emulated bf16
  attention and norms cost more than they save there), bfloat16 where bf16 is native.
* ``"w8a8"``: int8 weights as in ``"int8"``, and each linear's input quantised to int8 too, with
  one scale per row (per token: absmax / 127), so the product is an exact int8 x int8 -> int32
  matrix product (``torch._int_mm``, oneDNN's VNNI kernels on x86), scaled back by the row's and the
  output column's scales. Where the weight-only kernel's time grows with the rows it multiplies
  (on a 2-core avx512 EPYC, one thread, 24 different 8960 x 1536 weights in turn so that none stays
  in cache: 1.7 ms per layer for 1 row, 10.5 ms for 13), this one's barely does (1.2 ms, 3.0 ms),
  which is what the many-token forwards of speculation need. That speed needs int8 dot-product
  instructions (AVX512-VNNI, AVX-VNNI or AMX, read from the CPU's flags by
  :mod:`lookahead_reasoning.models.hardware`); ``"auto"`` picks it only where they exist. Without
  them the product can be inexact (oneDNN capped at AVX2 saturates int16 pair sums;
  :func:`w8a8_kernel_available` checks, and ``"w8a8"`` is then refused) or exact but slow (on a
  real AVX2-only EPYC plain decoding ran at 0.74 tok/s against 2.97 in float32 and 4.67 in
  ``"int8"``): ``"w8a8"`` then runs, after a one-line warning that names ``"int8"``. Rounding the
  activations moves the logits a little more than ``"int8"`` does (argmax agreement with the bf16
  model over four teacher-forced GSM8K solutions: 97.0% against 98.3%).
* ``"int8-dynamic"``: torch's dynamic int8 linears (``kernels.quantize_draft_int8``). The
  activations are quantised with one scale for the whole batch, so a row's logits depend on the
  other rows: allowed for a draft only (``role="draft"``), refused for a target.

Batch invariance. A target scores several branch rows and padded rows in one forward, and the
lossless guarantees (greedy SD == greedy AR, LR with the exact verifier == AR) need a row's logits
not to depend on its neighbours. Weight-only int8 does not quantise activations, and the bf16
rounding of a linear's input is per element, so each row sees the same arithmetic alone or in a
batch; what differs is only the summation order inside the kernels, as in float32. ``"w8a8"``
quantises activations, but per row: a row's scale comes from that row alone and the int32
accumulation is exact, so it stays batch invariant (the per-batch scale of ``"int8-dynamic"`` is
what breaks it).

What ``"auto"`` picks, :func:`resolve_precision` says (on a 2-core AVX2 EPYC one 8960 x 1536 ``"int8"``
linear takes 1.1-2.2 ms for one row against 2.9-3.8 ms in float32 with oneDNN; no int8 kernel is wired
for GPUs).

What the user gives up with int8: the logits move by the int8 rounding of the weights (about 0.4%
of each row's largest weight) and the bf16 rounding of each linear's input, so the greedy text can
differ from the float32 model's after some tokens; accuracy on GSM8K stays within the noise of a
few problems (benchmarks/README.md has the measured table). Speculative decoding stays lossless with
respect to the quantised target. The model is for inference: the LM head is no longer tied to
the embedding, and the int8 layers are not meant to be saved with ``save_pretrained``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from . import hardware
from ..errors import require
from .int8_layers import (INT8_KERNEL, W8A8_KERNEL, Int8PerTokenLinear, Int8WeightOnlyLinear, int8_kernel_available,
                          quantize_linears_int8, w8a8_kernel_available)
from .kernels import quantize_draft_int8, restore_linear
from .placement import cpu_supports_bf16, cpu_supports_int8_dot, resolve_device

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "float32", "bf16", "int8", "w8a8", "int8-dynamic")
ROLES = ("target", "draft")
_ALIASES = {"fp32": "float32", "float": "float32", "bfloat16": "bf16", "int8-weight-only": "int8",
            "int8_dynamic": "int8-dynamic", "dynamic-int8": "int8-dynamic",
            "int8-w8a8": "w8a8", "int8-per-token": "w8a8"}


@dataclass(frozen=True)
class PrecisionInfo:
    """What :func:`apply_precision` did to a model.

    ``weight_bytes_before``/``after`` count every parameter and buffer once (tied tensors once).
    ``compute_dtype`` is the dtype of the activations between the linear layers.
    """

    precision: str
    linears_converted: int
    weight_bytes_before: int
    weight_bytes_after: int
    compute_dtype: torch.dtype
    kernel: str

    def __str__(self) -> str:
        return (f"{self.precision}: {self.weight_bytes_before / 1e9:.2f} GB -> {self.weight_bytes_after / 1e9:.2f} GB "
                f"of weights, {self.linears_converted} linear layers converted, compute {self.compute_dtype}, "
                f"kernel {self.kernel}")


# ------------------------------------------------------------------------------------ resolution

def precision_warning(precision: str | None, device: str | torch.device | None = "cpu") -> str | None:
    """One line for the user when ``precision`` runs here but is not the fast choice it is elsewhere,
    else None. Today: ``"w8a8"`` on a CPU whose flags show no int8 dot-product instruction (VNNI or
    AMX), where ``torch._int_mm`` may be exact but runs a slow path."""
    if normalize_precision(precision) != "w8a8":
        return None
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if dev.type != "cpu" or hardware.has_int8_dot(hardware.cpu_flags()) is not False:
        return None
    return ("precision 'w8a8' on a CPU without int8 dot-product instructions (no AVX512-VNNI, AVX-VNNI or AMX "
            "in its flags): its int8 x int8 product runs a slow path there (plain decoding measured 4x slower "
            "than float32 on an AVX2-only CPU); --precision int8 or auto (which picks int8 here) is faster")


_WARNED: set[str] = set()  # the warnings logged so far: each once per process


def normalize_precision(precision: str | None) -> str:
    """The canonical name of ``precision`` (case-insensitive, aliases such as "fp32"); None means "auto".

    Raises ConfigError for a name that is no precision.
    """
    if precision is None:
        return "auto"
    require(isinstance(precision, str), f"precision must be a string, one of {', '.join(PRECISIONS)}; "
                                        f"got {precision!r}")
    key = precision.strip().lower()
    key = _ALIASES.get(key, key)
    require(key in PRECISIONS, f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    return key


def resolve_precision(precision: str | None, device: str | torch.device | None = "cpu") -> str:
    """The concrete precision for ``device`` (never "auto").

    ``"auto"``: on a CPU with int8 dot-product instructions (VNNI/AMX, :func:`cpu_supports_int8_dot`)
    ``"w8a8"`` when its kernel runs (the fastest precision measured there: plain decoding 2.3x bf16,
    and its time barely grows with the rows speculation verifies); on other CPUs ``"int8"`` when the
    int8 kernel runs (it reads a quarter of float32's bytes per token, and its kernel is faster than
    float32's for 1-5 rows); else bf16 on CPUs with native bf16 and float32 on others; on CUDA
    ``"bf16"`` when the GPU supports it, else ``"float32"``; on MPS ``"float32"``. An explicit name is
    checked against the device: ``"int8"`` and ``"int8-dynamic"`` are CPU-only (their kernels are
    torch's CPU ops), and raise ConfigError elsewhere or when this torch build lacks the op;
    ``"w8a8"`` is refused where its product is inexact and logs :func:`precision_warning` (once per
    process) where it is exact but slow.
    """
    name = normalize_precision(precision)
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if name == "auto":
        if dev.type == "cpu":
            if cpu_supports_int8_dot() and w8a8_kernel_available():
                return "w8a8"
            return "int8" if int8_kernel_available() else ("bf16" if cpu_supports_bf16() else "float32")
        if dev.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "float32"
        return "float32"
    if name in ("int8", "w8a8", "int8-dynamic"):
        require(dev.type == "cpu", f"precision {name!r} runs on the CPU only (its kernel is a CPU op); the model "
                                   f"is on {dev}: use 'bf16' or 'float32' there")
    if name == "int8":
        require(int8_kernel_available(), f"precision 'int8' needs {INT8_KERNEL}, which this torch build "
                                         f"({torch.__version__}) does not have or cannot run; use 'float32'")
    if name == "w8a8":
        require(w8a8_kernel_available(), f"precision 'w8a8' needs an exact {W8A8_KERNEL} on the CPU, which this torch "
                                         f"build ({torch.__version__}) does not have, cannot run, or runs inexactly "
                                         "on this CPU (without int8 dot-product instructions, VNNI/AMX, oneDNN's "
                                         "int8 product saturates); use 'int8'")
        warning = precision_warning(name, dev)
        if warning is not None and warning not in _WARNED:
            _WARNED.add(warning)
            log.warning(warning)
    return name


# -------------------------------------------------------------------------------------- applying

def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes held by the model's parameters and buffers, each storage counted once (tied weights once)."""
    storages = [t.untyped_storage() for t in [*model.parameters(), *model.buffers()]]
    return sum({s.data_ptr(): s.nbytes() for s in storages}.values())


def apply_precision(model: torch.nn.Module, precision: str | None = "auto", *, role: str = "target") -> PrecisionInfo:
    """Set the weight precision of a loaded model, in place.

    Args:
        model: a causal LM (transformers ``PreTrainedModel``) in eval mode, any float dtype.
        precision: a name of :data:`PRECISIONS` ("auto" resolves with :func:`resolve_precision`
            for the model's device).
        role: ``"target"`` or ``"draft"``; ``"int8-dynamic"`` is refused for a target (not batch
            invariant).

    Raises ConfigError for an unknown name or role, a precision the model's device cannot run, or
    ``"int8-dynamic"`` for a target. A refusal leaves the model untouched.
    """
    require(role in ROLES, f"role must be one of {', '.join(ROLES)}, got {role!r}")
    param = next(model.parameters(), None)
    require(param is not None, "the model has no parameters: nothing to set a precision for")
    name = resolve_precision(precision, param.device)
    require(not (name == "int8-dynamic" and role == "target"),
            "precision 'int8-dynamic' quantises activations with one scale per batch, so a row's logits depend "
            "on the other rows; a target must be batch invariant: use 'int8' (weight-only) for a target, "
            "'int8-dynamic' for a draft only")
    before = weight_bytes(model)
    converted, kernel = _apply(model, name)
    param = next(model.parameters())
    return PrecisionInfo(name, converted, before, weight_bytes(model), param.dtype, kernel)


def _apply(model: torch.nn.Module, name: str) -> tuple[int, str]:
    """Store ``model``'s weights in the concrete precision ``name``, in place: (linears converted, the kernel)."""
    if name == "float32":
        model.float()
        return 0, "torch.nn.functional.linear (oneDNN with cpu_linear)"
    if name == "int8-dynamic":
        return quantize_draft_int8(model), "torch.ao dynamic int8 linear (per-batch activation scale)"
    restore_linear(model)  # the oneDNN wrapper only serves float32
    if name == "bf16":
        model.to(torch.bfloat16)
        return 0, "torch.nn.functional.linear (bf16)"
    count = quantize_linears_int8(model, layer=Int8WeightOnlyLinear if name == "int8" else Int8PerTokenLinear)
    # The embedding, norms and biases (int8 buffers keep their dtype): float32 between the int8 linears unless
    # the CPU has native bf16 (emulated bf16 costs more than it saves).
    model.to(torch.bfloat16 if cpu_supports_bf16() else torch.float32)
    return count, INT8_KERNEL if name == "int8" else W8A8_KERNEL


DRAFT_PRECISIONS = (None, "none", "auto", "int8-dynamic")  # what precision={"draft": ...} may name


def split_precision(precision: Any) -> tuple[str | None, str | None]:
    """(the target's precision, the draft's) from ``precision``: a name (the target's; the draft's is
    "auto") or a {"target", "draft"} mapping."""
    if isinstance(precision, dict):
        unknown = sorted(set(precision) - {"target", "draft"})
        require(not unknown, f"precision keys must be 'target' and 'draft', got {', '.join(map(str, unknown))}")
        target, draft = precision.get("target"), precision.get("draft", "auto")
    else:
        target, draft = precision, "auto"
    require(draft in DRAFT_PRECISIONS, f"the draft's precision must be None, 'auto' or 'int8-dynamic', got {draft!r}")
    normalize_precision(target)  # a bad name fails here (None is "auto")
    return target, None if draft == "none" else draft


__all__ = ["PRECISIONS", "PrecisionInfo", "apply_precision", "normalize_precision", "precision_warning",
           "resolve_precision", "split_precision", "weight_bytes"]
