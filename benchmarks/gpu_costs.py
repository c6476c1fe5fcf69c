"""The CUDA paths and a GPU's cost table T(R, n), on random weights of the offline pair's real shapes.

No model weights need to reach the GPU machine: the models are drawn there (``testing.REAL_SHAPES``,
the Qwen2.5-Coder 1.5B and 0.5B sizes with their 151,936-id vocabulary) and timed like the real ones.

1. Lossless on CUDA: tiny float32 models (peaky random weights) on the GPU, greedy AR against token SD,
   LR and LR+SD with the exact verifier (the draft a perturbed copy of the target): the same tokens.
2. T(R, n) of the real shapes in bfloat16 (``planning.costs.profile``), beta(R) = T(R, n) / T(1, n) for
   decoding rows (n = 1) and rows checking 12 drafted tokens (n = 13), and the draft's cost ratio c.
3. The clock: the seconds the library records per forward (its own CUDA events, read a forward later)
   against CUDA events around the same forwards, and what the host's clock records without waiting.
4. Greedy AR's milliseconds per token for both shapes, with the attention kernels the library allows and
   with cuDNN's allowed too (it plans every new shape again, and decoding makes a new shape each token).

    python benchmarks/gpu_costs.py --out gpu-costs.json      # on a machine with a CUDA device
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext

import torch

from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning.decoding import generate
from lookahead_reasoning.planning.costs import profile
from lookahead_reasoning.runtime import lm as lm_module
from lookahead_reasoning.runtime.clock import HostClock
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.testing import REAL_SHAPES, REAL_VOCAB, perturbed_copy, tiny_model

TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
GRID = {1: (1, 2, 4, 8, 13, 25, 48, 96), 2: (1, 13), 3: (1, 13), 4: (1, 13), 6: (1, 13), 8: (1, 13)}
DRAFT_GRID = {1: (1, 4, 16, 48), 2: (1, 4), 3: (1, 4)}


def lossless(device: str, new_tokens: int = 96) -> dict[str, bool]:
    """Greedy AR's tokens against each speculative mode's on ``device`` (tiny float32 models)."""
    target = LM.from_loaded(tiny_model("qwen2", seed=0, device=device, layers=4, hidden=128))
    draft = perturbed_copy(target, 0.3, seed=1)
    prompt = target.prompt_ids("Ann has 3 apples and buys 4 more. How many apples does she have?")
    ar = generate(target, prompt, max_new_tokens=new_tokens).token_ids
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", k=2)
    return {mode: gen.generate(prompt, mode=mode, max_new_tokens=new_tokens).token_ids == ar
            for mode in ("sd", "lr", "lr-sd")}


def clock(lm: LM, forwards: int = 20) -> tuple[float, float]:
    """(median seconds the library records per one-token forward, median by CUDA events) over ``forwards``
    forwards of one row after a 300-token prefix (the first forward is left out of both)."""
    recorded, events = [], []
    lm.listeners.append(lambda timing: recorded.append(timing.seconds))
    session = lm.session([list(range(100, 400))])
    session.logits()
    for i in range(forwards):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        session.logits(extra=[[500 + i]])
        end.record()
        end.synchronize()
        events.append(start.elapsed_time(end) / 1000)
    lm.settle()  # the library's own event times arrive a forward late
    lm.listeners.pop()
    return statistics.median(recorded[1:]), statistics.median(events[1:])


def unwaited(lm: LM) -> float:
    """What :func:`clock` records with the host's clock and no wait for the GPU (the library before it timed a
    forward on the GPU at all)."""
    saved, lm.clock = lm.clock, HostClock()
    try:
        return clock(lm)[0]
    finally:
        lm.clock = saved


def decode_ms(lm: LM, tokens: int = 64, any_attention: bool = False) -> float:
    """Milliseconds per token of greedy AR after a 300-token prompt (a warm-up run first). With
    ``any_attention`` PyTorch may pick cuDNN's attention, as the library let it before."""
    kernels = lm_module.attention_kernels
    if any_attention:
        lm_module.attention_kernels = lambda device: nullcontext()
    try:
        prompt = [(7 + 31 * i) % len(lm.tokenizer) for i in range(300)]
        generate(lm, prompt, max_new_tokens=8)
        start = time.perf_counter()
        done = generate(lm, prompt, max_new_tokens=tokens)
        return (time.perf_counter() - start) / done.num_tokens * 1000
    finally:
        lm_module.attention_kernels = kernels


def real_shape(name: str, device: str) -> LM:
    loaded = tiny_model("qwen2", seed=0, device=device, dtype=torch.bfloat16, vocab_size=REAL_VOCAB,
                        initializer_range=0.02, **REAL_SHAPES[name])
    return LM(loaded.model, loaded.tokenizer, name=f"{name} (random weights)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-costs.json")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    result: dict = {"device": torch.cuda.get_device_name(args.device), "torch": torch.__version__}
    result["lossless"] = lossless(args.device)
    print("greedy AR == " + ", ".join(f"{m}: {ok}" for m, ok in result["lossless"].items()), flush=True)
    target, draft = real_shape(TARGET, args.device), real_shape(DRAFT, args.device)
    t = profile(target, GRID, repeats=5, progress=False).points
    d = profile(draft, DRAFT_GRID, repeats=5, progress=False).points
    result["target_points"], result["draft_points"] = t, d
    result["c"] = d[1][1] / t[1][1]
    print(f"T(R, n) of the 1.5B shape in bf16, ms; c = T_draft(1, 1) / T_target(1, 1) = {result['c']:.3f}")
    print("| R | " + " | ".join(f"n={n}" for n in GRID[1]) + " |")
    for rows, points in t.items():
        print(f"| {rows} | " + " | ".join(f"{points[n] * 1e3:.2f}" if n in points else "" for n in GRID[1]) + " |")
    result["beta"] = {n: {rows: t[rows][n] / t[1][n] for rows in t} for n in (1, 13)}
    for n, betas in result["beta"].items():
        print(f"beta(R) at n={n}: " + ", ".join(f"R={r}: {b:.2f}" for r, b in betas.items()))
    recorded, events = clock(target)
    result["clock"] = {"recorded_s": recorded, "cuda_events_s": events, "recorded_without_waiting_s": unwaited(target)}
    print(f"one-token forward of the 1.5B shape: recorded {recorded * 1e3:.2f} ms, CUDA events {events * 1e3:.2f} ms, "
          f"recorded without waiting for the GPU {result['clock']['recorded_without_waiting_s'] * 1e3:.2f} ms")
    result["decode_ms"] = {name: {"now": decode_ms(lm), "with cuDNN attention": decode_ms(lm, any_attention=True)}
                           for name, lm in ((TARGET, target), (DRAFT, draft))}
    for name, ms in result["decode_ms"].items():
        print(f"greedy AR, {name} shape: {ms['now']:.1f} ms/token ({ms['with cuDNN attention']:.1f} with cuDNN attention)")
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
