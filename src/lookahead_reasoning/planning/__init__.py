"""Speculation that configures itself: a measured cost table, rates learned online, and a planner
that picks the fastest plan (k drafted steps, gamma drafted tokens) before every cycle.

* :mod:`.costs`      ``CostGrid``/``CostTable``: T(R, n), measured once per machine and model setup,
  cached on disk, refined from the run's own timed forwards;
* :mod:`.estimates`  ``Book``: acceptance posteriors (token and step level), lengths, overheads;
* :mod:`.planner`    ``PlannerConfig``, ``Planner``: prices plans with
  :mod:`lookahead_reasoning.theory.costed`, picks one with hysteresis, gates rows;
* :mod:`.auto`       ``generate_auto``: the adaptive loop (mode ``auto``).
"""

from .auto import AutoOptions, Planning, generate_auto
from .costs import CostGrid, CostTable, load_or_profile, profile
from .estimates import Beta, Book, StepBook, TokenBook
from .planner import Choice, Planner, PlannerConfig, Prefill

__all__ = ["AutoOptions", "Beta", "Book", "Choice", "CostGrid", "CostTable", "Planner", "PlannerConfig", "Planning",
           "Prefill", "StepBook", "TokenBook", "generate_auto", "load_or_profile", "profile"]
