"""Benchmark modes over serving engines, interleaved per problem, resumable, optionally under load.

Modes (their endpoints are :class:`EngineBench`'s):

=================  =====================================================================
``ar``             one completion from the plain target (the engine's own decoding)
``sd``             one completion from a target started with the engine's draft-model SD
``ngram``          one completion from a target started with the engine's n-gram SD
``lr@kN``          Lookahead Reasoning, N drafted steps, sync schedule (``-async``: async)
``lr-sd@kN``       the same with the SD target writing the rows (the reference's layout)
``auto``           every cycle planned by :class:`~..planning.Planner` over the endpoints' request costs
=================  =====================================================================

Each finished (problem, mode) is one JSON line, synced before the next starts; a rerun skips what the
file holds, and refuses a file written against other endpoints' models. ``concurrency`` C > 1 runs C
problems of one mode at once (the engine serves them together): each record then carries the wall
time the batch took and the batch it ran in (``batch``: the first run's problem id and mode), for
throughput under load.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..decoding.results import GenerationResult
from ..engine_runtime import EngineRuntime, engine_verifier
from ..generator import LookaheadGenerator
from ..errors import ConfigError, require
from ..presets import mode_k
from ..prompts import math_messages
from ..settings import Settings, parse_label
from ..verifiers.base import verifier_fields
from .datasets import Problem, load_dataset
from .grading import graded
from .results import append_record, check_same_models, check_writable, done_pairs
from .runner import BenchRun, cycle_records, parse_modes

# Each engine mode: the runtime's mode it runs as, and the runtime whose target writes (``sd``, ``ngram``: a target
# started with the engine's own SD)
ENGINE_BENCH_MODES = {"ar": ("ar", "plain"), "sd": ("ar", "sd"), "ngram": ("ar", "ngram"), "auto": ("auto", "plain"),
                      "lr": ("lr", "plain"), "lr-sd": ("lr", "sd")}


def parse_engine_mode(mode: str) -> tuple[str, int | None, str]:
    """(base, k, schedule) of an engine mode name, in :func:`~..settings.parse_label`'s grammar: ``ar``, ``sd`` and
    ``ngram`` (the engine's own SD), ``auto``, ``lr@kN`` and ``lr-sd@kN``, an lr mode with ``-async``;
    ConfigError naming the valid forms."""
    forms = ("use ar, sd, ngram, auto, lr@kN, lr-sd@kN (append -async to an lr mode for the async schedule)")
    try:
        base, knobs = parse_label(mode)
    except ConfigError:
        raise ConfigError(f"--modes: unknown engine mode {mode!r}: {forms}") from None
    require(base in ENGINE_BENCH_MODES and not set(knobs) - {"k", "schedule"},
            f"--modes: unknown engine mode {mode!r}: {forms}")
    lr = base.startswith("lr")
    require("k" not in knobs or lr, f"--modes: engine mode {mode!r}: only lr modes take @kN")
    require("schedule" not in knobs or lr, f"--modes: engine mode {mode!r}: only lr modes take -async")
    return base, knobs.get("k") or (mode_k("lr") if lr else None), knobs.get("schedule", "sync")


@dataclass
class EngineBench(BenchRun):
    """What to run (see the module docstring; the problems, modes and budget are :class:`~.runner.BenchRun`'s),
    and on which endpoints: ``target`` the plain target, ``draft`` the draft, ``sd`` and ``ngram`` the targets
    started with the engine's own SD (each needed by the modes that use it); ``template``: the served model's
    tokenizer, for engines that apply no chat template themselves; ``scorer``: what scores drafted tokens for
    the likelihood verifiers (EnginePair's ``scorer``: a name, a URL, or one loaded already); ``target_model``,
    ``draft_model``: the served models' names, where a server serves several; ``server``: how the servers were
    started, written into every record as it is (``{"cache_prompt": False}``: llama.cpp's prompt cache off), so
    that a file says what its engine did."""

    target: str
    draft: str | None = None
    sd: str | None = None
    ngram: str | None = None
    template: str | None = None
    scorer: Any = None
    target_model: str | None = None  # the model names the engines serve (servers of several models)
    draft_model: str | None = None
    concurrency: int = 1
    verifier: Any = "exact"
    window: int = 0  # > 0: records carry a timeline; plain modes then decode in requests of this many tokens
    server: dict[str, Any] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)

    def __post_init__(self) -> None:
        self.modes = parse_modes(self.modes, parse_engine_mode, ENGINE_BENCH_MODES)
        for mode in self.modes:
            runs_as, target = ENGINE_BENCH_MODES[parse_engine_mode(mode)[0]]
            require(runs_as == "ar" or self.draft is not None, f"engine mode {mode} needs --draft-url")
            require(target != "sd" or self.sd is not None,
                    f"engine mode {mode} needs --sd-url (a target started with --spec draft)")
            require(target != "ngram" or self.ngram is not None,
                    f"engine mode {mode} needs --ngram-url (a target started with --spec ngram)")
        super().__post_init__()
        require(isinstance(self.concurrency, int) and self.concurrency >= 1,
                f"--concurrency must be an integer >= 1, got {self.concurrency!r}")
        require(isinstance(self.window, int) and self.window >= 0,
                f"window must be an integer >= 0, got {self.window!r}")


class EngineRunner:
    """The engine runtimes a benchmark's modes need (the generator's own,
    :class:`~..engine_runtime.EngineRuntime`: the plain target, and the targets started with the engine's
    SD), one run each; ``auto``'s runs share the plain runtime's planner across problems."""

    def __init__(self, bench: EngineBench):
        self.bench = bench
        names = {"target_model": bench.target_model, "draft_model": bench.draft_model}

        runs_as = {ENGINE_BENCH_MODES[parse_engine_mode(m)[0]][0] for m in bench.modes}
        mode = "auto" if "auto" in runs_as else "lr" if "lr" in runs_as else "ar"  # what the checks hold to

        def runtime(target: str, draft: str | None, names: dict[str, Any]) -> EngineRuntime:
            """What a LookaheadGenerator over these URLs runs (its checks and refusals included)."""
            return LookaheadGenerator(target=target, draft=draft, verifier="exact", settings=bench.settings, mode=mode,
                                      **{k: v for k, v in names.items() if v is not None}).engine

        plain = runtime(bench.target, bench.draft, {**names, "template": bench.template, "scorer": bench.scorer})
        self.runtimes: dict[str, EngineRuntime] = {"plain": plain}
        template = plain.pair.template  # loaded once, if named
        if bench.sd:
            self.runtimes["sd"] = runtime(bench.sd, bench.draft, {**names, "template": template})
        if bench.ngram:
            self.runtimes["ngram"] = runtime(bench.ngram, None, {"template": template, "target_model": bench.target_model})
        self.verifier = engine_verifier(bench.verifier)  # after connecting: a dead URL fails before a judge loads
        for each in self.runtimes.values():
            each.verifier = self.verifier
        self.models = {"target": plain.pair.target.client.model_name(),
                       "draft": plain.pair.draft.client.model_name() if bench.draft else None}

    async def prepare(self, problem: Problem, mode: str) -> tuple[EngineRuntime, list[int]]:
        """What one (problem, mode) needs before its timed part: the runtime it runs on, the prompt's ids
        (tokenized once, for every request), and its endpoints hot with the prompt cached (every mode then
        finds it so)."""
        runs_as, key = ENGINE_BENCH_MODES[parse_engine_mode(mode)[0]]
        runtime = self.runtimes[key]
        ids = await asyncio.to_thread(runtime.prompt_ids, math_messages(problem.question))
        await asyncio.to_thread(runtime.pair.warm, 4, runs_as != "ar", ids)
        return runtime, ids

    async def run(self, name: str, runtime: EngineRuntime, ids: list[int]) -> tuple[GenerationResult, dict[str, Any]]:
        """The timed part of one prepared (problem, mode), through the runtime's front door
        (:meth:`~..engine_runtime.EngineRuntime.agenerate`, its checks included): the result and what its record
        adds (``plans`` of ``auto``; with a ``window``, the ``timeline`` of (tokens so far, seconds) pairs, the
        plain modes decoding in requests of that many tokens)."""
        base, k, schedule = parse_engine_mode(name)
        mode, bench = ENGINE_BENCH_MODES[base][0], self.bench
        settings = replace(bench.settings, max_new_tokens=bench.max_new_tokens, schedule=schedule)
        timeline, start = [], time.perf_counter()

        def each(trace, run) -> None:
            done = (timeline[-1][0] if timeline else 0) + trace.tokens
            timeline.append((done, round(time.perf_counter() - start, 4)))

        window = bench.window if mode == "ar" and bench.window else None
        result = await runtime.agenerate(ids, mode, settings, k=k, on_cycle=each, window=window)
        plans = {"plans": result.stats.plan_counts()} if base == "auto" else {}
        cycles = cycle_records(result) if mode != "ar" else {}
        return result, {**plans, **cycles, **({"timeline": timeline} if bench.window else {})}

    def record(self, problem: Problem, mode: str, result: GenerationResult, extra: dict[str, Any],
               batch_s: float | None) -> dict[str, Any]:
        return {"problem_id": problem.id, "index": problem.index, "sample": 0, **result.summary(), "mode": mode,
                **extra, **graded(result.text, problem.answer), "engine": True, **self.models,
                **verifier_fields(self.verifier), "scorer": getattr(self.bench.scorer, "name", self.bench.scorer),
                "temperature": self.bench.settings.sampling.temperature, "concurrency": self.bench.concurrency,
                "batch_wall_s": round(batch_s, 4) if batch_s is not None else None, **self.bench.server,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


async def arun_engine_bench(bench: EngineBench, progress: bool = True) -> Path:
    """Run every (problem, mode) not yet in ``bench.out``, batch by batch (:func:`batch_order`)."""
    from tqdm import tqdm

    path = Path(bench.out)
    check_writable(path)
    problems = load_dataset(bench.dataset, limit=bench.limit, offset=bench.offset)
    runner = EngineRunner(bench)
    check_same_models(path, runner.models, now="these endpoints serve")
    batches = batch_order(problems, bench.modes, bench.concurrency, done_pairs(path))
    if batches:  # no timed run pays a cold server's first forward
        for runtime in runner.runtimes.values():
            await asyncio.to_thread(runtime.warm)
    first_auto = next((p for batch in batches for p, m in batch if parse_engine_mode(m)[0] == "auto"), None)
    if first_auto is not None:  # nor a batch's wall time the one measurement of the endpoints
        plain = runner.runtimes["plain"]
        await plain.aplanner(plain.prompt_ids(math_messages(first_auto.question)))
    bar = tqdm(total=sum(map(len, batches)), disable=not progress, desc="engine bench")
    try:
        for batch in batches:
            # every run of the batch is tokenized and warmed before any is timed: a run warming its
            # endpoints while another decodes would slow that one (on a shared CPU, by far more than
            # the warm-up's own cost) and charge the batch for it
            ready = [await runner.prepare(p, m) for p, m in batch]
            began = time.perf_counter()
            runs = [asyncio.ensure_future(runner.run(m, *r)) for (_, m), r in zip(batch, ready)]
            try:
                await asyncio.wait(runs)  # every run ends, failed or not
            finally:  # also when interrupted: each finished run is written, and none is lost
                whole = all(run.done() for run in runs)
                batch_s = time.perf_counter() - began if bench.concurrency > 1 and whole else None
                tag = {"batch": f"{batch[0][0].id}/{batch[0][1]}"} if bench.concurrency > 1 else {}  # the runs that shared the engine
                for (problem, mode), run in zip(batch, runs):
                    if run.done() and not run.cancelled() and run.exception() is None:
                        result, extra = run.result()
                        append_record(path, runner.record(problem, mode, result, {**extra, **tag}, batch_s))
                        bar.update(1)
                    elif not run.done():
                        run.cancel()
            failed = [run.exception() for run in runs if not run.cancelled() and run.exception() is not None]
            if failed:  # the rest of the bench stops; a rerun with the same --out resumes after the kept records
                raise failed[0]
    finally:  # the runs share this loop's connections: closed once, when none is left
        bar.close()
        for runtime in runner.runtimes.values():
            await runtime.pair.aclose()
    return path


def mode_order(modes: tuple[str, ...], i: int) -> list[str]:
    """The modes of problem ``i``: rotated by i, and reversed on every other pair of problems, so that
    each mode runs first, last and after different modes across problems (a mode that always ran
    right after the same one would always inherit its server's state)."""
    turned = list(modes[i % len(modes):] + modes[:i % len(modes)])
    return turned[::-1] if (i // 2) % 2 else turned


def batch_order(problems: list[Problem], modes: tuple[str, ...], size: int,
                done: set | frozenset = frozenset()) -> list[list[tuple[Problem, str]]]:
    """The batches of a run, each ``size`` problems of one mode decoded at once: the problems in groups
    of ``size``, each group once per mode, the modes in :func:`mode_order` of the group's number (C = 1:
    per problem). Every mode meets each group right after another mode met it, as often as the others:
    a batch that follows a batch of other problems finds the server's slots and caches in another state
    (the first batch after eight of another mode ran 33-37% slower, whichever mode it was), and that
    must not fall on one mode. Pairs in ``done`` ((problem id, mode, 0)) are left out."""
    groups = [problems[start:start + size] for start in range(0, len(problems), size)]
    batches = [[(p, mode) for p in group if (p.id, mode, 0) not in done]
               for g, group in enumerate(groups) for mode in mode_order(modes, g)]
    return [batch for batch in batches if batch]


def run_engine_bench(bench: EngineBench, progress: bool = True) -> Path:
    return asyncio.run(arun_engine_bench(bench, progress))


__all__ = ["EngineBench", "EngineRunner", "arun_engine_bench", "batch_order", "mode_order", "parse_engine_mode", "run_engine_bench"]
