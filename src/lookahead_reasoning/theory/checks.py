"""Input checks of the theory modules: each raises ConfigError naming the symbol and the bad value
(the first bad entry of an array)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from ..errors import ConfigError, require

Mode = Literal["sync", "async"]
ArrayLike = float | int | np.ndarray


def _shown(value: ArrayLike, bad: np.ndarray | None = None) -> str:
    """The offending value for an error message (the first bad entry of an array)."""
    if bad is not None and np.ndim(value) > 0:
        return f"{np.asarray(value)[bad].ravel()[0].item()!r} (in an array)"
    return repr(value)


def check_rate(value: ArrayLike, name: str) -> np.ndarray:
    """An acceptance rate: finite and in [0, 1). (At 1 every geometric series diverges.)"""
    v = np.asarray(value, dtype=float)
    bad = ~((v >= 0) & (v < 1))  # NaN fails both comparisons
    if bad.any():
        raise ConfigError(f"{name} must lie in [0, 1) (an acceptance probability; at 1 the speedup has no finite "
                          f"limit); got {_shown(value, bad)}")
    return v


def check_cost(value: ArrayLike, name: str, upper: float | None = None) -> np.ndarray:
    """A cost ratio: finite and >= 0 (and <= ``upper`` where the model needs it)."""
    v = np.asarray(value, dtype=float)
    bad = ~((v >= 0) & np.isfinite(v))
    if bad.any():
        raise ConfigError(f"{name} must be a finite number >= 0 (a draft/target cost ratio); got {_shown(value, bad)}")
    if upper is not None and (v > upper).any():
        raise ConfigError(f"{name} must be <= {upper:g} here (a draft step no slower than a target step); "
                          f"got {_shown(value, v > upper)}")
    return v


def check_batch_cost(value: ArrayLike) -> np.ndarray:
    """A batched/one-row target step time ratio: finite and > 0."""
    v = np.asarray(value, dtype=float)
    bad = ~((v > 0) & np.isfinite(v))
    if bad.any():
        raise ConfigError(f"beta (batched/one-row target step time) must be a finite number > 0, got "
                          f"{_shown(value, bad)}")
    return v


def check_count(value: ArrayLike, name: str, minimum: int = 1) -> np.ndarray:
    """A whole number (int or integer array) >= ``minimum``."""
    v = np.asarray(value)
    if isinstance(value, (bool, np.bool_)) or v.dtype.kind not in "iu":
        raise ConfigError(f"{name} must be an integer >= {minimum}; got {_shown(value)}")
    if (v < minimum).any():
        raise ConfigError(f"{name} must be an integer >= {minimum}; got {_shown(value, v < minimum)}")
    return v.astype(np.int64)


def check_mode(mode: str) -> Mode:
    require(mode in ("sync", "async"), f"mode must be 'sync' or 'async'; got {mode!r}")
    return mode  # type: ignore[return-value]


__all__ = ["ArrayLike", "Mode", "check_batch_cost", "check_cost", "check_count", "check_mode", "check_rate"]
