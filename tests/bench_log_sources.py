"""The run log's figures (benchmarks/README.md) and where each comes from.

The log is held section by section. In a held section every figure (a decimal, a speedup or a percentage,
code and link targets aside) is either on a table row that :data:`BENCH_TABLES` prints again from the
committed files, or matched by an entry of :data:`BENCH_SOURCES` (the same figure, on a line holding the
entry's context) whose computation gives it, rounded as the log writes it. The sources live in one module a
part of the log (``bench_log_<part>.py``; what they share is :mod:`bench_log`). The sections not yet held
are named in :data:`UNHELD`; a section leaves that list when its last figure gets a source, and the list may
not name a section that has none left.
"""

from __future__ import annotations

import bench_log_cpu_b
import bench_log_engine_a
import bench_log_engine_b
import bench_log_front
import bench_log_gpu
import bench_log_verifiers
from bench_log import BENCH, sections
from figure_check import line_figures

PARTS = [bench_log_front, bench_log_engine_a, bench_log_engine_b, bench_log_verifiers, bench_log_gpu, bench_log_cpu_b]
BENCH_SOURCES = [source for part in PARTS for source in part.SOURCES]
BENCH_TABLES = [table for part in PARTS for table in part.TABLES]


def generated_rows() -> set[str]:
    """Every table row :data:`BENCH_TABLES` prints."""
    return {row for _, rows in BENCH_TABLES for row in rows()}


def log_figures(text: str) -> list[tuple[str, str]]:
    """(figure, its line) for every figure of the held sections that no printed table row holds."""
    printed = generated_rows()
    return [(figure, line) for heading, lines in sections(text) if heading not in UNHELD
            for line in lines if line not in printed for figure in line_figures(line)]


# The sections whose figures are not all held yet.
UNHELD: set[str] = {
    'CPU kernels: what had to be earned (history)',
    'Answer fidelity on 30 problems (avx512_bf16 machine, float32)',
    'The same 30 problems with the `exact` verifier (now the default)',
    'Runs on the avx512_bf16 machine (mode auto with the fixed cost profile, float32, int8 weights)',
    'Precision w8a8 (same machine, about four hours after the runs above)',
    'float32 again, with learned rates (`auto-fp32-avx512-rerun-cpu.jsonl`)',
    "float32 with the planner's calibration fixed (`auto-fp32-avx512-calibrated-cpu.jsonl`)",
    'bf16 with the calibration fixed (`auto-bf16-calibrated-cpu.jsonl`)',
}
