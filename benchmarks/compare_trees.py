"""Two checkouts of this library side by side in one run: the same modes, problems and models, each generation
timed in turn, so a change to the loops can be held to "no slower than before".

    git worktree add /tmp/before <commit>
    .venv/bin/python benchmarks/compare_trees.py --before /tmp/before --after . --modes ar,sd@g12 --offset 200

Each checkout runs in a worker process of its own (its ``src`` first on the path) that loads the offline pair
once; the workers take turns, problem by problem and mode by mode, each mode's first runner alternating from
problem to problem (give an even --limit), so neither runs while the other does and both see the same machine.
The script prints, per mode, each checkout's median tokens a second, their ratio after / before, the median and
range of the per-problem ratios, and whether every answer's tokens are the same. Run it on
a quiet machine: it is a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning.prompts import math_messages
gen = LookaheadGenerator(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype=sys.argv[1])
gen.generate(math_messages("What is 2 + 3?"), mode="ar", max_new_tokens=8)  # warm
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    ask = json.loads(line)
    start = time.perf_counter()
    result = gen.generate(math_messages(ask["question"]), mode=ask["mode"], max_new_tokens=ask["tokens"],
                          **({"gamma": ask["gamma"]} if ask["gamma"] else {}))
    seconds = time.perf_counter() - start
    print(json.dumps({"ids": result.token_ids, "seconds": seconds}), flush=True)
"""


def start(tree: Path, dtype: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve() / "src")}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, dtype], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)
    if json.loads(worker.stdout.readline()).get("ready") is not True:
        raise SystemExit(f"the worker for {tree} did not start")
    return worker


def ask(worker: subprocess.Popen, question: str, mode: str, gamma: int | None, tokens: int) -> dict:
    worker.stdin.write(json.dumps({"question": question, "mode": mode, "gamma": gamma, "tokens": tokens}) + "\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="the checkout to compare against")
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("--modes", default="ar,sd@g12", help="modes, @gN: gamma")
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"))
    ap.add_argument("--offset", type=int, default=200)
    ap.add_argument("--limit", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args(argv)
    for tree in (args.before, args.after):
        if not (tree / "src" / "lookahead_reasoning").is_dir():
            raise SystemExit(f"{tree} is not a checkout of this library (no src/lookahead_reasoning)")
    lines = Path(args.dataset).read_text(encoding="utf-8").splitlines()[args.offset:args.offset + args.limit]
    questions = [json.loads(line)["question"] for line in lines]
    modes = [(m.split("@g")[0], int(m.split("@g")[1]) if "@g" in m else None) for m in args.modes.split(",")]
    workers = {"before": start(args.before, args.dtype), "after": start(args.after, args.dtype)}
    rates: dict[tuple[str, str], list[float]] = {}
    same = {m: True for m, _ in modes}
    for i, question in enumerate(questions):
        for mode, gamma in modes:  # each mode's first runner alternates from problem to problem
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            got = {name: ask(workers[name], question, mode, gamma, args.max_new_tokens) for name in order}
            for name, reply in got.items():
                rates.setdefault((mode, name), []).append(len(reply["ids"]) / reply["seconds"])
            same[mode] &= got["before"]["ids"] == got["after"]["ids"]
    for worker in workers.values():
        worker.stdin.close()
        worker.wait()
    print(f"{len(questions)} problems from {args.offset}, {args.max_new_tokens} tokens, dtype {args.dtype}")
    for mode, gamma in modes:
        before = statistics.median(rates[(mode, "before")])
        after = statistics.median(rates[(mode, "after")])
        label = mode + (f"@g{gamma}" if gamma else "")
        ratios = [a / b for a, b in zip(rates[(mode, "after")], rates[(mode, "before")])]
        print(f"{label:10s} before {before:6.2f} tok/s   after {after:6.2f} tok/s   after/before {after / before:.3f}"
              f"   per problem: median {statistics.median(ratios):.3f}, {min(ratios):.3f}-{max(ratios):.3f}"
              f"   same tokens: {same[mode]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
