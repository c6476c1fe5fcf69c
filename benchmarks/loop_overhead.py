"""What the one loop adds to a token against the plain loops, for the modes that speculate on no step.

    .venv/bin/python benchmarks/loop_overhead.py --offset 200 --limit 5 --max-new-tokens 256

``LookaheadGenerator.generate`` runs every mode as a plan of one loop (``decoding.generate_cycles``: cycles of a
policy's plans over this process's runtime); ``ar`` and ``sd`` are plans of no drafted step whose one cycle
writes the whole answer. The plain loops the notebooks teach from, ``decoding.generate`` (autoregressive)
and ``decoding.generate_sd`` (token SD), do the same work with nothing around them. Both run here on the
same loaded offline pair, greedy, problem by problem in alternating order, and the script prints each
mode's median seconds a token both ways, their ratio, and whether the tokens are the same. Run it on a
quiet machine: it is a timing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"))
    ap.add_argument("--offset", type=int, default=200)
    ap.add_argument("--limit", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args(argv)
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.bench.datasets import load_dataset
    from lookahead_reasoning.decoding import generate, generate_sd
    from lookahead_reasoning.prompts import math_messages
    from lookahead_reasoning.settings import Settings

    gen = LookaheadGenerator(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype=args.dtype)
    settings = gen.settings.with_overrides(max_new_tokens=args.max_new_tokens, gamma=12)
    plain = {"ar": lambda ids: generate(gen.target, ids, max_new_tokens=args.max_new_tokens),
             "sd": lambda ids: generate_sd(gen.target, ids, gen.draft, Settings(
                 gamma=12, draft_stop_below=settings.draft_stop_below, max_new_tokens=args.max_new_tokens))}
    one = {mode: (lambda ids, mode=mode: gen.generate(ids, mode=mode, max_new_tokens=args.max_new_tokens))
           for mode in plain}
    gen.warmup(["ar", "sd"], tokens=8)
    per_token: dict[tuple[str, str], list[float]] = {}
    same: dict[str, int] = {mode: 0 for mode in plain}
    problems = load_dataset(args.dataset, offset=args.offset, limit=args.limit)
    for i, problem in enumerate(problems):
        ids = gen.target.prompt_ids(math_messages(problem.question))
        for mode in plain:
            order = (("plain", plain[mode]), ("one loop", one[mode]))
            results = {}
            for loop, run in (order if i % 2 == 0 else order[::-1]):
                start = time.perf_counter()
                result = run(ids)
                seconds = time.perf_counter() - start
                per_token.setdefault((mode, loop), []).append(seconds / max(1, result.num_tokens))
                results[loop] = result.token_ids
            same[mode] += results["plain"] == results["one loop"]
            print(f"{problem.id} {mode}: plain {per_token[(mode, 'plain')][-1] * 1e3:.1f} ms/token, one loop "
                  f"{per_token[(mode, 'one loop')][-1] * 1e3:.1f}", flush=True)
    print(f"\n{len(problems)} problems (offset {args.offset}), {args.max_new_tokens} tokens, greedy, "
          f"{next(gen.target.model.parameters()).dtype}")
    print("| mode | plain loop, ms a token (median) | one loop | one loop / plain (median of per-problem ratios) | same tokens |")
    print("|---|---|---|---|---|")
    for mode in plain:
        a, b = per_token[(mode, "plain")], per_token[(mode, "one loop")]
        ratio = statistics.median(y / x for x, y in zip(a, b))
        print(f"| {mode} | {statistics.median(a) * 1e3:.1f} | {statistics.median(b) * 1e3:.1f} | {ratio:.3f} | "
              f"{same[mode]}/{len(problems)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
