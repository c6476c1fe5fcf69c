"""A bank of step pairs: what the draft and the target each write at the same step boundary.

The paper's synchronous protocol, on real problems, run by the one loop. Follow the target's own greedy
solution step by step (a step ends at a delimiter, "\\n\\n", at EOS or at the step cap): every cycle is the
fixed plan ``lr@k1r1``, one drafted step and one target row (:class:`~lookahead_reasoning.settings.CyclePlan`),
with a verifier that keeps no drafted step (:class:`KeepNone`). At each step boundary:

  1. the draft writes its next step s^ from the prefix x (the target's text so far);
  2. the target writes its own next step s from x (in this process starting with the drafted tokens it
     agrees with, scored in one forward: they are its own greedy tokens; with token-level SD by the
     draft model inside its step unless ``--no-target-sd``: the same text);
  3. x becomes x + s, and an observer of the cycle (:class:`PairLog`) writes the pair (s^, s).

After a step cut at the cap, x does not end on a boundary: the target writes on alone (a cycle with
nothing drafted, no pair), as Lookahead Reasoning drafts only from a boundary. A record holds both steps as
text and token ids (the draft's ids in its own vocabulary) and, in this process, each model's probabilities
of its own step's tokens and the target's probabilities of the drafted step's tokens (in the target's
tokens), from forwards of the observer's own sessions over the prefix and each step.

The same recorder runs over serving engines (a generator whose target is a URL): the cycle's draft and
target steps are completion requests. What an engine does not give is null: ``draft_probs``,
``target_probs`` and ``target_probs_of_draft`` (an OpenAI-compatible engine scores no given continuation).
No verifier of the ablation reads them (``target-score`` scores each pair with the model ``verifiers
--target`` loads), so every verifier runs on an engine's pairs file. ``agreed_tokens`` is the common
prefix of the two steps' ids: with greedy decoding and one tokenizer, the drafted tokens the target
would write itself. Every record names the models that wrote it (``target_model``, ``draft_model``, and
over engines ``target_url``, ``draft_url``); a rerun refuses a file written by other models.

The output is a JSON-lines file written with the benchmark runner's ``append_record`` (one line per
pair, pushed to disk at once) and read back with its ``done_pairs``: a pair's key is
``(problem id, "step-<i>")`` and each finished problem ends with a ``(problem id, "problem")``
summary. A rerun skips finished problems and the pairs already written (greedy decoding gives the
same steps again), so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ..decoding.driver import FixedPolicy, generate_cycles
from ..decoding.results import CycleTrace
from ..decoding.tools import Translator
from ..engine_runtime import alr
from ..errors import ConfigError, require
from ..options import GeneratorSpec, check_max_new_tokens, decoding_settings
from ..presets import DEFAULT_DRAFT, DEFAULT_MAX_NEW_TOKENS, DEFAULT_TARGET, MAX_STEP_TOKENS, TOKEN_GAMMA, no_model
from ..prompts import math_messages
from ..settings import CyclePlan, TokenSD
from ..steps import Step, closing
from ..stopping import common_prefix
from ..verifiers.base import Verdict
from ..verifiers.options import add_judge_args
from ..verifiers.text import normalize_step, step_numbers
from .ablation import DEFAULT_ENTRIES, run_ablation_command
from .datasets import DEFAULT_DATASET, Problem, load_dataset
from .bank_scores import own_probabilities, rounded
from .grading import graded
from .results import append_record, check_same_models, check_scope, check_writable, done_pairs

Write = Callable[[dict[str, Any]], None]


class KeepNone:
    """The verifier of a recording: it keeps no drafted step, so every cycle keeps the target's own step."""

    name = "keep-none"

    def verify(self, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        return [Verdict(False, None, "a recording keeps the target's own steps", 0.0, self.name) for _ in pairs]


class PairPolicy(FixedPolicy):
    """The recording's fixed plan: ``lr@k1r1`` at every step boundary (one drafted step, the target's row from
    x alone), the target writing on alone to the next boundary elsewhere; every finished cycle goes to
    ``observer`` (a :class:`PairLog`), as a policy hears what its cycles did."""

    def __init__(self, observer: Callable[[CycleTrace], None], mode: str = "pairs"):
        super().__init__(1, None, mode)
        self.observer = observer

    def plan(self, position: Any) -> CyclePlan:
        plan = super().plan(position)
        return replace(plan, rows=1) if plan.k else plan

    def learn(self, trace: CycleTrace) -> None:
        self.observer(trace)


class PairRecorder:
    """Follows problems with a :class:`~lookahead_reasoning.LookaheadGenerator`'s runtime (module
    docstring): its models in this process, or its engines where its target is a URL. Decoding is greedy
    (the generator's sampling must be), with its step settings and, in this process, its token SD inside
    the target's rows (``settings.token_sd.target``)."""

    def __init__(self, generator: Any, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS):
        check_max_new_tokens(max_new_tokens)
        require(generator.settings.sampling.greedy, "pairs follow the target's greedy solution: the generator must "
                "decode greedily (temperature 0)", ConfigError)
        self.generator, self.max_new_tokens = generator, max_new_tokens
        self.settings = generator.settings.with_overrides(max_new_tokens=max_new_tokens)
        if generator.engine is not None:
            pair = generator.engine.pair
            require(pair.draft is not None, "pairs over engines need a draft: give --draft-url (or --draft-model "
                    "on the target's engine)", ConfigError)
            self.names = {"target_model": pair.target.client.model_name(), "draft_model": pair.draft.client.model_name(),
                          "target_url": pair.target.client.endpoint.url, "draft_url": pair.draft.client.endpoint.url,
                          "engine": True}
        else:
            self.names = {"target_model": generator.target.name, "draft_model": generator.draft.name}
            self.translator = Translator(generator.target, generator.draft, generator.same_vocab)

    def follow(self, problem: Problem, write: Write, skip_steps: set[int] = frozenset()) -> dict[str, Any]:
        """Write the pair records of one problem as they are made (those of ``skip_steps`` are made again to
        reach the later ones, but not written) and return its summary record."""
        log = PairLog(self, problem, write, skip_steps)
        start = time.perf_counter()
        result = self._local(problem, log) if self.generator.engine is None else self._engine(problem, log)
        return {"kind": "problem", "problem_id": problem.id, "index": problem.index, "mode": "problem",
                "question": problem.question, **graded(result.text, problem.answer), "steps": log.index,
                "pairs": log.pairs, "new_tokens": len(result.token_ids), "stop_reason": result.stop_reason,
                "wall_s": round(time.perf_counter() - start, 3), **self.names, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}

    def _local(self, problem: Problem, log: "PairLog") -> Any:
        gen = self.generator
        messages = math_messages(problem.question)
        prompt = gen.target.prompt_ids(messages)
        log.start(prompt, prompt if gen.same_vocab else gen.draft.prompt_ids(messages))
        return generate_cycles(gen.pair, prompt, KeepNone(), self.settings, PairPolicy(log.cycle),
                               draft_ids=log.prompt_d)

    def _engine(self, problem: Problem, log: "PairLog") -> Any:
        runtime = self.generator.engine
        runtime.pair.use(self.settings)
        ids = runtime.prompt_ids(problem.question)
        log.start(ids, ids)
        return asyncio.run(closing(alr(runtime.pair, ids, KeepNone(), PairPolicy(log.cycle, "engine-pairs"),
                                       self.max_new_tokens), runtime.pair))


class PairLog:
    """The recording observer: hears every finished cycle, writes a pair record for each one that drafted
    a step, and follows the prefix x by the steps the cycles kept."""

    def __init__(self, recorder: PairRecorder, problem: Problem, write: Write, skip_steps: set[int]):
        self.recorder, self.problem, self.write, self.skip = recorder, problem, write, skip_steps
        self.ids: list[int] = []  # the answer so far, target ids
        self.texts: list[str] = []  # the kept steps' texts
        self.index = self.pairs = 0
        self.prompt: list[int] = []
        self.prompt_d: list[int] = []
        self.sessions: tuple[Any, Any] | None = None

    def start(self, prompt: list[int], prompt_d: list[int]) -> None:
        self.prompt, self.prompt_d = list(prompt), list(prompt_d)
        gen = self.recorder.generator
        if gen.engine is None:  # the observer's own sessions, for the probabilities: they follow the prefix
            self.sessions = (gen.target.session([self.prompt]), gen.draft.session([self.prompt_d]))

    def cycle(self, trace: CycleTrace) -> None:
        if trace.drafted:
            self.pairs += 1
            if self.index not in self.skip:
                self.write(self.record(trace.drafted[0], trace.target[0], trace.draft_s, trace.target_s))
        kept = trace.kept_steps
        self.ids += [t for step in kept for t in step.ids][:trace.tokens]
        self.texts += [step.text for step in kept]
        self.index += 1

    def record(self, drafted: Step, own: Step, draft_s: float, target_s: float) -> dict[str, Any]:
        probs = self.probabilities(drafted, own) if self.sessions is not None else (None, None, None)
        prefix = self.recorder.generator.target.decode(self.ids) if self.sessions is not None else "".join(self.texts)
        return {
            "kind": "pair", "problem_id": self.problem.id, "index": self.problem.index, "mode": f"step-{self.index}",
            "step": self.index, "prefix": prefix, "prefix_tokens": len(self.ids),
            "draft": drafted.text, "target": own.text, "draft_end": drafted.end, "target_end": own.end,
            "draft_ids": list(drafted.ids), "target_ids": list(own.ids),
            "agreed_tokens": common_prefix(drafted.ids, own.ids, len(drafted.ids)),
            "draft_probs": probs[0], "target_probs": probs[1], "target_probs_of_draft": probs[2],
            "exact": normalize_step(drafted.text) == normalize_step(own.text),
            "same_numbers": step_numbers(drafted.text) == step_numbers(own.text),
            "draft_s": round(draft_s, 4), "target_s": round(target_s, 4), **self.recorder.names,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }

    def probabilities(self, drafted: Step, own: Step) -> tuple[list[float], list[float], list[float]]:
        """(the draft's of its own step, the target's of its own step, the target's of the drafted step), each
        from one forward over the prefix and the step on the observer's sessions."""
        t_sess, d_sess = self.sessions
        translator = self.recorder.translator
        prefix, prefix_d = self.prompt + self.ids, self.prompt_d + translator.to_draft(self.ids)
        of_draft = own_probabilities(t_sess, prefix, translator.to_target(drafted))
        return (rounded(own_probabilities(d_sess, prefix_d, drafted.ids)),
                rounded(own_probabilities(t_sess, prefix, own.ids)), rounded(of_draft))


def finished_steps(done: set[tuple[str, str]], problem_id: str) -> set[int]:
    """Step indices of ``problem_id`` whose pair records are in a file's ``done_pairs``."""
    return {int(mode[5:]) for pid, mode in done if pid == problem_id and mode.startswith("step-")
            and mode[5:].isdigit()}


def run_pairs(recorder: PairRecorder | Callable[[], PairRecorder], dataset: str, out: str | Path, *, offset: int = 0,
              limit: int | None = None, progress: bool = True) -> Path:
    """Record the pairs of every problem of ``dataset`` (``offset``, ``limit``) not finished in ``out`` yet;
    returns its path. ``recorder``: a :class:`PairRecorder`, or what makes one (called only when a problem is
    left to do: a finished file loads no model)."""
    check_scope(offset, limit)
    problems = load_dataset(dataset, limit=limit, offset=offset)
    path = Path(out)
    check_writable(path)
    done = {(key[0], key[1]) for key in done_pairs(path)}  # (problem id, mode), whatever else the key holds
    todo = [p for p in problems if (p.id, "problem") not in done]
    if not todo:
        return path
    recorder = recorder if isinstance(recorder, PairRecorder) else recorder()
    check_same_models(path, {k: recorder.names[k] for k in ("target_model", "draft_model")}, "pairs")
    for n, problem in enumerate(todo, start=1):
        summary = recorder.follow(problem, lambda record: append_record(path, record), finished_steps(done, problem.id))
        append_record(path, summary)
        if progress:
            print(f"[{n}/{len(todo)}] {problem.id}: {summary['pairs']} pairs, {summary['new_tokens']} tokens, "
                  f"{summary['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return path


def pairs_spec(target: str = DEFAULT_TARGET, draft: str = DEFAULT_DRAFT, *, dtype: str = "auto",
               device: str | None = None, max_step_tokens: int = MAX_STEP_TOKENS, gamma: int = TOKEN_GAMMA,
               target_sd: bool = True) -> GeneratorSpec:
    """The generator a recording in this process runs, checked (ConfigError naming the option; loads
    nothing): both models as loaded (the draft not quantised), its steps, and token SD by the draft model
    inside the target's steps at ``gamma`` (``target_sd`` False: none; the same text either way).
    ``spec.build(verifier=KeepNone())`` loads it."""
    require(isinstance(gamma, int) and not isinstance(gamma, bool) and gamma >= 1, f"--gamma must be >= 1, got {gamma!r}",
            ConfigError)
    require(target_sd or gamma == TOKEN_GAMMA, f"--gamma {gamma}: with --no-target-sd the target drafts no tokens "
            "to count (leave one of them out)", ConfigError)
    require(not no_model(draft), "--draft none: a pair is what the draft and the target each write; name a draft")
    settings = decoding_settings({"max_step_tokens": max_step_tokens}).with_overrides(token_sd=TokenSD("draft" if target_sd else None, gamma=gamma))
    spec = GeneratorSpec(target, draft, mode="lr", settings=settings, draft_quantize=None, dtype=dtype, device=device)
    spec.check()
    return spec


# ------------------------------------------------------------------------------------------ command line

def add_pairs_commands(sub: Any) -> None:
    """Add the ``pairs`` (record a bank of step pairs) and ``verifiers`` (the offline ablation) commands."""
    p = sub.add_parser("pairs", help="record (draft step, target step) pairs on real problems (resumable JSONL)")
    p.add_argument("--dataset", required=True, help=f"GSM8K/AIME-format jsonl path, or a datasets-library name "
                                                    f"({DEFAULT_DATASET}: the first 64 GSM8K training problems, shipped)")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--out", default="results/pairs.jsonl", help="pairs JSONL (rerun with the same path to resume)")
    p.add_argument("--target", default=DEFAULT_TARGET)
    p.add_argument("--draft", default=DEFAULT_DRAFT)
    p.add_argument("--dtype", default="auto", help="auto | bf16 | fp16 | fp32, for both models")
    p.add_argument("--device", default=None)
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, help="per problem")
    p.add_argument("--max-step-tokens", type=int, default=MAX_STEP_TOKENS)
    p.add_argument("--gamma", type=int, default=TOKEN_GAMMA,
                   help="drafted tokens per SD iteration in the target's steps (not with --no-target-sd)")
    p.add_argument("--no-target-sd", action="store_true", help="the target writes token by token (same text)")
    p.set_defaults(func=cmd_pairs)

    v = sub.add_parser("verifiers", help="offline verifier ablation on a pairs JSONL: acceptance, latency, "
                                         "accepted pairs whose numbers differ")
    v.add_argument("pairs", nargs="+", help="the bank: one or more pairs JSONL files written by the pairs command")
    v.add_argument("--verifiers", default=DEFAULT_ENTRIES,
                   help="comma-separated; name@threshold for a threshold, e.g. exact,embedding@0.85,paper-judge,"
                        "target-score@9,random")
    v.add_argument("--limit", type=int, default=None, help="the first N pairs only")
    v.add_argument("--target", default=DEFAULT_TARGET, help="the target, for target-score (and --judge-model target)")
    v.add_argument("--dtype", default="auto", help="dtype of --target")
    v.add_argument("--device", default=None)
    add_judge_args(v)
    v.add_argument("--flips", default=None, help="a flips JSONL (`lookahead-reasoning flips`): add each verifier's flip rate")
    v.add_argument("--out", default=None, help="markdown table (default: <pairs>-verifiers.md); JSON and PNG beside it")
    v.set_defaults(func=run_ablation_command)


def cmd_pairs(args: Any) -> int:
    check_max_new_tokens(args.max_new_tokens)

    spec = pairs_spec(args.target, args.draft, dtype=args.dtype, device=args.device,
                      max_step_tokens=args.max_step_tokens, gamma=args.gamma, target_sd=not args.no_target_sd)
    path = run_pairs(lambda: PairRecorder(spec.build(verifier=KeepNone()), args.max_new_tokens), args.dataset,
                     args.out, offset=args.offset, limit=args.limit)
    print(f"pairs: {path}")
    return 0


__all__ = ["KeepNone", "PairLog", "PairRecorder", "add_pairs_commands", "check_scope",
           "PairPolicy", "pairs_spec", "run_pairs"]

