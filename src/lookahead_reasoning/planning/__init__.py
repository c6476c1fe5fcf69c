"""Speculation that configures itself: a measured cost table, rates learned online, and a planner
that picks the fastest plan (k drafted steps, gamma drafted tokens) before every cycle, in this
process or over an engine.

* :mod:`.costs`      ``CostGrid``/``CostTable``: T(R, n), measured once per machine and model setup,
  refined from the run's own timed forwards (:mod:`.auto` keeps them on disk);
* :mod:`.endpoints`  the same table for an engine's requests, measured per endpoint;
* :mod:`.estimates`  ``Book``: acceptance posteriors (token and step level), lengths, overheads,
  the calibration per kind of plan;
* :mod:`.planner`    ``PlannerConfig``, ``Planner``: prices plans with
  :mod:`lookahead_reasoning.theory.costed`, picks one with hysteresis, gates rows;
* :mod:`.policy`     ``AutoPolicy``: the planner as the driver's cycle policy; learns from traces;
* :mod:`.auto`       ``generate_auto``: mode ``auto`` over this process's models.
"""

from .auto import Planning, generate_auto, load_or_profile
from .costs import CostGrid, CostTable, profile
from .endpoints import ameasure
from .estimates import Beta, Book, StepBook, TokenBook
from .planner import Choice, Planner, PlannerConfig, Prefill
from .policy import AutoPolicy

__all__ = ["AutoPolicy", "Beta", "Book", "Choice", "CostGrid", "CostTable", "Planner", "PlannerConfig",
           "Planning", "Prefill", "StepBook", "TokenBook", "ameasure", "generate_auto", "load_or_profile", "profile"]
