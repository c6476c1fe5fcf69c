"""The benchmark runner: every mode on the same problems, models loaded once, results appended as
they finish so that an interrupted run resumes where it stopped.

Modes run interleaved per problem (and in a rotating order) so that machine noise spreads over all of
them instead of hitting one mode's block. Each (problem, mode) result is one JSON line, written and
flushed as soon as it exists; a rerun with the same output path skips every pair already there.

With ``accelerate launch -m lookahead_reasoning bench ...`` each process takes every n-th problem and
writes ``<out>.shard<i>-of-<n>`` next to ``<out>``; ``report`` merges the shards.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import ConfigError, require
from .datasets import Problem, load_dataset
from .grading import grade

OUR_MODES = ("ar", "sd", "sd-ngram", "lr", "lr-sd")
PEER_MODES = ("hf-generate", "hf-assisted", "hf-lookup")
ALL_MODES = OUR_MODES + PEER_MODES


@dataclass
class BenchConfig:
    """What to run. ``modes`` in ALL_MODES; model arguments as for LookaheadGenerator."""

    dataset: str
    out: str
    modes: tuple[str, ...] = ("ar", "lr")
    limit: int | None = None
    offset: int = 0
    sample: int | None = None
    seed: int = 0
    on_error: str = "raise"
    target: str = "qwen2.5-coder-1.5b"
    draft: str = "qwen2.5-coder-0.5b"
    verifier: str = "embedding"
    threshold: float | None = None
    k: int = 3
    gamma: int = 4
    max_new_tokens: int = 512
    max_step_tokens: int = 100
    token_sd_target: str = "draft"
    dtype: str = "auto"
    device: str | None = None
    cpu_linear: str = "auto"
    draft_quantize: str | None = "auto"
    draft_stop_below: float | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        modes = tuple(m.strip() for m in (self.modes.split(",") if isinstance(self.modes, str) else self.modes) if m.strip())
        for m in modes:
            parse_mode(m)  # raises on an unknown mode or a bad suffix
        require(len(modes) > 0, "no mode given")
        require(len(set(modes)) == len(modes), f"a mode is listed twice in {','.join(modes)}")
        self.modes = modes
        require(self.on_error in ("raise", "skip"), f"on_error must be 'raise' or 'skip', got {self.on_error!r}")


_SUFFIX_RE = re.compile(r"^(?:k(\d+))?(?:g(\d+))?$")


def parse_mode(mode: str) -> tuple[str, int | None, int | None]:
    """``"sd@g6"`` -> ("sd", k=None, gamma=6); ``"lr-sd@k2g3"`` -> ("lr-sd", 2, 3); ``"ar"`` -> ("ar", None, None).

    The suffix lets one run sweep gamma (drafted tokens) or k (drafted steps) with the models loaded once;
    each variant is its own row in the report.
    """
    base, _, suffix = mode.partition("@")
    require(base in ALL_MODES, f"unknown mode {base!r} in {mode!r}; choose from {', '.join(ALL_MODES)}")
    if not suffix:
        return base, None, None
    m = _SUFFIX_RE.match(suffix)
    require(m is not None and (m.group(1) or m.group(2)),
            f"bad mode suffix in {mode!r}: write @gN (gamma), @kN (k) or @kNgM, N >= 1")
    k, gamma = (int(m.group(1)) if m.group(1) else None), (int(m.group(2)) if m.group(2) else None)
    require((k is None or k >= 1) and (gamma is None or gamma >= 1), f"k and gamma must be >= 1 in {mode!r}")
    require(k is None or base in ("lr", "lr-sd"), f"@k only applies to lr and lr-sd, not {base!r} ({mode!r})")
    require(gamma is None or base not in ("ar", "hf-generate", "lr"), f"@g does not apply to {base!r} ({mode!r})")
    return base, k, gamma


def shard_path(out: str | Path, index: int, count: int) -> Path:
    out = Path(out)
    return out if count <= 1 else out.with_name(f"{out.name}.shard{index}-of-{count}")


def check_writable(path: Path) -> None:
    """Fail early, with the path in the message, when results could not be saved."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write results to {path}: {exc.strerror or exc}") from None


