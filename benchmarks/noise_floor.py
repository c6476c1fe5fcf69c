"""The noise floor of a runtime: how often greedy decoding changes its text and its answer when nothing
changes but the batch it runs in.

    .venv/bin/python benchmarks/noise_floor.py --runtime llama.cpp --repeat --out benchmarks/results/floor-llamacpp-avx512.jsonl \
        --offset 1000 --limit 50 --max-new-tokens 1024
    .venv/bin/python benchmarks/noise_floor.py --runtime pytorch --dtype bfloat16 \
        --out benchmarks/results/floor-pytorch-bf16-avx512.jsonl --offset 1000 --limit 50 --max-new-tokens 512
    .venv/bin/python benchmarks/noise_floor.py --runtime llama.cpp --no-cache-prompt --repeat \
        --out benchmarks/results/floor-llamacpp-nocache-avx512.jsonl --offset 1000 --limit 50 --max-new-tokens 1024
    .venv/bin/python benchmarks/noise_floor.py --runtime vllm --repeat \
        --out benchmarks/results/floor-vllm-avx512.jsonl --offset 1000 --limit 20 --max-new-tokens 1024
    lookahead-reasoning report benchmarks/results/floor-llamacpp-avx512.jsonl --no-plots

Each problem is decoded greedily (the offline 1.5B target, the question in its chat template) twice:

* ``ar``: alone, one row (this process: one forward per token over one row; llama.cpp's or vLLM's server:
  one request with nothing else in flight);
* ``ar-again`` (with ``--repeat``): alone once more, the floor of repetition itself;
* ``ar-batched``: beside the next problem of the list (problems 2i and 2i + 1 together): this process
  runs both as the two rows of every forward, llama.cpp's server receives both requests at once and
  decodes them in one batch.

``report`` then reads ``ar-batched`` as a mode against ``ar``: its fidelity table gives the share of
problems with the same text and the same final answer. That share is the runtime's floor: a speculative
mode whose target runs rows in batches (Lookahead Reasoning's branches, token SD's verification) cannot
be expected to keep more of ``ar``'s answers than this, whatever its verifier. Records carry the
runtime, its precision and the machine's bf16 flag; the file resumes where it stopped.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

TARGET = "qwen2.5-coder-1.5b"


def record(problem, mode: str, text: str, new_tokens: int, stop: str, wall: float, runtime: dict, partner=None) -> dict:
    from lookahead_reasoning.bench.grading import grade

    g = grade(text, problem.answer)
    return {"problem_id": problem.id, "index": problem.index, "sample": 0, "mode": mode, "new_tokens": new_tokens,
            "stop_reason": stop, "wall_time_s": round(wall, 4), "tokens_per_s": round(new_tokens / wall, 3) if wall else None,
            "gold": g.gold, "predicted": g.predicted, "correct": g.correct, "text": text,
            "batched_with": partner.id if partner is not None else None, **runtime}


class PyTorchRows:
    """The target in this process: one row alone, or two rows in every forward."""

    def __init__(self, dtype: str):
        from lookahead_reasoning.runtime.pair import as_lm

        self.lm = as_lm(TARGET, dtype=dtype)
        self.label = {"runtime": "pytorch", "dtype": dtype, "engine": False}

    def alone(self, question: str, budget: int) -> tuple[str, int, str, float]:
        from lookahead_reasoning.decoding.autoregressive import generate
        from lookahead_reasoning.prompts import math_messages

        r = generate(self.lm, self.lm.prompt_ids(math_messages(question)), max_new_tokens=budget)
        return r.text, len(r.token_ids), r.stop_reason, r.wall_time_s

    def together(self, questions: list[str], budget: int) -> list[tuple[str, int, str, float]]:
        from lookahead_reasoning.decoding.autoregressive import decode_rows
        from lookahead_reasoning.prompts import math_messages
        from lookahead_reasoning.sampling import SamplingConfig
        from lookahead_reasoning.stopping import StopChecker, StopCondition

        prompts = [self.lm.prompt_ids(math_messages(q)) for q in questions]
        session = self.lm.session(prompts)
        checkers = [StopChecker(StopCondition(self.lm.eos_ids, (), budget), self.lm.decode) for _ in prompts]
        start = time.perf_counter()
        hits = decode_rows(session, [len(p) for p in prompts], checkers, SamplingConfig())
        wall = time.perf_counter() - start
        out = []
        for b, (p, hit) in enumerate(zip(prompts, hits)):
            new = session.rows[b][len(p):]
            out.append((self.lm.decode(new), len(new), hit.reason, wall))
        return out


class EngineRows:
    """The target served by llama.cpp's server: one request alone, or two requests in flight at once."""

    def __init__(self, url: str, label: dict, timeout_s: float = 600.0):
        from lookahead_reasoning.runtime.engine.pair import EnginePair
        from lookahead_reasoning.settings import Settings

        settings = Settings(timeout_s=timeout_s)
        self.pairs = [EnginePair(url, settings=settings) for _ in range(2)]  # a client per thread
        self.label = label

    def _one(self, slot: int, question: str, budget: int) -> tuple[str, int, str, float]:
        from lookahead_reasoning.engine_runtime import ar
        from lookahead_reasoning.prompts import math_messages

        r = ar(self.pairs[slot], math_messages(question), budget)
        return r.text, len(r.token_ids), r.stop_reason, r.wall_time_s

    def alone(self, question: str, budget: int) -> tuple[str, int, str, float]:
        return self._one(0, question, budget)

    def together(self, questions: list[str], budget: int) -> list[tuple[str, int, str, float]]:
        with concurrent.futures.ThreadPoolExecutor(len(questions)) as pool:
            return list(pool.map(lambda i: self._one(i, questions[i], budget), range(len(questions))))


