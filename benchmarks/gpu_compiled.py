"""The compiled path on a GPU, against the eager loops: one command, one JSON file, under 8 minutes.

No weights travel to a GPU machine: every model is drawn there with random weights of a real shape
(``testing.REAL_SHAPES``: the offline pair, and targets of the 7B and 32B class), in bfloat16.

1. ``env``: the GPU, torch and transformers, and whether ``torch.compile`` works there.
2. ``lossless``: tiny float32 models (the draft a perturbed copy of the target) on the GPU, greedy:
   every mode on the compiled path writes the tokens of the eager loops on the same GPU (``reference``,
   made with ``fast_path="off"``); then a warm 256-token ``lr-sd`` run records no new CUDA graph.
3. ``shapes``: per shape, eager and compiled: greedy AR's milliseconds per token after a 300-token
   prompt (``*_ar_ms``, the prompt's forward included, as the committed runs measured it; ``*_decode_ms``,
   decoding alone), the seconds to record the graphs, T(R, n) for R 1-8 and n 1-16 on the compiled path
   (``planning.costs.profile``, 256 cached tokens) and a few eager points beside it.
4. ``cycles``: per (target, draft) pair, each mode generates with the compiled path, every forward
   logged (who, rows, n, cached tokens, seconds) beside the run's wall time, so that the cost model's
   price of the same forwards can be set against the realised time (``gpu_report.py`` does that, and
   the theory's predictions, on any machine afterwards). Random weights accept nothing, so these are
   cycles of the worst case; steps end on a few common characters so that they are of reasoning length.
5. ``inductor``: greedy AR of the offline pair's shapes with inductor's kernels recorded as CUDA graphs
   (one compiled shape each), where ``torch.compile`` works and time is left.

    python benchmarks/gpu_compiled.py --out gpu-compiled.json            # a CUDA machine
    python benchmarks/gpu_compiled.py --rehearse --out rehearsal.json    # the same code on a CPU, small shapes

Each section is written to the file as soon as it ends; a section that fails records its error and
the next one runs; a section that would overrun ``--budget-s`` is skipped with a note.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning.decoding import generate
from lookahead_reasoning.planning.costs import profile
from lookahead_reasoning.runtime.clock import wait_for as sync
from lookahead_reasoning.runtime.compiled import FastPathConfig
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.sampling import SamplingConfig
from lookahead_reasoning.steps import StepConfig
from lookahead_reasoning.testing import perturbed_copy, real_shape_lm, tiny_model

SHAPES = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "qwen2.5-32b", "qwen2.5-7b")
DRAFT = "qwen2.5-coder-0.5b"
GRID = {r: (1, 2, 3, 4, 6, 8, 10, 13, 16) for r in range(1, 9)}
EAGER_GRID = {1: (1, 4, 13), 2: (1, 13), 4: (1, 13), 8: (1, 13)}
MODES = (("ar", {}), ("sd", {"gamma": 8}), ("lr", {"k": 2}), ("lr-sd", {"k": 1, "gamma": 8}), ("lr-sd", {"k": 2, "gamma": 4}))
LOSSLESS = (("ar", {}), ("sd", {}), ("sd", {"gamma": 5}), ("sd-ngram", {}), ("lr", {"k": 2}), ("lr", {"k": 3}),
            ("lr", {"k": 2, "width": 2}), ("lr-sd", {}), ("lr-sd", {"k": 2, "gamma": 4}), ("auto", {}),
            ("sd", {"sampling": SamplingConfig(temperature=0.8)}), ("lr-sd", {"sampling": SamplingConfig(temperature=0.8)}))
# Random weights (drawn wide enough that greedy text does not repeat one token) over the tiny byte-level
# tokenizer: a step ends at any of these characters (about 20 tokens a step, as reasoning steps are), or
# at the cap; EOS is switched off so that every mode writes the same number of tokens.
INIT = 0.1
DELIMITERS = ("\n", ".", ",", "=", ";", ":", "?", "!", "a", "e", "o")
PROMPT = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many?"


class Budget:
    """The seconds left of a call's ``seconds``, on a clock started at ``start`` (``time.perf_counter``;
    default: now). A script run as a command starts it before its heavy imports, so that they count."""

    def __init__(self, seconds: float, start: float | None = None):
        self.start = time.perf_counter() if start is None else start
        self.seconds = seconds

    def spent(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.seconds - self.spent()


class Skip(Exception):
    """A step that cannot run here (the model does not fit, nothing to time): recorded as skipped, with this message."""


class Report:
    """The JSON file, written whole after every step (a temporary file renamed over it, so that a call cut
    short leaves the last complete file). Each step's entry has a ``status``: "ok", "failed" (with its
    ``error``) or "skipped" (with its ``message``); ``budget`` keeps every check of the budget."""

    def __init__(self, path: str | Path, budget: Budget, data: dict):
        self.path, self.budget, self.data = Path(path), budget, data
        data["budget"] = {"budget_s": budget.seconds, "checks": []}

    def save(self) -> None:
        self.data["total_s"] = round(self.budget.spent(), 1)
        self.data["budget"].update(spent_s=round(self.budget.spent(), 1), left_s=round(self.budget.left(), 1))
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
        os.replace(temporary, self.path)

    def section(self, into: dict, name: str, needs_s: float, fn: Callable[[], dict], label: str | None = None) -> dict:
        """Run one step into ``into[name]`` if the budget has ``needs_s`` seconds left, recording its status,
        its seconds and the check (``label``: the step's name in the checks, ``name`` by default), then save."""
        left = self.budget.left()
        check = {"step": label or name, "left_s": round(left, 1), "needs_s": round(needs_s, 1)}
        self.data["budget"]["checks"].append(check)
        if left < needs_s:
            into[name] = {"status": "skipped",
                          "message": f"{max(left, 0):.0f} s left, the step needs about {needs_s:.0f} s"}
        else:
            start = time.perf_counter()
            into[name] = _outcome(fn)
            check["took_s"] = into[name]["section_s"] = round(time.perf_counter() - start, 2)
        if into[name]["status"] != "ok":
            print(f"[{label or name}] {into[name]['status']}: {into[name].get('error') or into[name].get('message')}",
                  flush=True)
        self.save()
        return into[name]


def _outcome(fn: Callable[[], dict]) -> dict:
    """``fn``'s dict with ``status`` "ok", or the status and reason it did not give one."""
    try:
        out = fn()
    except Skip as why:
        return {"status": "skipped", "message": str(why)}
    except Exception as exc:  # noqa: BLE001 - one failing step must not lose the others
        return {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[:2000]}",
                "traceback": traceback.format_exc()[-3000:]}
    return {"status": "ok", **out}


