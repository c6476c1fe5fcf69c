"""What every figure check shares (README.md's, theory/README.md's and the run log's, benchmarks/README.md):
the committed results read as medians, ratios and counts (the CPU runs, the H100 tables and recorded schedules,
the step-pair bank and its flips), a figure written as a page writes it, and the log cut into its sections.

A part of the log is held by a module ``bench_log_<part>.py`` that gives ``SOURCES`` (entries of
:data:`figure_check.Source`: a context on the figure's line, the figure, what computes it) and ``TABLES``
(a name and what prints the table's rows again, each row exactly as the log has it);
:mod:`bench_log_sources` puts the parts together.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import statistics
import tomllib
from pathlib import Path
from typing import Callable

from figure_check import Source

from lookahead_reasoning.bench.flips import HarmRow, harm_rows, kept_foreign_steps, read_bank
from lookahead_reasoning.bench.report import load_results, summarize
from lookahead_reasoning.planning.costs import CostGrid
from lookahead_reasoning.testing import REAL_SHAPES, REAL_VOCABS
from lookahead_reasoning.theory import StepRates, TokenRates
from lookahead_reasoning.theory.breakeven import Machine

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


def alpha1_pooled(name: str, mode_prefix: str) -> float:
    runs = [r for r in records(name) if r["mode"].startswith(mode_prefix)]
    return sum(r["accepted_steps"] for r in runs) / sum(r["judged_pairs"] for r in runs)


@functools.cache
def gpu(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def grid(points: dict) -> CostGrid:
    return CostGrid({int(r): {int(n): s for n, s in row.items()} for r, row in points.items()}, prefix=256)


def weight_ms(name: str) -> float:
    s = REAL_SHAPES[name]
    h, kv = s["hidden"], s["hidden"] // s["heads"] * s["kv_heads"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * s["intermediate"]
    return 2.0 * (s["layers"] * layer + REAL_VOCABS[name] * h) / 3.35e12 * 1e3


@functools.cache
def schedules() -> tuple[dict, ...]:
    """The offline pair's recorded runs on GSM8K train 100-119 (notebooks 08 and 11 read them): written in bf16
    with the draft as a GPU would run it (not int8), every configuration."""
    with gzip.open(RESULTS / "schedules" / "gsm8k-100-119.jsonl.gz", "rt", encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh)


@functools.cache
def pair_rates() -> tuple[float, float]:
    """The offline pair's token alpha (accepted / judged, pooled over its recorded sd runs) and tokens a
    drafted or target step (pooled over its recorded lr runs)."""
    sd = [r["summary"] for r in schedules() if r["config"] == "sd"]
    lr = [r for r in schedules() if r["config"].startswith("lr@")]
    alpha = sum(s["accepted"] for s in sd) / sum(s["accepted"] + s["rejected"] for s in sd)
    return alpha, sum(r["new_tokens"] for r in lr) / sum(
        r["summary"]["cycles"] * r["summary"]["steps_per_cycle"] for r in lr
    )


def pair_step_rates() -> tuple[StepRates, TokenRates]:
    """:func:`pair_rates` as the theory's rates, as notebook 11 builds them."""
    alpha, step = pair_rates()
    return StepRates(0.5, round(step), round(step)), TokenRates.plain(alpha)


def cache_off_ratios(mode: str) -> list[float]:
    """``mode``'s tokens a second with llama.cpp's prompt cache off over with it on, problem by problem."""
    on, off = (
        {(r["mode"], r["problem_id"]): r for r in records(f"prompt-cache-{c}-avx512.jsonl")} for c in ("on", "off")
    )
    return [off[k]["tokens_per_s"] / on[k]["tokens_per_s"] for k in on if k[0] == mode]


@functools.cache
def schedule_rates(target: str) -> dict[tuple[str, str], float]:
    """(configuration, problem) -> tokens a second of every recorded run, its forwards priced by the first
    H100 run's compiled tables (``target``'s shape, the 0.5B's as the draft), as notebook 08 prices them."""
    from lookahead_reasoning.planning.costs import CostTable, price_schedule

    shapes = gpu("gpu-compiled-h100.json")["shapes"]
    costs = CostTable(grid(shapes[target]["points"]), grid(shapes["qwen2.5-coder-0.5b"]["points"]))
    return {(r["config"], r["problem_id"]): r["new_tokens"] / price_schedule(r["events"], costs) for r in schedules()}


def schedule_ratio(config: str, target: str) -> str:
    """Median over problems of a recorded run's priced tokens a second over `ar`'s on the same problem."""
    rate = schedule_rates(target)
    return f"{statistics.median(v / rate[('ar', pid)] for (c, pid), v in rate.items() if c == config):.2f}x"


def h100_machine(target: str, key: str) -> Machine:
    """The recheck's H100 table for ``target`` with the 0.5B as the draft (``key``: "points", compiled, or
    "eager_points"), at 300 cached tokens."""
    shapes = gpu("gpu-compiled-h100-recheck.json")["shapes"]
    t, d = grid(shapes[target][key]), grid(shapes["qwen2.5-coder-0.5b"][key])
    return Machine(lambda r, n: t.seconds(r, n, 300), lambda r, n: d.seconds(r, n, 300))


@functools.cache
def ablation() -> dict:
    """``lookahead-reasoning verifiers`` on the whole bank: every verifier's decision on every pair."""
    return json.loads((RESULTS / "verifier-ablation.json").read_text(encoding="utf-8"))


def bank_share(verifier: str) -> float:
    """The share of the bank's pairs ``verifier`` accepts."""
    decisions = ablation()["accepted"][verifier]
    return decisions.count("1") / len(decisions)


@functools.cache
def harm() -> dict[str, HarmRow]:
    """Each verifier's flips among the accepted non-exact pairs continued, as ``verifiers --flips`` counts them."""
    pairs, _ = read_bank([RESULTS / name for name in ("pairs-gsm8k.jsonl", "pairs-gsm8k-llamacpp.jsonl")])
    where = {tuple(key): i for i, key in enumerate(ablation()["keys"])}
    at = [where[(p["problem_id"], p["mode"])] for p in pairs]
    decisions = {v: [d[i] == "1" for i in at] for v, d in ablation()["accepted"].items()}
    flips = [
        json.loads(line)
        for line in (RESULTS / "flips-gsm8k-llamacpp.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    return {row.verifier: row for row in harm_rows(pairs, decisions, flips)}


def foreign_steps(name: str, mode: str) -> float:
    """Drafted steps per run that were not the target's own and were kept (``flips.kept_foreign_steps``), the
    mean over a results file's runs of ``mode``."""
    return statistics.mean(kept_foreign_steps(r) for r in records(name) if r["mode"] == mode)
