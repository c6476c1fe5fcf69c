"""The cost table of llama.cpp's server on this machine: T_t(R, n) of R concurrent step requests of n
tokens after a shared, cached prefix, and the draft's T_d(n).

    .venv/bin/python benchmarks/engine_costs.py --out benchmarks/results/engine-costs-avx512-cpu.json

The same measurement mode ``auto`` makes before its first cycle over an engine
(:func:`lookahead_reasoning.planning.endpoints.ameasure`), over more rows and lengths: R = 1..--rows,
n in --lengths, the median of --repeats tries per point, after a GSM8K prompt. Writes the table
(``CostTable.to_json``, key "table") with a least-squares line ``a_R + b_R n`` per row count and the
batch cost ratio beta(R) = b_R / b_1 (what one more row costs per token), and prints the table.
Notebook 07 reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def cpu_flags() -> list[str]:
    """The CPU features that decide llama.cpp's kernels (what `grep -o avx512_bf16 /proc/cpuinfo` tells)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f in {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "avx_vnni"})


def line_fit(curve: dict[int, float]) -> tuple[float, float]:
    """(a, b) of the least-squares line ``a + b n`` through one row count's (n, seconds) points."""
    import numpy as np

    n, s = np.array(sorted(curve.items()), dtype=float).T
    b, a = np.polyfit(n, s, 1)
    return float(a), float(b)


def main() -> int:
    from engine_run import servers

    from lookahead_reasoning.runtime.engine.pair import EnginePair
    from lookahead_reasoning.planning.endpoints import ameasure
    from lookahead_reasoning.prompts import math_messages

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--dataset", default=str(ROOT.parent / "shared/data/gsm8k/train.jsonl"))
    p.add_argument("--index", type=int, default=400, help="the GSM8K problem whose prompt is the shared prefix")
    p.add_argument("--rows", type=int, default=6)
    p.add_argument("--lengths", default="8,40,128")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    question = json.loads(Path(args.dataset).read_text(encoding="utf-8").splitlines()[args.index])["question"]
    lengths = tuple(int(n) for n in args.lengths.split(","))
    with servers("auto", args.threads, parallel=max(4, args.rows)) as urls:
        pair = EnginePair(urls["target"], urls["draft"])
        pair.warm()
        prompt = pair.prompt_ids(math_messages(question))
        began = time.perf_counter()
        costs = asyncio.run(ameasure(pair.target, pair.draft, prompt, rows=args.rows, repeats=args.repeats,
                                     lengths=lengths))
        seconds = time.perf_counter() - began
    fit = {r: line_fit(curve) for r, curve in sorted(costs.target.points.items())}
    b1 = fit[1][1]
    data = {"table": costs.to_json(), "fit": {str(r): [round(a, 5), round(b, 6)] for r, (a, b) in fit.items()},
            "beta": {str(r): round(b / b1, 3) for r, (_, b) in fit.items()},
            "draft_fit": [round(x, 6) for x in line_fit(costs.draft.points[1])], "prefix_tokens": len(prompt),
            "lengths": list(lengths), "repeats": args.repeats, "measure_s": round(seconds, 1),
            "machine": {"cpu_flags": cpu_flags(), "cores": os.cpu_count(), "python": platform.python_version()},
            "server": "llama-server (llama-cpp-python 0.3.36 sdist), Q4_K_M, -t %d" % args.threads,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"prefix {len(prompt)} tokens, measured in {seconds:.0f} s; T_t(R, n) in seconds:")
    print("  R " + "".join(f"{'n=' + str(n):>9}" for n in lengths) + "    a_R      b_R   beta(R)")
    for r, (a, b) in fit.items():
        cells = "".join(f"{costs.target(r, n):9.2f}" for n in lengths)
        print(f"{r:3d} {cells}  {a:6.3f}  {b:7.4f}  {b / b1:6.2f}")
    a, b = line_fit(costs.draft.points[1])
    print(f"draft T_d(n) = {a:.3f} + {b:.4f} n  (c per token against the target's b_1: {b / b1:.2f})")
    print(f"overlap: a draft and a target request at once cost {costs.overlap:.2f}x the dearer alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
