"""The forward schedules of real runs: what the offline pair's forwards were, mode by mode, to replay on a GPU.

    .venv/bin/python benchmarks/record_schedules.py --out runs/schedules.jsonl --offset 100 --limit 20
    .venv/bin/python benchmarks/record_schedules.py --out runs/schedules.jsonl --pack benchmarks/results/schedules/gsm8k-100-119.jsonl.gz
    .venv/bin/python benchmarks/record_schedules.py --rehearse --out /tmp/rehearsal.jsonl   # tiny models, 2 problems, 32 tokens

Each GSM8K problem is answered greedily by the real offline pair (bf16 where the CPU has it, else float32;
the draft as loaded, not int8, as it would run on a GPU) in every configuration of :data:`CONFIGS`, with a
:class:`~lookahead_reasoning.runtime.schedule.ScheduleRecorder` on both models: every session verb
(sessions, forks, selections, rollbacks, forwards with their rows, new tokens and cached columns, and the
host time between forwards) goes into the record beside the text, the answer's grade and the run's
summary. Mode ``auto`` plans with the cost table measured on an H100's compiled path
(``benchmarks/results/gpu-compiled-h100-recheck.json``, the 1.5B and 0.5B shapes): its plans are the ones
it would choose there, on this pair's real acceptance. Configurations run interleaved per problem, one
JSON line each, appended as they finish; a rerun skips what is there. ``--pack`` writes the gzipped file
that ``benchmarks/gpu_schedules.py`` replays.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
H100_TABLE = ROOT / "benchmarks" / "results" / "gpu-compiled-h100-recheck.json"
TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
# (label, mode, verifier, k): what is recorded for every problem
CONFIGS = (("ar", "ar", "exact", None), ("sd", "sd", "exact", None),
           ("lr@k1-exact", "lr", "exact", 1), ("lr@k2-exact", "lr", "exact", 2),
           ("lr@k1-likelihood", "lr", "likelihood", 1), ("lr@k2-likelihood", "lr", "likelihood", 2),
           ("lr-sd", "lr-sd", "exact", None), ("auto-h100", "auto", "exact", None))


def h100_costs(path: Path = H100_TABLE) -> Any:
    """The cost table of the 1.5B target and 0.5B draft shapes on the H100's compiled path."""
    from lookahead_reasoning.planning.costs import CostGrid, CostTable

    shapes = json.loads(path.read_text(encoding="utf-8"))["shapes"]

    def grid(name: str) -> CostGrid:
        points = shapes[name]["points"]
        return CostGrid({int(r): {int(n): float(s) for n, s in row.items()} for r, row in points.items()}, prefix=256)

    return CostTable(grid(TARGET), grid(DRAFT))


def done(path: Path) -> set[tuple[str, str]]:
    """(problem, configuration) pairs already in the file (a torn last line is dropped)."""
    if not path.exists():
        return set()
    pairs, lines = set(), path.read_text(encoding="utf-8").splitlines()
    good = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        good.append(line)
        pairs.add((rec["problem_id"], rec["config"]))
    if len(good) != len(lines):
        path.write_text("".join(g + "\n" for g in good), encoding="utf-8")
    return pairs


def generators(rehearse: bool, dtype: str) -> tuple[dict[str, Any], Any, Any]:
    """One generator per verifier over one pair of models, and the models."""
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.planning import PlannerConfig
    from lookahead_reasoning.runtime.lm import LM
    from lookahead_reasoning.runtime.pair import as_lm
    from lookahead_reasoning.testing import perturbed_copy, tiny_model

    if rehearse:
        target = LM.from_loaded(tiny_model("qwen2", seed=0))
        draft = perturbed_copy(target, 0.3, seed=1)
    else:
        target, draft = as_lm(TARGET, dtype=dtype), as_lm(DRAFT, dtype=dtype)
    planner = PlannerConfig(refine=False, progress=False)  # the H100's table is not moved by this CPU's timings
    gens = {v: LookaheadGenerator(target=target, draft=draft, verifier=v, precision={"draft": None}, planner=planner)
            for v in ("exact", "likelihood")}
    gens["exact"].plan_with(h100_costs())
    return gens, target, draft


