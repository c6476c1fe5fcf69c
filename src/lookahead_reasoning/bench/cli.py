"""``bench`` and ``report`` sub-commands of the ``lookahead-reasoning`` CLI."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_bench_commands(sub: argparse._SubParsersAction) -> None:
    from .runner import ALL_MODES

    b = sub.add_parser("bench", help="run modes side by side on a dataset; results appended to a JSONL (resumable)")
    b.add_argument("--dataset", required=True, help="GSM8K/AIME-format jsonl path, or a datasets-library name")
    b.add_argument("--out", default="results/bench.jsonl", help="results JSONL (rerun with the same path to resume)")
    b.add_argument("--modes", default="ar,lr",
                   help=f"comma-separated, from: {','.join(ALL_MODES)}; a suffix sets gamma or k for one entry, "
                        "e.g. sd@g6, lr@k2, lr-sd@k2g3 (a sweep in one run)")
    b.add_argument("--limit", type=int, default=None)
    b.add_argument("--offset", type=int, default=0)
    b.add_argument("--sample", type=int, default=None, help="seeded random subset of this size")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--on-error", default="raise", choices=["raise", "skip"], help="malformed dataset lines")
    b.add_argument("--target", default="qwen2.5-coder-1.5b")
    b.add_argument("--draft", default="qwen2.5-coder-0.5b")
    b.add_argument("--draft-quantize", default="auto", choices=["auto", "int8", "none"],
                   help="auto (int8 for a CPU draft) | int8 | none: dynamic int8 linears make the draft 2-3x cheaper")
    b.add_argument("--verifier", default="embedding")
    b.add_argument("--threshold", type=float, default=None)
    b.add_argument("-k", type=int, default=3)
    b.add_argument("--gamma", type=int, default=4)
    b.add_argument("--draft-stop-below", type=float, default=None,
                   help="modes sd and lr-sd: the draft model stops after a token it gave less than this probability (e.g. 0.4 with a gamma of 12)")
    b.add_argument("--max-new-tokens", type=int, default=512)
    b.add_argument("--max-step-tokens", type=int, default=100)
    b.add_argument("--token-sd-target", default="draft", choices=["ngram", "draft"])
    b.add_argument("--dtype", default="auto")
    b.add_argument("--device", default=None)
    b.add_argument("--cpu-linear", default="auto", choices=["auto", "onednn", "default"])
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--report", action="store_true", help="print the report when done")
    b.set_defaults(func=cmd_bench)

    r = sub.add_parser("report", help="markdown table and plots from a results JSONL (shards merged)")
    r.add_argument("results")
    r.add_argument("--plots", default=None, help="folder for PNG plots (default: next to the results)")
    r.add_argument("--no-plots", action="store_true")
    r.set_defaults(func=cmd_report)


def cmd_bench(args: argparse.Namespace) -> int:
    from .runner import BenchConfig, run_bench

    config = BenchConfig(
        dataset=args.dataset, out=args.out, modes=args.modes, limit=args.limit, offset=args.offset,
        sample=args.sample, seed=args.seed, on_error=args.on_error, target=args.target, draft=args.draft,
        verifier=args.verifier, threshold=args.threshold, k=args.k, gamma=args.gamma,
        max_new_tokens=args.max_new_tokens, max_step_tokens=args.max_step_tokens,
        token_sd_target=args.token_sd_target, dtype=args.dtype, device=args.device,
        cpu_linear=args.cpu_linear, draft_quantize=args.draft_quantize, draft_stop_below=args.draft_stop_below)
    path = run_bench(config, progress=not args.no_progress)
    print(f"results: {path}")
    if args.report:
        return cmd_report(argparse.Namespace(results=args.out, plots=None, no_plots=False))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .report import load_results, markdown_table, plot, summarize

    records = load_results(args.results)
    rows = summarize(records)
    print(markdown_table(rows))
    if not args.no_plots:
        folder = args.plots or str(Path(args.results).with_suffix("")) + "-plots"
        for p in plot(rows, records, folder):
            print(f"plot: {p}")
    return 0
