"""What each weight precision costs on this CPU: one linear layer, whole-model forwards, and AR tokens/s.

Decoding one token reads every weight once, so fewer bytes per weight should mean faster tokens,
if the kernel for that format is good on this CPU. Three parts, one process, medians over repeats:

1. ``linear``: one linear layer (default 8960 x 1536, the 1.5B target's MLP shape) for M = 1, 2, 5,
   13 input rows, in float32 (oneDNN and torch's default BLAS), bf16, the library's int8 weight-only
   layer (``precision="int8"``: bf16 input to ``torch._weight_int8pack_mm``), the same op with
   float32 and float16 inputs, int4 (``torch._weight_int4pack_mm_for_cpu``, group 128), torch's
   dynamic int8 linear, and torchao's ``Int8WeightOnlyConfig`` in eager mode (and compiled, with
   ``--compile``) when torchao is installed.
2. ``forward``: whole-model forward time of the target after a ~300-token cached prefix, for
   (rows x new tokens) = 1x1, 1x5, 1x13, 2x1, 2x13, 3x1, per precision variant (float32 with
   oneDNN, bf16, int8, int8 with a float32 LM head, int8 with bf16 between the linears, w8a8,
   int8-dynamic), plus the weight bytes and the largest logit difference to float32.
3. ``ar``: greedy autoregressive tokens/s over ``--ar-tokens`` new tokens on a GSM8K prompt, per
   variant, and how many leading tokens agree with float32's.

    flock /tmp/lr-cpu.lock .venv/bin/python benchmarks/precision_kernels.py                  # all parts
    flock /tmp/lr-cpu.lock .venv/bin/python benchmarks/precision_kernels.py --parts linear
    flock /tmp/lr-cpu.lock .venv/bin/python benchmarks/precision_kernels.py --parts forward ar \\
        --variants float32 int8 --model qwen2.5-coder-0.5b

``--accuracy N`` adds a fourth part: greedy AR on N GSM8K problems (from ``--offset``, default 100)
per variant, graded, with the number of problems each variant gets right (slow: minutes per problem
in float32). ``--accuracy-draft qwen2.5-coder-0.5b`` decodes them with greedy speculative decoding
instead, which emits the same tokens as greedy AR (the library's lossless guarantee) in less time.

The numbers in benchmarks/README.md came from a 2-core AMD EPYC (KVM guest) with AVX2 and no
avx512 at all (``grep -o avx512_bf16 /proc/cpuinfo`` prints nothing), torch 2.13.0+cpu, 24 GiB RAM.
The machine should be otherwise idle (wrap the command in the project's CPU lock).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Callable

import torch
from tqdm import tqdm

from lookahead_reasoning.decoding.autoregressive import generate
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.decoding.speculative import generate_sd
from lookahead_reasoning.models.kernels import apply_cpu_linear
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.models import cpu_supports_bf16, load_model
from lookahead_reasoning.models.int8_layers import (Int8PerTokenLinear, Int8WeightOnlyLinear, quantize_linears_int8,
                                                   quantize_rows_int8)
from lookahead_reasoning.models.precision import apply_precision, weight_bytes
from lookahead_reasoning.prompts import math_messages

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "train.jsonl"
SHAPES = ((1, 1), (1, 5), (1, 13), (2, 1), (2, 13), (3, 1))  # (rows, new tokens per row)
VARIANTS = ("float32", "bf16", "int8", "int8-f32-head", "int8-bf16", "w8a8", "int8-dynamic")


def median_ms(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


# ------------------------------------------------------------------------------------ part 1: linear

def int4_layer(weight: torch.Tensor, group: int = 128) -> Callable[[torch.Tensor], torch.Tensor]:
    """x (M, K) -> (M, N) through torch's CPU int4 kernel (asymmetric 4-bit, one scale/zero per group)."""
    n, k = weight.shape
    wg = weight.float().reshape(n, k // group, group)
    low, high = wg.amin(-1, keepdim=True), wg.amax(-1, keepdim=True)
    scale = (high - low).clamp(min=1e-8) / 15
    q = torch.round((wg - low) / scale).clamp(0, 15).to(torch.int32).reshape(n, k)
    packed = torch._convert_weight_to_int4pack_for_cpu(q, 2)
    scale_zero = torch.stack([scale.squeeze(-1), (low + 8 * scale).squeeze(-1)], -1).transpose(0, 1).contiguous()

    def run(x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int4pack_mm_for_cpu(x, packed, group, scale_zero.to(x.dtype))
    return run


def linear_candidates(weight: torch.Tensor, use_compile: bool) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Name -> function of a float32 (M, K) input computing (M, N), for each kernel and format."""
    w32, wbf = weight.float().contiguous(), weight.to(torch.bfloat16).contiguous()
    int8 = Int8WeightOnlyLinear(weight)
    q, scale = quantize_rows_int8(weight)
    int4 = int4_layer(weight)
    out = {
        "float32 oneDNN": lambda x: torch.ops.mkldnn._linear_pointwise(x, w32, None, "none", [], ""),
        "float32 default": lambda x: torch.nn.functional.linear(x, w32),
        "bf16": lambda x: torch.nn.functional.linear(x.to(torch.bfloat16), wbf),
        "int8 (precision='int8')": int8,
        "int8pack f32 act": lambda x: torch._weight_int8pack_mm(x, q, scale.float()),
        "int8pack f16 act": lambda x: torch._weight_int8pack_mm(x.half(), q, scale.half()),
        "int4 bf16 act": lambda x: int4(x.to(torch.bfloat16)),
        "int4 f32 act": lambda x: int4(x),
    }
    dense = torch.nn.Sequential(torch.nn.Linear(w32.shape[1], w32.shape[0], bias=False))
    with torch.no_grad():
        dense[0].weight.copy_(w32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization deprecation notices
        from torch.ao.quantization import quantize_dynamic

        dyn = quantize_dynamic(dense, {torch.nn.Linear}, dtype=torch.qint8)
    out["int8-dynamic (torch.ao)"] = dyn
    out["int8-dynamic, one row per call"] = lambda x: torch.cat([dyn(x[i:i + 1]) for i in range(x.shape[0])])
    out["w8a8: int8 act per token x int8 (precision='w8a8', torch._int_mm)"] = Int8PerTokenLinear(weight)
    out.update(torchao_candidates(w32, use_compile))
    return out


def torchao_candidates(w32: torch.Tensor, use_compile: bool) -> dict[str, Callable]:
    try:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except ImportError:
        return {}
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig

    found = {}
    dyn = torch.nn.Sequential(torch.nn.Linear(w32.shape[1], w32.shape[0], bias=False))
    with torch.no_grad():
        dyn[0].weight.copy_(w32)
    quantize_(dyn, Int8DynamicActivationInt8WeightConfig())
    found["torchao int8 act per token x int8 eager"] = dyn
    for act in (torch.float32, torch.bfloat16):
        layer = torch.nn.Sequential(torch.nn.Linear(w32.shape[1], w32.shape[0], bias=False)).to(act)
        with torch.no_grad():
            layer[0].weight.copy_(w32)
        quantize_(layer, Int8WeightOnlyConfig())
        tag = "f32" if act == torch.float32 else "bf16"
        found[f"torchao int8wo {tag} eager"] = (lambda lay, dt: lambda x: lay(x.to(dt)))(layer, act)
        if use_compile:
            compiled = torch.compile(layer, dynamic=False)
            found[f"torchao int8wo {tag} compiled"] = (lambda lay, dt: lambda x: lay(x.to(dt)))(compiled, act)
    return found


def part_linear(args: argparse.Namespace) -> dict:
    """Time every candidate at every M in rounds (one call each per round, in turn), so that load
    from other processes hits all of them alike; report the median over rounds."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(args.linear_n, args.linear_k, generator=gen) * 0.02
    candidates = linear_candidates(weight, args.compile)
    rows = (1, 2, 5, 13)
    inputs = {m: torch.randn(m, args.linear_k, generator=gen) for m in rows}
    times: dict[str, dict[int, list[float]]] = {name: {m: [] for m in rows} for name in candidates}
    with torch.no_grad():
        for fn in candidates.values():  # warm-up (and compilation, with --compile)
            for m in rows:
                fn(inputs[m])
                fn(inputs[m])
        for _ in tqdm(range(args.linear_repeats), desc="linear rounds", leave=False):
            for name, fn in candidates.items():
                for m in rows:
                    start = time.perf_counter()
                    fn(inputs[m])
                    times[name][m].append(time.perf_counter() - start)
    table = {name: {m: statistics.median(t) * 1000 for m, t in by_m.items()} for name, by_m in times.items()}
    print(f"\n## one {args.linear_n} x {args.linear_k} linear, ms per call (median of {args.linear_repeats})\n")
    print("| kernel | " + " | ".join(f"M={m}" for m in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for name, by_m in table.items():
        print(f"| {name} | " + " | ".join(f"{by_m[m]:.2f}" for m in rows) + " |")
    return {"linear": {name: {str(m): v for m, v in by_m.items()} for name, by_m in table.items()}}


# --------------------------------------------------------------------------- parts 2-3: the model

def load_variant(model_name: str, variant: str) -> tuple[LM, str]:
    """The model in one precision variant, its linears on oneDNN where they stay float32."""
    loaded = load_model(model_name, dtype="bf16", cpu_linear="default")  # the cache is bf16: exact
    model = loaded.model
    if variant == "int8-f32-head":
        quantize_linears_int8(model, include_output_layer=False)
        model.float()
        kernel = "int8 body, float32 head"
    elif variant == "int8-bf16":
        info = apply_precision(model, "int8")
        model.to(torch.bfloat16)
        kernel = info.kernel + ", bf16 between linears"
    else:
        info = apply_precision(model, variant, role="draft" if variant == "int8-dynamic" else "target")
        kernel = info.kernel
    apply_cpu_linear(model, "auto")
    return LM(model, loaded.tokenizer, name=f"{model_name}:{variant}"), kernel


def prefix_ids(lm: LM, length: int) -> list[int]:
    """A GSM8K chat prompt grown to about ``length`` tokens with more questions."""
    questions = [json.loads(line)["question"] for line, _ in zip(open(DATA, encoding="utf-8"), range(40))]
    text = ""
    for q in questions[100 % len(questions):] + questions:
        text += q + "\n\n"
        ids = lm.prompt_ids(math_messages(text))
        if len(ids) >= length:
            return ids
    return ids


def forward_table(lm: LM, prefix: list[int], shapes: list[tuple[int, int]], repeats: int) -> dict[str, float]:
    """Median ms of one forward of rows x width new tokens after ``prefix`` is cached, per shape.

    One session per row count: the prefix is fed once, and each timed forward is rolled back.
    """
    out = {}
    for rows in sorted({r for r, _ in shapes}):
        session = Session(lm, [prefix] * rows)
        session.logits()
        for r, width in shapes:
            if r != rows:
                continue
            extra = [[prefix[-1]] * (width - 1)] * rows if width > 1 else None

            def step():
                session.logits(extra=extra, keep=width)
                session.set_rows([prefix] * rows)
            out[f"{rows}x{width}"] = median_ms(step, repeats, warmup=1)
    return out


def last_logits(lm: LM, prefix: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return lm.forward(torch.tensor([prefix]))[0][0, -1]


def part_model(args: argparse.Namespace) -> dict:
    results: dict[str, dict] = {}
    reference_logits, reference_ids = None, None
    for variant in tqdm(args.variants, desc="variants"):
        lm, kernel = load_variant(args.model, variant)
        prefix = prefix_ids(lm, args.prefix)
        row = {"kernel": kernel, "weight_gb": weight_bytes(lm.model) / 1e9}
        logits = last_logits(lm, prefix)
        if reference_logits is None and variant == "float32":
            reference_logits = logits
        if reference_logits is not None:
            row["max_logit_diff_vs_float32"] = float((logits - reference_logits).abs().max())
        if "forward" in args.parts:
            row["forward_ms"] = forward_table(lm, prefix, args.shapes, args.repeats)
        if "ar" in args.parts:
            prompt = lm.prompt_ids(math_messages(first_question(args.offset)))
            generate(lm, prompt, max_new_tokens=4)  # warm-up
            runs = [generate(lm, prompt, max_new_tokens=args.ar_tokens) for _ in range(args.ar_repeats)]
            row["ar_tok_s"] = statistics.median(r.num_tokens / r.wall_time_s for r in runs)
            ids = runs[0].token_ids
            if variant == "float32":
                reference_ids = ids
            if reference_ids is not None:
                row["ar_agree_with_float32"] = next((i for i, (a, b) in enumerate(zip(ids, reference_ids)) if a != b),
                                                    min(len(ids), len(reference_ids)))
        if args.accuracy:
            row["accuracy"] = accuracy(lm, args)
        results[variant] = row
        del lm
    print_model_tables(results, args)
    return {"model": args.model, "variants": results}


def first_question(offset: int) -> str:
    with open(DATA, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i == offset:
                return json.loads(line)["question"]
    raise ValueError(f"{DATA} has fewer than {offset + 1} problems")


def accuracy(lm: LM, args: argparse.Namespace) -> dict:
    from lookahead_reasoning.bench.datasets import load_jsonl
    from lookahead_reasoning.bench.grading import grade

    problems = load_jsonl(DATA, limit=args.accuracy, offset=args.offset)
    draft = accuracy_draft(args.accuracy_draft) if args.accuracy_draft else None
    correct, answers, tokens = 0, [], []
    for problem in tqdm(problems, desc=f"{lm.name} accuracy", leave=False):
        prompt = lm.prompt_ids(math_messages(problem.question))
        if draft is None:
            out = generate(lm, prompt, max_new_tokens=args.accuracy_tokens)
        else:  # greedy SD emits exactly the target's greedy AR tokens, in less time
            out = generate_sd(lm, prompt, draft, gamma=8, max_new_tokens=args.accuracy_tokens, draft_stop_below=0.4)
        g = grade(out.text, problem.answer)
        correct += bool(g.correct)
        answers.append(g.predicted)
        tokens.append(out.token_ids)
    return {"correct": correct, "of": len(problems), "answers": answers, "token_ids": tokens}


@functools.cache
def accuracy_draft(name: str) -> LM:
    """The draft that speeds up the accuracy runs (int8 weight-only: it only proposes tokens)."""
    loaded = load_model(name, dtype="bf16", cpu_linear="default")
    apply_precision(loaded.model, "int8")
    return LM(loaded.model, loaded.tokenizer, name=f"{name}:int8")


def print_model_tables(results: dict[str, dict], args: argparse.Namespace) -> None:
    names = list(results)
    print(f"\n## {args.model}: weights and agreement\n")
    print("| variant | kernel | weights GB | max logit diff vs float32 | AR tok/s | AR tokens equal to float32 |")
    print("|---|---|---|---|---|---|")
    for v in names:
        r = results[v]
        diff = r.get("max_logit_diff_vs_float32")
        agree = r.get("ar_agree_with_float32")
        tok_s = r.get("ar_tok_s")
        print(f"| {v} | {r['kernel']} | {r['weight_gb']:.2f} | {'-' if diff is None else f'{diff:.3f}'} | "
              f"{'-' if tok_s is None else f'{tok_s:.2f}'} | {'-' if agree is None else agree} |")
    if "forward" in args.parts:
        print(f"\n## {args.model}: one forward after a ~{args.prefix}-token cached prefix, ms (median of {args.repeats})\n")
        print("| rows x tokens | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for r, w in args.shapes:
            key = f"{r}x{w}"
            print(f"| {key} | " + " | ".join(f"{results[v]['forward_ms'][key]:.0f}" for v in names) + " |")
    if args.accuracy:
        print(f"\n## {args.model}: GSM8K problems {args.offset}..{args.offset + args.accuracy - 1} right, greedy AR\n")
        for v in names:
            acc = results[v]["accuracy"]
            print(f"- {v}: {acc['correct']}/{acc['of']}  answers {acc['answers']}")


# ------------------------------------------------------------------------------------------- main

def parse_shape(text: str) -> tuple[int, int]:
    rows, _, width = text.lower().partition("x")
    if not (rows.isdigit() and width.isdigit() and int(rows) > 0 and int(width) > 0):
        raise argparse.ArgumentTypeError(f"a shape is ROWSxTOKENS like 2x13, got {text!r}")
    return int(rows), int(width)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["linear", "forward", "ar"], choices=["linear", "forward", "ar"])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--linear-n", type=int, default=8960)
    parser.add_argument("--linear-k", type=int, default=1536)
    parser.add_argument("--linear-repeats", type=int, default=20)
    parser.add_argument("--compile", action="store_true", help="also time torchao's int8 layer under torch.compile")
    parser.add_argument("--prefix", type=int, default=300, help="cached prefix length for the forward table")
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=list(SHAPES),
                        help="rows x new tokens per forward, e.g. 1x1 2x13 (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="forwards per shape")
    parser.add_argument("--ar-tokens", type=int, default=64)
    parser.add_argument("--ar-repeats", type=int, default=3)
    parser.add_argument("--offset", type=int, default=100, help="first GSM8K problem (0-9 tuned the defaults)")
    parser.add_argument("--accuracy", type=int, default=0, help="also grade greedy AR on this many problems")
    parser.add_argument("--accuracy-tokens", type=int, default=384)
    parser.add_argument("--accuracy-draft", default=None,
                        help="decode the accuracy runs with greedy SD and this draft (same tokens as AR, faster)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, native bf16: {cpu_supports_bf16()}, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    out: dict = {}
    if "linear" in args.parts:
        out.update(part_linear(args))
    if {"forward", "ar"} & set(args.parts) or args.accuracy:
        out.update(part_model(args))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
