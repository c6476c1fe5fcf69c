"""Offline verifier ablation: every verifier on the same bank of step pairs (see :mod:`.pairs`).

For each verifier: the pairs judged, the acceptance rate, the median latency per pair (each pair
judged alone, as Lookahead Reasoning's early judge does, after one untimed warm-up call), the
failures (judgements that failed and rejected), and the share of accepted pairs whose numbers
differ (:func:`~lookahead_reasoning.verifiers.text.step_numbers` of the drafted and of the target's
step): an accepted step with other numbers than the target's usually leads elsewhere, so this is a
proxy for harmful acceptances. Exact match accepts no such pair by construction.

Entries are ``name`` or ``name@threshold`` (``embedding@0.85``, ``target-score@8``). Entries of a
threshold verifier that differ only by their threshold are judged once: these verifiers decide
``score >= threshold`` and nothing else depends on it, so the other thresholds are read from the
same scores (their latency is that run's). The plot draws, for every such verifier, the acceptance
rate against the numbers-differ share over a grid of thresholds, and the other verifiers as points.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import ConfigError, DatasetError, require
from ..models import load_model
from ..runtime.lm import LM
from ..verifiers.options import (
    VerifierSettings, build_verifier, check_verifier_settings, load_judge, refuse_unread_verifier_options,
    verifier_settings_from_args,
)
from ..verifiers.likelihood import TokenScores, verify_pairs
from ..verifiers.registry import stage_names
from ..verifiers.text import step_numbers
from .flips import harm_rows, harm_table, writers
from .report import save_figure
from .results import as_paths, check_writable, read_bank_files, read_records

DEFAULT_ENTRIES = "exact,embedding@0.8,embedding@0.85,embedding@0.9,embedding@0.95,embedding-numbers,random"
# Reasons of verdicts decided as score >= threshold (embedding cosine, target-score digit, judge share).
_THRESHOLD_REASONS = ("cosine ", "score ", "P(yes) share ", "min p ")
_GRIDS = {"cosine": [round(0.5 + 0.01 * i, 2) for i in range(51)], "score": list(range(10)),
          "share": [round(0.05 * i, 2) for i in range(21)]}
_FAMILY_GRID = {"embedding": "cosine", "embedding-numbers": "cosine", "target-score": "score",
                "judge": "share", "openai-judge": "share", "paper-judge": "share"}


@dataclass(frozen=True)
class Entry:
    """One verifier of the ablation: ``spec`` as written, the verifier ``name`` and its ``threshold``."""

    spec: str
    name: str
    threshold: float | None = None

    @property
    def family(self) -> str | None:
        """The key entries share when one run serves them all (None: this entry runs on its own)."""
        stages = stage_names(self.name)
        if len(stages) != 1 or stages[0] not in _FAMILY_GRID:
            return None
        if stages[0] == "paper-judge" and self.threshold is None:
            return None  # without a threshold it reads the top token, not a share
        return stages[0]


def parse_entries(text: str) -> list[Entry]:
    """``"exact,embedding@0.85,paper-judge"`` -> entries; ConfigError naming a bad or repeated one."""
    entries = []
    for spec in (s.strip() for s in str(text).split(",")):
        if not spec:
            continue
        name, _, value = spec.partition("@")
        try:
            threshold = float(value) if value else None
        except ValueError:
            raise ConfigError(f"--verifiers: bad threshold in {spec!r}; write name@number, "
                              "e.g. embedding@0.85") from None
        entries.append(Entry(spec, name.strip(), threshold))
    require(bool(entries), "--verifiers lists no verifier")
    specs = [e.spec for e in entries]
    require(len(set(specs)) == len(specs), f"--verifiers lists a verifier twice: {','.join(specs)}")
    return entries


def load_pairs(paths: str | Path | Sequence[str | Path], limit: int | None = None) -> list[dict[str, Any]]:
    """The pair records of a bank: one pairs JSONL or several, in order (problem summaries and a torn
    last line are skipped)."""
    require(limit is None or (isinstance(limit, int) and limit >= 1), f"--limit must be >= 1, got {limit!r}")
    pairs = [r for r in read_bank_files(paths, DatasetError) if r.get("kind") == "pair"
             and isinstance(r.get("draft"), str) and isinstance(r.get("target"), str)]
    require(bool(pairs), f"{', '.join(map(str, as_paths(paths)))} holds no step pairs", DatasetError)
    return pairs[:limit] if limit else pairs


@dataclass
class AblationRow:
    """One verifier's line of the table."""
    verifier: str
    pairs: int
    accepted: int
    accept_rate: float
    numbers_differ_accepted: float | None  # share of the accepted pairs whose numbers differ
    median_latency_ms: float
    failures: int
    note: str = ""


def numbers_differ(pairs: Sequence[dict[str, Any]]) -> list[bool]:
    """Per pair: do the drafted and the target's step write different sets of numbers?"""

    return [step_numbers(p["draft"]) != step_numbers(p["target"]) for p in pairs]