def done_pairs(path: Path) -> set[tuple[str, str]]:
    """(problem id, mode) pairs already in a results file; a torn last line (killed run) is ignored."""
    done: set[tuple[str, str]] = set()
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        done.add((str(rec.get("problem_id")), str(rec.get("mode"))))
    return done


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and push it to disk before going on.

    A last line torn by a kill (no newline at the end) is closed first, so the new record starts
    on a line of its own; the torn line is ignored when results are read.
    """
    torn = path.exists() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(("\n" if torn else "") + json.dumps(record, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


class ModeRunner:
    """Holds the loaded models and runs one (problem, mode) pair into a result record."""

    def __init__(self, config: BenchConfig, generator: Any = None):
        from ..decoding.lookahead import TokenSD
        from ..decoding.steps import StepConfig
        from ..generator import LookaheadGenerator

        self.config = config
        if generator is None:
            kwargs = {"threshold": config.threshold} if config.threshold is not None else None
            bases = {parse_mode(m)[0] for m in config.modes}
            needs_draft = bool(bases & {"sd", "lr", "lr-sd", "hf-assisted"})
            needs_verifier = bool(bases & {"lr", "lr-sd"})
            generator = LookaheadGenerator(
                target=config.target, draft=config.draft if needs_draft else None,
                verifier=config.verifier if needs_verifier else "exact", k=config.k, gamma=config.gamma,
                steps=StepConfig(("\n\n",), config.max_step_tokens),
                token_sd=TokenSD(target=config.token_sd_target, draft="ngram", gamma=config.gamma),
                verifier_kwargs=kwargs if needs_verifier else None, dtype=config.dtype, device=config.device,
                cpu_linear=config.cpu_linear, draft_quantize=config.draft_quantize if needs_draft else None,
                draft_stop_below=config.draft_stop_below)
        self.gen = generator

    def warmup(self, tokens: int = 8) -> None:
        """Run every mode once on a short question, untimed: the first forwards of a fresh process
        page the weights in and set up kernels, and are several times slower than the rest."""
        probe = Problem("warmup", "What is 2 + 3?", "5", "warmup", -1)
        saved = self.config.max_new_tokens
        self.config.max_new_tokens = tokens
        try:
            for mode in self.config.modes:
                self.run(probe, mode)
        finally:
            self.config.max_new_tokens = saved

    def run(self, problem: Problem, mode: str) -> dict[str, Any]:
        from ..lm import hf_generate
        from ..prompts import math_messages

        messages = math_messages(problem.question)
        cfg = self.config
        base, k, gamma = parse_mode(mode)
        if base in OUR_MODES:
            result = self.gen.generate(messages, mode=base, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                                       gamma=gamma, k=k)
            text, summary = result.text, {**result.summary(), "mode": mode}
        else:
            ids = self.gen.target.prompt_ids(messages)
            # hf-lookup needs a count (gamma); hf-assisted keeps transformers' own heuristics unless @gN
            gamma = gamma or (cfg.gamma if base == "hf-lookup" else None)
            start = time.perf_counter()
            new = hf_generate(self.gen.target, ids, cfg.max_new_tokens,
                              assistant=self.gen.draft if base == "hf-assisted" else None,
                              assistant_tokens=gamma if base == "hf-assisted" else None,
                              prompt_lookup_num_tokens=gamma if base == "hf-lookup" else None)
            wall = time.perf_counter() - start
            text = self.gen.target.decode(new)
            summary = {"mode": mode, "new_tokens": len(new), "wall_time_s": round(wall, 4), "gamma": gamma,
                       "tokens_per_s": round(len(new) / wall, 3) if wall > 0 else None,
                       "stop_reason": "eos" if new and new[-1] in self.gen.target.eos_ids else "budget"}
        g = grade(text, problem.answer)
        return {"problem_id": problem.id, "index": problem.index, "mode": mode, **summary,
                "gold": problem.answer, "predicted": g.predicted, "correct": g.correct, "text": text,
                "target": cfg.target, "draft": cfg.draft, "draft_quantize": getattr(self.gen, "draft_quantize", cfg.draft_quantize),
                "verifier": cfg.verifier, "k": k or cfg.k, "draft_stop_below": cfg.draft_stop_below,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def run_bench(config: BenchConfig, *, runner: ModeRunner | None = None, progress: bool = True,
              process_index: int | None = None, num_processes: int | None = None) -> Path:
    """Run the benchmark; returns the results path (this process's shard)."""
    if process_index is None or num_processes is None:
        process_index, num_processes = _accelerate_rank()
    problems = load_dataset(config.dataset, limit=config.limit, offset=config.offset, sample=config.sample,
                            seed=config.seed, on_error=config.on_error)
    mine = problems[process_index::num_processes]
    path = shard_path(config.out, process_index, num_processes)
    check_writable(path)
    done = done_pairs(path)
    todo = [(p, m) for i, p in enumerate(mine) for m in _rotated(config.modes, i) if (p.id, m) not in done]
    if not todo:
        return path
    runner = runner or ModeRunner(config)
    runner.warmup()
    bar = _progress(len(todo), progress and process_index == 0, f"bench[{process_index}/{num_processes}]")
    for problem, mode in todo:
        append_record(path, runner.run(problem, mode))
        bar.update(1)
        bar.set_postfix_str(f"{problem.id} {mode}")
    bar.close()
    return path


def _rotated(modes: tuple[str, ...], i: int) -> Iterable[str]:
    """The modes in a different order for each problem (problem i starts at mode i mod n)."""
    n = len(modes)
    return [modes[(i + j) % n] for j in range(n)]


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


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="run")


__all__ = ["ALL_MODES", "BenchConfig", "ModeRunner", "parse_mode", "run_bench", "shard_path", "done_pairs", "asdict"]
