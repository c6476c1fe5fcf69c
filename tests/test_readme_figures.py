"""Every figure the README states has its source here: the committed file and the computation it comes from,
or the constant of the code it restates (and every figure of theory/README.md's prose, its sources in
``theory_sources.py``, and of the run log's held sections, benchmarks/README.md, in ``bench_log_sources.py``).

A figure is a decimal ("0.64"), a speedup ("2.94x") or a percentage ("16.0%", "92%") in the README's text
or tables (code, inline code and link targets aside; the what-to-expect table's rows are held by
``test_readme.py``). Each one must match an entry of :data:`SOURCES` (the same figure, on a line that holds
the entry's context) whose computation, run on the committed files, prints that figure. A figure without a
source fails, and so does one whose source now computes another: a number edited by hand, or a file rerun
without its sentence.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import statistics
import tomllib
from pathlib import Path

import pytest
from bench_log import (
    BENCH,
    per_problem,
    alpha1_pooled,
    bank_share,
    cache_off_ratios,
    cost_points,
    foreign_steps,
    gpu,
    h100_machine,
    harm,
    pair_rates,
    pair_step_rates,
    schedule_ratio,
    sections,
    speedup,
    tps,
    weight_ms,
)
from bench_log_sources import BENCH_SOURCES, BENCH_TABLES, PARTS, log_figures
from figure_check import Source, check_source, line_figures, unsourced
from test_harness_table import _script as harness_table_script
from theory_sources import THEORY, THEORY_SOURCES, break_evens, prose_figures

from lookahead_reasoning.presets import DRAFT_STOP_BELOW
from lookahead_reasoning.theory.breakeven import break_even
from lookahead_reasoning.verifiers.embedding import EmbeddingVerifier
from lookahead_reasoning.verifiers.likelihood import DEFAULT_THRESHOLDS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = (ROOT / "README.md").read_text(encoding="utf-8")
def figures(text: str) -> list[tuple[str, str]]:
    """(figure, its line) for every figure of the README's prose and tables, as the module docstring says."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    expect = text.split("## What to expect", 1)[1].split("\n## ", 1)[0]
    found = []
    for line in text.splitlines():
        if line.startswith("|") and line in expect:
            continue
        found += [(figure, line) for figure in line_figures(line)]
    return found


# ------------------------------------------------------------------------------------------ the sources

@functools.cache
def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (RESULTS / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@functools.cache
def _harness() -> dict[str, list[str]]:
    table = harness_table_script().report(RESULTS / "harness")
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in table.splitlines()[2:])}


def _side() -> dict[str, list[str]]:
    """The side-by-side timing's rows (``harness_table.py --interleave --report`` on the committed answers)."""
    table = harness_table_script().side_by_side(RESULTS / "harness-side")
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in table.splitlines()[4:])}


_H100 = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "qwen2.5-7b", "qwen2.5-32b")


def _points(name: str, run: str = "gpu-compiled-h100-recheck.json") -> dict[int, dict[int, float]]:
    """T(R, n) of a shape on the compiled path, as an H100 run measured it (seconds): the recheck's, whose tables
    the README's break-evens price too."""
    points = gpu(run)["shapes"][name]["points"]
    return {int(r): {int(n): s for n, s in row.items()} for r, row in points.items()}


def cpu_beta(name: str) -> float:
    """T(2, 1) / T(1, 1) of a committed CPU cost table, as its points measured it."""
    points = cost_points(name)
    return points[2][1] / points[1][1]


def _median_over_ar(name: str, mode: str) -> str:
    """The median over problems of ``mode``'s tokens a second over ``ar``'s on the same problem."""
    return f"{statistics.median(per_problem(name, mode)):.2f}x"


def _pays_above(target: str, key: str) -> str:
    point = break_even(*pair_step_rates(), h100_machine(target, key)).alpha1[1]
    return "none" if point is None else f"{point:.2f}"


