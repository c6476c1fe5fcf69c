"""Where and how a model runs: the device, the weight dtype and the attention implementation.

Each ``resolve_*`` turns a user's choice (or None / "auto") into what transformers is asked for,
and raises ConfigError for a choice this machine cannot honour, naming what it has.
"""

from __future__ import annotations

import importlib.util
import re

import torch

from . import hardware
from ..errors import require

_DEVICE_RE = re.compile(r"^(cpu|cuda|mps)(?::(\d+))?$")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """The device to load on: None -> ``cuda`` when available, else ``cpu``.

    Accepts ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"`` or a torch.device; raises ConfigError for
    a device this machine does not have (naming what it has) or a string that is no device.
    """
    if device is None:
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    text = str(device).strip().lower()
    match = _DEVICE_RE.match(text)
    require(match is not None, "device must be 'cpu', 'cuda', 'cuda:N' or 'mps' (or None for the best available), "
                               f"got {device!r}; this machine has {_available_devices()}")
    kind, index = match.group(1), match.group(2)
    if kind == "cuda":
        require(torch.cuda.is_available(), f"device {text!r} asked for, but CUDA is not available here "
                                           f"(this machine has {_available_devices()})")
        count = torch.cuda.device_count()
        require(index is None or int(index) < count, f"device {text!r} asked for, but there "
                f"{'is' if count == 1 else 'are'} only {count} CUDA device{'' if count == 1 else 's'} "
                f"(cuda:0..cuda:{count - 1})")
    elif kind == "mps":
        require(_mps_available(), f"device {text!r} asked for, but MPS (Apple GPU) is not available here "
                                  f"(this machine has {_available_devices()})")
        require(index in (None, "0"), f"device {text!r}: there is only one MPS device, 'mps'")
    else:
        require(index in (None, "0"), f"device {text!r}: use 'cpu' (the CPU has no index)")
    return torch.device(text)


def _mps_available() -> bool:
    return torch.backends.mps.is_available()


def _available_devices() -> str:
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        found.append("mps")
    return ", ".join(found)


_DTYPE_NAMES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 matmul instructions (x86 AVX512-BF16 or AMX-BF16).

    Read from the CPU's flags (:mod:`lookahead_reasoning.models.hardware`), else from torch's CPU
    capability string (``AMX``). Without them torch emulates bf16 matmuls, which is slower than float32.
    """
    flags = hardware.cpu_flags()
    if flags is not None:
        return bool(flags & {"avx512_bf16", "amx_bf16"})
    return "AMX" in _cpu_capability()


def cpu_supports_int8_dot() -> bool:
    """True when the CPU has int8 dot-product instructions (x86 AVX512-VNNI, AVX-VNNI or AMX-INT8).

    ``torch._int_mm`` (the ``"w8a8"`` precision's product) is fast only with them: without them it is
    either inexact (oneDNN capped at AVX2 sums pairs of products in saturating int16) or exact but
    several times slower than float32. Read from the CPU's flags
    (:func:`lookahead_reasoning.models.hardware.has_int8_dot`), else from torch's CPU capability
    string (``AVX512`` or ``AMX``).
    """
    known = hardware.has_int8_dot(hardware.cpu_flags())
    if known is not None:
        return known
    capability = _cpu_capability()
    return "AMX" in capability or "AVX512" in capability


def _cpu_capability() -> str:
    """torch's name for the vector instructions its CPU kernels use ("AVX2", "AVX512", "AMX"...)."""
    return str(getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")()).upper()


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device | None = None) -> torch.dtype:
    """The weight dtype to load in.

    ``"auto"`` (or None): bfloat16 on a CUDA device that supports it, bfloat16 on a CPU with native
    bf16 instructions (:func:`cpu_supports_bf16`: 2-3x faster than float32 there), float32 otherwise
    (older GPUs, MPS, other CPUs). Also accepts ``"bf16"``/``"bfloat16"``, ``"fp16"``/``"float16"``,
    ``"fp32"``/``"float32"`` and those torch dtypes; anything else raises ConfigError.
    """
    if isinstance(dtype, torch.dtype):
        require(dtype in (torch.bfloat16, torch.float16, torch.float32),
                f"dtype must be a floating weight type (bfloat16, float16, float32), got {dtype}")
        return dtype
    if dtype is None or (isinstance(dtype, str) and dtype.strip().lower() == "auto"):
        dev = resolve_device(device) if not isinstance(device, torch.device) else device
        if dev.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        if dev.type == "cpu":
            return torch.bfloat16 if cpu_supports_bf16() else torch.float32
        return torch.float32
    key = dtype.strip().lower().removeprefix("torch.") if isinstance(dtype, str) else None
    require(key in _DTYPE_NAMES, f"dtype must be 'auto', 'bf16'/'bfloat16', 'fp16'/'float16', 'fp32'/'float32' or a "
                                 f"torch dtype, got {dtype!r}")
    return _DTYPE_NAMES[key]


def _has_package(module: str) -> bool:
    """Whether ``module`` is installed, found without importing it."""
    return importlib.util.find_spec(module) is not None


_ATTN_KNOWN = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def resolve_attn_implementation(requested: str | None, device: str | torch.device | None = None) -> str:
    """The attention implementation to ask transformers for.

    None/"auto": ``flash_attention_2`` on CUDA when the ``flash_attn`` package is installed, else
    ``sdpa``. An explicit ``flash_attention_2``/``_3`` where it cannot run (not CUDA, or the package
    missing) raises ConfigError rather than silently falling back, so a benchmark never runs with
    an attention it did not ask for. Other known names pass through, as do hub kernel ids
    (containing "/"); unknown names raise ConfigError.
    """
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if requested is None or requested.strip().lower() == "auto":
        return "flash_attention_2" if dev.type == "cuda" and _has_package("flash_attn") else "sdpa"
    name = requested.strip()
    if "/" in name:
        return name
    require(name in _ATTN_KNOWN, f"attn_implementation must be one of {', '.join(_ATTN_KNOWN)} or 'auto', "
                                 f"got {requested!r}")
    if name.startswith("flash_attention"):
        package = "flash_attn" if name == "flash_attention_2" else "flash_attn_interface"
        require(dev.type == "cuda", f"attn_implementation={name!r} needs a CUDA device, and the model is loaded on "
                                    f"{dev}; use 'sdpa' (or leave it unset to pick the best available)")
        require(_has_package(package), f"attn_implementation={name!r} needs the {package!r} package, which is not "
                                       f"installed (`pip install -e \".[gpu]\"`); use 'sdpa' or leave it unset")
    return name


def device_map_device(device_map: str | dict) -> torch.device:
    """The device that decides the dtype for a device_map load: the map itself if it names one
    device, else the first GPU if there is one, else the CPU."""
    names_one = isinstance(device_map, (str, torch.device)) and _DEVICE_RE.match(str(device_map).lower())
    return resolve_device(device_map if names_one else None)


__all__ = ["cpu_supports_bf16", "cpu_supports_int8_dot", "device_map_device", "resolve_attn_implementation",
           "resolve_device", "resolve_dtype"]
