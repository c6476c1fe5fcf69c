"""``bench`` and ``report`` sub-commands of the ``lookahead-reasoning`` CLI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import require
from ..options import add_generator_args, check_cache_writable, check_fits_context, generator_spec
from ..presets import DEFAULT_MAX_NEW_TOKENS
from .datasets import DEFAULT_DATASET, load_dataset
from .report import by_verifier, fidelity_table, load_results, markdown_table, plot, summarize
from .results import as_paths
from .runner import (ALL_MODES, BenchConfig, check_same_setup, check_writable, parse_mode, parse_modes, run_bench,
                     shard_path)


def add_bench_commands(sub: argparse._SubParsersAction) -> None:

    b = sub.add_parser("bench", help="run modes side by side on a dataset; results appended to a JSONL (resumable)")
    d = b.add_argument_group("problems and modes")
    d.add_argument("--dataset", default=DEFAULT_DATASET, help=f"GSM8K/AIME-format jsonl path, or a datasets-library name (default: "
                   f"{DEFAULT_DATASET}, the first 64 GSM8K training problems, shipped)")
    d.add_argument("--out", default="results/bench.jsonl", help="results JSONL (rerun with the same path to resume)")
    d.add_argument("--modes", default="ar,auto",
                   help=f"comma-separated, from: {','.join(ALL_MODES)}; a suffix sets gamma or k for one entry, "
                        "e.g. sd@g6, lr@k2, lr-sd@k2g3, auto@k1 (a sweep in one run)")
    d.add_argument("--limit", type=int, default=None)
    d.add_argument("--offset", type=int, default=0)
    d.add_argument("--sample", type=int, default=None, help="seeded random subset of this size")
    d.add_argument("--samples", type=int, default=1,
                   help="runs of every (problem, mode), seeds --seed, --seed + 1, ... (with --temperature > 0)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--on-error", default="raise", choices=["raise", "skip"], help="malformed dataset lines")
    d.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    d.add_argument("--no-progress", action="store_true")
    d.add_argument("--report", action="store_true", help="print the report when done")
    add_generator_args(b, mode=False)
    b.set_defaults(func=cmd_bench)

    r = sub.add_parser("report", help="markdown table and plots from a results JSONL (shards merged)")
    r.add_argument("results", nargs="+", help="one results JSONL or several (runs of one mode with other verifiers "
                                              "are rows of their own)")
    r.add_argument("--plots", default=None, help="folder for PNG plots (default: next to the results)")
    r.add_argument("--no-plots", action="store_true")
    r.set_defaults(func=cmd_report)


def cmd_bench(args: argparse.Namespace) -> int:

    modes = parse_modes(args.modes)  # an option none of them reads is refused, the decoding numbers checked here
    spec = generator_spec(args, [parse_mode(m)[0] for m in modes])
    spec.check()
    config = BenchConfig(
        dataset=args.dataset, out=args.out, modes=args.modes, limit=args.limit, offset=args.offset,
        sample=args.sample, seed=args.seed, on_error=args.on_error, max_new_tokens=args.max_new_tokens,
        samples=args.samples, generator=spec)
    problems = load_dataset(config.dataset, limit=config.limit, offset=config.offset, sample=config.sample,
                            seed=config.seed, on_error=config.on_error)  # a bad dataset fails before any model loads
    chosen = ", ".join(f"{flag} {value}" for flag, value, default in (("--offset", args.offset, 0), ("--limit", args.limit, None),
                                                                        ("--sample", args.sample, None)) if value != default)
    require(len(problems) > 0, f"--dataset {args.dataset}: no problems selected ({chosen or 'the file holds none'})")
    check_fits_context(spec.target, config.max_new_tokens)
    check_writable(shard_path(config.out, 0, 1))
    check_same_setup(shard_path(config.out, 0, 1), config)
    if any(parse_mode(m)[0] == "auto" for m in config.modes):
        check_cache_writable("mode auto keeps the cost tables it measures and the rates it learns there")
    try:
        path = run_bench(config, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished run is saved in {args.out}; run the same command again to resume",
              file=sys.stderr)
        return 130
    print(f"results: {path}")
    if args.report:
        return cmd_report(argparse.Namespace(results=[args.out], plots=None, no_plots=False))
    return 0


def cmd_report(args: argparse.Namespace) -> int:

    require(not (args.plots and args.no_plots), f"--plots {args.plots} and --no-plots: give one (a folder for the "
            "plots, or none)")
    paths = as_paths(args.results)
    records = by_verifier([r for path in paths for r in load_results(path)])
    rows = summarize(records)
    print(markdown_table(rows))
    fidelity = fidelity_table(records)
    if fidelity:
        print(f"\n{fidelity}")
    if not args.no_plots:
        folder = args.plots or str(Path(paths[0]).with_suffix("")) + "-plots"
        for p in plot(rows, records, folder):
            print(f"plot: {p}")
    return 0
