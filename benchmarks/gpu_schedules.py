"""Real runs' forwards, timed on a GPU: one command, one JSON file, under 8 minutes.

No weights travel to a GPU machine, so acceptance cannot be measured there; but what a run's forwards
are (rows, new tokens, cached columns, forks, selections, rollbacks) depends on acceptance only, and
``benchmarks/record_schedules.py`` recorded them for the real offline pair on GSM8K. This script replays
those schedules on the GPU's compiled path with random weights of the same shapes (and, as a what-if,
with targets of the 7B and 32B shapes against the draft's): real acceptance, GPU timing of the same forwards.

1. ``env``: the GPU, torch and transformers.
2. ``lossless``: tiny float32 models, greedy: every mode on the compiled path writes the eager path's
   tokens (``gpu_compiled.lossless``).
3. ``context``: the 1.5B shape's greedy AR milliseconds per token after 1k, 4k, 16k and 32k cached
   tokens (the cache grows to hold them; attention reads the used columns rounded up), and after 4k
   with q/k/v and gate/up run as separate products and each RMS norm as the model's own operations
   (``FastPathConfig(fuse=False)``), beside the fused.
   ``flex``: the same contexts with flex attention (``FastPathConfig(attention="flex")``: its compiled
   decoding kernel splits the key columns over thread blocks) instead of the masked SDPA kernel.
   ``inductor``: the 1.5B shape's decoding bucket compiled by inductor (recorded as CUDA graphs):
   seconds to compile into an empty kernel cache and again from the cache, and AR ms a token at 4k.
4. ``replay``: per target shape, first its greedy AR milliseconds a token after 4k cached tokens and T(R, n)
   for up to 4 rows of 1 and 13 tokens (beta), then problem by problem while its share of the budget lasts,
   every configuration's schedule replayed once untimed (its graphs recorded) and then timed: wall seconds,
   seconds inside forwards, forwards per model.

    python benchmarks/gpu_schedules.py --out gpu-schedules.json                     # a CUDA machine
    python benchmarks/gpu_schedules.py --rehearse --out rehearsal.json              # the same code on a CPU
    python benchmarks/gpu_schedules.py --report gpu-schedules.json                  # the tables, anywhere

``--report`` prices every replayed schedule with the cost table the planner used (the H100's measured
T(R, n)) and sets the price beside the replayed time, and each configuration's tokens per second beside
``ar``'s on the same problems.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_compiled import (  # noqa: E402
    Budget, Report, env, fast, fixed_ids, free, greedy_decoder, lossless, points_json, shared_vocab, steady_points,
    sync)

from lookahead_reasoning.planning.costs import price_schedule  # noqa: E402
from lookahead_reasoning.runtime.schedule import host_gaps, replay  # noqa: E402
from lookahead_reasoning.testing import real_shape_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = ROOT / "benchmarks" / "results" / "schedules" / "gsm8k-100-119.jsonl.gz"
DRAFT = "qwen2.5-coder-0.5b"
TARGETS = ("qwen2.5-coder-1.5b", "qwen2.5-7b", "qwen2.5-32b")
SHARE = {"qwen2.5-coder-1.5b": 0.4, "qwen2.5-7b": 0.25, "qwen2.5-32b": 0.35}  # of the replay section's seconds
CONTEXTS = (1024, 4096, 16384, 32768)
REHEARSAL_SHAPE = {"layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "intermediate": 256}  # every shape, on a CPU


def load_schedules(path: Path, problems: int | None = None) -> list[dict]:
    """The recorded runs, grouped by problem in file order (``problems``: the first few only)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    order = list(dict.fromkeys(r["problem_id"] for r in records))
    keep = set(order[:problems]) if problems else set(order)
    return [r for r in records if r["problem_id"] in keep]