def run(rows, problems, out: Path, budget: int, repeat: bool = False, batched: bool = True) -> None:
    from lookahead_reasoning.bench.results import append_record, done_pairs

    done = {(pid, mode) for pid, mode, _ in done_pairs(out)}
    alone = ("ar", "ar-again") if repeat else ("ar",)
    with tqdm(total=(len(alone) + batched) * len(problems), desc="floor", unit="run") as bar:
        def write(rec: dict) -> None:
            append_record(out, rec)  # whole lines, on disk before the next run: an interrupted run resumes
            bar.update(1)

        for mode in alone:
            for p in problems:
                if (p.id, mode) in done:
                    bar.update(1)
                    continue
                write(record(p, mode, *rows.alone(p.question, budget), rows.label))
        for i in range(0, len(problems) - 1 if batched else 0, 2):
            two = problems[i:i + 2]
            if all((p.id, "ar-batched") in done for p in two):
                bar.update(2)
                continue
            for p, other, got in zip(two, two[::-1], rows.together([p.question for p in two], budget)):
                write(record(p, "ar-batched", *got, rows.label, partner=other))


def main() -> int:
    from lookahead_reasoning.bench.datasets import load_jsonl
    from lookahead_reasoning.models.hardware import cpu_flags

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", choices=["pytorch", "llama.cpp", "vllm"], required=True)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="pytorch: the target's dtype")
    p.add_argument("--out", required=True, help="results JSONL (resumes)")
    p.add_argument("--dataset", default=str(ROOT.parent / "shared/data/gsm8k/train.jsonl"))
    p.add_argument("--offset", type=int, default=1000)
    p.add_argument("--limit", type=int, default=50, help="an even number: problems run in pairs")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2, help="an engine's server threads")
    p.add_argument("--repeat", action="store_true", help="also decode every problem alone a second time (ar-again)")
    p.add_argument("--no-batched", action="store_true", help="leave out ar-batched (two problems at once)")
    p.add_argument("--no-cache-prompt", action="store_true",
                   help="llama.cpp: start the server with its prompt cache off (--no-cache-prompt): every prompt "
                        "evaluated whole")
    p.add_argument("--slots", type=int, default=4, help="llama.cpp: the server's slots (--parallel)")
    args = p.parse_args()
    if args.limit < 2 or args.limit % 2:
        p.error(f"--limit must be an even number >= 2 (problems run in pairs), got {args.limit}")
    if args.no_cache_prompt and args.runtime != "llama.cpp":
        p.error("--no-cache-prompt is llama.cpp's; vLLM's servers here cache prefixes (--enable-prefix-caching)")
    problems = list(load_jsonl(args.dataset, limit=args.limit, offset=args.offset))
    flags = cpu_flags() or set()
    machine = {"avx512_bf16": "avx512_bf16" in flags}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.runtime == "pytorch":
        rows = PyTorchRows(args.dtype)
        rows.label.update(machine)
        run(rows, problems, out, args.max_new_tokens, args.repeat, not args.no_batched)
    else:
        from engine_run import server

        from lookahead_reasoning.runtime.engine.vllm import resolved_dtype

        srv = server(args.runtime, TARGET, args.threads, parallel=args.slots, context=2048 * args.slots,
                     cache_prompt=not args.no_cache_prompt)
        if args.runtime == "vllm":
            label = {"runtime": "vllm", "dtype": resolved_dtype(srv.config), "prefix_caching": True}
        else:
            label = {"runtime": "llama.cpp", "dtype": "q4_k_m", "slots": args.slots,
                     "cache_prompt": not args.no_cache_prompt}
        with srv:
            print(f"target: {srv.label} at {srv.url}", file=sys.stderr)
            run(EngineRows(srv.url, {**label, "engine": True, **machine}), problems, out, args.max_new_tokens,
                args.repeat, not args.no_batched)
    return 0


if __name__ == "__main__":
    sys.exit(main())
