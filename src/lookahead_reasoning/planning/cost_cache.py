"""Where measured cost tables live on disk, and what decides that a cached table still holds: the
model, its dtype, device and kernels (oneDNN linears, int8 layers), the CPU (model name and
instruction-set flags), the thread count and the torch version. A changed key means a new profile
(:func:`~.costs.profile`); a corrupt file is measured again with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

from ..models import hardware
from ..models.kernels import uses_onednn_linear
from ..models import cache_root
from ..runtime.lm import LM
from . import costs
from .costs import CostGrid

log = logging.getLogger(__name__)


def cost_key(lm: LM) -> dict[str, Any]:
    """Everything that changes how long ``lm``'s forward takes here (the cache key of its table)."""
    param = next(lm.model.parameters())
    kinds = sorted({type(m).__name__ for m in lm.model.modules() if "Linear" in type(m).__name__})
    return {
        "model": lm.name, "parameters": sum(p.numel() for p in lm.model.parameters()),
        "dtype": str(param.dtype), "device": str(param.device), "onednn": uses_onednn_linear(lm.model),
        "linear_kinds": kinds, "cpu": _cpu_identity(), "threads": torch.get_num_threads(),
        "torch": torch.__version__, **_instruction_caps(), **_fast_path(lm),
    }


def _fast_path(lm: LM) -> dict[str, Any]:
    """The compiled path's shapes, where it is on (absent when off, so the eager keys stay as they were)."""
    if lm.fast is None:
        return {}
    config = lm.fast.config
    return {"fast_path": f"{config.backend} rows {list(config.row_buckets)} tokens {list(config.token_buckets)} "
                         f"length {config.length}"}


_ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


def _instruction_caps() -> dict[str, str]:
    """The environment variables that restrict which instructions torch's, oneDNN's and MKL's kernels use,
    where set: the same CPU then has other costs (absent when unset, so ordinary keys stay as they were)."""
    return {name: os.environ[name] for name in _ISA_CAPS if os.environ.get(name)}


def _cpu_identity() -> str:
    """The CPU's model name and a digest of its instruction-set flags."""
    name, flags = platform.processor() or platform.machine(), " ".join(sorted(hardware.cpu_flags() or ()))
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    if name in ("", platform.machine(), platform.processor()):
                        name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} [{hashlib.sha256(flags.encode()).hexdigest()[:12]}]"


def cache_path(lm: LM, key: dict[str, Any], root: str | os.PathLike | None = None) -> Path:
    """Where ``lm``'s table lives: beside its converted weights for an offline model, else under costs/."""
    base = cache_root(root)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", lm.name).strip("_") or "model"
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    folder = base / safe / "costs" if (base / safe).is_dir() else base / "costs" / safe
    return folder / f"{digest}.json"


def load_or_profile(lm: LM, grid: dict[int, tuple[int, ...]], *, reprofile: bool = False, progress: bool = True,
                    label: str = "", root: str | os.PathLike | None = None) -> tuple[CostGrid, Path]:
    """``lm``'s cost grid from its cache file, or measured (and saved) when missing, stale or unreadable."""
    key = {**cost_key(lm), "grid": {str(r): list(ns) for r, ns in sorted(grid.items())}}
    path = cache_path(lm, key, root)
    if path.exists() and not reprofile:
        try:
            grid_ = CostGrid.from_json(json.loads(path.read_text(encoding="utf-8")))
            if grid_.key == json.loads(json.dumps(key)):
                return grid_, path
            log.warning("cost table %s was measured for another setup; measuring again", path)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # json errors are ValueErrors
            log.warning("cost table %s is unreadable (%s); measuring again", path, exc)
    measured = costs.profile(lm, grid, progress=progress, label=label)
    measured.key = key
    save(measured, path)
    return measured, path


def save(grid: CostGrid, path: Path) -> None:
    """Write a table atomically (a torn write never leaves a half file behind)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(grid.to_json(), indent=1), encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["cache_path", "cost_key", "load_or_profile", "save"]
