"""Command line: ``lookahead-reasoning {generate,lr,bench,report}`` (also ``python -m lookahead_reasoning``).

* ``generate``: autoregressive generation with one model, streaming the text.
* ``lr``: Lookahead Reasoning on one question, with the autoregressive run of the same target in the
  same process for the speedup (``--no-compare`` to skip), the trace summary and a coloured trace.
* ``bench`` / ``report``: the benchmark harness (see :mod:`lookahead_reasoning.bench`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .errors import LookaheadError

DEFAULT_TARGET = "qwen2.5-coder-1.5b"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="auto", help="auto | bf16 | fp16 | fp32 (auto: bf16 where the CPU/GPU supports it)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when present)")
    p.add_argument("--cpu-linear", default="auto", choices=["auto", "onednn", "default"],
                   help="linear-layer kernel for float32 CPU models (auto: oneDNN, much faster for SD's "
                        "few-token forwards; default: torch's BLAS path)")


def _add_prompt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", help="the question (default: a built-in GSM8K-style problem)")
    p.add_argument("--dataset", help="a GSM8K/AIME-format jsonl file to take the question from")
    p.add_argument("--index", type=int, default=0, help="which problem of --dataset (0-based)")
    p.add_argument("--raw", action="store_true", help="use the prompt text as is, without the chat template")
    p.add_argument("--max-new-tokens", type=int, default=384)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)


def _question(args: argparse.Namespace) -> tuple[str | list, str | None]:
    """The prompt (messages unless --raw) and the gold answer when it comes from a dataset."""
    from .prompts import EXAMPLE_QUESTION, math_messages

    gold = None
    if args.dataset:
        from .bench.datasets import load_jsonl

        problems = load_jsonl(args.dataset, offset=args.index, limit=1)
        if not problems:
            raise LookaheadError(f"--index {args.index} is past the end of {args.dataset}")
        question, gold = problems[0].question, problems[0].answer
    else:
        question = args.prompt or EXAMPLE_QUESTION
    if args.raw:
        return question, gold
    return math_messages(question) if (args.dataset or not args.prompt) else question, gold


def _sampling(args: argparse.Namespace):
    from .sampling import SamplingConfig

    return SamplingConfig(args.temperature, args.top_k, args.top_p)


def cmd_generate(args: argparse.Namespace) -> int:
    from .decoding.autoregressive import generate
    from .lm import LM
    from .models import load_model

    lm = LM.from_loaded(load_model(args.model, dtype=args.dtype, device=args.device, cpu_linear=args.cpu_linear))
    prompt, _ = _question(args)
    ids = lm.prompt_ids(prompt, raw=args.raw)
    result = generate(lm, ids, max_new_tokens=args.max_new_tokens, sampling=_sampling(args), seed=args.seed,
                      on_text=lambda t: (sys.stdout.write(t), sys.stdout.flush()))
    print(f"\n\n[{result.num_tokens} tokens, {result.wall_time_s:.1f} s, {result.tokens_per_s:.2f} tok/s, "
          f"{result.target_forwards} forwards, stop: {result.stop_reason}]")
    return 0


def default_gamma(mode: str, token_sd_target: str = "draft") -> int:
    """Drafted tokens per SD iteration when --gamma is not given: 12 for the draft model (with its
    early stop, --draft-stop-below 0.4), 6 for prompt lookup; the best measured on this project's CPU
    (README, Benchmark)."""
    ngram = mode == "sd-ngram" or (mode == "lr-sd" and token_sd_target == "ngram")
    return 6 if ngram else 12


def default_k(mode: str) -> int:
    """Drafted steps per cycle when -k is not given: 2 for ``lr``, 1 for ``lr-sd``. With token SD
    inside the rows, every extra row makes the target's batched step dearer on a CPU (beta, see
    theory/README.md section 2), and one drafted step per cycle measured best (README, Benchmark)."""
    return 1 if mode == "lr-sd" else 2


def cmd_lr(args: argparse.Namespace) -> int:
    from .bench.grading import grade
    from .decoding.lookahead import TokenSD
    from .decoding.steps import StepConfig
    from .generator import LookaheadGenerator
    from .render import render_html, render_terminal

    if args.gamma is None:
        args.gamma = default_gamma(args.mode, args.token_sd_target)
    if args.k is None:
        args.k = default_k(args.mode)
    print(f"loading target {args.target}, draft {args.draft}, verifier {args.verifier} ...", flush=True)
    gen = LookaheadGenerator(
        target=args.target, draft=args.draft, verifier=args.verifier, k=args.k, width=args.width,
        steps=StepConfig(tuple(args.delimiter or ["\n\n"]), args.max_step_tokens),
        token_sd=TokenSD(target=args.token_sd_target, draft=args.token_sd_draft, gamma=args.gamma),
        sampling=_sampling(args), gamma=args.gamma,
        verifier_kwargs={"threshold": args.threshold} if args.threshold is not None else None,
        dtype=args.dtype, device=args.device, cpu_linear=args.cpu_linear, draft_quantize=args.draft_quantize,
        draft_stop_below=args.draft_stop_below)
    prompt, gold = _question(args)
    modes = [args.mode] + ([] if args.no_compare else ["ar"])
    if not args.no_warmup:  # untimed: a fresh process's first forwards are several times slower
        print("warming up (a few tokens of each mode, untimed) ...", flush=True)
        gen.warmup(modes)
    results = {}
    for mode in modes:
        print(f"\n=== {mode} ===", flush=True)
        stream = (lambda t: (sys.stdout.write(t), sys.stdout.flush())) if mode == args.mode else None
        results[mode] = gen.generate(prompt, mode=mode, max_new_tokens=args.max_new_tokens, seed=args.seed,
                                     raw=args.raw, on_text=stream)
        r = results[mode]
        if mode != args.mode:
            print(f"[{r.num_tokens} tokens in {r.wall_time_s:.1f} s]")
    main = results[args.mode]
    print("\n\n=== trace (green: drafted steps accepted; yellow: target steps) ===")
    print(render_terminal(main, color=sys.stdout.isatty() or args.color, details=args.details))
    summary = main.summary()
    if "ar" in results:
        ar = results["ar"]
        summary["ar_tokens_per_s"] = round(ar.tokens_per_s, 3)
        summary["speedup_vs_ar"] = round(main.tokens_per_s / ar.tokens_per_s, 3)
        summary["same_text_as_ar"] = main.text == ar.text
    if gold is not None:
        summary["gold"] = gold
        for mode, r in results.items():
            g = grade(r.text, gold)
            summary[f"{mode}_answer"] = g.predicted
            summary[f"{mode}_correct"] = g.correct
    print("\n=== summary ===")
    print(json.dumps(summary, indent=2))
    if args.html:
        Path(args.html).write_text(render_html(main), encoding="utf-8")
        print(f"trace written to {args.html}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lookahead-reasoning", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="autoregressive generation, streamed")
    g.add_argument("--model", default=DEFAULT_TARGET, help="offline name, hub id, local directory or .gguf file")
    _add_model_args(g)
    _add_prompt_args(g)
    g.set_defaults(func=cmd_generate)

    lr = sub.add_parser("lr", help="Lookahead Reasoning on one question, with AR in the same run for the speedup")
    lr.add_argument("--target", default=DEFAULT_TARGET)
    lr.add_argument("--draft", default=DEFAULT_DRAFT)
    lr.add_argument("--draft-quantize", default="auto", choices=["auto", "int8", "none"],
                    help="auto (int8 for a CPU draft) | int8 | none: dynamic int8 linears make the draft 2-3x cheaper")
    lr.add_argument("--verifier", default="embedding-numbers",
                    help="exact | embedding | embedding-numbers | judge | cascade:exact+embedding | random")
    lr.add_argument("--threshold", type=float, default=None, help="verifier threshold (embedding cosine, judge score)")
    lr.add_argument("--mode", default="lr", choices=["lr", "lr-sd", "sd", "sd-ngram", "ar"])
    lr.add_argument("-k", type=int, default=None, help="drafted steps per cycle (default: 2 for lr, 1 for lr-sd)")
    lr.add_argument("--width", type=int, default=1, help="drafts per position")
    lr.add_argument("--gamma", type=int, default=None,
                    help="drafted tokens per SD iteration (default: 12 for the draft model, 6 for prompt lookup)")
    lr.add_argument("--draft-stop-below", type=float, default=0.4,
                    help="modes sd and lr-sd: the draft model stops after a token it gave less than this "
                         "probability (default 0.4; 0 drafts gamma tokens every time)")
    lr.add_argument("--token-sd-target", default="draft", choices=["ngram", "draft"], help="SD inside target steps (lr-sd)")
    lr.add_argument("--token-sd-draft", default="ngram", choices=["ngram", "none"], help="SD inside draft steps (lr-sd)")
    lr.add_argument("--delimiter", action="append", help="step delimiter (repeatable; default a blank line)")
    lr.add_argument("--max-step-tokens", type=int, default=100)
    lr.add_argument("--no-compare", action="store_true", help="skip the autoregressive run")
    lr.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up of each mode")
    lr.add_argument("--details", action="store_true", help="print every cycle's verdicts")
    lr.add_argument("--color", action="store_true", help="colour the trace even when not on a terminal")
    lr.add_argument("--html", help="write the trace as an HTML page here")
    _add_model_args(lr)
    _add_prompt_args(lr)
    lr.set_defaults(func=cmd_lr)

    try:
        from .bench.cli import add_bench_commands

        add_bench_commands(sub)
    except ImportError:  # the benchmark harness is optional
        pass
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "token_sd_draft", None) == "none":
        args.token_sd_draft = None
    try:
        return args.func(args)
    except LookaheadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
