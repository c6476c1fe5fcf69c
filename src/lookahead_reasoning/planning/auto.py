"""Mode ``auto``: Lookahead Reasoning whose every cycle runs the plan the planner prices fastest.

The loop (the one every mode runs, :func:`lookahead_reasoning.decoding.driver.generate_cycles`):

  1. choose   the planner prices every plan (k drafted steps, gamma drafted tokens per SD iteration,
              the draft's confidence stop ``draft_stop_below``) with the cost table at the current context length and
              the rates learned so far (the first cycle also pays for feeding the prompt);
  2. run      one cycle of that plan (:func:`~lookahead_reasoning.decoding.driver.drive` runs it):
              k = 0 is the target writing the next step alone (with SD at gamma, or plainly), and an
              SD iteration may run past the step's end (nothing is wasted); k >= 1 is an LR cycle
              whose rows the step gate may cut after the scoring pass;
  3. learn    from the cycle's trace only (:class:`~.policy.AutoPolicy`): its verdicts, lengths,
              SD iterations and unexplained time update the book, its timed forwards the cost table.

Every forward runs at the n (new tokens per row) the cost table prices it at: where a forward of a
larger measured n is cheaper than the one asked for, it is padded to that n (``PlannerConfig.pad``,
``CostGrid.padded_n``, handed to the runtime as the policy's ``pads``).

A drafted step must start at a step boundary: when a plan with k >= 1 wins but the text is mid-step
(after an overshooting cycle), the target first finishes the step alone. With draft == target, the
exact verifier and greedy decoding the output is greedy autoregressive decoding's, whatever the
plans (every plan is lossless under those conditions). What the run learned is saved for the next
run of the same pair (``PlannerConfig.learn``).

Where that is kept: the measured cost tables live on disk, keyed by what decides that a table still
holds (:func:`cost_key`): the model, its dtype, device and kernels (oneDNN linears, int8 layers), the
CPU (model name and instruction-set flags), the thread count and the torch version. A changed key means
a new profile (:func:`~.costs.profile`); a corrupt file is measured again with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..decoding.driver import check_auto_width, generate_cycles
from ..decoding.results import GenerationResult
from ..errors import require
from ..models import cache_root, hardware
from ..models.kernels import uses_onednn_linear
from ..presets import LR_SD_TOKEN_SD, TOKEN_GAMMA
from ..runtime.lm import LM
from ..runtime.pair import ModelPair
from ..settings import Settings, TokenSD, local_settings
from ..theory.breakeven import BreakEven
from ..verifiers.base import Verifier
from . import costs
from .costs import DRAFT_GRID, TARGET_GRID, CostGrid, CostTable
from .estimates import Book, load_book, write_json
from .planner import Planner, PlannerConfig
from .policy import AutoPolicy

log = logging.getLogger(__name__)


def cost_key(lm: LM) -> dict[str, Any]:
    """Everything that changes how long ``lm``'s forward takes here (the cache key of its table)."""
    param = next(lm.model.parameters())
    kinds = sorted({type(m).__name__ for m in lm.model.modules() if "Linear" in type(m).__name__})
    key = {
        "model": lm.name, "parameters": sum(p.numel() for p in lm.model.parameters()),
        "dtype": str(param.dtype), "device": str(param.device), "onednn": uses_onednn_linear(lm.model),
        "linear_kinds": kinds, "cpu": _cpu_identity(), "threads": torch.get_num_threads(),
        "torch": torch.__version__, **{name: os.environ[name] for name in _ISA_CAPS if os.environ.get(name)},
    }
    if lm.fast is not None:  # the compiled path's shapes (absent when off, so the eager keys stay as they were)
        c = lm.fast.config
        key["fast_path"] = f"{c.backend} rows {list(c.row_buckets)} tokens {list(c.token_buckets)} length {c.length}"
    return key


# The environment variables that restrict which instructions torch's, oneDNN's and MKL's kernels use: where set,
# the same CPU has other costs (absent from the key when unset, so ordinary keys stay as they were).
_ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


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
    write_json(measured.to_json(), path)
    return measured, path