def context_ms(lm: Any, contexts: tuple[int, ...], tokens: int, chunk: int = 4096) -> dict[str, float]:
    """Greedy AR ms a token after each of ``contexts`` cached tokens (prefilled in chunks; decode only timed)."""
    vocab = shared_vocab(lm)
    out = {}
    for context in contexts:
        ids = fixed_ids(lm, context)
        session = lm.session([ids[:chunk]])
        session.logits()
        for at in range(chunk, context, chunk):
            session.extend(0, ids[at:at + chunk])
            session.logits()
        for i in range(8):  # warm: this span's graph recorded
            session.extend(0, [(11 + i) % vocab])
            session.logits()
        sync(lm.device)
        start = time.perf_counter()
        for i in range(tokens):
            session.extend(0, [(13 + 7 * i) % vocab])
            session.argmax().tolist()  # read, as a decoding loop reads each token before the next forward
        sync(lm.device)
        out[str(context)] = round((time.perf_counter() - start) / tokens * 1000, 3)
        del session
    print(f"[context] {lm.name}: " + ", ".join(f"{c} cached: {ms} ms" for c, ms in out.items()), flush=True)
    return out


def compile_costs(lm: Any, backend: str, contexts: tuple[int, ...], tokens: int) -> dict:
    """What inductor's kernels cost to make and what they give, for the decoding bucket (one row, one token):
    seconds to compile into an empty kernel cache, then again after dynamo forgets them (the kernels loaded
    from the disk cache, as a later run would), the compiles each made, and AR ms a token at ``contexts``."""
    import tempfile

    import torch._dynamo
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    out: dict[str, Any] = {"backend": backend}
    with tempfile.TemporaryDirectory() as cache, temporary_cache_dir(cache):
        for name in ("cold", "cached"):
            torch._dynamo.reset()
            lm.use_fast_path(fast(backend, length=4096))
            sync(lm.device)
            start = time.perf_counter()
            lm.fast.warm(rows=(1,), tokens=(1,), spans=(contexts[0],))
            sync(lm.device)
            out[f"{name}_compile_s"] = round(time.perf_counter() - start, 2)
            out[f"{name}_compiles"] = lm.fast.compiles
        out["ms_per_token"] = context_ms(lm, contexts, tokens)
        out["compiles_after"] = lm.fast.compiles  # the contexts' other spans compile nothing more
    print(f"[inductor] {out}", flush=True)
    return out


def greedy_tokens(lm: Any, steps: int) -> list[int]:
    """``steps`` greedy tokens after :func:`gpu_compiled.fixed_ids`' prompt (to compare two attentions' choices)."""
    step = greedy_decoder(lm)
    return [step() for _ in range(steps)]


