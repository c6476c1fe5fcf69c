"""Command-line verbs for engines: the ``--target-url``/``--draft-url`` side of ``generate``, ``lr``, ``bench``
and ``pairs``, and ``flips`` (``serve-engine``, which starts them, is :mod:`.serve_cli`):

* ``generate --target-url URL``: the engine's own plain decoding of the question, and the summary line;
* ``lr --target-url URL --draft-url URL``: one question with ``auto``, ``lr`` or ``ar`` over the engines;
* ``bench --target-url URL ...``: the engine modes of :mod:`.bench` over a data set (resumable);
* ``pairs --target-url URL --draft-url URL``: the bank of step pairs, written by the engines
  (:mod:`.bench.pairs`), for ``lookahead-reasoning verifiers``.

A dead URL, a refused request or a bad option ends such a command with one line (``error: ...``)
and exit status 2.
"""

from __future__ import annotations

import argparse

from .bench.engine import ENGINE_BENCH_MODES, EngineBench, parse_engine_mode, run_engine_bench
from .bench.flips import FLIP_MAX_NEW_TOKENS, Flipper, check_flip_options, engine_finish, read_bank, run_flips
from .bench.pairs import KeepNone, PairRecorder, run_pairs
from .engine_runtime import ENGINE_MODES, check_scheme, is_url
from .errors import ConfigError, require
from .generator import LookaheadGenerator
from .options import OPTION_READS, check_max_new_tokens, named_check, refuse_unread_options
from .presets import (
    ENGINE_TIMEOUT_S,
    MAX_STEP_TOKENS,
    MODE_READS,
    MODES,
    SCHEDULE,
    STEP_DELIMITERS,
    read_by,
)
from .sampling import SamplingConfig
from .settings import Settings
from .steps import StepConfig
from .verifiers.options import check_verifier_settings, verifier_settings_from_args


def add_url_options(p: argparse.ArgumentParser, uses: str = "all") -> None:
    """The engine options of a command: ``uses`` "all" (lr, bench), "pairs" (the target's and the
    draft's endpoints) or "generate" (the target's). Their defaults are kept on the parsed options
    (``engine_options``) so that :func:`refuse_engine_options` can tell which were given."""
    g = p.add_argument_group("serving engines (OpenAI-compatible: llama.cpp's llama-server, vLLM, SGLang)")
    g.add_argument("--target-url", help="run over the engine at this URL instead of this process's PyTorch loops")
    g.add_argument("--target-model", help="the model name the target's engine serves (servers of several models)")
    if uses != "generate":
        g.add_argument("--draft-url", help="the draft's engine (default: --draft-model on the target's engine)")
        g.add_argument("--draft-model", help="the draft's model name on its engine")
    g.add_argument("--template", help="the served model's tokenizer (offline name, directory or hub id), for chat "
                   "prompts to an engine that applies no chat template itself (default: the engine's own, else the "
                   "tokenizer of the model name it serves)")
    g.add_argument("--engine-timeout", type=float, default=ENGINE_TIMEOUT_S, help="seconds one engine request may take")
    if uses == "all":
        g.add_argument("--scorer", help="for the likelihood verifiers over an engine that scores no prompt "
                       "(llama.cpp): the target's model loaded here (offline name, directory or hub id) or an engine "
                       "URL that does (vLLM)")
        g.add_argument("--sd-url", help="bench: a target engine started with its own draft-model SD (modes sd, lr-sd)")
        g.add_argument("--ngram-url", help="bench: a target engine started with its own n-gram SD (mode ngram)")
        g.add_argument("--concurrency", type=int, default=1, help="bench: problems run at once against the engine")
        g.add_argument("--schedule", default=SCHEDULE, choices=["sync", "async"],
                       help="lr over an engine: draft every step then send the rows (sync), or send each row as soon "
                            "as its drafted prefix exists (async)")
    only = g._group_actions[1:]  # every option but --target-url, which says that the target is an engine
    p.set_defaults(engine_options={a.dest: (a.option_strings[0], a.default) for a in only})


