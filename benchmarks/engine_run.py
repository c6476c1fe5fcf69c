"""Start the llama.cpp servers a benchmark over engines needs, run it, stop them.

    .venv/bin/python benchmarks/engine_run.py --out benchmarks/results/engine-cpu.jsonl \
        --offset 400 --limit 10 --max-new-tokens 1024 --modes ar,sd,ngram,lr@k2,lr-sd@k2,auto

The servers (loopback ports, 2 threads each unless --threads): the plain 1.5B target, the 0.5B draft,
and, when a mode needs them, the target with llama.cpp's own draft-model SD and its n-gram SD. The
run resumes from --out like every benchmark here.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def servers(modes: str, threads: int = 2, parallel: int = 4, context: int = 8192, spec_max: int = 8):
    """The llama.cpp servers ``modes`` need, started on loopback and stopped on exit: role -> URL."""
    from lookahead_reasoning.bench.engine import parse_engine_mode
    from lookahead_reasoning.runtime.engine.llamacpp import LlamaServer, ServerConfig

    bases = {parse_engine_mode(m)[0] for m in modes.split(",")}
    common = dict(parallel=parallel, context=context, threads=threads)
    configs = {"target": ServerConfig("qwen2.5-coder-1.5b", **common)}
    if bases & {"lr", "lr-sd", "auto"}:
        configs["draft"] = ServerConfig("qwen2.5-coder-0.5b", **common)
    if bases & {"sd", "lr-sd"}:
        configs["sd"] = ServerConfig("qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", spec="draft",
                                     spec_max=spec_max, **common)
    if "ngram" in bases:
        configs["ngram"] = ServerConfig("qwen2.5-coder-1.5b", spec="ngram", **common)
    with contextlib.ExitStack() as stack:
        urls = {role: stack.enter_context(LlamaServer(cfg)).url for role, cfg in configs.items()}
        print(urls, file=sys.stderr)
        yield urls


def main() -> int:
    from lookahead_reasoning.bench.engine import EngineBench, EngineURLs, run_engine_bench
    from lookahead_reasoning import Settings

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--dataset", default=str(ROOT.parent / "shared/data/gsm8k/train.jsonl"))
    p.add_argument("--offset", type=int, default=400)
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--modes", default="ar,sd,ngram,lr@k2,lr-sd@k2,auto")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--spec-max", type=int, default=8, help="llama.cpp's draft tokens per SD iteration (mode sd)")
    args = p.parse_args()
    with servers(args.modes, args.threads, max(args.parallel, args.concurrency * 3), 8192 * max(1, args.concurrency),
                 args.spec_max) as urls:
        bench = EngineBench(args.dataset, args.out, EngineURLs(**urls), modes=args.modes, limit=args.limit,
                            offset=args.offset, max_new_tokens=args.max_new_tokens, concurrency=args.concurrency,
                            settings=Settings())
        print(run_engine_bench(bench))
    return 0


if __name__ == "__main__":
    sys.exit(main())