def judge_pairs(verifier: Any, pairs: Sequence[dict[str, Any]]) -> list[Any]:
    """Each pair judged alone (one ``verify`` call per pair), after one untimed warm-up call; a
    likelihood verifier reads the target's probabilities of the drafted tokens stored with the pair
    (the bank's, without ranks)."""
    def one(p: dict[str, Any]) -> Any:
        probs = p.get("target_probs_of_draft")
        scores = None if probs is None else TokenScores.of(probs)
        return verify_pairs(verifier, [(p["draft"], p["target"])], [scores])[0]

    one(pairs[0])  # loads lazily loaded models
    return [one(p) for p in pairs]


def rethreshold(verdict: Any, threshold: float) -> bool:
    """The decision ``verdict``'s verifier would take at ``threshold`` (fixed decisions stay)."""
    if verdict.score is not None and verdict.error is None and verdict.reason.startswith(_THRESHOLD_REASONS):
        return verdict.score >= threshold
    return verdict.accepted


def summarize(spec: str, accepted: Sequence[bool], differ: Sequence[bool], verdicts: Sequence[Any],
              note: str = "") -> AblationRow:
    n, k = len(accepted), sum(accepted)
    bad = sum(a and d for a, d in zip(accepted, differ))
    latency = statistics.median(v.latency_s for v in verdicts) * 1000 if verdicts else float("nan")
    return AblationRow(spec, n, k, k / n if n else float("nan"), bad / k if k else None, latency,
                       sum(v.error is not None for v in verdicts), note)


def run_ablation(pairs: Sequence[dict[str, Any]], entries: Sequence[Entry], make: Callable[[Entry], Any],
                 decisions: dict[str, list[bool]] | None = None) -> tuple[list[AblationRow], dict[str, list[Any]]]:
    """Judge ``pairs`` with every entry (``make(entry)`` builds its verifier); returns the table's rows
    and the verdicts of every verifier that ran, by spec. ``decisions``, when given, receives every
    entry's accept/reject per pair, by spec."""
    decisions = {} if decisions is None else decisions
    differ = numbers_differ(pairs)
    runs: dict[str, list[Any]] = {}
    ran_for: dict[str, str] = {}  # family -> spec of the entry whose run serves it
    rows = []
    for entry in entries:
        family = entry.family
        if family is not None and family in ran_for:
            source = ran_for[family]
            threshold = entry.threshold if entry.threshold is not None else make(entry).threshold  # its default
            accepted = decisions[entry.spec] = [rethreshold(v, threshold) for v in runs[source]]
            rows.append(summarize(entry.spec, accepted, differ, runs[source], f"scores of {source}"))
            continue
        verdicts = runs[entry.spec] = judge_pairs(make(entry), pairs)
        if family is not None:
            ran_for[family] = entry.spec
        decisions[entry.spec] = [v.accepted for v in verdicts]
        rows.append(summarize(entry.spec, decisions[entry.spec], differ, verdicts))
    return rows, runs


def sweep(verdicts: Sequence[Any], differ: Sequence[bool], grid: Sequence[float]) -> list[tuple[float, float, float]]:
    """(threshold, acceptance rate, numbers-differ share of the accepted) over ``grid``."""
    out = []
    for t in grid:
        accepted = [rethreshold(v, t) for v in verdicts]
        k = sum(accepted)
        out.append((t, k / len(accepted), sum(a and d for a, d in zip(accepted, differ)) / k if k else math.nan))
    return out


def markdown_table(rows: Sequence[AblationRow], pairs: Sequence[dict[str, Any]]) -> str:
    differ = numbers_differ(pairs)
    problems = len({p.get("problem_id") for p in pairs})
    strata = Counter(writers(p) for p in pairs)
    written = "" if len(strata) < 2 else " Written by: " + "; ".join(
        f"{n} by {Path(t).name} and {Path(d).name}{' over engines' * e}" for (t, d, e), n in strata.items()) + "."
    lines = [f"{len(pairs)} step pairs from {problems} problems; the numbers differ in "
             f"{sum(differ)} of them ({sum(differ) / len(pairs):.0%}).{written}", "",
             "| verifier | pairs | accepted | accept rate | accepted with other numbers | median latency / pair |"
             " failures | note |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        bad = "-" if r.numbers_differ_accepted is None else f"{r.numbers_differ_accepted:.1%}"
        lines.append(f"| {r.verifier} | {r.pairs} | {r.accepted} | {r.accept_rate:.1%} | {bad} | "
                     f"{_ms(r.median_latency_ms)} | {r.failures} | {r.note} |")
    return "\n".join(lines)


def _ms(ms: float) -> str:
    return "-" if ms != ms else f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.2f} ms"