URL_DESTS = {"target_url": "--target-url", "draft_url": "--draft-url", "sd_url": "--sd-url", "ngram_url": "--ngram-url",
             "scorer": "--scorer", "judge_url": "--judge-url"}


def refuse_engine_options(args: argparse.Namespace) -> None:
    """ConfigError naming every engine option a command got without ``--target-url``: it would be ignored,
    since the run loads its models in this process; and naming a URL option whose scheme is not http(s)."""
    for dest, flag in URL_DESTS.items():
        value = getattr(args, dest, None)
        check_scheme(value, flag)  # --scorer may name a model; every other is an engine's URL
        require(value is None or dest == "scorer" or is_url(value), f"{flag} {value!r}: an engine's URL is http:// or "
                "https:// and a host")
    if getattr(args, "target_url", None) or not hasattr(args, "engine_options"):
        return
    given = [flag for name, (flag, default) in args.engine_options.items() if getattr(args, name) != default]
    require(not given, f"{', '.join(given)}: for a target served by an engine (--target-url URL); without one "
            "the models run in this process and these options would be ignored")


# What each command honours with a target served by an engine (--target-url), by argparse name; every other
# option it has, given with --target-url, is refused by name before any request (tests/test_bad_inputs.py
# draws them all). The rest configure models this process loads, or token-level SD in this process.
VERIFIER_OPTIONS = {"verifier", "threshold", "judge_model", "judge_dtype", "judge_url", "judge_name", "judge_timeout"}
URL_OPTIONS = {"target_url", "target_model", "draft_url", "draft_model", "template", "engine_timeout"}
SAMPLING_OPTIONS = {"temperature", "top_k", "top_p", "seed"}
QUESTION_OPTIONS = {"prompt", "dataset", "index", "raw", "max_new_tokens"}
OVER_ENGINE = {
    "lr": {"mode", "k", "width", "delimiter", "max_step_tokens", "no_compare", "no_warmup", "details", "color", "html",
           "scorer", "schedule", *VERIFIER_OPTIONS, *URL_OPTIONS, *SAMPLING_OPTIONS, *QUESTION_OPTIONS},
    "generate": {*URL_OPTIONS, *SAMPLING_OPTIONS, *QUESTION_OPTIONS},
    "bench": {"dataset", "out", "modes", "limit", "offset", "max_new_tokens", "no_progress", "report", "width",
              "delimiter", "max_step_tokens", "scorer", "sd_url", "ngram_url", "concurrency", "schedule",
              *VERIFIER_OPTIONS, *URL_OPTIONS, *SAMPLING_OPTIONS},
    "pairs": {"dataset", "offset", "limit", "out", "max_new_tokens", "max_step_tokens", *URL_OPTIONS},
}


def read_by_note(command: str, dest: str, engine_only: set[str] | frozenset[str]) -> str:
    """Which modes and targets read option ``dest`` of ``command`` (generate, lr, bench, pairs): the note its help
    and OPTIONS.md give, from the tables the refusals use (:data:`~.presets.MODE_READS`, :data:`OVER_ENGINE`)."""
    modes = {"generate": "mode ar", "pairs": "its fixed plan"}.get(command, "every mode")
    if command in ("lr", "bench") and dest in OPTION_READS:
        modes = "modes " + read_by(OPTION_READS[dest], tuple(MODE_READS) if command == "bench" else MODES)
    honoured = dest in OVER_ENGINE[command]
    if dest == "mode":
        return "with either target (over an engine: auto, lr, ar)"
    if dest in engine_only:
        return f"read by {modes} with an engine target (--target-url)" if honoured else f"not read by {command}: refused"
    return f"read by {modes} with {'either target' if honoured else 'a target of this process'}"