SOURCES: list[Source] = [
    ("Python 3.11", "3.11", lambda: tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"][2:]),
    ("stops after a token it gives less than 0.4", "0.4", lambda: f"{DRAFT_STOP_BELOW}"),
    ("cosine >= 0.85", "0.85", lambda: f"{inspect.signature(EmbeddingVerifier).parameters['threshold'].default}"),
    ("target probability >= 0.3", "0.3", lambda: f"{DEFAULT_THRESHOLDS['min-prob']}"),
    # lm-evaluation-harness: the committed table (benchmarks/results/harness), as `harness_table.py --report` prints it
    ("scored the target alone", "0.64", lambda: _harness()["hf"][2]),
    ("`--model lookahead` 0.64", "0.64", lambda: _harness()["auto"][2]),
    ("with `exact` and", "0.64", lambda: _harness()["lr-exact"][2]),
    ("with the likelihood verifier", "0.62", lambda: _harness()["lr-likelihood"][2]),
    # the time of a problem: the configurations side by side (benchmarks/results/harness-side)
    ("less time a problem", "2.67x", lambda: _side()["auto"][2].split()[0]),
    ("against this library's loop", "2.75x", lambda: _side()["auto"][3].split()[0]),
    ("answered side by side", "8", lambda: str(len({e["config"].split("#")[1] for e in _jsonl("harness-side/answers.jsonl")}))),
    # the Modes table's bf16 answers of auto (18/20)
    ("answers 0.90 for `auto`", "0.90", lambda: f"{_answers_auto_bf16()[0] / _answers_auto_bf16()[1]:.2f}"),
    # the verifiers table: GSM8K train 200-229, float32
    ("| `exact` |", "0.78x", lambda: f"{speedup('fidelity30-exact-fp32-cpu.jsonl', 'lr'):.2f}x"),
    ("| `exact` |", "2.04x", lambda: f"{speedup('fidelity30-exact-fp32-cpu.jsonl', 'auto'):.2f}x"),
    ("| `exact` |", "17.4%", lambda: f"{bank_share('exact'):.1%}"),
    ("| `embedding-numbers` |", "0.85x", lambda: f"{speedup('fidelity30-fp32-cpu.jsonl', 'lr'):.2f}x"),
    ("| `embedding-numbers` |", "2.11x", lambda: f"{speedup('fidelity30-fp32-cpu.jsonl', 'auto'):.2f}x"),
    ("| `embedding-numbers` |", "52.0%", lambda: f"{bank_share('embedding-numbers'):.1%}"),
    # the bank's flips and the likelihood rule
    ("non-exact pairs `embedding-numbers` accepts change the answer", "16.0%", lambda: f"{harm()['embedding-numbers'].rate:.1%}"),
    ("which predicts the 22/30 above", "74%", lambda: f"{(1 - harm()['embedding-numbers'].rate) ** foreign_steps('fidelity30-fp32-cpu.jsonl', 'lr'):.0%}"),
    ("`likelihood` at 0.3 accepts", "0.3", lambda: f"{DEFAULT_THRESHOLDS['min-prob']}"),
    ("`likelihood` at 0.3 accepts", "25.2%", lambda: f"{bank_share('likelihood@0.3'):.1%}"),
    ("`likelihood` at 0.3 accepts", "1.45x", lambda: f"{bank_share('likelihood@0.3') / bank_share('exact'):.2f}x"),
    ("predicted to keep", "92%", lambda: f"{harm()['likelihood@0.3'].retention:.0%}"),
    ("it accepted 1.61x what `exact` accepted", "1.61x",
     lambda: f"{alpha1_pooled('e2e-llamacpp-likelihood@0.3.jsonl', 'lr@') / alpha1_pooled('e2e-llamacpp.jsonl', 'lr@'):.2f}x"),
    ("with the engine's prompt cache off, it accepted", "1.45x",
     lambda: f"{alpha1_pooled('e2e-llamacpp-nocache-avx512-likelihood@0.3.jsonl', 'lr@') / alpha1_pooled('e2e-llamacpp-nocache-avx512.jsonl', 'lr@'):.2f}x"),
    # llama.cpp's prompt cache: lr's speed with it off over its speed with it on, problem by problem
    ("makes `ar` repeat itself exactly, at some speed", "0.73", lambda: f"{statistics.median(cache_off_ratios('lr@k2')):.2f}"),
    # the engine against this library's loops (GSM8K train 400-409)
    ("llama.cpp's plain decoding alone runs", "7.5x",
     lambda: f"{tps('engine-llamacpp-avx512-cpu.jsonl', 'ar') / tps('engine-scale-pytorch-cpu.jsonl', 'ar'):.1f}x"),
    ("llama.cpp's plain decoding alone runs", "3.1x",
     lambda: f"{tps('engine-llamacpp-amx-cpu.jsonl', 'ar') / tps('auto-bf16-amx-cpu.jsonl', 'ar'):.1f}x"),
    # what a second row costs PyTorch in bf16 (the committed cost tables of both bf16 CPUs)
    ("a second row of one token costs", "0.95", lambda: f"{cpu_beta('avx512-bf16'):.2f}"),
    ("a second row of one token costs", "0.92", lambda: f"{cpu_beta('amx-bf16'):.2f}"),
    # what auto's speed-up is made of: one drafted step against ar and against the best token-SD plan on the bf16
    # EPYC (theory section 9 on cpu-costs-avx512-bf16.json), and lr@k1 and sd@g12 measured there
    ("one drafted step a cycle pays above a step acceptance alpha1 of", "0.118",
     lambda: f"{break_evens('cpu-bf16')['ar']:.3f}"),
    ("keeping 0.40 of its steps", "0.40", lambda: f"{alpha1_pooled('auto-bf16-cpu.jsonl', 'lr@k1'):.2f}"),
    ("keeping 0.40 of its steps", "1.11x", lambda: f"{speedup('auto-bf16-cpu.jsonl', 'lr@k1'):.2f}x"),
    ("But token SD ran at", "2.45x", lambda: f"{speedup('auto-bf16-cpu.jsonl', 'sd@g12'):.2f}x"),
    ("best token-SD plan a drafted step pays only above", "0.73", lambda: f"{break_evens('cpu-bf16')['best']:.2f}"),
    # plain sd against auto on GSM8K train 200-229: the median over problems of each run's speed over ar's
    ("Plain `sd` can beat `auto` too", "2.18x", lambda: _median_over_ar("fidelity30-fp32-cpu.jsonl", "sd")),
    ("Plain `sd` can beat `auto` too", "2.10x", lambda: _median_over_ar("fidelity30-fp32-cpu.jsonl", "auto")),
    ("Plain `sd` can beat `auto` too", "2.15x", lambda: _median_over_ar("fidelity30-exact-fp32-cpu.jsonl", "auto")),
    # the GPU paragraph: the H100's files
    *[("On one H100", value, fn) for value, fn in (
        ("24.2", lambda: f"{gpu('gpu-compiled-h100.json')['shapes']['qwen2.5-coder-0.5b']['eager_ar_ms']:.1f}"),
        ("4.62", lambda: f"{gpu('gpu-compiled-h100.json')['shapes']['qwen2.5-coder-0.5b']['compiled_ar_ms']:.2f}"),
        ("3.51", lambda: f"{gpu('gpu-compiled-h100.json')['inductor']['qwen2.5-coder-0.5b']['ar_ms']:.2f}"),
        ("0.29", lambda: f"{weight_ms('qwen2.5-coder-0.5b'):.2f}"),
        ("20.2", lambda: f"{gpu('gpu-compiled-h100.json')['shapes']['qwen2.5-coder-1.5b']['eager_ar_ms']:.1f}"),
        ("6.04", lambda: f"{gpu('gpu-compiled-h100.json')['shapes']['qwen2.5-coder-1.5b']['compiled_ar_ms']:.2f}"),
        ("4.99", lambda: f"{gpu('gpu-compiled-h100.json')['inductor']['qwen2.5-coder-1.5b']['ar_ms']:.2f}"),
        ("0.92", lambda: f"{weight_ms('qwen2.5-coder-1.5b'):.2f}"),
        ("28.4", lambda: f"{gpu('gpu-compiled-h100.json')['shapes']['qwen2.5-7b']['eager_ar_ms']:.1f}"),
        ("10.6", lambda: f"{gpu('gpu-compiled-h100.json')['shapes']['qwen2.5-7b']['compiled_ar_ms']:.1f}"),
        ("4.2", lambda: f"{weight_ms('qwen2.5-7b'):.1f}"),
        ("68.1", lambda: f"{gpu('gpu-compiled-h100.json')['shapes']['qwen2.5-32b']['eager_ar_ms']:.1f}"),
        ("35.6", lambda: f"{gpu('gpu-compiled-h100.json')['shapes']['qwen2.5-32b']['compiled_ar_ms']:.1f}"),
        ("19.1", lambda: f"{weight_ms('qwen2.5-32b'):.1f}"),
        ("1.30", lambda: f"{max(_points(n)[r][t] / _points(n)[1][t] for n in _H100 for r in (2, 3, 4) for t in _points(n)[r] if t <= 13):.2f}"),
        ("0.90", lambda: f"{_points('qwen2.5-coder-0.5b')[1][1] / _points('qwen2.5-coder-1.5b')[1][1]:.2f}"),
        ("0.15", lambda: f"{_points('qwen2.5-coder-0.5b')[1][1] / _points('qwen2.5-32b')[1][1]:.2f}"),
        ("0.93", lambda: f"{pair_rates()[0]:.2f}"),
        ("41", lambda: f"{pair_rates()[1]:.0f}"),  # tokens a step
        ("0.82", lambda: _pays_above("qwen2.5-7b", "points")),
        ("0.57", lambda: _pays_above("qwen2.5-32b", "points")),
        ("0.70", lambda: _pays_above("qwen2.5-7b", "eager_points")),
        ("0.34", lambda: _pays_above("qwen2.5-32b", "eager_points")),
        ("0.17", lambda: f"{alpha1_pooled('e2e-llamacpp.jsonl', 'lr@'):.2f}"),
        ("0.40", lambda: f"{alpha1_pooled('auto-bf16-cpu.jsonl', 'lr@k1'):.2f}"),
        ("0.63", lambda: "0.63"),  # the paper's reported step acceptance (GSM8K, a 7B judge): a citation
        ("0.87x", lambda: schedule_ratio("sd", "qwen2.5-coder-1.5b")),
        ("1.42x", lambda: schedule_ratio("sd", "qwen2.5-7b")),
        ("3.35x", lambda: schedule_ratio("sd", "qwen2.5-32b")),
        ("0.66x", lambda: schedule_ratio("lr@k1-exact", "qwen2.5-coder-1.5b")),
        ("0.84x", lambda: schedule_ratio("lr@k1-exact", "qwen2.5-7b")),
        ("1.09x", lambda: schedule_ratio("lr@k1-exact", "qwen2.5-32b")),
    )],
]


def _answers_auto_bf16() -> tuple[int, int]:
    from test_quoted_numbers import _agreement

    answers, _, runs = _agreement(["auto-bf16-calibrated-cpu.jsonl", "engine-scale-pytorch-cpu.jsonl"], "auto")
    return answers, runs


# Each page: its text, how its figures are found, their sources, and an edit that a source must catch.
PAGES = {"README.md": (README, figures, SOURCES, ("1.45x", "1.55x")),
         "theory/README.md": (THEORY, prose_figures, THEORY_SOURCES, ("1.41 on the", "1.51 on the")),
         "benchmarks/README.md": (BENCH, log_figures, BENCH_SOURCES, ("1.09x `hf-assisted` (4.87)", "1.19x `hf-assisted` (4.87)"))}
PAGE_SOURCES = [(page, *source) for page, (_, _, sources, _) in PAGES.items() for source in sources]


@pytest.mark.parametrize("page", PAGES)
def test_every_figure_a_page_states_has_its_source(page):
    text, found, sources, _ = PAGES[page]
    stray = unsourced(found(text), sources)
    assert not stray, f"figures of {page} without a source in tests/:\n" + "\n".join(map(str, stray))


@pytest.mark.parametrize("page, context, figure, compute", PAGE_SOURCES,
                         ids=[f"{p}:{f}@{c[:30]}" for p, c, f, _ in PAGE_SOURCES])
def test_each_source_computes_the_figure_its_page_states(page, context, figure, compute):
    check_source(PAGES[page][0], page, context, figure, compute)


@pytest.mark.parametrize("page", PAGES)
def test_a_figure_changed_by_hand_fails(page):
    text, found, sources, (before, after) = PAGES[page]
    edited = text.replace(before, after, 1)
    assert edited != text and unsourced(found(edited), sources)


@pytest.mark.parametrize("table", [name for name, _ in BENCH_TABLES])
def test_every_table_the_run_log_prints_again_is_there_row_for_row(table):
    rows = dict(BENCH_TABLES)[table]()
    missing = [row for row in rows if row not in BENCH.splitlines()]
    assert not missing, f"benchmarks/README.md's table ({table}) no longer has the rows its files give:\n" + "\n".join(missing)


def test_a_table_row_edited_by_hand_fails():
    row = dict(BENCH_TABLES)[BENCH_TABLES[0][0]]()[0]
    edited = BENCH.replace(row, row.replace(" | 1.00 |", " | 1.01 |", 1), 1)
    assert edited != BENCH and unsourced(log_figures(edited), BENCH_SOURCES)


def test_every_section_of_the_run_log_with_figures_belongs_to_one_part():
    """A part names the sections it holds; every section with a figure belongs to exactly one, and no part names
    a section the log no longer has."""
    claimed = [heading for part in PARTS for heading in part.HELD]
    headings = {heading for heading, _ in sections(BENCH)}
    assert len(claimed) == len(set(claimed)), "a section is named by two parts"
    assert set(claimed) <= headings, f"parts name sections the log no longer has: {set(claimed) - headings}"
    with_figures = {heading for heading, lines in sections(BENCH) if any(map(line_figures, lines))}
    assert with_figures <= set(claimed), f"sections no part holds: {with_figures - set(claimed)}"
