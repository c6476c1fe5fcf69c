"""What the formulas predict for a run, from the rates and costs the run measured."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import require
from .costed import f_sync_costed
from .formulas import f_async, f_sync, sd_speedup

__all__ = ["Prediction", "judged_alpha", "predict"]


@dataclass(frozen=True)
class Prediction:
    """Predicted speedups over autoregressive decoding; None where an input they need is missing.

    ``sd``          token SD alone, ``S(alpha, gamma, c)``;
    ``lr_sync``     synchronous LR alone, ``f_sync(k1)``;
    ``lr_async``    asynchronous LR alone, ``f_async(k1)`` (None when ``c1 > 1``: that model needs a draft
                    step no slower than a target step);
    ``lr_sd``       synchronous LR with token SD inside the steps, ``f_sync(k1) * S(alpha, gamma, c)``
                    (the loop this library runs);
    ``lr_sd_async`` the same with the asynchronous step layer, ``f_async(k1) * S(alpha, gamma, c)``.
    ``k1`` is the step parallelism used (drafted steps per cycle + 1).
    """

    sd: float | None
    lr_sync: float | None
    lr_async: float | None
    lr_sd: float | None
    lr_sd_async: float | None
    k1: int | None


def _field(stats: Any, name: str) -> Any:
    """``stats[name]`` or ``stats.name``; None when absent, None or NaN."""
    value = stats.get(name) if isinstance(stats, Mapping) else getattr(stats, name, None)
    return None if isinstance(value, float) and math.isnan(value) else value


def judged_alpha(stats: Any) -> float | None:
    """The theory's alpha of a run's token-SD statistics (a summary mapping or an ``SDStats``): accepted /
    (accepted + rejected). A summary written before runs counted their rejections has none; its
    rejections are then taken as the iterations that did not accept all ``gamma`` drafts, which counts
    a draft that stopped early and was accepted whole as a rejection: a lower bound on alpha (exact
    where no draft stopped early). None where the counts are missing."""
    accepted, rejected = _field(stats, "accepted"), _field(stats, "rejected")
    if rejected is None:
        histogram, gamma = _field(stats, "accept_histogram"), _field(stats, "gamma")
        if not histogram or gamma is None:
            return None
        rejected = sum(histogram) - (histogram[gamma] if len(histogram) > gamma else 0)
    if accepted is None or accepted + rejected == 0:
        return None
    return accepted / (accepted + rejected)


def _token_fields(stats: Any) -> tuple[Any, Any, Any]:
    """(alpha, gamma, c) of ``stats``, each from its ``target_sd`` field where ``stats`` lacks it; alpha is
    ``alpha`` or, in a run's summary, ``alpha_judged`` (both accepted / judged)."""
    values = [_field(stats, name) for name in ("alpha", "gamma", "c")]
    if values[0] is None:
        values[0] = _field(stats, "alpha_judged")
    inner = _field(stats, "target_sd")  # where absent, every field read from it is None
    return tuple(v if v is not None else _field(inner, name) for v, name in zip(values, ("alpha", "gamma", "c")))


def predict(stats: Any, costs: Callable[[int, int], float] | None = None) -> Prediction:
    """Predicted speedups from measured statistics (a mapping or any object with attributes).

    Fields read (each optional; a missing, None or NaN field switches off what needs it):

    - ``alpha``  per-token acceptance rate of token SD, in [0, 1);
    - ``gamma``  drafted tokens per SD iteration (int >= 0);
    - ``c``      draft/target cost ratio of one forward pass (>= 0);
    - ``alpha1`` step acceptance rate, in [0, 1);
    - ``c1``     draft step time / target step time (one batched target step run), >= 0;
    - ``k``      drafted steps per LR cycle (int >= 0), as in ``CycleStats.k``; the step parallelism is then
                 ``k1 = k + 1`` (k drafted steps, k + 1 target rows). A ``k1`` field, if given, wins.

    Where ``alpha``, ``gamma`` or ``c`` is missing and the object has a ``target_sd`` field (as
    ``CycleStats`` does: token SD inside the target's steps), that field's ``alpha``/``gamma``/``c`` are
    used. So ``predict(lr_stats)``, ``predict(sd_stats)`` and ``predict({"alpha": .8, ...})`` all work.

    ``costs``: the target's measured forward time ``T(R, n)`` (a ``planning.CostGrid`` or any callable
    of rows and new tokens). Without it the step layer assumes free parallelism (``beta = 1``), which
    overstates ``lr_sync`` by beta on a machine where a batch of k1 rows costs more than one row; with
    it ``lr_sync`` uses ``beta = T(k1, 1) / T(1, 1)`` (rows decoding token by token) and ``lr_sd``
    ``beta = T(k1, gamma + 1) / T(1, gamma + 1)`` (rows checking gamma drafted tokens).

    The predictions carry every assumption of the formulas (i.i.d. acceptance, free parallelism unless
    ``costs`` says otherwise, free verification, fixed costs); the gap to a measured speedup is what
    those assumptions miss.
    Out-of-range values raise :class:`~lookahead_reasoning.errors.ConfigError` (for instance a measured
    acceptance rate of exactly 1, where the formulas have no finite geometric series).
    """
    alpha, gamma, c = _token_fields(stats)
    alpha1, c1 = _field(stats, "alpha1"), _field(stats, "c1")
    k1, k = _field(stats, "k1"), _field(stats, "k")
    if k1 is None and k is not None:
        require(isinstance(k, int) and not isinstance(k, bool) and k >= 0,
                f"k (drafted steps per cycle) must be an integer >= 0; got {k!r}")
        k1 = k + 1
    sd = None if None in (alpha, gamma, c) else float(sd_speedup(alpha, gamma, c))
    lr_sync = lr_async = lr_sd = None
    if None not in (alpha1, c1, k1):
        lr_sync = float(f_sync(k1, alpha1, c1) if costs is None else f_sync_costed(k1, alpha1, c1, costs, 1))
        if c1 <= 1:
            lr_async = float(f_async(k1, alpha1, c1))
        if sd is not None:
            rows = f_sync(k1, alpha1, c1) if costs is None else f_sync_costed(k1, alpha1, c1, costs, int(gamma) + 1)
            lr_sd = float(rows) * sd
    return Prediction(
        sd=sd, lr_sync=lr_sync, lr_async=lr_async, lr_sd=lr_sd,
        lr_sd_async=None if sd is None or lr_async is None else lr_async * sd,
        k1=k1,
    )