def refuse_local_only_options(args: argparse.Namespace, command: str) -> None:
    """ConfigError naming every option of ``command`` given with ``--target-url`` that the run over the
    engine would not honour (:data:`OVER_ENGINE`); nothing is sent before."""
    if not getattr(args, "target_url", None):
        return
    given = [flag for dest, (flag, default) in getattr(args, "option_flags", {}).items()
             if dest not in OVER_ENGINE[command] and getattr(args, dest, default) != default]
    require(not given, f"{', '.join(given)}: not with --target-url: {command} over an engine runs the engine's own "
            "model (its loading is set where the engine starts) and no token-level SD in this process (start the "
            "engine with its own SD for that)")


def engine_settings(args: argparse.Namespace) -> Settings:
    """The settings the shared options describe for a run over engines (steps, sampling, seed, width,
    schedule, timeout); a command without an option gets its default (``pairs``: greedy). A bad one is refused
    naming its option."""
    return named_check(lambda: Settings(
        steps=StepConfig(tuple(getattr(args, "delimiter", None) or STEP_DELIMITERS),
                         getattr(args, "max_step_tokens", MAX_STEP_TOKENS)),
        sampling=SamplingConfig(getattr(args, "temperature", 0.0), getattr(args, "top_k", None),
                                getattr(args, "top_p", 1.0)), timeout_s=args.engine_timeout,
        seed=getattr(args, "seed", 0), width=getattr(args, "width", 1), schedule=getattr(args, "schedule", SCHEDULE)))


def engine_generator(args: argparse.Namespace):
    """``lr --target-url``'s :class:`~lookahead_reasoning.LookaheadGenerator` over the engines: the options
    it honours there (:data:`OVER_ENGINE`), the same class and checks as for models of this process."""
    require(args.mode in ENGINE_MODES, f"--mode {args.mode} runs token-level SD in this process; over an engine "
            f"the modes are {', '.join(ENGINE_MODES)} (start the engine with its own SD and use ar for token SD there)")
    return LookaheadGenerator(target=args.target_url, draft=args.draft_url, verifier=verifier_settings_from_args(args),
                              settings=engine_settings(args).with_overrides(max_new_tokens=args.max_new_tokens),
                              mode=args.mode, k=args.k, target_model=args.target_model, draft_model=args.draft_model,
                              template=args.template, scorer=args.scorer)


def run_bench_over_engine(args: argparse.Namespace) -> int:
    """``bench --target-url``: the engine modes of :mod:`.bench` over the dataset."""
    bench = EngineBench(args.dataset, args.out, args.target_url, draft=args.draft_url, sd=args.sd_url,
                        ngram=args.ngram_url, template=args.template, scorer=args.scorer, modes=args.modes,
                        target_model=args.target_model, draft_model=args.draft_model,
                        limit=args.limit, offset=args.offset,
                        max_new_tokens=args.max_new_tokens, concurrency=args.concurrency,
                        verifier=verifier_settings_from_args(args), settings=engine_settings(args))
    check_verifier_settings(bench.verifier)
    given = {flag: dest for dest, (flag, default) in args.option_flags.items() if getattr(args, dest) != default}
    runs_as = [ENGINE_BENCH_MODES[parse_engine_mode(m)[0]][0] for m in bench.modes]  # the engine's own SD runs as ar
    refuse_unread_options(runs_as, bench.settings, given, None)  # an option no mode reads, before any request
    path = run_engine_bench(bench)
    print(f"results: {path} (`lookahead-reasoning report {path}`)")
    return 0


def target_generator(args: argparse.Namespace, settings: Settings):
    """The target's engine alone, through the front door (a :class:`~lookahead_reasoning.LookaheadGenerator` in
    mode ``ar``, no draft, with its checks): plain decoding for ``generate`` and ``flips``."""
    return LookaheadGenerator(target=args.target_url, settings=settings, mode="ar", target_model=args.target_model,
                              template=args.template)


