"""Why the CPU defaults are what they are: forward costs and SD speed, side by side in one process.

Part 0 times a forward that feeds 5 tokens and keeps the logits of the last one, with
``logits_to_keep`` given as an int (transformers slices the hidden states: a strided view) and as an
index tensor (a compact copy, what ``LM.forward`` does), in the models' bf16 (``--dtype``).
Part 1 times one forward of the target and of the draft for 1, 5, 9 and 16 new tokens with torch's
default linear layers and with oneDNN's (``cpu_linear``), and the draft with int8 linears
(``draft_quantize``). Part 2 runs greedy AR and draft-model SD with the float32 draft and with the
int8 draft on a few GSM8K problems, and prints tokens/s, the speedup over AR, alpha and c.

    .venv/bin/python benchmarks/cpu_kernels.py --problems 3 --max-new-tokens 128

Medians over repeats; the machine should be otherwise idle (see /proc/pressure/cpu).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from lookahead_reasoning.decoding.autoregressive import generate
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.decoding.speculative import generate_sd
from lookahead_reasoning.models.kernels import quantize_draft_int8, restore_linear, use_onednn_linear
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.models import load_model
from lookahead_reasoning.prompts import math_messages

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "train.jsonl"


def forward_ms(lm: LM, prompt: list[int], n: int, repeats: int) -> float:
    """Median time of one forward that feeds n new tokens after a cached prompt."""
    session = Session(lm, [prompt])
    session.logits()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.logits(extra=[[prompt[-1]] * (n - 1)] if n > 1 else None, keep=n)
        times.append(time.perf_counter() - start)
        session.set_rows([prompt])
    return statistics.median(times) * 1000


def head_ms(lm: LM, prompt: list[int], n: int, as_index: bool, repeats: int) -> float:
    """Median time of one forward of n new tokens after a cached prompt, keeping the last position's
    logits via ``logits_to_keep=1`` (as_index False) or ``logits_to_keep=tensor([n - 1])``."""
    import torch

    times = []
    for _ in range(repeats):
        session = Session(lm, [prompt])
        session.logits()
        ids = torch.tensor([[prompt[-1]] * n])
        keep = torch.tensor([n - 1]) if as_index else 1
        start = time.perf_counter()
        with torch.no_grad():
            lm.model(input_ids=ids, past_key_values=session.kv.cache, use_cache=True, logits_to_keep=keep)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--dataset", default=str(DATA))
    ap.add_argument("--problems", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--gamma", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--head-dtype", default="bf16", help="dtype for part 0 (the LM head strides)")
    args = ap.parse_args()

    print(f"## 0. a 5-token forward keeping 1 position's logits, {args.head_dtype}, ms (median of {args.repeats})\n")
    print("| model | logits_to_keep=1 (strided view) | index tensor (compact) | ratio |\n|---|---|---|---|")
    for name in (args.target, args.draft):
        lm = LM.from_loaded(load_model(name, dtype=args.head_dtype))
        prompt = lm.prompt_ids(math_messages("What is 17 * 23?"))
        sliced, indexed = (head_ms(lm, prompt, 5, flag, args.repeats) for flag in (False, True))
        print(f"| {name} | {sliced:.0f} | {indexed:.0f} | {sliced / indexed:.1f}x |", flush=True)
        del lm
    print()

    target = LM.from_loaded(load_model(args.target, dtype="fp32", cpu_linear="default"))
    draft = LM.from_loaded(load_model(args.draft, dtype="fp32", cpu_linear="default"))
    draft8 = LM.from_loaded(load_model(args.draft, dtype="fp32", cpu_linear="default"))
    quantize_draft_int8(draft8.model)
    questions = [json.loads(line)["question"] for line in open(args.dataset, encoding="utf-8")][:args.problems]
    prompt = target.prompt_ids(math_messages(questions[0]))

    print("## one forward, ms (median of", args.repeats, "), after a cached prompt of", len(prompt), "tokens\n")
    print("| model | linear | 1 token | 5 tokens | 9 tokens | 16 tokens |\n|---|---|---|---|---|---|")
    for name, lm in (("target", target), ("draft", draft)):
        for kernel in ("default", "onednn"):
            if kernel == "onednn":
                use_onednn_linear(lm.model)
            cells = [f"{forward_ms(lm, prompt, n, args.repeats):.0f}" for n in (1, 5, 9, 16)]
            print(f"| {name} | {kernel} | " + " | ".join(cells) + " |", flush=True)
    cells = [f"{forward_ms(draft8, prompt, n, args.repeats):.0f}" for n in (1, 5, 9, 16)]
    print("| draft | int8 | " + " | ".join(cells) + " |\n", flush=True)

    print(f"## greedy generation, {args.max_new_tokens} new tokens, target and draft on oneDNN linears\n")
    print("| problem | mode | tok/s | speedup | alpha | c | same text as AR |\n|---|---|---|---|---|---|---|")
    ratios: dict[str, list[float]] = {"sd fp32 draft": [], "sd int8 draft": []}
    for i, question in enumerate(questions):
        ids = target.prompt_ids(math_messages(question))
        generate_sd(target, ids, draft8, gamma=args.gamma, max_new_tokens=8)  # warm every path once
        ar = generate(target, ids, max_new_tokens=args.max_new_tokens)
        print(f"| {i} | ar | {ar.tokens_per_s:.2f} | 1.00 | - | - | - |", flush=True)
        for label, d in (("sd fp32 draft", draft), ("sd int8 draft", draft8)):
            r = generate_sd(target, ids, d, gamma=args.gamma, max_new_tokens=args.max_new_tokens)
            ratio = r.tokens_per_s / ar.tokens_per_s
            ratios[label].append(ratio)
            print(f"| {i} | {label} (gamma {args.gamma}) | {r.tokens_per_s:.2f} | {ratio:.2f} | {r.stats.alpha:.2f} "
                  f"| {r.stats.c:.3f} | {r.token_ids == ar.token_ids} |", flush=True)
    print()
    for label, values in ratios.items():
        print(f"median speedup over AR, {label}: {statistics.median(values):.2f}x")
    restore_linear(target.model)


if __name__ == "__main__":
    main()
