"""Many requests at once over llama.cpp's server: does speculation still pay under load?

    .venv/bin/python benchmarks/engine_load.py --out benchmarks/results/engine-load-cpu \
        --offset 600 --limit 4 --max-new-tokens 512 --modes ar,sd,auto --concurrency 1,2,4

For each concurrency C the engine benchmark runs C problems of one mode at once (``--concurrency``
of ``bench``) into its own results file, ``<out>-c<C>.jsonl`` (each resumes). One set of servers
serves every C (the same slots and cache), so the rows differ only in the load. The table: per C and
mode, throughput (all tokens over the summed wall time of the batches) and the median latency of
one request; written as markdown to ``<out>.md`` and printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def row(records: list[dict]) -> dict:
    """Throughput and latency of one (C, mode): a batch's wall time is counted once."""
    batches: dict[object, float] = {}
    for r in records:  # C = 1 runs have no batch: each is its own
        batches[r.get("batch") or id(r)] = r.get("batch_wall_s") or r["wall_time_s"]
    tokens = sum(r["new_tokens"] for r in records)
    return {"problems": len(records), "throughput": tokens / sum(batches.values()),
            "latency": float(np.median([r["wall_time_s"] for r in records])),
            "per_request": float(np.median([r["tokens_per_s"] for r in records]))}


def table(out: str, levels: list[int], modes: list[str]) -> str:
    from lookahead_reasoning.bench.results import read_records

    lines = ["| C | mode | problems | throughput (tok/s, all requests) | vs `ar` at this C | median latency (s) "
             "| median tok/s of one request |", "|---|---|---|---|---|---|---|"]
    for c in levels:
        path = Path(f"{out}-c{c}.jsonl")
        records = list(read_records(path)) if path.exists() else []
        rows = {m: row([r for r in records if r["mode"] == m]) for m in modes if any(r["mode"] == m for r in records)}
        for mode, r in rows.items():
            ratio = r["throughput"] / rows["ar"]["throughput"] if "ar" in rows else float("nan")
            lines.append(f"| {c} | `{mode}` | {r['problems']} | {r['throughput']:.2f} | {ratio:.2f}x | "
                         f"{r['latency']:.1f} | {r['per_request']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    from engine_run import servers

    from lookahead_reasoning.bench.engine import EngineBench, run_engine_bench

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="results prefix: <out>-c<C>.jsonl per C, <out>.md the table")
    p.add_argument("--dataset", default=str(ROOT.parent / "shared/data/gsm8k/train.jsonl"))
    p.add_argument("--offset", type=int, default=600)
    p.add_argument("--limit", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--modes", default="ar,sd,auto")
    p.add_argument("--concurrency", default="1,2,4")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    if not args.table_only:
        with servers(args.modes, args.threads, parallel=3 * max(levels), context=8192 * max(levels)) as urls:
            for c in levels:
                run_engine_bench(EngineBench(args.dataset, f"{args.out}-c{c}.jsonl", **urls,
                                             modes=args.modes, limit=args.limit, offset=args.offset,
                                             max_new_tokens=args.max_new_tokens, concurrency=c))
    text = table(args.out, levels, args.modes.split(","))
    Path(f"{args.out}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
