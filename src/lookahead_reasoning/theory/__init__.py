"""Speedup theory of token-level SD and Lookahead Reasoning: closed forms, budget splits, simulators.

Pure numpy/float functions in the paper's symbols (no torch):

- :mod:`.formulas`  ``sd_speedup`` S(alpha, gamma, c), its ceiling, ``best_gamma``; ``f_sync``
  (and ``f_sync_batched``/``lookahead_pays`` when the batched target step is not free),
  ``f_async`` (branches ``async_s1``/``async_s2``, identities ``expected_ceil``/``expected_mod``);
  ``g_token``, ``h_combined``, ``parallel_degree``;
- :mod:`.budget`    ``best_split`` of a parallel budget M between k1 and k2, ``regime``,
  ``hybrid_conditions`` (closed-form sufficient conditions), ``paper_hybrid_box``;
- :mod:`.costed`    the same speeds priced by a measured cost table T(R, n) (seconds of a forward of
  R rows x n new tokens) instead of 1, c and beta: ``sd_rate``, ``step_cycle``, ``lr_cycle``,
  ``f_sync_costed``; what the adaptive mode's planner compares;
- :mod:`.joint`     ``h_joint``: sync LR x SD as one process (the batch waits for its slowest SD row);
- :mod:`.predict`   ``predict(stats)``: the speedups the formulas give for a run's measured rates;
- :mod:`.simulate`  seeded Monte Carlo of token SD, sync LR, async LR (event timeline) and LR+SD
  (sync: the joint process, a batch of SD rows waiting for its slowest row);
- :mod:`.simulate_costed`  Monte Carlo of the costed processes, checking :mod:`.costed`.

Derivations: ``theory/README.md``; numerical checks: ``python theory/check.py``.
"""

from .budget import BudgetSplit, Optimum, Regime, best_split, hybrid_conditions, paper_hybrid_box, regime, speedup_grid
from .formulas import (
    async_depth, async_s1, async_s2, best_gamma, expected_ceil, expected_mod, expected_tokens, f_async,
    f_step, f_sync, f_sync_batched, g_token, h_combined, lookahead_pays, parallel_degree, sd_ceiling, sd_speedup,
)
from .costed import (
    CycleEstimate, StepRates, TokenRates, chunk_cycle, drafted_pmf, expected_accepted, f_sync_costed,
    iteration_seconds, kept_pmf, lr_cycle, request_cycle, sd_rate, step_cycle, tokens_per_iteration,
)
from .joint import h_joint
from .predict import Prediction, judged_alpha, predict
from .simulate import (
    AsyncSchedule, LRSDPlay, SimResult, async_event_timeline, async_schedule, sample_run_lengths, simulate_lr_async,
    simulate_lr_sd, simulate_lr_sync, simulate_sd,
)
from .simulate_costed import CostedPlay, simulate_costed_lr, simulate_costed_sd

__all__ = [
    "AsyncSchedule", "BudgetSplit", "CostedPlay", "CycleEstimate", "LRSDPlay", "Optimum", "Prediction", "Regime",
    "SimResult", "StepRates", "TokenRates", "async_depth", "async_event_timeline", "async_s1", "async_s2",
    "async_schedule", "best_gamma", "best_split", "chunk_cycle", "drafted_pmf", "expected_accepted", "expected_ceil",
    "expected_mod", "expected_tokens", "f_async", "f_step", "f_sync", "f_sync_batched", "f_sync_costed", "g_token",
    "h_combined", "h_joint", "hybrid_conditions", "iteration_seconds", "judged_alpha", "kept_pmf", "lookahead_pays",
    "lr_cycle", "paper_hybrid_box", "parallel_degree", "predict", "regime", "request_cycle", "sample_run_lengths",
    "sd_ceiling", "sd_rate", "sd_speedup", "simulate_costed_lr", "simulate_costed_sd", "simulate_lr_async",
    "simulate_lr_sd", "simulate_lr_sync", "simulate_sd", "speedup_grid", "step_cycle", "tokens_per_iteration"
]
