"""The run log's figures (benchmarks/README.md) and where each comes from.

Every figure of the log (a decimal, a speedup or a percentage; code, inline code and link targets aside) is
either on a table row that :data:`BENCH_TABLES` prints again from the committed files, or matched by an
entry of :data:`BENCH_SOURCES` (the same figure, on a line holding the entry's context) whose computation
gives it, rounded as the log writes it. The sources live in one module a part of the log
(``bench_log_<part>.py``, each naming the sections it holds in ``HELD``; what they share is
:mod:`bench_log`): a new section of the log belongs to a part, and its figures to their files.
"""

from __future__ import annotations

import bench_log_amx
import bench_log_cpu_a
import bench_log_cpu_b
import bench_log_engine_a
import bench_log_engine_b
import bench_log_front
import bench_log_gpu
import bench_log_verifiers
from bench_log import sections
from figure_check import line_figures

PARTS = [
    bench_log_front,
    bench_log_amx,
    bench_log_engine_a,
    bench_log_engine_b,
    bench_log_verifiers,
    bench_log_gpu,
    bench_log_cpu_a,
    bench_log_cpu_b,
]
BENCH_SOURCES = [source for part in PARTS for source in part.SOURCES]
BENCH_TABLES = [table for part in PARTS for table in part.TABLES]


def generated_rows() -> set[str]:
    """Every table row :data:`BENCH_TABLES` prints."""
    return {row for _, rows in BENCH_TABLES for row in rows()}


def log_figures(text: str) -> list[tuple[str, str]]:
    """(figure, its line) for every figure of the log that no printed table row holds."""
    printed = generated_rows()
    return [
        (figure, line)
        for _, lines in sections(text)
        for line in lines
        if line not in printed
        for figure in line_figures(line)
    ]
