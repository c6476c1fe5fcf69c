"""``lookahead-reasoning score-pairs BANK --out SCORED``: the target's probabilities for a bank of
step pairs written over engines.

A bank written over engines (:mod:`.pairs` with an engine target) holds no probabilities (an
OpenAI-compatible engine scores no given continuation), so the ``likelihood`` verifiers of the ablation cannot judge its pairs. This pass
loads the target in this process and, problem by problem, follows each pair's prefix x in step
order on one cached session:

  1. ``target_probs_of_draft``: the target's probability of every drafted token after x, from ONE
     forward over x + s^ (:func:`own_probabilities`, as the pairs command scores them);
  2. ``target_probs``: its probability of each token of its own step s after x (one forward over
     x + s, which also extends the cache to the next pair's prefix).

The probabilities come from this process's build of the target (``scored_by`` names it and its
dtype), which may differ from the engine's (a quantized GGUF file): they are the target's view of
the drafted step, as the PyTorch loops' checking forward would give it. The drafted ids are scored as
they are where they decode to the drafted text in the target's vocabulary, else the text is encoded.

The output holds every record of the bank (problem summaries included), each pair with its
probabilities; a pair that has them already is copied as it is. It is written one line at a time
(the bench runner's ``append_record``) and a rerun skips the pairs already there, so an interrupted
pass resumes.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from itertools import chain
from pathlib import Path
from typing import Any, Iterator, Sequence

from tqdm.auto import tqdm

from ..errors import require
from ..models import load_model
from ..presets import DEFAULT_TARGET
from ..prompts import math_messages
from ..runtime.lm import LM
from ..sampling import token_scores
from .results import append_record, check_writable, done_pairs, read_bank_files

DIGITS = 6  # probabilities are stored rounded to this many decimals (the pairs command's too)


def own_probabilities(session: Any, prefix: list[int], tokens: list[int]) -> list[float]:
    """The session's model's probability of each of ``tokens`` after ``prefix``, from ONE forward. The cache
    keeps ``prefix`` (what it shares with the row now); on return the row is ``prefix + tokens``, all cached."""
    if not tokens:
        return []
    session.set_rows([prefix])
    logits = session.logits(extra=[tokens], keep=len(tokens) + 1)[0, :-1]  # (n, V): position j predicts token j
    return token_scores(logits, list(tokens))[0]


def rounded(values: list[float]) -> list[float]:
    """Probabilities as a bank stores them (:data:`DIGITS` decimals)."""
    return [round(float(v), DIGITS) for v in values]


def needs_scores(record: dict[str, Any]) -> bool:
    """Whether a pair record lacks the target's probabilities of its drafted step."""
    return record.get("kind") == "pair" and record.get("target_probs_of_draft") is None


def prefix_ids(lm: Any, earlier: Sequence[dict[str, Any]], pair: dict[str, Any]) -> list[int]:
    """The ids of a pair's prefix x in the target's vocabulary: the target steps of the earlier pairs
    of its problem when they add up to it (``prefix_tokens``), else x encoded (a step the target
    wrote on alone after the step cap has no pair)."""
    ids = [t for p in earlier for t in p["target_ids"]]
    if len(ids) == pair.get("prefix_tokens") and "".join(p["target"] for p in earlier) == pair["prefix"]:
        return ids
    return lm.encode(pair["prefix"]) if pair["prefix"] else []


def step_ids(lm: Any, ids: Sequence[int], text: str) -> list[int]:
    """A step's ids as the target reads them: ``ids`` where they decode to ``text``, else ``text`` encoded."""
    return list(ids) if ids and lm.decode(ids) == text else lm.encode(text)