def run_one(gens: dict[str, Any], target: Any, draft: Any, problem: Any, config: tuple, max_new_tokens: int) -> dict:
    import torch

    from lookahead_reasoning.bench.grading import grade
    from lookahead_reasoning.prompts import math_messages
    from lookahead_reasoning.runtime.schedule import ScheduleRecorder, summary

    label, mode, verifier, k = config
    gen = gens[verifier]
    recorder = ScheduleRecorder()
    recorder.attach(target, "target")
    recorder.attach(draft, "draft")
    try:
        with recorder.recording() as events:
            start = time.perf_counter()
            result = gen.generate(math_messages(problem.question), mode=mode, k=k, max_new_tokens=max_new_tokens)
            wall = time.perf_counter() - start
    finally:
        ScheduleRecorder.detach(target)
        ScheduleRecorder.detach(draft)
    g = grade(result.text, problem.answer)
    stats = result.summary()
    plans = [c.plan.plan for c in getattr(result.stats, "cycles", []) if c.plan is not None]
    predicted = [c.plan.predicted_tok_s for c in getattr(result.stats, "cycles", []) if c.plan is not None]
    return {"problem_id": problem.id, "index": problem.index, "config": label, "mode": mode, "verifier": verifier,
            "threshold": getattr(gen.verifier, "threshold", None), "k": k, "new_tokens": result.num_tokens,
            "token_ids": list(result.token_ids), "correct": g.correct, "predicted": g.predicted, "gold": problem.answer,
            "wall_s": round(wall, 3), "summary": stats, "plans": plans, "predicted_tok_s": predicted,
            "schedule_summary": summary(events), "events": events,
            "dtype": str(next(target.model.parameters()).dtype), "threads": torch.get_num_threads(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def pack(src: Path, dest: Path) -> None:
    """The records without their token ids' duplicates, gzipped, in problem and configuration order."""
    records = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    order = {c[0]: i for i, c in enumerate(CONFIGS)}
    records.sort(key=lambda r: (r["index"], order.get(r["config"], 99)))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dest, "wt", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    print(f"packed {len(records)} records into {dest} ({dest.stat().st_size / 1e6:.2f} MB)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSONL file to append to (resumed when it exists)")
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"))
    ap.add_argument("--offset", type=int, default=100)
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS))
    ap.add_argument("--dtype", default="auto", help="auto: bfloat16 where the CPU has avx512_bf16, else float32")
    ap.add_argument("--rehearse", action="store_true", help="tiny random models, 2 problems, 32 tokens")
    ap.add_argument("--pack", default=None, help="write the records, gzipped, to this path and stop")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.pack:
        pack(out, Path(args.pack))
        return 0
    from tqdm import tqdm

    from lookahead_reasoning.bench.datasets import load_dataset
    from lookahead_reasoning.models.placement import cpu_supports_bf16

    wanted = [c for c in CONFIGS if c[0] in args.configs.split(",")]
    unknown = set(args.configs.split(",")) - {c[0] for c in CONFIGS}
    if unknown:
        ap.error(f"unknown configurations {sorted(unknown)}; known: {', '.join(c[0] for c in CONFIGS)}")
    if args.rehearse:
        args.limit, args.max_new_tokens = min(args.limit, 2), min(args.max_new_tokens, 32)
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if cpu_supports_bf16() else "float32")
    problems = load_dataset(args.dataset, offset=args.offset, limit=args.limit)
    have = done(out)
    todo = [(p, wanted[(i + j) % len(wanted)]) for i, p in enumerate(problems) for j in range(len(wanted))
            if (p.id, wanted[(i + j) % len(wanted)][0]) not in have]
    if not todo:
        print(f"{out}: every run is there")
        return 0
    gens, target, draft = generators(args.rehearse, dtype)
    gens["exact"].warmup(["ar", "sd", "lr"], tokens=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        for problem, config in tqdm(todo, desc="schedules", unit="run"):
            rec = run_one(gens, target, draft, problem, config, args.max_new_tokens)
            with out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    except KeyboardInterrupt:
        print(f"\nstopped; every finished run is kept in {out}: run the same command again to go on", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
