"""Builds of llama.cpp's server side by side on one model: a prompt's prefill, one row, four rows at once.

    .venv/bin/python benchmarks/engine_builds.py --out benchmarks/results/llamacpp-amx-builds-cpu.json \\
        amx=$HOME/.cache/lookahead_reasoning/engines/llama.cpp-0.3.36-KEY/bin/llama-server \\
        no-amx=/tmp/no-amx/bin/llama-server

Each build serves the offline 1.5B's GGUF (Q4_K_M) on loopback, 2 threads, 4 slots; the builds take turns
(the order alternates per repeat) and each figure is a median over ``--repeats``:

* ``prefill_tps``: a prompt of about 400 tokens evaluated whole (``cache_prompt`` false), as the server
  reports it (``timings.prompt_per_second``);
* ``decode_tps``: one request writing ``--tokens`` tokens (``timings.predicted_per_second``);
* ``rows4_tps``: four such requests at once (a Lookahead Reasoning cycle's rows), tokens over wall time.

Every row of the matrix kernels runs through ggml's AMX kernels where the build has them (a prompt, or
several rows); one row alone runs its vector kernels. Time it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
          "How many clips did Natalia sell altogether in April and May? ") * 12


def _start(binary: str, model: Path, port: int) -> subprocess.Popen:
    import httpx

    process = subprocess.Popen([binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-np", "4",
                                "-c", "8192", "-t", "2", "--no-webui"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(600):
        if process.poll() is not None:
            raise SystemExit(f"{binary} exited with {process.returncode} while loading")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{binary} was not ready in 120 s")


def _complete(port: int, prompt: str, tokens: int) -> dict:
    import httpx

    reply = httpx.post(f"http://127.0.0.1:{port}/completion", timeout=600,
                       json={"prompt": prompt, "n_predict": tokens, "temperature": 0.0, "cache_prompt": False})
    reply.raise_for_status()
    return reply.json()


def measure(binary: str, model: Path, port: int, tokens: int) -> dict:
    """One server of ``binary``: its prefill, one-row and four-row speeds (tokens a second)."""
    process = _start(binary, model, port)
    try:
        _complete(port, "Hello", 4)  # warm
        prefill = _complete(port, PROMPT, 1)["timings"]["prompt_per_second"]
        decode = _complete(port, "Count from one to one hundred:", tokens)["timings"]["predicted_per_second"]
        start = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda i: _complete(port, f"Count from {i} to one hundred:", tokens), range(4)))
        rows4 = sum(r["tokens_predicted"] for r in replies) / (time.perf_counter() - start)
        return {"prefill_tps": prefill, "decode_tps": decode, "rows4_tps": rows4,
                "prompt_tokens": _complete(port, PROMPT, 1)["tokens_evaluated"]}
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def main(argv: list[str] | None = None) -> int:
    from lookahead_reasoning.models.hardware import cpu_flags
    from lookahead_reasoning.models.offline import offline_gguf
    from lookahead_reasoning.runtime.engine.process import free_port

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", help="NAME=PATH of a llama-server binary, two or more")
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args(argv)
    builds = dict(b.split("=", 1) for b in args.builds)
    model = offline_gguf(args.model)
    runs: dict[str, list[dict]] = {name: [] for name in builds}
    for repeat in range(args.repeats):
        order = list(builds) if repeat % 2 == 0 else list(reversed(builds))
        for name in order:
            runs[name].append(measure(builds[name], model, free_port(), args.tokens))
            print(name, repeat, runs[name][-1], file=sys.stderr)
    keys = ("prefill_tps", "decode_tps", "rows4_tps")
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in runs.items()}
    flags = cpu_flags() or set()
    result = {"model": args.model, "tokens": args.tokens, "repeats": args.repeats, "builds": builds,
              "cpu": {"machine": platform.machine(), "amx": sorted(f for f in flags if f.startswith("amx")),
                      "avx512_bf16": "avx512_bf16" in flags},
              "runs": runs, "medians": medians}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for name, m in medians.items():
        print(f"{name}: " + ", ".join(f"{k} {v:.1f}" for k, v in m.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