def overall(entries: Iterable[dict]) -> str:
    """A group of steps' status: "failed" or "skipped" when every step was, else "ok" (each keeps its own)."""
    statuses = {e.get("status") for e in entries}
    return statuses.pop() if statuses in ({"failed"}, {"skipped"}) else "ok"


def env(device: torch.device) -> dict:
    import transformers

    info: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                            "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, memory_gb=round(props.total_memory / 1e9, 1))
    start = time.perf_counter()
    try:
        doubled = torch.compile(lambda x: x * 2)(torch.ones(2, device=device))
        info["torch_compile"] = bool(doubled.sum().item() == 4)
    except Exception as exc:  # noqa: BLE001
        info["torch_compile"] = False
        info["torch_compile_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    info["torch_compile_s"] = round(time.perf_counter() - start, 1)
    print(f"[env] {info}", flush=True)
    return info


def fast(backend: str, rows: int = 8, length: int = 1024, **fields: Any) -> FastPathConfig:
    return FastPathConfig(backend=backend, rows=rows, length=length, **fields)


def lossless(device: torch.device, backends: tuple[str, ...]) -> dict:
    """Greedy and sampled tokens of every mode on the compiled path against the eager loops' (tiny float32
    models on ``device``): ``reference``, then ``all_same`` and the rest per backend (:func:`lossless_config`)."""
    target, draft, prompt = lossless_models(device)
    out: dict[str, Any] = {"reference": lossless_reference(target, draft, prompt)}
    for backend in backends:
        out[backend] = lossless_config(target, draft, prompt, out["reference"], fast(backend))
    return out


def lossless_models(device: torch.device) -> tuple[LM, LM, list[int]]:
    """The lossless check's target, its draft (a perturbed copy) and prompt: tiny float32 models on ``device``."""
    target = LM.from_loaded(tiny_model("qwen2", seed=0, device=device, layers=4, hidden=128))
    draft = perturbed_copy(target, 0.3, seed=1)
    return target, draft, target.prompt_ids("Ann has 3 apples and buys 4 more. How many apples does she have?")


def mode_label(mode: str, kw: dict) -> str:
    return mode + "".join(f"@{k}{v}" if k != "sampling" else f"@t{v.temperature}" for k, v in kw.items())


def path_of(lm: LM) -> str:
    """How ``lm``'s forwards run now: "off" (the eager loops over a DynamicCache) or backend/attention (the
    attention the path chose: "auto" is flex or sdpa by backend and device)."""
    return "off" if lm.fast is None else f"{lm.fast.config.backend}/{lm.fast.attention}"


def lossless_reference(target: LM, draft: LM, prompt: list[int], modes: tuple = LOSSLESS, tokens: int = 96) -> dict:
    """Every mode's tokens from the eager loops on the models' own device: a generator made with
    ``fast_path="off"`` (without it a generator puts models on a GPU on the compiled path, and the
    reference would be what it is checking). ``ran`` says how each model's forwards ran."""
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", k=2, fast_path="off")
    out = {mode_label(mode, kw): gen.generate(prompt, mode=mode, max_new_tokens=tokens, **kw).token_ids
           for mode, kw in modes}
    print(f"[lossless] the eager loops' tokens on {target.device}: {len(out)} modes", flush=True)
    return {"fast_path": "off", "device": str(target.device), "max_new_tokens": tokens, "tokens": out,
            "ran": {"target": path_of(target), "draft": path_of(draft)}}


def lossless_config(target: LM, draft: LM, prompt: list[int], reference: dict, config: FastPathConfig,
                    modes: tuple = LOSSLESS, again: int = 256) -> dict:
    """Every mode's tokens on the compiled path ``config`` against ``reference``'s (:func:`lossless_reference`,
    the same ``modes``): ``same_tokens`` per mode, where the first differs, ``all_same``; then (``again`` > 0)
    the graphs or compiles a warm ``again``-token lr-sd run still makes (none, once its shapes were seen)."""
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", k=2, fast_path=config)
    try:
        same, first = {}, {}
        for mode, kw in modes:
            label = mode_label(mode, kw)
            tokens = gen.generate(prompt, mode=mode, max_new_tokens=reference["max_new_tokens"], **kw).token_ids
            same[label] = tokens == reference["tokens"][label]
            if not same[label]:
                first[label] = next((i for i, (a, b) in enumerate(zip(tokens, reference["tokens"][label])) if a != b),
                                    min(len(tokens), len(reference["tokens"][label])))
        out = {"ran": path_of(target), "same_tokens": same, "first_difference": first, "all_same": all(same.values()),
               "graphs_made": graphs_made(target, draft)}
        if again:
            gen.generate(prompt, mode="lr-sd", max_new_tokens=again)  # its attention widths recorded
            before = graphs_made(target, draft)
            gen.generate(prompt, mode="lr-sd", max_new_tokens=again)
            out["graphs_made_by_a_warm_lr_sd_run"] = graphs_made(target, draft) - before
    finally:
        target.use_fast_path(None)
        draft.use_fast_path(None)
    print(f"[lossless] {out['ran']}: {'all the same' if out['all_same'] else first}; {out['graphs_made']} graphs",
          flush=True)
    return out


def graphs_made(*lms: LM) -> int:
    """Graphs recorded and compiled so far by these models' compiled paths."""
    return sum(lm.fast.captures + lm.fast.compiles for lm in lms if lm.fast is not None)


def shared_vocab(lm: LM) -> int:
    """How many ids both the tokenizer and the model's vocabulary hold (at least 2)."""
    return max(2, min(len(lm.tokenizer), lm.vocab_size))


def fixed_ids(lm: LM, count: int) -> list[int]:
    """A fixed prompt of ``count`` ids of :func:`shared_vocab` (the same on every run, so that every timing
    reads the same cache)."""
    vocab = shared_vocab(lm)
    return [(7 + 31 * i) % vocab for i in range(count)]


def greedy_decoder(lm: LM, prompt_tokens: int = 300) -> Callable[[], int]:
    """Greedy decoding after :func:`fixed_ids`, one token a call. The prompt's forward runs here; each call
    feeds the token the last forward chose (one forward of one token, its argmax read as the greedy loop
    reads it: ``Session.argmax``) and returns it."""
    session = lm.session([fixed_ids(lm, prompt_tokens)])
    chosen = session.argmax()

    def step() -> int:
        nonlocal chosen
        token = int(chosen[0, -1])
        session.extend(0, [token])
        chosen = session.argmax()
        return token

    return step


def decode_only_ms(lm: LM, tokens: int, prompt_tokens: int = 300) -> float:
    """Milliseconds per token of greedy decoding after a ``prompt_tokens`` prompt, the prompt's forward not
    timed: each token's forward, its argmax and the read of it, as a decoding loop pays them."""
    step = greedy_decoder(lm, prompt_tokens)
    for _ in range(8):  # the one-token shape recorded or compiled
        step()
    sync(lm.device)
    start = time.perf_counter()
    for _ in range(tokens):
        step()
    sync(lm.device)
    return (time.perf_counter() - start) / tokens * 1000


def decode_ms(lm: LM, tokens: int) -> float:
    """Milliseconds per token of greedy AR after a 300-token prompt, the prompt's (eager) forward included,
    as every committed run measured it (a short warm-up run first); :func:`decode_only_ms` leaves it out."""
    prompt = fixed_ids(lm, 300)
    generate(lm, prompt, max_new_tokens=8)
    sync(lm.device)
    start = time.perf_counter()
    done = generate(lm, prompt, max_new_tokens=tokens)
    sync(lm.device)
    return (time.perf_counter() - start) / done.num_tokens * 1000


def points_json(points: dict[int, dict[int, float]]) -> dict[str, dict[str, float]]:
    return {str(r): {str(n): s for n, s in row.items()} for r, row in points.items()}


def steady_points(lm: LM, grid: dict[int, tuple[int, ...]], repeats: int, prefix: int = 256) -> dict[int, dict[int, float]]:
    """T(R, n): median seconds of one forward of R rows x n new tokens after ``prefix`` cached tokens.

    The rows are forked from the prefix once per R, and rolled back to it after every timed forward,
    so a point is the forward alone (until the GPU is done), as a cycle's later
    forwards are; the fork's copies are not in it (planning.costs.profile times a fork in every point).
    """
    ids = fixed_ids(lm, prefix)
    base = lm.session([ids])
    base.logits()
    points: dict[int, dict[int, float]] = {}
    for rows, ns in grid.items():
        branches = base.fork(rows)
        for n in ns:
            times = []
            for r in range(repeats + 1):
                start = time.perf_counter()
                branches.logits(extra=[[100 + i for i in range(n - 1)]] * rows, keep=1)
                sync(lm.device)  # until the GPU is done
                if r:  # the first is a warm-up
                    times.append(time.perf_counter() - start)
                branches.set_rows([list(ids)] * rows)
            points.setdefault(rows, {})[n] = statistics.median(times)
    return points


def kernel_profile(lm: LM, forwards: int = 5) -> dict:
    """CUDA kernels per one-token forward after 256 cached tokens, and the GPU's busy time in them
    (torch.profiler): with the static path's kernels run one by one, and replayed as CUDA graphs."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    out = {}
    for backend in ("eager", lm.fast.config.backend):
        lm.use_fast_path(fast(backend, row_buckets=(1,), token_buckets=(1,)))
        session = lm.session([[(7 + 31 * i) % 200 for i in range(256)]])
        session.logits()
        for i in range(3):  # one new token a forward (extend, then feed): the one-token bucket, recorded
            session.extend(0, [100 + i])
            session.logits()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(forwards):
                session.extend(0, [110 + i])
                session.logits()
        out[backend] = kernel_summary(prof, forwards, lm.device)
    print(f"[kernels] {lm.name}: " + "; ".join(f"{b}: {v['kernels_per_forward']:.0f} kernels, "
                                              f"{v['gpu_busy_ms_per_forward']:.2f} ms busy" for b, v in out.items()), flush=True)
    return out


def kernel_summary(prof: Any, forwards: int, device: torch.device) -> dict:
    """A torch.profiler run of ``forwards`` forwards, per forward: the device's kernels (on a CPU, the operators
    run), the milliseconds the device was busy in them, and the twelve that took longest (name, calls, ms)."""
    def busy_us(row: Any) -> float:
        if device.type != "cuda":
            return row.self_cpu_time_total
        return getattr(row, "self_device_time_total", getattr(row, "self_cuda_time_total", 0))

    rows = [r for r in prof.key_averages() if device.type != "cuda" or busy_us(r) > 0]
    top = sorted(rows, key=lambda r: -busy_us(r))
    return {"kernels_per_forward": sum(r.count for r in rows) / forwards,
            "gpu_busy_ms_per_forward": sum(busy_us(r) for r in rows) / forwards / 1000,
            "top": [(r.key[:80], r.count // forwards, busy_us(r) / forwards / 1000) for r in top[:12]]}


def measure_shape(lm: LM, backend: str, rehearse: bool) -> dict:
    device = lm.device
    out: dict[str, Any] = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    out["eager_ar_ms"] = decode_ms(lm, 16 if rehearse else 48)
    out["eager_decode_ms"] = decode_only_ms(lm, 16 if rehearse else 48)
    out["eager_points"] = points_json(steady_points(lm, EAGER_GRID, repeats=3))
    lm.use_fast_path(fast(backend))
    start = time.perf_counter()
    lm.fast.warm(rows=tuple(reversed(lm.fast.config.row_buckets)), tokens=tuple(reversed(lm.fast.config.token_buckets)))
    sync(device)
    out["warm_s"] = round(time.perf_counter() - start, 2)
    out["graphs"] = lm.fast.captures + lm.fast.compiles
    out["compiled_ar_ms"] = decode_ms(lm, 32 if rehearse else 128)
    out["compiled_decode_ms"] = decode_only_ms(lm, 32 if rehearse else 128)
    out["points"] = points_json(steady_points(lm, GRID if not rehearse else {1: (1, 13), 4: (1, 13)}, repeats=5))
    out["profile_points"] = points_json(profile(lm, {1: (1, 13), 4: (1, 13)}, repeats=3, progress=False).points)
    out["arena_copies"] = lm.fast.arena.copies
    if device.type == "cuda":
        out["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 1e9, 2)
    print(f"[shapes] {lm.name}: AR {out['eager_ar_ms']:.2f} ms/token eager, {out['compiled_ar_ms']:.2f} compiled "
          f"(decode alone {out['eager_decode_ms']:.2f} and {out['compiled_decode_ms']:.2f}) "
          f"({out['graphs']} graphs in {out['warm_s']} s); T(1,1) {out['points']['1']['1'] * 1e3:.2f} ms", flush=True)
    return out


def cycles(target: LM, draft: LM, rehearse: bool) -> dict:
    """Each mode on the compiled path, every forward of both models logged beside the wall time."""
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", draft_stop_below=None,
                             steps=StepConfig(delimiters=DELIMITERS, max_step_tokens=48))
    prompt = target.prompt_ids(PROMPT)
    target.eos_ids = draft.eos_ids = frozenset()
    runs = []
    for mode, kw in MODES:
        log: list[tuple[str, int, int, int, float]] = []
        with target.metered(lambda t: log.append(("target", t.rows, t.n, t.cached, t.seconds))), \
                draft.metered(lambda t: log.append(("draft", t.rows, t.n, t.cached, t.seconds))):
            gen.generate(prompt, mode=mode, max_new_tokens=16, **kw)  # warm: buckets this mode uses
            log.clear()
            sync(target.device)
            start = time.perf_counter()
            result = gen.generate(prompt, mode=mode, max_new_tokens=32 if rehearse else 96, **kw)
            sync(target.device)
            wall = time.perf_counter() - start
        label = mode + "".join(f"@{k}{v}" for k, v in kw.items())
        runs.append({"mode": label, "tokens": result.num_tokens, "wall_s": wall, "forwards": log,
                     "distinct_tokens": len(set(result.token_ids))})
        print(f"[cycles] {target.name} <- {draft.name}: {label} {result.num_tokens / wall:.1f} tok/s, "
              f"{len(log)} forwards, {sum(f[4] for f in log) / wall:.0%} of the wall in forwards", flush=True)
    return {"target": target.name, "draft": draft.name, "runs": runs}


def free(*lms: LM) -> None:
    for lm in lms:
        lm.use_fast_path(None)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-compiled.json")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --rehearse)")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--rehearse", action="store_true", help="a CPU run of the same code: 2-layer shapes, eager backend")
    args = ap.parse_args()
    device = torch.device(args.device or ("cpu" if args.rehearse else "cuda"))
    backend = "eager" if device.type != "cuda" else "cuda-graphs"
    budget = Budget(args.budget_s)
    report = Report(args.out, budget, {"argv": vars(args), "backend": backend, "shapes": {}, "cycles": {}})
    result = report.data
    changes = {"layers": 2} if args.rehearse else {}
    info = report.section(result, "env", 0, lambda: env(device))
    report.section(result, "lossless", 30, lambda: lossless(device, (backend,)))
    kept: dict[str, LM] = {}
    needs = {"qwen2.5-coder-0.5b": 25, "qwen2.5-coder-1.5b": 30, "qwen2.5-7b": 45, "qwen2.5-32b": 90}

    def shapes(names: list[str]) -> None:
        for name in names:
            holder: dict[str, LM] = {}

            def run_shape(name: str = name, holder: dict = holder) -> dict:
                start = time.perf_counter()
                lm = holder["lm"] = real_shape_lm(name, device, initializer_range=INIT, **changes)
                sync(device)
                made = time.perf_counter() - start
                out = measure_shape(lm, backend, args.rehearse)
                out["draw_s"] = round(made, 1)
                return out

            report.section(result["shapes"], name, needs.get(name, 60), run_shape)
            lm = holder.pop("lm", None)
            if lm is not None and lm.fast is not None and DRAFT in kept and name != DRAFT:
                report.section(result["cycles"], name, 20, lambda lm=lm: cycles(lm, kept[DRAFT], args.rehearse))
            if lm is not None and lm.fast is not None and name == "qwen2.5-coder-1.5b" and device.type == "cuda":
                report.section(result, "kernels", 10, lambda lm=lm: kernel_profile(lm))
            if lm is not None and lm.fast is not None and name in (DRAFT, "qwen2.5-coder-1.5b"):
                kept[name] = lm
            elif lm is not None:
                free(lm)
            lm = None
            free()

    def inductor() -> dict:
        """Inductor's kernels recorded as CUDA graphs: the 1.5B at a few bucket shapes, the 0.5B decoding."""
        out = {}
        for name, lm in kept.items():
            rows, tokens = ((1, 4), (1, 16)) if name != DRAFT else ((1,), (1,))
            lm.use_fast_path(fast("inductor+cuda-graphs" if device.type == "cuda" else "inductor",
                                  row_buckets=rows, token_buckets=tokens))
            start = time.perf_counter()
            lm.fast.warm()
            sync(device)
            warm = time.perf_counter() - start
            out[name] = {"compile_s": round(warm, 1), "graphs": lm.fast.compiles, "buckets": [rows, tokens],
                         "ar_ms": decode_ms(lm, 32 if args.rehearse else 128)}
            if name != DRAFT:
                out[name]["points"] = points_json(steady_points(lm, {1: (1, 16), 4: (1, 16)}, repeats=5))
            print(f"[inductor] {name}: {out[name]}", flush=True)
            lm.use_fast_path(fast(backend))
            lm.fast.warm()
        return out

    order = args.shapes.split(",")
    shapes([n for n in order if n in (DRAFT, "qwen2.5-coder-1.5b")])
    if isinstance(info, dict) and info.get("torch_compile"):
        report.section(result, "inductor", 170 if device.type == "cuda" else 60, inductor)
    shapes([n for n in order if n not in (DRAFT, "qwen2.5-coder-1.5b")])
    report.save()
    print(f"wrote {args.out} in {result['total_s']} s")


if __name__ == "__main__":
    main()