@dataclass
class Planning:
    """What ``auto`` plans with for one pair: what it searches and how it learns (``config``), the cost
    table and the book it keeps between generations, and where they are saved. Change the search of one
    call with ``dataclasses.replace(planning, config=...)``: the table and the book stay shared."""

    costs: CostTable
    book: Book
    # target table, draft table, book, the pair's rates with this verifier in any regime, and with any verifier
    paths: tuple[Path, Path, Path, Path, Path]
    config: PlannerConfig = field(default_factory=PlannerConfig)

    @classmethod
    def load(cls, pair: ModelPair, verifier_name: str, config: PlannerConfig | None = None) -> "Planning":
        """Read (or measure) both cost tables and the book of this pair in this cost regime. A regime
        the pair has not run in yet starts from the acceptance rates it learned in the last regime it
        ran in with this verifier (:meth:`Book.rates_only`); a verifier new to the pair starts from the
        token rates it learned with the last verifier (:meth:`Book.token_rates_only`: token acceptance
        is the draft's, step acceptance the verifier's); else the priors. ``config`` None: the defaults."""
        config = config or PlannerConfig()
        target_lm, draft_lm = pair.target, pair.draft
        t_grid, t_path = load_or_profile(target_lm, TARGET_GRID, reprofile=config.reprofile, progress=config.progress,
                                         label=f"target {target_lm.name}", root=config.cache_dir)
        d_grid, d_path = load_or_profile(draft_lm, DRAFT_GRID, reprofile=config.reprofile, progress=config.progress,
                                         label=f"draft {draft_lm.name}", root=config.cache_dir)

        def digest(parts: list) -> str:
            return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
        book_path = t_path.parent / f"book-{digest([t_grid.key, d_grid.key, verifier_name])}.json"
        rates_path = t_path.parent / f"rates-{digest([target_lm.name, draft_lm.name, verifier_name])}.json"
        token_path = t_path.parent / f"rates-{digest([target_lm.name, draft_lm.name])}.json"
        if book_path.exists():
            book = load_book(book_path)
        elif rates_path.exists():
            log.info("no rates learned in this cost regime yet: starting from the pair's rates in %s", rates_path)
            book = load_book(rates_path).rates_only()
        elif token_path.exists():
            log.info("no rates learned with verifier %s yet: starting from the pair's token rates in %s",
                     verifier_name, token_path)
            book = load_book(token_path).token_rates_only()
        else:
            book = Book()
        return cls(CostTable(t_grid, d_grid), book, (t_path, d_path, book_path, rates_path, token_path), config)

    @classmethod
    def elsewhere(cls, costs: CostTable, book: Book | None = None, config: PlannerConfig | None = None) -> "Planning":
        """Planning with a given table (measured on another machine, say) and ``book`` (None: nothing learned
        yet), saved to a throwaway folder only: what ``auto`` would choose there, at the rates learned here."""
        folder = Path(tempfile.mkdtemp(prefix="lookahead-planning-"))
        paths = tuple(folder / f"{name}.json" for name in ("target", "draft", "book", "rates", "token-rates"))
        return cls(costs, book if book is not None else Book(), paths, config or PlannerConfig())

    def break_even(self, context: int, can_sd: bool = True, draft_stop_below: float | None = None) -> BreakEven:
        """The step acceptance above which k drafted steps beat the best plan without them, on this table
        and book (:meth:`Planner.break_even <.planner.Planner.break_even>`)."""
        planner = Planner(self.costs, self.book, self.config, can_sd=can_sd, draft_stop_below=draft_stop_below)
        return planner.break_even(context)

    def save(self) -> None:
        write_json(self.costs.target.to_json(), self.paths[0])
        write_json(self.costs.draft.to_json(), self.paths[1])
        for path in self.paths[2:]:
            write_json(self.book.to_json(), path)


def auto_token_sd(given: TokenSD | None, config: PlannerConfig) -> TokenSD:
    """The token SD mode ``auto`` runs with: the draft model drafting tokens for the target (its gammas the
    planner's) and the draft's steps written plainly, unless ``given`` says otherwise: ``target=None``
    leaves out every plan with token SD, ``draft="ngram"`` writes the draft's steps with prompt lookup.
    Prompt lookup for the target's rows (``target="ngram"``) is refused: the planner prices token SD with
    the draft model only. ``given`` None, or the ``lr-sd`` preset every generator and the command line start
    from, is no choice: auto makes its own."""
    if given == TokenSD(**LR_SD_TOKEN_SD):
        given = None
    require(given is None or given.target != "ngram", "token_sd target 'ngram': mode auto drafts the target's "
            "tokens with the draft model (target='draft') or not at all (target=None); use mode lr-sd or "
            "sd-ngram for prompt lookup")
    return TokenSD(target="draft" if given is None else given.target, draft=None if given is None else given.draft,
                   gamma=max(config.gammas, default=TOKEN_GAMMA))


def generate_auto(pair: ModelPair, prompt_ids: Sequence[int], verifier: Verifier, settings: Settings | None = None,
                  *, on_text: Callable[[str], None] | None = None, planning: Planning | None = None,
                  draft_ids: Sequence[int] | None = None) -> GenerationResult:
    """Adaptive speculation for one prompt (module docstring), on :func:`~..decoding.driver.generate_cycles`.

    ``pair``: the target and the draft (:func:`~..runtime.pair.model_pair`). ``settings``: default
    ``Settings.preset()`` (change fields with ``settings.with_overrides(...)``); ``planning``: the cost table,
    the book and the planner's config (:class:`Planning`, whose ``config.max_k`` caps the drafted steps of a
    plan), carried across calls (None: loaded, or measured, with the default config); ``draft_ids``: the
    prompt in the draft's tokenizer (:func:`~..decoding.driver.start_state`); ``on_text`` hears the accepted
    text as it grows. The plans draft one step per position (``width`` 1; a larger width is refused).
    ``settings.token_sd`` limits the search where it is given (:func:`auto_token_sd`); the gammas are the
    planner's (``PlannerConfig.gammas``).
    """
    settings = local_settings(settings or Settings.preset())
    check_auto_width(settings)
    planning = planning or Planning.load(pair, getattr(verifier, "name", type(verifier).__name__))
    config = planning.config
    settings = settings.with_overrides(token_sd=auto_token_sd(settings.token_sd, config))
    can_sd = settings.token_sd.target == "draft" and pair.same_vocab  # the draft model drafts the rows' tokens
    planner = Planner(planning.costs, planning.book, config, can_sd=can_sd, draft_stop_below=settings.draft_stop_below)
    grids = (planning.costs.target, planning.costs.draft)
    for grid in grids:
        grid.padding = config.pad
    pads = tuple(grid.padded_n if config.pad else None for grid in grids)  # forwards run at the n they are priced at
    policy = AutoPolicy(planner, settings.steps.delimiters, on_finish=planning.save if config.learn else None,
                        pads=pads)
    return generate_cycles(pair, prompt_ids, verifier, settings, policy, on_text=on_text, draft_ids=draft_ids)


__all__ = ["Planning", "auto_token_sd", "cache_path", "cost_key", "generate_auto", "load_or_profile"]