def replay_shape(target: Any, draft: Any, records: list[dict], seconds: float) -> dict:
    """Problem by problem while ``seconds`` last: each record replayed untimed, then timed."""
    models = {"target": target, "draft": draft}
    device = target.device
    budget = Budget(seconds)
    out: list[dict] = []
    problems = list(dict.fromkeys(r["problem_id"] for r in records))
    for problem in problems:
        mine = [r for r in records if r["problem_id"] == problem]
        if budget.left() < 0:
            break
        for rec in mine:
            replay(rec["events"], models, sync=lambda: sync(device))  # graphs recorded, allocator warm
        for rec in mine:
            done = replay(rec["events"], models, sync=lambda: sync(device))
            out.append({"problem_id": problem, "config": rec["config"], "new_tokens": rec["new_tokens"],
                        "wall_s": round(done.wall_s, 5), "forward_s": round(done.forward_s, 5),
                        "forwards": done.forwards})
        ar = next((o for o in out if o["problem_id"] == problem and o["config"] == "ar"), None)
        print(f"[replay] {target.name}: {problem}: " + ", ".join(
            f"{o['config']} {o['new_tokens'] / o['wall_s']:.0f} tok/s" for o in out if o["problem_id"] == problem)
            + (f" (ar {ar['new_tokens'] / ar['wall_s']:.0f})" if ar else ""), flush=True)
    return {"target": target.name, "draft": draft.name, "runs": out,
            "graphs": target.fast.captures + draft.fast.captures if target.fast and draft.fast else None,
            "grown": (target.fast.grown, draft.fast.grown) if target.fast and draft.fast else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-schedules.json")
    ap.add_argument("--schedules", default=str(SCHEDULES))
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --rehearse)")
    ap.add_argument("--budget-s", type=float, default=440.0)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--rehearse", action="store_true",
                    help="a CPU run of the same code: small shapes, backend rehearsed-graphs, one problem, short contexts")
    ap.add_argument("--report", default=None, help="print the tables of a finished run's JSON and stop")
    args = ap.parse_args(argv)
    if args.report:
        print_report(json.loads(Path(args.report).read_text(encoding="utf-8")), Path(args.schedules))
        return 0
    device = torch.device(args.device or ("cpu" if args.rehearse else "cuda"))
    backend = "rehearsed-graphs" if device.type != "cuda" else "cuda-graphs"
    budget = Budget(args.budget_s)
    report = Report(args.out, budget, {"argv": vars(args), "backend": backend, "replay": {}})
    result = report.data
    changes = REHEARSAL_SHAPE if args.rehearse else {}
    report.section(result, "env", 0, lambda: env(device))
    report.section(result, "lossless", 30, lambda: lossless(device, (backend,)))
    records = load_schedules(Path(args.schedules), problems=1 if args.rehearse else None)
    draft = real_shape_lm(DRAFT, device, **changes).use_fast_path(fast(backend))

    def ar_ms_4k(lm: Any) -> dict[str, float]:
        """AR milliseconds a token after 4k cached tokens (256 in a rehearsal)."""
        return context_ms(lm, (256,) if args.rehearse else (4096,), 16 if args.rehearse else 64)

    report.section(result, "draft", 10, lambda: {"ar_ms_4k": ar_ms_4k(draft)})

    def context() -> dict:
        lm = real_shape_lm("qwen2.5-coder-1.5b", device, **changes).use_fast_path(fast(backend, length=4096))
        try:
            ctx = (256, 1024) if args.rehearse else CONTEXTS
            out = {"backend": backend, "ms_per_token": context_ms(lm, ctx, 16 if args.rehearse else 64),
                   "columns": lm.fast.arena.shape.length, "grown": lm.fast.grown}
            lm.use_fast_path(fast(backend, length=4096, fuse=False))  # the same weights, products and norms unfused
            out["unfused_ms_per_token"] = context_ms(lm, ctx[:1] if args.rehearse else (4096,), 16 if args.rehearse else 64)
            return out
        finally:
            free(lm)

    report.section(result, "context", 5 if args.rehearse else 45, context)

    def flex() -> dict:
        lm = real_shape_lm("qwen2.5-coder-1.5b", device, **changes).use_fast_path(
            fast(backend, length=4096, attention="flex"))
        try:
            ctx = (256,) if args.rehearse else CONTEXTS
            out = {"backend": backend, "attention": "flex", "ms_per_token": context_ms(lm, ctx, 8 if args.rehearse else 64)}
            flex_tokens = greedy_tokens(lm, 32)
            lm.use_fast_path(fast(backend, length=4096))
            sdpa_tokens = greedy_tokens(lm, 32)
            out["same_greedy_tokens_as_sdpa"] = next(
                (i for i, (a, b) in enumerate(zip(flex_tokens, sdpa_tokens)) if a != b), len(sdpa_tokens))
            print(f"[flex] {out}", flush=True)
            return out
        finally:
            free(lm)

    report.section(result, "flex", 5 if args.rehearse else 60, flex)

    def inductor() -> dict:
        backend_i = "inductor+cuda-graphs" if device.type == "cuda" else "inductor"
        lm = real_shape_lm("qwen2.5-coder-1.5b", device, **changes)
        try:
            return compile_costs(lm, backend_i, (256,) if args.rehearse else (4096,), 16 if args.rehearse else 64)
        finally:
            free(lm)

    report.section(result, "inductor", 5 if args.rehearse else 90, inductor)
    left = budget.left() - 10
    for name in args.targets.split(","):
        holder: dict[str, Any] = {}

        def run(name: str = name, holder: dict = holder) -> dict:
            start = time.perf_counter()
            target = holder["lm"] = real_shape_lm(name, device, **changes).use_fast_path(fast(backend))
            sync(device)
            shape = {"ar_ms_4k": ar_ms_4k(target),
                     "points": points_json(steady_points(target, {1: (1, 13), 2: (1, 13), 4: (1, 13)}, repeats=3))}
            out = replay_shape(target, draft, records, SHARE.get(name, 0.3) * left - (time.perf_counter() - start))
            out["shape"] = shape
            out["draw_s"] = round(time.perf_counter() - start, 1)
            return out

        report.section(result["replay"], name, 30, run)
        free(*holder.values())
        holder.clear()
    free(draft)
    report.save()
    print(f"wrote {args.out} in {result['total_s']} s")
    return 0