def run_generate_over_engine(args: argparse.Namespace, prompt) -> int:
    """``generate --target-url``: plain decoding by the engine (one completion request, through the generator
    as for any URL target), printed with the local command's summary line."""
    gen = target_generator(args, engine_settings(args).with_overrides(max_new_tokens=args.max_new_tokens))
    try:
        result = gen.generate(prompt, raw=True, on_text=lambda text: print(text, end="", flush=True))
    finally:
        gen.close()
    print(f"\n\n[{result.num_tokens} tokens, {result.wall_time_s:.1f} s, {result.tokens_per_s:.2f} tok/s, "
          f"engine {gen.engine.pair.target.client.endpoint.url}, stop: {result.stop_reason}]")
    return 0


def run_pairs_over_engine(args: argparse.Namespace) -> int:
    """``pairs --target-url``: the bank of step pairs written by the engines (:mod:`.bench.pairs`)."""
    check_max_new_tokens(args.max_new_tokens)  # run_pairs checks the problems' range, before connecting
    require(args.draft_url is not None or args.draft_model is not None,
            "pairs over engines need a draft: give --draft-url (or --draft-model on the target's engine)")
    made = []

    def recorder() -> PairRecorder:  # connects: only when a problem is left to record
        made.append(LookaheadGenerator(target=args.target_url, draft=args.draft_url, verifier=KeepNone(),
                                       settings=engine_settings(args), mode="lr", target_model=args.target_model,
                                       draft_model=args.draft_model, template=args.template))
        return PairRecorder(made[0], args.max_new_tokens)
    try:
        path = run_pairs(recorder, args.dataset, args.out, offset=args.offset, limit=args.limit)
    finally:
        for generator in made:
            generator.close()
    print(f"pairs: {path} (`lookahead-reasoning verifiers {path}` compares the verifiers on them)")
    return 0


def add_flips_command(sub: argparse._SubParsersAction) -> None:
    """``flips``: continue a bank's non-exact pairs on both branches over the target's engine (:mod:`.bench.flips`)."""
    f = sub.add_parser("flips", help="continue a step-pair bank's non-exact pairs to the end on both branches "
                                     "(the target over an engine) and record which change the answer (resumable)")
    f.add_argument("pairs", nargs="+", help="the bank: one or more pairs JSONL files written by the pairs command")
    f.add_argument("--out", required=True, help="flips JSONL (rerun with the same path to resume)")
    f.add_argument("--sample", type=int, default=None, help="continue this many non-exact pairs, drawn with --seed "
                                                            "(default: all)")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--max-new-tokens", type=int, default=FLIP_MAX_NEW_TOKENS,
                   help="a branch's whole answer, prefix and step included")
    add_url_options(f, "generate")
    f.set_defaults(func=cmd_flips)


def cmd_flips(args: argparse.Namespace) -> int:
    require(bool(args.target_url), "flips continues the branches over an engine: give --target-url "
            "(`lookahead-reasoning serve-engine` starts one)", ConfigError)
    check_flip_options(args.sample, args.max_new_tokens)
    require(args.sample is not None or args.seed == 0, f"--seed {args.seed} draws the pairs of --sample, which is not "
            "given (every non-exact pair is continued): give --sample N, or leave --seed out")
    read_bank(args.pairs)  # a bad option or file fails before any connection
    gen = target_generator(args, engine_settings(args))
    try:
        finish = engine_finish(gen, args.max_new_tokens)
        path = run_flips(args.pairs, args.out, Flipper(finish, gen.engine.pair.target.client.model_name()),
                         sample=args.sample, seed=args.seed, max_new_tokens=args.max_new_tokens)
    finally:
        gen.close()
    print(f"flips: {path} (`lookahead-reasoning verifiers {' '.join(args.pairs)} --flips {path}` adds each verifier's "
          "flip rate to the ablation)")
    return 0


__all__ = ["add_flips_command", "add_url_options", "cmd_flips", "engine_settings",
           "OVER_ENGINE", "engine_generator", "read_by_note", "refuse_engine_options", "refuse_local_only_options", "run_bench_over_engine",
           "run_generate_over_engine",
           "run_pairs_over_engine", "target_generator"]
