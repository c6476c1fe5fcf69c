"""Start the engine servers a benchmark needs, run it, stop them.

    .venv/bin/python benchmarks/engine_run.py --out benchmarks/results/engine-cpu.jsonl \
        --offset 400 --limit 10 --max-new-tokens 1024 --modes ar,sd,ngram,lr@k2,lr-sd@k2,auto
    .venv/bin/python benchmarks/engine_run.py --engine vllm --out benchmarks/results/engine-vllm-cpu.jsonl \
        --offset 700 --limit 4 --max-new-tokens 512 --modes ar,ngram,lr@k2,auto
    .venv/bin/python benchmarks/engine_run.py --out benchmarks/results/e2e-llamacpp.jsonl --offset 1000 --limit 50 \
        --modes ar,lr@k2 --verifiers exact,likelihood@0.3 --scorer qwen2.5-coder-1.5b --chunk 5

The servers (loopback ports, 2 threads each unless --threads): the plain 1.5B target, the 0.5B draft,
and, when a mode needs them, the target with the engine's own draft-model SD and its n-gram SD.
``--engine`` picks llama.cpp's server (GGUF) or vLLM (bf16) for the targets; ``--draft-engine`` the
draft's (default llama.cpp: on a CPU its Q4 draft is several times faster than vLLM's bf16 one; the
two tokenize alike). The run resumes from --out like every benchmark here.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def server(engine: str, model: str, threads: int, parallel: int, context: int, spec: str | None = None,
           spec_max: int = 8, dtype: str = "auto", cache_prompt: bool = True):
    """One server of ``engine`` for ``model`` (``spec``: the engine's own SD, "draft" or "ngram")."""
    from lookahead_reasoning.runtime.engine.llamacpp import LlamaServer
    from lookahead_reasoning.runtime.engine.process import ServerConfig
    from lookahead_reasoning.runtime.engine.vllm import VLLMServer

    draft = "qwen2.5-coder-0.5b" if spec == "draft" else None
    if engine == "vllm":  # 1 GiB of KV cache: room for 8 sequences of 4096 tokens of the 1.5B
        return VLLMServer(ServerConfig(model, "vllm", threads=threads, spec=spec, draft=draft,
                                       spec_tokens=min(spec_max, 4) if spec else None, dtype=dtype, kv_cache_gib=1))
    return LlamaServer(ServerConfig(model, context=context, threads=threads, spec=spec, draft=draft, spec_tokens=spec_max,
                                    cache_prompt=cache_prompt, parallel=parallel))


@contextlib.contextmanager
def servers(modes: str, threads: int = 2, parallel: int = 4, context: int = 8192, spec_max: int = 8,
            engine: str = "llama.cpp", draft_engine: str = "llama.cpp", dtype: str = "auto", cache_prompt: bool = True):
    """The servers ``modes`` need, started on loopback and stopped on exit: role -> URL (``cache_prompt``
    False: llama.cpp's servers evaluate every prompt whole)."""
    from lookahead_reasoning.bench.engine import parse_engine_mode

    bases = {parse_engine_mode(m)[0] for m in modes.split(",")}
    common = dict(threads=threads, parallel=parallel, context=context, dtype=dtype, cache_prompt=cache_prompt)
    chosen = {"target": server(engine, "qwen2.5-coder-1.5b", **common)}
    if bases & {"lr", "lr-sd", "auto"}:
        chosen["draft"] = server(draft_engine, "qwen2.5-coder-0.5b", **common)
    if bases & {"sd", "lr-sd"}:
        chosen["sd"] = server(engine, "qwen2.5-coder-1.5b", spec="draft", spec_max=spec_max, **common)
    if "ngram" in bases:
        chosen["ngram"] = server(engine, "qwen2.5-coder-1.5b", spec="ngram", spec_max=spec_max, **common)
    with contextlib.ExitStack() as stack:
        urls = {}
        for role, one in chosen.items():
            urls[role] = stack.enter_context(one).url
            print(f"{role}: {one.label} at {urls[role]}, ready after {one.started_s:.0f} s", file=sys.stderr)
        yield urls


def main() -> int:
    from lookahead_reasoning import Settings
    from lookahead_reasoning.bench.engine import EngineBench, run_engine_bench
    from lookahead_reasoning.runtime.engine.pair import make_scorer
    from lookahead_reasoning.verifiers.likelihood import uses_scores
    from lookahead_reasoning.verifiers.registry import make_verifier

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
    p.add_argument("--spec-max", type=int, default=8, help="the engine's draft tokens per SD iteration (mode sd; "
                                                          "vLLM: at most 4)")
    p.add_argument("--engine", default="llama.cpp", choices=["llama.cpp", "vllm"])
    p.add_argument("--draft-engine", default="llama.cpp", choices=["llama.cpp", "vllm"])
    p.add_argument("--dtype", default="auto", help="vLLM's dtype (auto: bf16 where the CPU has it, else float32; "
                                                   "float32 takes twice the memory)")
    p.add_argument("--verifiers", default="exact", help="comma-separated (name or name@threshold): the first runs "
                   "every mode into --out, each other one the lr modes into --out with -<verifier> before .jsonl")
    p.add_argument("--scorer", default=None, help="for likelihood verifiers over llama.cpp: the target loaded here")
    p.add_argument("--no-prompt-cache", action="store_true",
                   help="llama.cpp: start every server with --no-cache-prompt (prompts evaluated whole, repeatable)")
    p.add_argument("--chunk", type=int, default=0, help="problems per round of all verifiers (0: all at once), so "
                                                        "that a stopped run leaves every file on the same problems")
    args = p.parse_args()
    if args.no_prompt_cache and "vllm" in (args.engine, args.draft_engine):
        p.error("--no-prompt-cache is llama.cpp's --no-cache-prompt; vLLM's servers here always cache prefixes (--enable-prefix-caching)")
    verifiers = [v.strip() for v in args.verifiers.split(",") if v.strip()]
    lr_modes = ",".join(m for m in args.modes.split(",") if m.startswith("lr")) or args.modes
    ends = range(args.chunk, args.limit + args.chunk, args.chunk) if args.chunk else [args.limit]
    with servers(args.modes, args.threads, max(args.parallel, args.concurrency * 3), 8192 * max(1, args.concurrency),
                 args.spec_max, args.engine, args.draft_engine, args.dtype, not args.no_prompt_cache) as urls:
        scorer = make_scorer(args.scorer, Settings()) if args.scorer else None  # loaded once, for every round
        for end in ends:
            for i, spec in enumerate(verifiers):
                name, _, threshold = spec.partition("@")
                verifier = make_verifier(name, **({"threshold": float(threshold)} if threshold else {}))
                out = args.out if i == 0 else args.out.replace(".jsonl", f"-{spec}.jsonl")
                scoring = scorer if uses_scores(verifier) else None
                bench = EngineBench(args.dataset, out, **urls, scorer=scoring,
                                    modes=args.modes if i == 0 else lr_modes, limit=min(end, args.limit),
                                    offset=args.offset, max_new_tokens=args.max_new_tokens,
                                    concurrency=args.concurrency, verifier=verifier, settings=Settings(),
                                    server={"cache_prompt": not args.no_prompt_cache} if "llama.cpp" in
                                    (args.engine, args.draft_engine) else {})
                print(run_engine_bench(bench))
    return 0


if __name__ == "__main__":
    sys.exit(main())