# ---------------------------------------------------------------------------------------------- the report

def print_report(data: dict, schedules: Path) -> None:
    """Per target shape and configuration: median tokens/s, speed against ar on the same problems, the
    price the H100 table puts on the same forwards against the replayed time, and the recorded host time."""
    from record_schedules import h100_costs

    records = {(r["problem_id"], r["config"]): r for r in load_schedules(schedules)}
    costs = h100_costs()
    print(f"device: {data.get('env', {}).get('name', data.get('env', {}).get('device'))}, backend {data.get('backend')}")
    ctx = data.get("context", {}).get("ms_per_token")
    if ctx:
        print("AR ms a token by cached tokens (1.5B shape): " + ", ".join(f"{c}: {ms}" for c, ms in ctx.items()))
    flex = (data.get("flex") or {}).get("ms_per_token")
    if flex:
        print("the same with flex attention: " + ", ".join(f"{c}: {ms}" for c, ms in flex.items()))
    apart = data.get("context", {}).get("unfused_ms_per_token")
    if apart:
        print("the same unfused (q/k/v and gate/up as separate products, the model's own norms): "
              + ", ".join(f"{c}: {ms}" for c, ms in apart.items()))
    ind = data.get("inductor") or {}
    if ind.get("ms_per_token"):
        print(f"the same compiled by inductor ({ind['backend']}): " + ", ".join(
            f"{c}: {ms}" for c, ms in ind["ms_per_token"].items()) + f"; the decoding bucket compiled in "
            f"{ind['cold_compile_s']} s, {ind['cached_compile_s']} s from the kernel cache")
    for name, shape in data.get("replay", {}).items():
        runs = shape.get("runs") if isinstance(shape, dict) else None
        if not runs:
            print(f"{name}: {shape.get('error') or shape.get('skipped') if isinstance(shape, dict) else shape}")
            continue
        print(f"\n{name} <- {shape['draft']} ({len({r['problem_id'] for r in runs})} problems)")
        facts = shape.get("shape", {})
        if facts:
            p = {int(r): {int(n): v for n, v in row.items()} for r, row in facts["points"].items()}
            ms = list(facts["ar_ms_4k"].values())[0]
            print(f"AR after 4k cached tokens: {ms} ms a token; beta(4 rows, 1 token) {p[4][1] / p[1][1]:.2f}, "
                  f"beta(4 rows, 13 tokens) {p[4][13] / p[1][13]:.2f}")
        print("| configuration | tok/s (median) | vs ar (median of per-problem ratios) | priced / replayed "
              "(forwards) | host s a token (recorded) |")
        print("|---|---|---|---|---|")
        ar = {r["problem_id"]: r for r in runs if r["config"] == "ar"}
        for config in dict.fromkeys(r["config"] for r in runs):
            mine = [r for r in runs if r["config"] == config]
            rates = [r["new_tokens"] / r["wall_s"] for r in mine]
            vs = [(r["new_tokens"] / r["wall_s"]) / (ar[r["problem_id"]]["new_tokens"] / ar[r["problem_id"]]["wall_s"])
                  for r in mine if r["problem_id"] in ar]
            ratio, host = [], []
            for r in mine:
                rec = records.get((r["problem_id"], config))
                if rec is not None:
                    if name == "qwen2.5-coder-1.5b":
                        ratio.append(price_schedule(rec["events"], costs) / r["forward_s"])
                    host.append(sum(host_gaps(rec["events"])) / max(1, rec["new_tokens"]))
            med = (lambda xs: f"{statistics.median(xs):.2f}" if xs else "-")
            print(f"| {config} | {med(rates)} | {med(vs)} | {med(ratio)} | {med([h * 1000 for h in host])} ms |")


if __name__ == "__main__":
    raise SystemExit(main())
