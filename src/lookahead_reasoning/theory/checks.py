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


def _ensure(ok: np.ndarray, value: ArrayLike, message: str) -> None:
    """ConfigError where ``ok`` fails: ``message`` and the first bad entry of ``value``."""
    if not ok.all():
        raise ConfigError(message + _shown(value, ~ok))


def check_rate(value: ArrayLike, name: str) -> np.ndarray:
    """An acceptance rate: finite and in [0, 1). (At 1 every geometric series diverges.)"""
    v = np.asarray(value, dtype=float)
    _ensure((v >= 0) & (v < 1), value, f"{name} must lie in [0, 1) (an acceptance probability; at 1 the speedup has "
            "no finite limit); got ")  # NaN fails both comparisons
    return v


def check_cost(value: ArrayLike, name: str, upper: float | None = None) -> np.ndarray:
    """A cost ratio: finite and >= 0 (and <= ``upper`` where the model needs it)."""
    v = np.asarray(value, dtype=float)
    _ensure((v >= 0) & np.isfinite(v), value, f"{name} must be a finite number >= 0 (a draft/target cost ratio); got ")
    if upper is not None:
        _ensure(v <= upper, value, f"{name} must be <= {upper:g} here (a draft step no slower than a target step); "
                "got ")
    return v


def check_batch_cost(value: ArrayLike) -> np.ndarray:
    """A batched/one-row target step time ratio: finite and > 0."""
    v = np.asarray(value, dtype=float)
    _ensure((v > 0) & np.isfinite(v), value, "beta (batched/one-row target step time) must be a finite number > 0, "
            "got ")
    return v


def check_count(value: ArrayLike, name: str, minimum: int = 1) -> np.ndarray:
    """A whole number (int or integer array) >= ``minimum``."""
    v = np.asarray(value)
    if isinstance(value, (bool, np.bool_)) or v.dtype.kind not in "iu":
        raise ConfigError(f"{name} must be an integer >= {minimum}; got {_shown(value)}")
    _ensure(v >= minimum, value, f"{name} must be an integer >= {minimum}; got ")
    return v.astype(np.int64)


def check_rates(alpha: ArrayLike, k: ArrayLike, c: ArrayLike, names: str, minimum: int = 1,
                upper: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A rate, a count >= ``minimum`` and a cost ratio (<= ``upper``), checked in that order; ``names``: their
    symbols, as ``"alpha1 k1 c1"``."""
    rate, count, cost = names.split()
    return check_rate(alpha, rate), check_count(k, count, minimum), check_cost(c, cost, upper)


def check_mode(mode: str) -> Mode:
    require(mode in ("sync", "async"), f"mode must be 'sync' or 'async'; got {mode!r}")
    return mode  # type: ignore[return-value]


__all__ = ["ArrayLike", "Mode", "check_batch_cost", "check_cost", "check_count", "check_mode", "check_rate",
           "check_rates"]