def score_problem(lm: Any, question: str, pairs: Sequence[dict[str, Any]], scored_by: str,
                  todo: set[str] | None = None) -> Iterator[dict[str, Any]]:
    """Yield the pairs of one problem whose mode is in ``todo`` (None: all) with the target's
    probabilities, in step order. ``pairs``: all of the problem's pairs (the earlier ones give the
    later ones' prefixes)."""
    pairs = sorted(pairs, key=lambda p: p["step"])
    prompt = lm.prompt_ids(math_messages(question))
    session = lm.session([prompt])
    for i, pair in enumerate(pairs):
        if todo is not None and pair["mode"] not in todo:
            continue
        x = prompt + prefix_ids(lm, pairs[:i], pair)
        of_draft = own_probabilities(session, x, step_ids(lm, pair["draft_ids"], pair["draft"]))
        target_probs = own_probabilities(session, x, step_ids(lm, pair["target_ids"], pair["target"]))
        yield {**pair, "target_probs_of_draft": rounded(of_draft), "target_probs": rounded(target_probs),
               "scored_by": scored_by}


def bank_records(bank: str | Path, out: str | Path) -> list[dict[str, Any]]:
    """The records of the pairs file ``bank``, checked with ``out`` before anything loads: ConfigError for a
    missing file, one that holds no step pairs, or an ``out`` that is the bank or cannot be written."""
    bank, out = Path(bank), Path(out)
    records = read_bank_files(bank)
    require(bank.resolve() != out.resolve(), f"--out must be another file than the bank ({bank})")
    check_writable(out, "the scored pairs")
    return records


def run_score_pairs(bank: str | Path, out: str | Path, lm: Any, scored_by: str, progress: bool = True) -> Path:
    """Write ``bank``'s records to ``out`` with every pair scored by ``lm`` (module docstring); returns ``out``."""
    bank, out = Path(bank), Path(out)
    records = bank_records(bank, out)
    done = {(key[0], key[1]) for key in done_pairs(out)}
    problems = {r["problem_id"]: r for r in records if r.get("kind") == "problem"}
    by_problem: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("kind") == "pair":
            by_problem[r["problem_id"]].append(r)
    left = {pid: [p for p in ps if (pid, p["mode"]) not in done] for pid, ps in by_problem.items()}
    missing = sorted(pid for pid, ps in left.items() if pid not in problems and any(map(needs_scores, ps)))
    require(not missing, f"{bank} has pairs of problems without their summary (question): {missing[:3]}")
    with tqdm(total=sum(map(len, left.values())), desc="scoring", unit="pair", disable=not progress) as bar:
        for pid, pairs in left.items():
            todo = {p["mode"] for p in pairs if needs_scores(p)}
            scored = score_problem(lm, problems[pid]["question"], by_problem[pid], scored_by, todo) if todo else []
            for record in chain([p for p in pairs if not needs_scores(p)], scored):
                append_record(out, record)
                bar.update(1)
    for r in records:  # the problem summaries last: a problem is whole in ``out`` once its pairs are
        if r.get("kind") == "problem" and (r["problem_id"], "problem") not in done:
            append_record(out, r)
    return out


def add_score_pairs_command(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("score-pairs", help="add the target's probabilities to a step-pair bank written over "
                                           "engines (for the likelihood verifiers; resumable)")
    s.add_argument("pairs", help="a pairs JSONL written by the pairs command")
    s.add_argument("--out", required=True, help="the scored bank JSONL (rerun with the same path to resume)")
    s.add_argument("--target", default=DEFAULT_TARGET, help="the target (offline name, directory or hub id)")
    s.add_argument("--dtype", default="auto", help="auto | bf16 | fp16 | fp32")
    s.add_argument("--device", default=None)
    s.set_defaults(func=cmd_score_pairs)


def cmd_score_pairs(args: argparse.Namespace) -> int:
    bank_records(args.pairs, args.out)  # a file of nothing to score is refused before the model loads
    lm = LM.from_loaded(load_model(args.target, dtype=args.dtype, device=args.device))
    scored_by = f"{lm.name} ({str(next(lm.model.parameters()).dtype).replace('torch.', '')})"
    try:
        path = run_score_pairs(args.pairs, args.out, lm, scored_by)
    except KeyboardInterrupt:
        print(f"\ninterrupted: the scored pairs so far are in {args.out}; run the same command again to resume",
              file=sys.stderr)
        return 130
    print(f"scored pairs: {path}")
    return 0


__all__ = ["add_score_pairs_command", "bank_records", "cmd_score_pairs", "needs_scores", "own_probabilities",
           "prefix_ids", "run_score_pairs", "score_problem", "step_ids"]