def plot_tradeoff(rows: Sequence[AblationRow], runs: dict[str, list[Any]], entries: Sequence[Entry],
                  pairs: Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """PNG: acceptance rate against the numbers-differ share, a curve per threshold verifier (None: no data)."""
    by_spec = {e.spec: e for e in entries}
    curves = [(verdicts, by_spec[spec].family) for spec, verdicts in runs.items() if by_spec[spec].family is not None]
    points = [r for r in rows if by_spec[r.verifier].family is None and r.numbers_differ_accepted is not None]
    if not curves and not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    differ = numbers_differ(pairs)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for verdicts, family in curves:
        curve = [(t, a, d) for t, a, d in sweep(verdicts, differ, _GRIDS[_FAMILY_GRID[family]]) if d == d]
        line, = ax.plot([d for _, _, d in curve], [a for _, a, _ in curve], marker=".", lw=1, label=family)
        for entry in entries:
            if entry.family == family and entry.threshold is not None:
                [(_, a, d)] = sweep(verdicts, differ, [entry.threshold])
                if d == d:
                    ax.annotate(f"{entry.threshold:g}", (d, a), fontsize=7, color=line.get_color())
    for r in points:
        ax.scatter([r.numbers_differ_accepted], [r.accept_rate], marker="s", zorder=3)
        ax.annotate(r.verifier, (r.numbers_differ_accepted, r.accept_rate), fontsize=8)
    ax.set_xlabel("share of accepted pairs whose numbers differ (lower is safer)")
    ax.set_ylabel("acceptance rate")
    ax.set_title("verifiers on recorded step pairs: acceptance vs. a harm proxy")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return save_figure(fig, path)


# ------------------------------------------------------------------------------------------ command

def entry_settings(entry: Entry, base: Any) -> Any:
    """The verifier settings of one entry: its name and threshold, plus the judge options it uses."""

    stages = set(stage_names(entry.name))
    local = bool(stages & {"judge", "paper-judge"}) and base.judge_model is not None
    remote = bool(stages & {"openai-judge"}) or ("paper-judge" in stages and not local)
    return VerifierSettings(entry.name, entry.threshold,
                            judge_model=base.judge_model if local else None,
                            judge_url=base.judge_url if remote else None,
                            judge_name=base.judge_name if remote else None,
                            judge_timeout=base.judge_timeout if remote else None,
                            judge_dtype=base.judge_dtype if local else "auto")


def verifier_maker(args: Any, settings: dict[str, VerifierSettings]) -> Callable[[Entry], Any]:
    """What builds each entry's verifier (``settings``: by spec) for the ``verifiers`` command; the target and
    each judge model are loaded once, on first need."""
    target = functools.cache(lambda: LM.from_loaded(load_model(args.target, dtype=args.dtype, device=args.device)))
    judges: dict[str, Any] = {}

    def make(entry: Entry) -> Any:
        s = settings[entry.spec]
        judge_name = (s.judge_model or "").strip().lower()
        needs_target = "target-score" in stage_names(s.name) or judge_name in ("target", args.target.lower())
        lm = target() if needs_target else None
        if s.judge_model and s.judge_model not in judges:
            judges[s.judge_model] = load_judge(s, lm, args.device)
        return build_verifier(s, target_lm=lm, judge_lm=judges.get(s.judge_model), device=args.device)

    return make


def run_ablation_command(args: Any) -> int:
    """The ``verifiers`` command: check everything, load what is needed once, judge, write the outputs."""

    entries = parse_entries(args.verifiers)
    base = verifier_settings_from_args(args)
    settings = {}
    for e in entries:
        try:
            settings[e.spec] = entry_settings(e, base)
        except Exception as exc:  # an unknown name: say which entry
            raise ConfigError(f"--verifiers entry {e.spec!r}: {exc}") from None
        check_verifier_settings(settings[e.spec])
    refuse_unread_verifier_options(args, settings.values())
    pairs = load_pairs(args.pairs, args.limit)
    first = Path(as_paths(args.pairs)[0])
    out = Path(args.out) if args.out is not None else first.with_name(first.stem + "-verifiers.md")
    check_writable(out, "the table")
    decisions: dict[str, list[bool]] = {}
    rows, runs = run_ablation(pairs, entries, verifier_maker(args, settings), decisions)
    table = markdown_table(rows, pairs)
    if getattr(args, "flips", None):  # the measured harm of each verifier, from continued pairs
        flips = list(read_records(Path(args.flips)))
        table += "\n\n" + harm_table(harm_rows(pairs, decisions, flips), flips)
    print(table)
    plot = plot_tradeoff(rows, runs, entries, pairs, out.with_suffix(".png"))
    body = f"{table}\n" + (f"\n![acceptance vs numbers-differ share]({plot.name})\n" if plot else "")
    out.write_text(body, encoding="utf-8")
    accepted = {spec: "".join("1" if a else "0" for a in d) for spec, d in decisions.items()}  # per pair, keys' order
    summary = {"pairs": list(map(str, as_paths(args.pairs))), "n_pairs": len(pairs), "rows": [asdict(r) for r in rows],
               "accepted": accepted, "keys": [[p["problem_id"], p["mode"]] for p in pairs],
               "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(f"\ntable: {out}" + (f"\nplot: {plot}" if plot else ""))
    return 0


__all__ = ["AblationRow", "DEFAULT_ENTRIES", "Entry", "load_pairs", "markdown_table", "parse_entries",
           "plot_tradeoff", "run_ablation", "sweep"]
