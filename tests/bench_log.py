"""What the run log's sources share (benchmarks/README.md): the committed results read as medians, ratios
and counts, a figure written as the log writes it, and the log cut into its sections.

A part of the log is held by a module ``bench_log_<part>.py`` that gives ``SOURCES`` (entries of
:data:`figure_check.Source`: a context on the figure's line, the figure, what computes it) and ``TABLES``
(a name and what prints the table's rows again, each row exactly as the log has it);
:mod:`bench_log_sources` puts the parts together.
"""

from __future__ import annotations

import functools
import json
import re
import statistics
import tomllib
from pathlib import Path
from typing import Callable

from figure_check import Source

from lookahead_reasoning.bench.report import load_results, summarize

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCH = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
Table = tuple[str, Callable[[], list[str]]]  # (a name, what prints the table's rows)


def sections(text: str) -> list[tuple[str, list[str]]]:
    """(heading, lines) of every section, code blocks blanked out (a heading's ``#`` inside code is code)."""
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("#"):
            found.append((line.lstrip("# ").strip(), []))
        elif found:
            found[-1][1].append(line)
    return found


# ------------------------------------------------------------------------------------------ the files


@functools.cache
def records(name: str) -> tuple[dict, ...]:
    return tuple(load_results(RESULTS / name))


def mode_row(name: str, mode: str):
    return next(row for row in summarize(list(records(name))) if row.mode == mode)


def tps(name: str, mode: str) -> float:
    """Median tokens a second of ``mode`` in a results file."""
    return mode_row(name, mode).tps_median


def speedup(name: str, mode: str, over: str = "ar") -> float:
    """Ratio of the median tokens a second of two modes of one file."""
    return tps(name, mode) / tps(name, over)


def per_problem(name: str, mode: str, over: str = "ar", other: str | None = None) -> list[float]:
    """``mode``'s tokens a second over ``over``'s, problem by problem (``over`` from file ``other`` if given)."""
    base = {r["problem_id"]: r["tokens_per_s"] for r in records(other or name) if r["mode"] == over}
    return [
        r["tokens_per_s"] / base[r["problem_id"]]
        for r in records(name)
        if r["mode"] == mode and r["problem_id"] in base
    ]


def planner(name: str, mode: str = "auto") -> float:
    """The planner's predicted over realised tokens a second (median over problems)."""
    return mode_row(name, mode).planner_ratio


def planner_ratios(name: str, mode: str = "auto") -> list[float]:
    return [r["predicted_tok_s"] / r["tokens_per_s"] for r in records(name) if r["mode"] == mode]


def same_text(name: str, mode: str, of: str = "ar", other: str | None = None) -> int:
    """How many of ``mode``'s runs wrote ``of``'s exact text on the same problem."""
    base = {r["problem_id"]: r["text"] for r in records(other or name) if r["mode"] == of}
    return sum(r["text"] == base.get(r["problem_id"]) for r in records(name) if r["mode"] == mode)


def plan_cycles(name: str, prefix: str, mode: str = "auto") -> int:
    """Cycles of ``mode`` whose plan label starts with ``prefix`` (``sd@g24``), over every problem."""
    return sum(
        n
        for r in records(name)
        if r["mode"] == mode
        for plan, n in r["plans"].items()
        if plan.startswith(prefix) and not plan[len(prefix) : len(prefix) + 1].isdigit()
    )


@functools.cache
def cost_points(name: str) -> dict[int, dict[int, float]]:
    """T(R, n) of a committed CPU cost table (``cpu-costs-<name>.json``): rows -> new tokens -> seconds."""
    table = json.loads((RESULTS / f"cpu-costs-{name}.json").read_text(encoding="utf-8"))["table"]
    return {int(r): {int(n): t for n, t in curve.items()} for r, curve in table["target"]["points"].items()}


def like(figure: str, value: float) -> str:
    """``value`` written as ``figure`` is: the same decimals, and its unit ("x", or "%" of a fraction)."""
    unit = figure[-1] if figure[-1] in "x%" else ""
    digits = len(figure.rstrip("x%").partition(".")[2])
    return f"{value * (100 if unit == '%' else 1):.{digits}f}{unit}"


def held(context: str, figures: dict[str, Callable[[], float]]) -> list[Source]:
    """Sources for several figures on lines holding ``context``, each computed as a number."""
    return [(context, figure, lambda f=figure, fn=fn: like(f, fn())) for figure, fn in figures.items()]


def cells(*values: str) -> str:
    return "| " + " | ".join(values) + " |"


def median(values: list[float]) -> float:
    return statistics.median(values)


def torch_pin() -> str:
    """The torch version pyproject.toml pins, as "major.minor"."""
    pin = next(
        d
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if d.startswith("torch==")
    )
    return ".".join(pin.removeprefix("torch==").split(".")[:2])


def on_problems_of(name: str, other: str, mode: str) -> float:
    """Ratio of ``mode``'s median tokens a second in two files, over the problems of ``other``."""
    ids = {r["problem_id"] for r in records(other)}
    return median([r["tokens_per_s"] for r in records(name) if r["mode"] == mode and r["problem_id"] in ids]) / tps(
        other, mode
    )


def over_best_fixed(name: str) -> float:
    """``auto``'s median tokens a second over the fastest fixed mode's of the same file."""
    return tps(name, "auto") / max(tps(name, m) for m in {r["mode"] for r in records(name)} - {"ar", "auto"})


def first_problem_ratio(name: str, mode: str, over: str) -> float:
    first = min(r["index"] for r in records(name))
    rate = {r["mode"]: r["tokens_per_s"] for r in records(name) if r["index"] == first}
    return rate[mode] / rate[over]


def median_without_first(name: str, mode: str) -> float:
    first = min(r["index"] for r in records(name))
    return median([r["tokens_per_s"] for r in records(name) if r["mode"] == mode and r["index"] != first])


def listed(context: str, written: list[str], values: Callable[[], list[float]]) -> list[Source]:
    """Sources for a list of figures on one line (``written``, in the log's order), each the value at its place;
    a figure written twice must be what both places compute."""

    def compute(figure: str) -> str:
        got = values()
        if len(got) != len(written):
            return f"{len(got)} values, not {len(written)}"
        found = {like(figure, v) for v, w in zip(got, written) if w == figure}
        return found.pop() if len(found) == 1 else " / ".join(sorted(found))

    return [(context, figure, lambda f=figure: compute(f)) for figure in dict.fromkeys(written)]
