"""Command line: ``lookahead-reasoning {generate,lr,bench,report,pairs,score-pairs,verifiers,flips,serve-engine}`` (also ``python -m lookahead_reasoning``).

* ``generate``: autoregressive generation with one model, streaming the text.
* ``lr``: one question with a speculative mode (``auto`` by default), with the autoregressive run of
  the same target in the same process for the speedup (``--no-compare`` to skip), the trace summary
  and a coloured trace.
* ``bench`` / ``report``: the benchmark harness (see :mod:`lookahead_reasoning.bench`).
* ``pairs`` / ``verifiers``: a bank of (drafted step, target step) pairs and an offline verifier ablation;
  ``score-pairs``: the target's probabilities for a bank written over engines; ``flips``: which accepted pairs change the final answer (both branches continued over an engine).
* ``serve-engine``: build llama.cpp's server and serve the offline models on loopback; ``generate``,
  ``lr``, ``bench`` and ``pairs`` with ``--target-url`` run over any OpenAI-compatible engine
  (:mod:`lookahead_reasoning.engine_runtime`).

Every option is checked before any model loads: a bad number, name, path or dataset index fails in
a second, naming the option.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from pathlib import Path

from . import engine_cli
from .bench.bank_scores import add_score_pairs_command
from .bench.cli import add_bench_commands
from .bench.datasets import DEFAULT_DATASET, load_jsonl
from .bench.grading import grade
from .bench.pairs import add_pairs_commands
from .bench.runner import check_writable
from .engine_cli import (add_flips_command, add_url_options, engine_generator, read_by_note, refuse_engine_options,
                         refuse_local_only_options, run_generate_over_engine)
from .errors import LookaheadError, PromptError, require
from .generator import LookaheadGenerator
from .integrations import harness
from .options import (
    DTYPES,
    add_generator_args,
    check_cache_writable,
    check_fits_context,
    check_max_new_tokens,
    generator_spec,
    named_check,
)
from .presets import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TARGET
from .prompts import math_messages
from .render import render_html, render_terminal
from .serve_cli import add_serve_command
from .sampling import SamplingConfig


def _add_prompt_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("question")
    g.add_argument("--prompt", help="the question (default: problem --index of --dataset)")
    g.add_argument("--dataset", help=f"a GSM8K/AIME-format jsonl file to take the question from (default: "
                                     f"{DEFAULT_DATASET}, the first 64 GSM8K training problems, shipped)")
    g.add_argument("--index", type=int, help="which problem of --dataset (0-based; default 0)")
    g.add_argument("--raw", action="store_true", help="use the prompt text as is, without the chat template")
    g.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    g.add_argument("--seed", type=int, default=0)


def _check_prompt_args(args: argparse.Namespace) -> None:
    check_max_new_tokens(args.max_new_tokens)
    require(args.prompt is None or args.prompt.strip() != "", "--prompt is empty: give a question", PromptError)
    require(args.prompt is None or (args.dataset is None and args.index is None),
            "give --prompt, or --dataset and --index, not both (--index picks a problem of a data set)")
    require(args.index is None or args.index >= 0, f"--index must be >= 0 (a 0-based problem number), got {args.index}")


def _question(args: argparse.Namespace) -> tuple[str | list, str | None]:
    """The prompt (messages unless --raw) and the gold answer when it comes from a dataset."""
    if args.prompt is not None:
        return args.prompt, None
    dataset, index = args.dataset or DEFAULT_DATASET, args.index or 0
    everything = load_jsonl(dataset)
    require(index < len(everything),
            f"--index {index} is past the end of {dataset} ({len(everything)} problems: 0..{len(everything) - 1})")
    question, gold = everything[index].question, everything[index].answer
    return (question if args.raw else math_messages(question)), gold


_stream = functools.partial(print, end="", flush=True)  # the text as it is written


def cmd_generate(args: argparse.Namespace) -> int:
    _check_prompt_args(args)
    if args.target_url:  # the engine's own decoding (lookahead_reasoning.engine_runtime)
        refuse_local_only_options(args, "generate")
        return run_generate_over_engine(args, _question(args)[0])
    require(args.dtype.lower() in DTYPES, f"--dtype must be one of {', '.join(DTYPES)}, got {args.dtype!r}")
    sampling = named_check(lambda: SamplingConfig(args.temperature, args.top_k, args.top_p))
    check_fits_context(args.model, args.max_new_tokens)
    prompt, _ = _question(args)
    gen = LookaheadGenerator(target=args.model, mode="ar", sampling=sampling, dtype=args.dtype, device=args.device,
                             cpu_linear=args.cpu_linear)  # one model: the target alone, through the one loop
    check_fits_context(gen.target.model, args.max_new_tokens)
    result = gen.generate(prompt, raw=args.raw, max_new_tokens=args.max_new_tokens, seed=args.seed, on_text=_stream)
    print(f"\n\n[{result.num_tokens} tokens, {result.wall_time_s:.1f} s, {result.tokens_per_s:.2f} tok/s, "
          f"{result.target_forwards} forwards, stop: {result.stop_reason}]")
    return 0


def cmd_lr(args: argparse.Namespace) -> int:
    """One question in a mode and in ``ar``, over this process's models or, with --target-url, over engines:
    one generator either way (the engine's takes the options it honours there; the rest are refused)."""
    refuse_local_only_options(args, "lr")
    spec = generator_spec(args)  # the decoding numbers are checked here, the names and choices next
    _check_prompt_args(args)
    if not args.target_url:
        spec.check()
        check_fits_context(spec.target, args.max_new_tokens)
        if args.mode == "auto":
            check_cache_writable("mode auto keeps the cost tables it measures and the rates it learns there")
    if args.html:
        check_writable(Path(args.html), "the trace", "--html")
    prompt, gold = _question(args)
    if args.target_url:  # over serving engines (lookahead_reasoning.engine_runtime)
        print(f"connecting to target {args.target_url}, draft {args.draft_url}, verifier {spec.verifier.name} ...",
              flush=True)
        gen = engine_generator(args)
    else:
        print(f"loading target {spec.target}, draft {spec.draft}, verifier {spec.verifier.name} ...", flush=True)
        gen = spec.build()
        check_fits_context(gen.target.model, args.max_new_tokens)
    try:
        results = _run_modes(gen, args, prompt)
    finally:
        gen.close()
    main = results[args.mode]
    print("\n\n=== trace (green: drafted steps accepted; yellow: target steps) ===")
    print(render_terminal(main, color=sys.stdout.isatty() or args.color, details=args.details))
    print("\n=== summary ===")
    summary = _lr_summary(results, args.mode, gold)
    if args.mode == "auto" and gen.engine is None:  # when the step layer pays here, at this pair's token rates
        point = gen.break_even(context=len(main.prompt_ids) + main.num_tokens // 2)
        summary["step_layer_pays_above_alpha1"] = {f"k{k}": None if a is None else round(a, 3)
                                                   for k, a in point.alpha1.items()}
    print(json.dumps(summary, indent=2))
    if args.html:
        Path(args.html).write_text(render_html(main), encoding="utf-8")
        print(f"trace written to {args.html}")
    return 0


def _run_modes(gen, args: argparse.Namespace, prompt) -> dict:
    """``args.mode`` (streamed) and, unless --no-compare, ``ar`` on the same prompt: mode -> result."""
    modes = [args.mode] + ([] if args.no_compare or args.mode == "ar" else ["ar"])
    if not args.no_warmup:  # untimed: a fresh process's first forwards are several times slower
        print("warming up (a few tokens of each mode, untimed) ...", flush=True)
        gen.warmup(modes)
    results = {}
    for mode in modes:
        print(f"\n=== {mode} ===", flush=True)
        results[mode] = gen.generate(prompt, mode=mode, max_new_tokens=args.max_new_tokens, seed=args.seed,
                                     raw=args.raw, on_text=_stream if mode == args.mode else None)
        if mode != args.mode:
            print(f"[{results[mode].num_tokens} tokens in {results[mode].wall_time_s:.1f} s]")
    return results


def _lr_summary(results: dict, mode: str, gold: str | None) -> dict:
    """The main mode's summary, its speedup over ``ar`` when that ran, and the graded answers."""
    main = results[mode]
    summary = main.summary()
    if "ar" in results and mode != "ar" and results["ar"].num_tokens:
        ar = results["ar"]
        summary["ar_tokens_per_s"] = round(ar.tokens_per_s, 3)
        summary["speedup_vs_ar"] = round(main.tokens_per_s / ar.tokens_per_s, 3)
        summary["same_text_as_ar"] = main.text == ar.text
    if gold is not None:
        summary["gold"] = gold
        for name, r in results.items():
            g = grade(r.text, gold)
            summary[f"{name}_answer"] = g.predicted
            summary[f"{name}_correct"] = g.correct
    return summary


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors take one line (the usage block is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="lookahead-reasoning", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("eval", help="lm-evaluation-harness with this library as model lookahead (needs the eval extra; "
                   "every lm_eval option after it)", add_help=False)

    g = sub.add_parser("generate", help="autoregressive generation, streamed")
    g.add_argument("--model", default=DEFAULT_TARGET, help="offline name, hub id, local directory or .gguf file")
    g.add_argument("--dtype", default="auto", help="auto | bf16 | fp16 | fp32 (auto: bf16 where the CPU/GPU supports it)")
    g.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when present)")
    g.add_argument("--cpu-linear", default="auto", choices=["auto", "onednn", "default"])
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=1.0)
    _add_prompt_args(g)
    g.set_defaults(func=cmd_generate)

    add_url_options(g, "generate")

    lr = sub.add_parser("lr", help="one question with a speculative mode, with AR in the same run for the speedup")
    add_generator_args(lr)
    _add_prompt_args(lr)
    o = lr.add_argument_group("output")
    o.add_argument("--no-compare", action="store_true", help="skip the autoregressive run")
    o.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up of each mode")
    o.add_argument("--details", action="store_true", help="print every cycle's verdicts (and plan, in mode auto)")
    o.add_argument("--color", action="store_true", help="colour the trace even when not on a terminal")
    o.add_argument("--html", help="write the trace as an HTML page here")
    lr.set_defaults(func=cmd_lr)

    add_url_options(lr)
    add_serve_command(sub)

    add_bench_commands(sub)
    add_pairs_commands(sub)
    add_score_pairs_command(sub)
    add_flips_command(sub)
    # with --target-url, bench runs the engine modes (lookahead_reasoning.bench.engine), the engines write the pairs
    for command, uses, over_engine in (("bench", "all", engine_cli.run_bench_over_engine),
                                       ("pairs", "pairs", engine_cli.run_pairs_over_engine)):
        add_url_options(sub.choices[command], uses)
        sub.choices[command].set_defaults(func=_local_or_engine(sub.choices[command].get_default("func"), over_engine))
    _mark_options(sub)
    return parser


def _mark_options(sub: argparse._SubParsersAction) -> None:
    """What each option of generate, lr, bench and pairs defaults to (refusals name the given ones), and in its
    help which modes and targets read it (:func:`~.engine_cli.read_by_note`)."""
    for command in ("generate", "lr", "bench", "pairs"):
        p = sub.choices[command]
        actions = [a for a in p._actions if a.option_strings and a.dest != "help"]
        p.set_defaults(option_flags={a.dest: (a.option_strings[0], a.default) for a in actions})
        for action in actions:
            note = read_by_note(command, action.dest, frozenset(p.get_default("engine_options")))
            action.help = f"{action.help} [{note}]" if action.help else f"[{note}]"


def _local_or_engine(local, over_engine):
    """A command that runs ``over_engine`` when --target-url is given, else ``local``."""
    def run(args: argparse.Namespace) -> int:
        if args.target_url:
            refuse_local_only_options(args, args.command)
            return over_engine(args)
        return local(args)
    return run


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["eval"]:  # lm-eval's own command line with this library's model and task, the eval extra
            harness.main(argv[1:])  # installed (lookahead_reasoning.integrations.harness)
            return 0
        args = build_parser().parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        refuse_engine_options(args)
        return args.func(args)
    except LookaheadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
