"""The benchmark runner: every mode on the same problems, models loaded once, results appended as
they finish so that an interrupted run resumes where it stopped.

Modes run interleaved per problem (and in a rotating order) so that machine noise spreads over all of
them instead of hitting one mode's block. Each (problem, mode) result is one JSON line, written and
flushed as soon as it exists; a rerun with the same output path skips every pair already there.

With ``accelerate launch -m lookahead_reasoning bench ...`` each process takes every n-th problem and
writes ``<out>.shard<i>-of-<n>`` next to ``<out>``; ``report`` merges the shards.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import ConfigError, require
from ..options import GeneratorSpec, check_fits_context, check_max_new_tokens
from ..presets import DEFAULT_MAX_NEW_TOKENS, MODES, NGRAM_GAMMA, STEP_MODES
from ..settings import parse_label
from ..prompts import math_messages
from ..verifiers.base import verifier_fields
from ..verifiers.options import VerifierSettings
from .datasets import Problem, load_dataset
from .grading import graded
from .peers import Peer, hf_generate
from .results import append_record, check_same_setup, check_scope, check_writable, done_pairs, shard_path

OUR_MODES = MODES
PEER_MODES = ("hf-generate", "hf-assisted", "hf-lookup")
ALL_MODES = OUR_MODES + PEER_MODES


@dataclass
class BenchRun:
    """What every benchmark reads, in this process or over engines: the problems (``dataset``, from
    ``offset``, at most ``limit``), the results file ``out``, the modes, and the tokens each run may write."""

    dataset: str
    out: str
    _: KW_ONLY
    modes: tuple[str, ...] = ("ar", "auto")
    limit: int | None = None
    offset: int = 0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS

    def __post_init__(self) -> None:
        check_scope(self.offset, self.limit)
        check_max_new_tokens(self.max_new_tokens)


@dataclass
class BenchConfig(BenchRun):
    """A benchmark in this process: the problems, the modes, and what the generator is built from
    (``generator``: a :class:`~lookahead_reasoning.options.GeneratorSpec`, the models, the verifier and one
    ``Settings``).

    ``samples`` runs every (problem, mode) that many times with seeds ``seed, seed + 1, ...`` (with
    a temperature above 0: the paper's sampled evaluation; greedy runs repeat the same text).
    """

    sample: int | None = None
    seed: int = 0
    on_error: str = "raise"
    samples: int = 1
    generator: GeneratorSpec = field(default_factory=GeneratorSpec)

    def __post_init__(self) -> None:
        self.modes = parse_modes(self.modes)
        require(self.on_error in ("raise", "skip"), f"--on-error must be 'raise' or 'skip', got {self.on_error!r}")
        require(isinstance(self.samples, int) and self.samples >= 1, f"--samples must be an integer >= 1, got {self.samples!r}")
        super().__post_init__()
        require(self.sample is None or (isinstance(self.sample, int) and self.sample >= 1),
                f"--sample must be >= 1 (a selection of {self.sample!r} problems runs nothing), got {self.sample!r}")


def parse_modes(modes: str | Iterable[str], parse: Callable[[str], Any] | None = None,
                known: tuple[str, ...] = ALL_MODES) -> tuple[str, ...]:
    """``"ar, sd@g6"`` -> ("ar", "sd@g6"): every mode checked by ``parse`` (default: :func:`parse_mode`, the
    modes of this process, ``known``), none empty, none twice."""
    listed = modes.split(",") if isinstance(modes, str) else list(modes)
    names = tuple(m.strip() for m in listed if m.strip())
    require(len(names) > 0, f"--modes is empty: give one or more of {', '.join(known)}, separated by commas")
    for m in names:
        (parse or parse_mode)(m)  # raises on an unknown mode or a bad suffix
    twice = sorted({m for m in names if names.count(m) > 1})
    require(not twice, f"--modes: {', '.join(twice)} listed twice; each mode runs once per problem, so give it once")
    return names


def parse_mode(mode: str) -> tuple[str, int | None, int | None]:
    """``"sd@g6"`` -> ("sd", k=None, gamma=6); ``"lr-sd@k2g3"`` -> ("lr-sd", 2, 3); ``"ar"`` -> ("ar", None, None).

    The grammar is :func:`~..settings.parse_label`'s, the one every mode and plan label is written in; a benchmark
    of this process takes ``@kN`` (k; for ``auto`` the most a plan may use) and ``@gN`` (gamma), so that one
    run can sweep them with the models loaded once; each variant is its own row in the report.
    """
    try:
        base, knobs = parse_label(mode)
    except ConfigError as exc:
        raise ConfigError(f"--modes: {exc}") from None
    require(base in ALL_MODES, f"--modes: unknown mode {base!r} in {mode!r}; choose from {', '.join(ALL_MODES)}")
    extra = sorted(set(knobs) - {"k", "gamma"})
    require(not extra, f"--modes {mode!r}: a benchmark of this process takes @kN and @gN, not {', '.join(extra)}")
    k, gamma = knobs.get("k"), knobs.get("gamma")
    require((k is None or k >= 1) and (gamma is None or gamma >= 1), f"--modes: k and gamma must be >= 1 in {mode!r}")
    require(k is None or base in STEP_MODES, f"--modes: @k only applies to lr, lr-sd and auto, not {base!r} ({mode!r})")
    require(gamma is None or base not in ("ar", "hf-generate", "lr", "auto"),
            f"--modes: @g does not apply to {base!r} ({mode!r})")
    return base, k, gamma


class ModeRunner:
    """Holds the loaded models and runs one (problem, mode, sample) into a result record."""

    def __init__(self, config: BenchConfig, generator: Any = None):
        self.config = config
        self.bases = bases = list(dict.fromkeys(parse_mode(m)[0] for m in config.modes))
        if generator is None:
            settings = config.generator
            if not set(bases) & set(STEP_MODES):  # no verifier needed: do not load one
                settings = dataclasses.replace(settings, verifier=VerifierSettings(name="exact"))
            if not set(bases) & {"sd", "lr", "lr-sd", "auto", "hf-assisted"}:  # no draft needed
                settings = dataclasses.replace(settings, draft=None, draft_quantize=None)
            ours = [b for b in bases if b in OUR_MODES]
            if ours and "auto" not in ours:  # the generator checks its settings against a mode the run uses
                settings = dataclasses.replace(settings, mode=next((m for m in ours if m in STEP_MODES), ours[0]))
            generator = settings.build()
        self.gen = generator
        check_fits_context(generator.target.model, config.max_new_tokens)

    def warmup(self, tokens: int = 8) -> None:
        """Run every mode once on a short question, untimed (a fresh process's first forwards are slow)."""
        self.gen.warmup([b for b in self.bases if b in OUR_MODES], tokens=tokens)
        probe = self.gen.target.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
        for base in self.bases:
            if base in PEER_MODES:
                self._peer(base, probe, tokens, None, 0)

    def _peer(self, base: str, ids: list[int], max_new_tokens: int, gamma: int | None, seed: int) -> list[int]:

        # hf-lookup needs a count (gamma); hf-assisted keeps transformers' own heuristics unless @gN or --gamma
        gamma = gamma or self.gen.settings.gamma or (NGRAM_GAMMA if base == "hf-lookup" else None)
        peer = (Peer(assistant=self.gen.draft, assistant_tokens=gamma) if base == "hf-assisted"
                else Peer(prompt_lookup_num_tokens=gamma) if base == "hf-lookup" else Peer())
        return hf_generate(self.gen.target, ids, max_new_tokens, peer, sampling=self.gen.settings.sampling, seed=seed)

    def run(self, problem: Problem, mode: str, sample: int = 0) -> dict[str, Any]:

        messages = math_messages(problem.question)
        cfg = self.config
        base, k, gamma = parse_mode(mode)
        seed = cfg.seed + sample
        extra: dict[str, Any] = {}
        if base in OUR_MODES:
            result = self.gen.generate(messages, mode=base, max_new_tokens=cfg.max_new_tokens, seed=seed,
                                       gamma=gamma, k=k)
            text, summary = result.text, {**result.summary(), "mode": mode}
            if base in STEP_MODES:
                extra = cycle_records(result)
        else:
            ids = self.gen.target.prompt_ids(messages)
            start = time.perf_counter()
            new = self._peer(base, ids, cfg.max_new_tokens, gamma, seed)
            wall = time.perf_counter() - start
            text = self.gen.target.decode(new)
            summary = {"mode": mode, "new_tokens": len(new), "wall_time_s": round(wall, 4), "gamma": gamma,
                       "tokens_per_s": round(len(new) / wall, 3) if wall > 0 else None,
                       "stop_reason": "eos" if new and new[-1] in self.gen.target.eos_ids else "budget"}
        settings = cfg.generator
        return {"problem_id": problem.id, "index": problem.index, "mode": mode, "sample": sample, "seed": seed,
                **summary, **graded(text, problem.answer), "target": settings.target, "draft": settings.draft,
                "draft_quantize": getattr(self.gen, "draft_quantize", settings.draft_quantize),
                **verifier_fields(self.gen.verifier),
                "k": k or summary.get("k"), "draft_stop_below": self.gen.settings.draft_stop_below,
                "temperature": self.gen.settings.sampling.temperature,
                "dtype": str(next(self.gen.target.model.parameters()).dtype),
                "precision": settings.precision or "as-loaded", "cpu_linear": settings.cpu_linear,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra}


def cycle_records(result: Any) -> dict[str, Any]:
    """What every step-level cycle decided, for the record: drafted and target texts, each verdict
    (accepted, score, latency, error), the plan (mode auto), and the target tokens thrown away (steps
    the target wrote on rows that were not kept)."""
    cycles, discarded = [], 0
    for cycle in result.stats.cycles:
        kept_row = cycle.accepted if cycle.appended_target_step else None
        discarded += sum(len(s.ids) for j, s in enumerate(cycle.target) if j != kept_row)
        cycles.append({
            "drafted": [s.text for s in cycle.drafted], "target": [s.text for s in cycle.target],
            "verdicts": [{"accepted": v.accepted, "score": v.score, "latency_s": round(v.latency_s, 5),
                          "verifier": v.verifier, "error": getattr(v, "error", None)} for v in cycle.verdicts],
            "accepted": cycle.accepted, "appended_target_step": cycle.appended_target_step,
            "rows": cycle.target_rows, "tokens": cycle.tokens, "wall_s": round(cycle.wall_s, 4),
            "agreements": [round(a, 3) for a in cycle.agreements],
            "plan": cycle.plan.plan if cycle.plan else None,
            "predicted_tok_s": round(cycle.plan.predicted_tok_s, 3) if cycle.plan else None})
    return {"cycle_log": cycles, "target_tokens_discarded": discarded}


def run_bench(config: BenchConfig, *, runner: ModeRunner | None = None, progress: bool = True,
              process_index: int | None = None, num_processes: int | None = None) -> Path:
    """Run the benchmark; returns the results path (this process's shard)."""
    from tqdm.auto import tqdm

    if process_index is None or num_processes is None:
        process_index, num_processes = _accelerate_rank()
    problems = load_dataset(config.dataset, limit=config.limit, offset=config.offset, sample=config.sample,
                            seed=config.seed, on_error=config.on_error)
    mine = problems[process_index::num_processes]
    path = shard_path(config.out, process_index, num_processes)
    check_writable(path)
    check_same_setup(path, config)
    done = done_pairs(path)
    todo = [(p, m, s) for i, p in enumerate(mine) for s in range(config.samples)
            for m in _rotated(config.modes, i * config.samples + s) if (p.id, m, s) not in done]
    if not todo:
        return path
    runner = runner or ModeRunner(config)
    runner.warmup()
    bar = tqdm(total=len(todo), disable=not (progress and process_index == 0), desc=f"bench[{process_index}/"
               f"{num_processes}]", unit="run")
    for problem, mode, sample in todo:
        append_record(path, runner.run(problem, mode, sample))
        bar.update(1)
        bar.set_postfix_str(f"{problem.id} {mode}" + (f" #{sample}" if config.samples > 1 else ""))
    bar.close()
    return path


def _rotated(modes: tuple[str, ...], i: int) -> Iterable[str]:
    """The modes in a different order for each problem (problem i starts at mode i mod n)."""
    return modes[i % len(modes):] + modes[:i % len(modes)]


def _accelerate_rank() -> tuple[int, int]:
    """(process index, process count) under ``accelerate launch`` / torchrun; (0, 1) otherwise.

    The launchers set RANK and WORLD_SIZE for every process. They are read directly because on a
    machine without GPUs accelerate's PartialState sees a single process unless a multi-CPU backend
    was configured, and sharding must not depend on that.
    """
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "ACCELERATE_NUM_PROCESSES" in os.environ:
        from accelerate import PartialState

        state = PartialState()
        return state.process_index, state.num_processes
    return 0, 1


__all__ = ["ALL_MODES", "BenchConfig", "ModeRunner", "check_same_setup", "done_pairs", "parse_mode", "parse_modes",
           "run_bench", "shard_path"]
