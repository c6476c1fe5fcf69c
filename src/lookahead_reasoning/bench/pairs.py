"""A bank of step pairs: what the draft and the target each write at the same step boundary.

The paper's synchronous protocol, on real problems. Follow the target's own greedy solution step by
step (a step ends at a delimiter, "\\n\\n", at EOS or at the step cap). At each step boundary:

  1. the draft writes its next step s^ from the prefix x (the target's text so far);
  2. the target scores s^ in ONE forward over x + s^: the target's probability of every drafted
     token, and (its greedy choice at each position) how many leading tokens of s^ it would
     write itself;
  3. the target writes its own next step s from x, starting with the drafted tokens it agreed with
     (they are its own greedy tokens), optionally with token-level SD by the draft model (lossless);
  4. x becomes x + s, the pair (s^, s) is one record.

After a step cut at the cap, x does not end on a boundary: the target writes on alone (no pair), as
Lookahead Reasoning drafts only from a boundary. A record holds both steps as text and token ids
(the draft's ids in its own vocabulary), each model's probabilities of its own step's tokens (the
draft's from one scoring forward over its step; the target's from the scoring forward of step 2
where it agreed, and one forward over the rest) and the target's probabilities of the drafted
step's tokens (in the target's tokens: the same ids when the two models share a vocabulary).

The output is a JSON-lines file written with the benchmark runner's ``append_record`` (one line per
pair, pushed to disk at once) and read back with its ``done_pairs``: a pair's key is
``(problem id, "step-<i>")`` and each finished problem ends with a ``(problem id, "problem")``
summary. A rerun skips finished problems and the pairs already written (greedy decoding gives the
same steps again), so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from ..decoding.drafters import make_drafter
from ..decoding.tools import StepWriter, Translator
from ..errors import LookaheadError, require
from ..models import load_model
from ..presets import DEFAULT_DRAFT, DEFAULT_MAX_NEW_TOKENS, DEFAULT_TARGET, MAX_STEP_TOKENS, STEP_DELIMITERS
from ..presets import TOKEN_GAMMA
from ..prompts import math_messages
from ..runtime.lm import LM
from ..runtime.pair import model_pair
from ..runtime.session import Session
from ..sampling import SamplingConfig, make_generator, token_scores
from ..steps import StepConfig
from ..stopping import common_prefix
from ..verifiers.options import add_judge_args
from ..verifiers.text import normalize_step, step_numbers
from .ablation import DEFAULT_ENTRIES, run_ablation_command
from .datasets import DEFAULT_DATASET, Problem, load_dataset
from .grading import grade
from .runner import append_record, check_writable, done_pairs

PROBABILITY_DIGITS = 6  # probabilities are stored rounded to this many decimals


@dataclass
class PairsConfig:
    """What to record: problems (dataset, offset, limit), models, dtype, budgets."""

    dataset: str
    out: str
    offset: int = 0
    limit: int | None = None
    target: str = DEFAULT_TARGET
    draft: str = DEFAULT_DRAFT
    dtype: str = "auto"
    device: str | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    max_step_tokens: int = MAX_STEP_TOKENS
    delimiters: tuple[str, ...] = STEP_DELIMITERS
    target_sd: bool = True  # token-level SD by the draft model inside the target's steps (same output)
    gamma: int = TOKEN_GAMMA

    def __post_init__(self) -> None:
        require(isinstance(self.offset, int) and self.offset >= 0, f"--offset must be >= 0, got {self.offset!r}")
        require(self.limit is None or (isinstance(self.limit, int) and self.limit >= 1),
                f"--limit must be >= 1, got {self.limit!r}")
        require(isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1,
                f"--max-new-tokens must be >= 1, got {self.max_new_tokens!r}")
        require(isinstance(self.max_step_tokens, int) and self.max_step_tokens >= 1,
                f"--max-step-tokens must be >= 1, got {self.max_step_tokens!r}")
        require(isinstance(self.gamma, int) and self.gamma >= 1, f"--gamma must be >= 1, got {self.gamma!r}")


class PairRecorder:
    """Holds the two models and the decoding pieces; :meth:`follow` records one problem."""

    def __init__(self, target: Any, draft: Any, config: PairsConfig):
        pair = model_pair(target, draft)  # without one vocabulary, steps cross as text and no token-level SD
        self.target, self.draft, self.same_vocab = pair.target, pair.draft, pair.same_vocab
        self.config = config
        self.steps = StepConfig(tuple(config.delimiters), config.max_step_tokens)

    def follow(self, problem: Problem, skip_steps: set[int] = frozenset()) -> Iterator[dict[str, Any]]:
        """Yield the pair records of one problem as they are made, then its summary record.

        ``skip_steps``: step indices whose pair records exist already (they are computed again, to
        reach the later steps, but not yielded).
        """
        greedy, generator = SamplingConfig(), make_generator(0)
        messages = math_messages(problem.question)
        prompt_t = self.target.prompt_ids(messages)
        prompt_d = prompt_t if self.same_vocab else self.draft.prompt_ids(messages)
        t_sess, d_sess = self.target.session([prompt_t]), self.draft.session([prompt_d])
        drafter = None
        if self.config.target_sd and self.same_vocab:
            drafter = make_drafter("draft", lm=self.draft, sampling=greedy, generator=generator)
            drafter.attach(d_sess)  # one draft cache, for its own steps and for drafting the target's tokens
        tools = _Tools(StepWriter(self.draft, self.steps, greedy, generator),
                       StepWriter(self.target, self.steps, greedy, generator, drafter, self.config.gamma),
                       Translator(self.target, self.draft, self.same_vocab), t_sess, d_sess, prompt_t, prompt_d)
        generated: list[int] = []
        at_boundary, index, pairs, stop = True, 0, 0, "budget"
        start = time.perf_counter()
        while len(generated) < self.config.max_new_tokens:
            remaining = self.config.max_new_tokens - len(generated)
            if at_boundary:
                record, step = self._pair(problem, index, generated, remaining, tools)
                pairs += 1
                if index not in skip_steps:
                    yield record
            else:  # not at a boundary: the target writes on alone
                t_sess.set_rows([prompt_t + generated])
                [step] = tools.target_writer.write(t_sess, [remaining])
            generated += step.ids
            at_boundary, index = step.boundary, index + 1
            if step.end == "eos":
                stop = "eos"
                break
        yield self._summary(problem, generated, index, pairs, stop, time.perf_counter() - start)

    def _pair(self, problem: Problem, index: int, generated: list[int], remaining: int,
              tools: "_Tools") -> tuple[dict[str, Any], Any]:
        """Steps 1-3 of the module docstring at one boundary; returns the record and the target's step."""
        prefix, prefix_d = tools.prompt_t + generated, tools.prompt_d + tools.translator.to_draft(generated)
        t0 = time.perf_counter()
        # 1. the draft's next step, and its probabilities of its own tokens
        tools.d_sess.set_rows([prefix_d])
        [drafted] = tools.draft_writer.write(tools.d_sess, [remaining])
        draft_probs = own_probabilities(tools.d_sess, prefix_d, drafted.ids)
        t1 = time.perf_counter()
        # 2. the target scores the drafted step in one forward
        drafted_t = tools.translator.to_target(drafted)
        scored = score_draft(tools.t_sess, prefix, drafted_t)
        # 3. the target's own step, starting with the drafted tokens it agrees with
        tools.t_sess.set_rows([prefix + scored.head])
        [own] = tools.target_writer.write(tools.t_sess, [remaining], starts=[len(prefix)])
        known = common_prefix(own.ids, scored.head, len(own.ids))
        target_probs = scored.head_probs[:known] + own_probabilities(tools.t_sess, prefix + own.ids[:known],
                                                                     own.ids[known:])
        t2 = time.perf_counter()
        record = {
            "kind": "pair", "problem_id": problem.id, "index": problem.index, "mode": f"step-{index}",
            "step": index, "prefix": self.target.decode(generated), "prefix_tokens": len(generated),
            "draft": drafted.text, "target": own.text, "draft_end": drafted.end, "target_end": own.end,
            "draft_ids": list(drafted.ids), "target_ids": list(own.ids), "agreed_tokens": scored.agreed,
            "draft_probs": _rounded(draft_probs), "target_probs": _rounded(target_probs),
            "target_probs_of_draft": _rounded(scored.probs),
            "exact": normalize_step(drafted.text) == normalize_step(own.text),
            "same_numbers": step_numbers(drafted.text) == step_numbers(own.text),
            "draft_s": round(t1 - t0, 4), "target_s": round(t2 - t1, 4),
            "target_model": self.target.name, "draft_model": self.draft.name,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        return record, own

    def _summary(self, problem: Problem, generated: list[int], steps: int, pairs: int, stop: str,
                 wall: float) -> dict[str, Any]:
        text = self.target.decode(generated)
        g = grade(text, problem.answer)
        return {"kind": "problem", "problem_id": problem.id, "index": problem.index, "mode": "problem",
                "question": problem.question, "gold": problem.answer, "predicted": g.predicted,
                "correct": g.correct, "text": text, "steps": steps, "pairs": pairs, "new_tokens": len(generated),
                "stop_reason": stop, "wall_s": round(wall, 3), "target_model": self.target.name,
                "draft_model": self.draft.name, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


@dataclass
class _Tools:
    """The pieces one problem is followed with (two writers, the translator, both sessions and prompts)."""

    draft_writer: StepWriter
    target_writer: StepWriter
    translator: Translator
    t_sess: Session
    d_sess: Session
    prompt_t: list[int]
    prompt_d: list[int]


@dataclass
class DraftScore:
    """The target's view of a drafted step, from one forward over prefix + step.

    ``probs[j]``: the target's probability of drafted token j; ``agreed``: how many leading drafted
    tokens are the target's own greedy choices; ``head``: those tokens plus the target's greedy token
    after them (the start of the target's own step) and ``head_probs`` their probabilities.
    """

    probs: list[float]
    agreed: int
    head: list[int]
    head_probs: list[float]


def score_draft(session: Any, prefix: list[int], drafted: list[int]) -> DraftScore:
    """Score ``drafted`` after ``prefix`` with ONE forward of the session's model (see :class:`DraftScore`).

    On return the session's row is ``prefix + drafted``, all cached.
    """
    session.set_rows([prefix])
    logits = session.logits(extra=[drafted], keep=len(drafted) + 1)[0]  # (n + 1, V)
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.argmax(dim=-1).tolist()
    n = len(drafted)
    on_draft = probs[torch.arange(n), torch.tensor(drafted, dtype=torch.long)].tolist() if n else []
    agreed = 0
    while agreed < n and top[agreed] == drafted[agreed]:
        agreed += 1
    head = list(drafted[:agreed]) + [top[agreed]]
    return DraftScore(on_draft, agreed, head, on_draft[:agreed] + [float(probs[agreed, top[agreed]])])


def own_probabilities(session: Any, prefix: list[int], tokens: list[int]) -> list[float]:
    """The session's model's probability of each of ``tokens`` after ``prefix``, from ONE forward.

    The cache keeps ``prefix`` (what it shares with the row now); on return the row is
    ``prefix + tokens``, all cached.
    """
    if not tokens:
        return []
    session.set_rows([prefix])
    logits = session.logits(extra=[tokens], keep=len(tokens) + 1)[0, :-1]  # (n, V): position j predicts token j
    return token_scores(logits, list(tokens))[0]


def _rounded(values: list[float]) -> list[float]:
    return [round(float(v), PROBABILITY_DIGITS) for v in values]


def load_pair_models(config: PairsConfig) -> tuple[Any, Any]:
    """The target and draft LMs named in ``config`` (offline names, hub ids, paths)."""
    return tuple(LM.from_loaded(load_model(name, dtype=config.dtype, device=config.device))
                 for name in (config.target, config.draft))


def finished_steps(done: set[tuple[str, str]], problem_id: str) -> set[int]:
    """Step indices of ``problem_id`` whose pair records are in a file's ``done_pairs``."""
    return {int(mode[5:]) for pid, mode in done if pid == problem_id and mode.startswith("step-")
            and mode[5:].isdigit()}


def run_pairs(config: PairsConfig, *, recorder: PairRecorder | None = None, progress: bool = True) -> Path:
    """Record the pairs of every problem not finished in ``config.out`` yet; returns the path."""
    problems = load_dataset(config.dataset, limit=config.limit, offset=config.offset)
    path = Path(config.out)
    check_writable(path)
    done = {(key[0], key[1]) for key in done_pairs(path)}  # (problem id, mode), whatever else the key holds
    todo = [p for p in problems if (p.id, "problem") not in done]
    if not todo:
        return path
    recorder = recorder or PairRecorder(*load_pair_models(config), config)
    for n, problem in enumerate(todo, start=1):
        for record in recorder.follow(problem, finished_steps(done, problem.id)):
            append_record(path, record)
        if progress:
            print(f"[{n}/{len(todo)}] {problem.id}: {record['pairs']} pairs, {record['new_tokens']} tokens, "
                  f"{record['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return path


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
    p.add_argument("--gamma", type=int, default=TOKEN_GAMMA, help="drafted tokens per SD iteration in the target's steps")
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
    v.set_defaults(func=cmd_verifiers)


def cmd_pairs(args: Any) -> int:
    config = PairsConfig(dataset=args.dataset, out=args.out, offset=args.offset, limit=args.limit, target=args.target,
                         draft=args.draft, dtype=args.dtype, device=args.device, max_new_tokens=args.max_new_tokens,
                         max_step_tokens=args.max_step_tokens, target_sd=not args.no_target_sd, gamma=args.gamma)
    path = run_pairs(config)
    print(f"pairs: {path}")
    return 0


def cmd_verifiers(args: Any) -> int:
    return run_ablation_command(args)


def main(argv: list[str] | None = None) -> int:
    """``python -m lookahead_reasoning.bench.pairs {pairs,verifiers} ...`` (the same commands as the CLI's)."""
    parser = argparse.ArgumentParser(prog="python -m lookahead_reasoning.bench.pairs", description=__doc__.split("\n")[0])
    add_pairs_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except LookaheadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


__all__ = ["DraftScore", "PairRecorder", "PairsConfig", "add_pairs_commands", "own_probabilities", "run_pairs",
           "score_draft"]


if __name__ == "__main__":
    raise SystemExit(main())
