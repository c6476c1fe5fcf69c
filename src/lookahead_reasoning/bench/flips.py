"""What an accepted step does to the answer: a verifier's harm, measured directly.

A verifier that accepts a drafted step s^ in place of the target's own step s changes the text from
there on. Whether that matters shows only at the end: for a pair of the step-pair bank (prefix x,
drafted step s^, target's step s), continue both x + s^ and x + s greedily with the target to the end
and grade the two answers. The pair *flips* when the answers differ. A verifier's flip rate is the
share of flips among the pairs it accepts that are not exact matches (an exact match leaves the
text as it is); with it and the number of such steps a verifier accepts per problem, the share of
answers kept end to end is predicted as (1 - flip rate) ^ (accepted non-exact steps per problem).

The target runs behind an engine (one completion request per branch). The target branch x + s is
the target's own greedy path: where the target, continuing an earlier pair's x + s, wrote on through a
later pair's x + s, that branch's answer serves the later pair without a second request (only text the
target wrote itself counts: the bank's prefixes may come from another build of the target). Where the
bank was written over an engine serving this same target, each problem's summary text is that path
(:func:`own_trace`) and no target branch of the problem is continued at all. A step that
ended with EOS ends its branch: nothing is continued after it.

Only pairs that are not exact matches are continued, in a seeded random order (``sample``: the first
that many; the pairs of a bank grown with other builds of the models are drawn in proportion,
:func:`sample_pairs`). Each continued pair is one JSON line written at once (the bench runner's
``append_record``); a rerun skips the pairs already in the file, so an interrupted run resumes.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from ..errors import require
from ..options import check_max_new_tokens
from ..prompts import math_messages
from ..steps import COMPLETE_ENDS
from ..verifiers.text import normalize_step
from .grading import grade, same_answer
from .results import append_record, check_writable, done_pairs, read_bank_files, read_records

FLIP_MAX_NEW_TOKENS = 1024  # a branch's whole answer (prefix, step and continuation), in target tokens
Z95 = 1.959964


def check_flip_options(sample: int | None, max_new_tokens: int) -> None:
    """ConfigError naming the option: ``sample`` (how many non-exact pairs to continue; None: all) and
    ``max_new_tokens`` (a branch's whole answer) must be integers >= 1."""
    require(sample is None or (isinstance(sample, int) and not isinstance(sample, bool) and sample >= 1),
            f"--sample must be an integer >= 1, got {sample!r}")
    check_max_new_tokens(max_new_tokens)


def read_bank(paths: str | Path | Sequence[str | Path]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(pair records, problem summaries by problem id) of a bank: one pairs file or several (their
    records together); ConfigError when a file is missing or the bank holds no pairs."""
    records = read_bank_files(paths)
    pairs = [r for r in records if r.get("kind") == "pair"]
    problems = {r["problem_id"]: r for r in records if r.get("kind") == "problem"}
    missing = sorted({p["problem_id"] for p in pairs} - set(problems))
    require(not missing, f"the bank has pairs of problems without their summary (question, gold answer): "
            f"{missing[:3]}; rerun `lookahead-reasoning pairs` on its file to finish them")
    return pairs, problems


def complete(pair: dict[str, Any]) -> bool:
    """Whether the pair's drafted step ended on a delimiter or EOS: a step cut at the step cap is never
    accepted by a cycle, whatever a verifier would say of it."""
    return pair.get("draft_end", "stop_string") in COMPLETE_ENDS


def writers(pair: dict[str, Any]) -> tuple[str, str, bool]:
    """The stratum of a pair: the models that wrote it (target, draft) and whether over engines."""
    return str(pair.get("target_model")), str(pair.get("draft_model")), bool(pair.get("engine"))


def sample_pairs(pairs: Sequence[dict[str, Any]], n: int | None, seed: int) -> list[dict[str, Any]]:
    """The pairs that are not exact matches (and whose drafted step is complete) in a seeded order;
    the first ``n`` (None: all). Pairs cut at the step cap are shuffled with the others and then left
    out, so that leaving them out keeps the others' order.

    The pairs are split by the models that wrote them (:func:`writers`: a bank grown with another
    build of the models is another stratum); each stratum is shuffled by ``random.Random(seed)`` and
    the strata are merged in proportion to their sizes (the r-th of a stratum of N sits at (r + 1/2) / N),
    so any first part of the order takes about the same share of every stratum, uniformly within each:
    a larger ``n`` extends a smaller one, an interrupted run has continued such a sample, and a bank of
    one stratum keeps the order it had before it grew."""
    strata: dict[tuple[str, str, bool], list[dict[str, Any]]] = {}
    for p in pairs:
        if not p.get("exact"):
            strata.setdefault(writers(p), []).append(p)
    keyed = []
    for s, members in enumerate(strata.values()):
        random.Random(seed).shuffle(members)  # then the incomplete ones leave: the others keep their order
        members = [p for p in members if complete(p)]
        keyed += [((r + 0.5) / len(members), s, p) for r, p in enumerate(members)]
    order = [p for _, _, p in sorted(keyed, key=lambda t: t[:2])]
    return order if n is None else order[:n]


Finish = Callable[[str, str], tuple[str, int]]  # (question, text so far) -> (the continuation, its tokens)


def engine_finish(gen: Any, max_new_tokens: int = FLIP_MAX_NEW_TOKENS) -> Finish:
    """Continue a text greedily with the target of ``gen`` (a :class:`~lookahead_reasoning.LookaheadGenerator` over
    an engine URL) to EOS or ``max_new_tokens`` in all (the text so far counts): one completion request, mode ``ar``."""
    engine = gen.engine

    def finish(question: str, head: str) -> tuple[str, int]:
        ids = engine.prompt_ids(math_messages(question))
        written = engine.pair.target.encode(head) if head else []
        budget = max_new_tokens - len(written)
        if budget <= 0:
            return "", 0
        done = gen.generate(ids + written, mode="ar", max_new_tokens=budget)
        return done.text, len(done.token_ids)

    return finish


class Flipper:
    """Continues branches with ``finish`` (:func:`engine_finish`) and remembers each problem's target branches."""

    def __init__(self, finish: Finish, model: str = ""):
        self.finish, self.model = finish, model
        self.branches: dict[str, list[tuple[str, str]]] = {}  # problem id -> (head, whole text) of its target branches

    def remember(self, problem_id: str, head: str, whole: str) -> None:
        self.branches.setdefault(problem_id, []).append((head, whole))

    def known(self, problem_id: str, head: str) -> str | None:
        """A remembered target branch that serves ``head``: one the target wrote on from an earlier part of
        ``head`` (its own head is a prefix of ``head``) and that passes through all of ``head``."""
        return next((whole for mine, whole in self.branches.get(problem_id, [])
                     if head.startswith(mine) and whole.startswith(head)), None)

    def flip(self, pair: dict[str, Any], problem: dict[str, Any]) -> dict[str, Any]:
        """Continue the pair's drafted branch (and its target branch, unless a remembered one starts
        with it), grade both, and return the record."""
        start = time.perf_counter()
        pid, question, gold = pair["problem_id"], problem["question"], problem["gold"]
        draft_head, target_head = pair["prefix"] + pair["draft"], pair["prefix"] + pair["target"]
        draft_text, draft_tokens = ("", 0) if pair.get("draft_end") == "eos" else self.finish(question, draft_head)
        known = self.known(pid, target_head)
        if known is None and pair.get("target_end") == "eos":  # the target's step ended the answer
            known = target_head
        target_text, target_tokens = (None, 0) if known is not None else self.finish(question, target_head)
        target_whole = known if known is not None else target_head + target_text
        if known is None:
            self.remember(pid, target_head, target_whole)
        mine, theirs = grade(draft_head + draft_text, gold), grade(target_whole, gold)
        same = same_answer(mine.predicted, theirs.predicted)
        return {"kind": "flip", "problem_id": pid, "index": pair.get("index"), "mode": pair["mode"],
                "step": pair["step"], "gold": gold, "draft_answer": mine.predicted, "target_answer": theirs.predicted,
                "flip": not same, "draft_correct": mine.correct, "target_correct": theirs.correct,
                "target_reused": known is not None, "draft_text": draft_text, "target_text": target_text,
                "draft_tokens": draft_tokens, "target_tokens": target_tokens,
                "model": self.model, "wall_s": round(time.perf_counter() - start, 3),
                "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def own_trace(problem: dict[str, Any], model: str, max_new_tokens: int) -> bool:
    """Whether a bank problem's summary text is the greedy trace ``model`` continues every target branch
    of that problem with: the bank was written over an engine serving ``model``, and the trace ended where
    a branch of ``max_new_tokens`` would (at EOS within it, or at exactly that many tokens)."""
    ended = problem.get("stop_reason") == "eos" and problem.get("new_tokens", math.inf) <= max_new_tokens
    return (bool(model) and bool(problem.get("engine")) and problem.get("target_model") == model
            and isinstance(problem.get("text"), str) and (ended or problem.get("new_tokens") == max_new_tokens))


def run_flips(bank: str | Path | Sequence[str | Path], out: str | Path, flipper: Flipper, *, sample: int | None = None,
              seed: int = 0, max_new_tokens: int = FLIP_MAX_NEW_TOKENS, progress: bool = True) -> Path:
    """Continue the non-exact pairs of ``bank`` (a pairs file written by ``lookahead-reasoning pairs``, or
    several) with ``flipper`` into the flips JSONL ``out``, skipping those it holds already (a rerun resumes);
    returns its path. ``sample``: how many pairs to continue (None: all), drawn with ``seed``
    (:func:`sample_pairs`); ``max_new_tokens``: a branch's whole answer, as ``flipper``'s continuations
    were bounded (it decides whether a bank's own trace serves as every target branch: :func:`own_trace`)."""
    check_flip_options(sample, max_new_tokens)
    pairs, problems = read_bank(bank)
    chosen = sample_pairs(pairs, sample, seed)
    path = Path(out)
    check_writable(path, "the flips")
    done = {(key[0], key[1]) for key in done_pairs(path)}
    by_key = {(p["problem_id"], p["mode"]): p for p in pairs}
    for pid, problem in problems.items():  # a bank written by this very target: its trace is every target branch
        if own_trace(problem, flipper.model, max_new_tokens):
            flipper.remember(pid, "", problem["text"])
    for record in read_records(path):  # the target branches of an earlier run serve this one too
        pair = by_key.get((record.get("problem_id"), record.get("mode")))
        if pair is not None and record.get("target_text") is not None:
            head = pair["prefix"] + pair["target"]
            flipper.remember(pair["problem_id"], head, head + record["target_text"])
    todo = [p for p in chosen if (p["problem_id"], p["mode"]) not in done]
    with tqdm(total=len(chosen), initial=len(chosen) - len(todo), desc="flips", unit="pair", disable=not progress) as bar:
        for pair in todo:
            append_record(path, flipper.flip(pair, problems[pair["problem_id"]]))
            bar.update(1)
    return path


# ------------------------------------------------------------------------------------------ the harm table

def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion k / n (95% by default); (nan, nan) when n = 0."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


@dataclass
class HarmRow:
    """One verifier's measured harm: flips among its accepted, continued, non-exact pairs."""

    verifier: str
    continued: int  # accepted non-exact pairs that were continued
    flips: int
    rate: float
    low: float
    high: float
    steps_per_problem: float  # accepted non-exact steps per problem of the bank
    retention: float  # predicted share of answers kept: (1 - rate) ** steps_per_problem

    @property
    def retention_low(self) -> float:
        """The predicted share of answers kept at the high end of the flip rate's interval."""
        return (1 - self.high) ** self.steps_per_problem if self.high == self.high else math.nan


def kept_foreign_steps(record: dict[str, Any]) -> int:
    """How many drafted steps a run kept that are not the target's own (normalised text): the steps
    that could flip its answer, from its ``cycle_log`` (a benchmark record of an LR mode)."""
    log = record.get("cycle_log") or []
    log = json.loads(log) if isinstance(log, str) else log
    return sum(normalize_step(d) != normalize_step(t) for c in log
               for d, t in zip(c["drafted"][:c["accepted"]], c["target"][:c["accepted"]]))


def harm_rows(pairs: Sequence[dict[str, Any]], decisions: dict[str, Sequence[bool]],
              flips: Sequence[dict[str, Any]]) -> list[HarmRow]:
    """Per verifier (``decisions``: spec -> accepted per pair, in ``pairs``' order) its flip rate with a
    95% interval and the answer retention it predicts. Accepted pairs whose drafted step was cut at the
    step cap do not count: no cycle keeps such a step."""
    flipped = {(f["problem_id"], f["mode"]): bool(f["flip"]) for f in flips if f.get("kind") == "flip"}
    problems = len({p["problem_id"] for p in pairs}) or 1
    rows = []
    for spec, accepted in decisions.items():
        foreign = [p for p, a in zip(pairs, accepted) if a and not p.get("exact") and complete(p)]
        seen = [flipped[(p["problem_id"], p["mode"])] for p in foreign if (p["problem_id"], p["mode"]) in flipped]
        k, n = sum(seen), len(seen)
        rate = k / n if n else (0.0 if not foreign else math.nan)
        low, high = wilson(k, n) if n else (rate, rate)
        per = len(foreign) / problems
        rows.append(HarmRow(spec, n, k, rate, low, high, per, (1 - rate) ** per if rate == rate else math.nan))
    return rows


def harm_table(rows: Sequence[HarmRow], flips: Sequence[dict[str, Any]]) -> str:
    n = sum(1 for f in flips if f.get("kind") == "flip")
    lines = [f"{n} non-exact pairs continued to the end on both branches; a flip is a different final answer.", "",
             "| verifier | accepted non-exact pairs continued | flips | flip rate (95% interval) |"
             " accepted non-exact steps / problem | predicted answers kept (at the interval's high end) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        rate = "-" if r.rate != r.rate else f"{r.rate:.1%} ({r.low:.1%}-{r.high:.1%})"
        kept = "-" if r.retention != r.retention else f"{r.retention:.1%}" + (
            f" ({r.retention_low:.1%})" if r.retention_low == r.retention_low else "")
        lines.append(f"| {r.verifier} | {r.continued} | {r.flips} | {rate} | {r.steps_per_problem:.2f} | {kept} |")
    return "\n".join(lines)


__all__ = ["FLIP_MAX_NEW_TOKENS", "Flipper", "HarmRow", "check_flip_options", "engine_finish", "harm_rows", "harm_table",
           "kept_foreign_steps", "own_trace", "read_bank", "run_flips", "sample_pairs", "wilson", "writers"]
