"""The host's work around each replay of a recorded forward: what every greedy token on a GPU pays beside the
GPU's own time (a decoding loop reads each token before it feeds the next, so the host's work is not hidden).

A CUDA graph's replay runs none of the model's Python code. This script times a greedy decoding step on the
compiled path's bookkeeping with a stand-in for a CUDA graph whose replay runs nothing (the rehearsal's
graphs with an empty launch), so that what is timed is the host's side alone: the session's tensors, the
forward's checks and timings, the mask's new column, the input copies. Two ways, side by side, alternating:

* ``as built``: a replay enters nothing of the model's code;
* ``stand-ins every replay``: the replay entered what the model's code needs, as the compiled path did before
  it told the two apart: no autograd, the attention setting, and each fused stand-in set in place of its
  layer and set back (five products and two norms a layer: about 400 module attributes a token for 28 layers).

Random-weight models of 2, 28 (the 1.5B's depth) and 64 (the 32B's) layers, tiny widths (the width does not
change the host's work). Medians of ``--repeats`` runs of ``--tokens`` tokens each.

    .venv/bin/python benchmarks/replay_host.py --out benchmarks/results/replay-host-cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

import lookahead_reasoning.runtime.backends as backends
from lookahead_reasoning.runtime.graphs import RehearsedGraph
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.testing import KernelsOnly, tiny_model

LAYERS = (2, 28, 64)


class KernelsEnteringTheModel(KernelsOnly):
    """The same, its replays entering what the model's code needs (as each replay once did)."""

    runs_python = True


def host_us(lm: LM, tokens: int) -> float:
    """Microseconds a greedy token of ``lm`` (its graphs already recorded: one warm run first)."""
    session = lm.session([[5, 6, 7, 8]])
    chosen = session.argmax()
    for _ in range(10):
        session.extend(0, chosen[:, -1].tolist())
        chosen = session.argmax()
    start = time.perf_counter()
    for _ in range(tokens):
        session.extend(0, chosen[:, -1].tolist())
        chosen = session.argmax()
    return (time.perf_counter() - start) / tokens * 1e6


def measure(layers: int, repeats: int, tokens: int) -> dict[str, float]:
    """Median microseconds a token both ways for a model of ``layers`` layers, and their ratio."""
    ways = {"as built": KernelsOnly, "stand-ins every replay": KernelsEnteringTheModel}
    models, times = {}, {name: [] for name in ways}
    try:
        for name, kind in ways.items():
            backends.RehearsedGraph = kind  # the graph class a fast path records with
            models[name] = LM.from_loaded(tiny_model("qwen2", layers=layers)).use_fast_path("rehearsed-graphs")
            host_us(models[name], 5)  # record the buckets this run uses
        for _ in range(repeats):
            for name, lm in models.items():
                backends.RehearsedGraph = ways[name]  # a longer run's next span is recorded the same way
                times[name].append(host_us(lm, tokens))
    finally:
        backends.RehearsedGraph = RehearsedGraph
    out = {name: round(statistics.median(t), 1) for name, t in times.items()}
    out["ratio"] = round(out["stand-ins every replay"] / out["as built"], 2)
    return out


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    return "avx512_bf16" if "avx512_bf16" in text else "no avx512_bf16"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None, help="write the figures here (JSON)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.tokens < 1:
        ap.error("--repeats and --tokens must be at least 1")
    result = {"machine": {"cpu": platform.processor() or platform.machine(), "flags": cpu_flags(),
                          "torch": torch.__version__},
              "repeats": args.repeats, "tokens": args.tokens, "us_per_token": {}}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the host's work, not a thread pool's start-up
    try:
        for layers in LAYERS:
            got = result["us_per_token"][str(layers)] = measure(layers, args.repeats, args.tokens)
            print(f"{layers} layers: as built {got['as built']} us a token, stand-ins every replay "
                  f"{got['stand-ins every replay']} us ({got['ratio']}x)", flush=True)
    finally:
        torch.set_num_threads(threads)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
