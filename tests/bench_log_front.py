"""The run log's front section ("What to expect"): the regime tables and their prose, held to their files."""

from __future__ import annotations

from bench_log import (
    Table,
    cells,
    cost_points,
    first_problem_ratio,
    held,
    like,
    median_without_first,
    mode_row,
    on_problems_of,
    over_best_fixed,
    per_problem,
    planner,
    planner_ratios,
    records,
    speedup,
    torch_pin,
    tps,
)
from figure_check import Source

_BF16, _FP32, _INT8 = "auto-bf16-cpu.jsonl", "auto-fp32-avx512-cpu.jsonl", "auto-int8-avx512-cpu.jsonl"
_ONEDNN, _MKL, _INT8_AVX2 = "auto-onednn-cpu.jsonl", "auto-mkl-cpu.jsonl", "auto-int8-cpu.jsonl"
_BF16_CAL, _FP32_RERUN, _FP32_CAL = (
    "auto-bf16-calibrated-cpu.jsonl",
    "auto-fp32-avx512-rerun-cpu.jsonl",
    "auto-fp32-avx512-calibrated-cpu.jsonl",
)
_W8A8, _BF16_AFTER, _MKLCAP = (
    "auto-w8a8-avx512-cpu.jsonl",
    "auto-bf16-after-w8a8-cpu.jsonl",
    "auto-avx2emu-mklcap-default-cpu.jsonl",
)


def _accuracy(name: str) -> str:
    """Right answers of every mode of a file, when every mode scored alike ("6/10")."""
    scores = {
        (sum(r["correct"] for r in records(name) if r["mode"] == m), sum(r["mode"] == m for r in records(name)))
        for m in {r["mode"] for r in records(name)}
    }
    [(right, runs)] = scores
    return f"{right}/{runs}"


def _regime_cells(name: str, mode: str, over: str | None = None) -> list[str]:
    """A mode's median tok/s and speedup over ``ar`` (of ``over``'s file if given), "-" where it did not run."""
    if not any(r["mode"] == mode for r in records(name)):
        return ["-", "-"]
    base = tps(over or name, "ar")
    return [f"{tps(name, mode):.2f}", f"{tps(name, mode) / base:.2f}"]


def _regimes_table(columns: list[tuple[str, str | None]], modes: list[str]) -> list[str]:
    rows = [
        cells(f"`{mode}`", *[c for name, over in columns for c in _regime_cells(name, mode, over)]) for mode in modes
    ]
    return rows + [
        cells("accuracy (every mode)", *[c for name, _ in columns for c in (_accuracy(name), "")]).replace(
            "|  |", "| |"
        )
    ]


HELD = ["Benchmarks: scripts, run logs and history", "What to expect: the runs behind the front page table"]

TABLES: list[Table] = [
    (
        "native bf16: bf16, float32 and int8 regimes",
        lambda: _regimes_table(
            [(_BF16, None), (_FP32, None), (_INT8, _BF16)],
            ["ar", "sd@g12", "lr@k1", "lr@k2", "lr-sd@k1g12", "hf-assisted", "auto"],
        ),
    ),
    (
        "AVX2 only: float32 under oneDNN and the BLAS, int8",
        lambda: _regimes_table(
            [(_ONEDNN, None), (_MKL, None), (_INT8_AVX2, _ONEDNN)], ["ar", "sd@g12", "hf-assisted", "auto"]
        ),
    ),
]


SOURCES: list[Source] = [
    ("2-core AMD EPYC virtual machines, torch", "2.13", torch_pin),
    (
        "0.4 for the fixed modes",
        "0.4",
        lambda: like("0.4", next(r["draft_stop_below"] for r in records(_BF16) if r["mode"] == "lr@k1")),
    ),
    *held(
        "beta(2) = T(2, 1) / T(1, 1) = 0.95",
        {"0.95": lambda: cost_points("avx512-bf16")[2][1] / cost_points("avx512-bf16")[1][1]},
    ),
    *held(
        "`lr@k1` 1.11x, alpha1 0.41",
        {"1.11x": lambda: speedup(_BF16, "lr@k1"), "0.41": lambda: mode_row(_BF16, "lr@k1").alpha1},
    ),
    *held(
        "a 13-token forward costs 1.16 one-token",
        {"1.16": lambda: cost_points("avx512-bf16")[1][13] / cost_points("avx512-bf16")[1][1]},
    ),
    *held("forwards (the same table) and a draft token about 0.12", {"0.12": lambda: mode_row(_BF16, "auto").c}),
    *held(
        "cycles, 24 on 12, 16 on 5, stop",
        {
            "0.7": lambda: float(
                next(
                    p for r in records(_BF16) if r["mode"] == "auto" for p in r["plans"] if p.startswith("sd@g20")
                ).rpartition("s")[2]
            )
        },
    ),
    *held(
        "1.07x `hf-assisted` and 1.18x `sd@g12`",
        {"1.07x": lambda: speedup(_BF16, "auto", "hf-assisted"), "1.18x": lambda: speedup(_BF16, "auto", "sd@g12")},
    ),
    *held("Its predicted speed was 12% above", {"12%": lambda: planner(_BF16) - 1}),
    *held("`auto` 12.42", {"12.42": lambda: tps(_BF16_CAL, "auto")}),
    *held(
        "tok/s, 2.94x `ar`, 1.18x `sd@g12`, 1.12x `hf-assisted`",
        {
            "2.94x": lambda: speedup(_BF16_CAL, "auto"),
            "1.18x": lambda: speedup(_BF16_CAL, "auto", "sd@g12"),
            "1.12x": lambda: speedup(_BF16_CAL, "auto", "hf-assisted"),
        },
    ),
    *held(
        "(2.13x-3.61x)",
        {"2.13x": lambda: min(per_problem(_BF16_CAL, "auto")), "3.61x": lambda: max(per_problem(_BF16_CAL, "auto"))},
    ),
    *held("predicted speed 0.973 of the realised", {"0.973": lambda: planner(_BF16_CAL)}),
    *held("plain decoding runs nearly as fast as in bf16 here (4.16", {"4.16": lambda: tps(_FP32, "ar")}),
    *held(
        "against 4.24 tok/s) while the int8 draft",
        {
            "4.24": lambda: tps(_BF16, "ar"),
            "0.07": lambda: mode_row(_FP32, "auto").c,
            "0.12": lambda: mode_row(_BF16, "auto").c,
        },
    ),
    *held(
        "It ran at 0.96x `sd@g12` and 0.97x",
        {"0.96x": lambda: speedup(_FP32, "auto", "sd@g12"), "0.97x": lambda: speedup(_FP32, "auto", "hf-assisted")},
    ),
    *held(
        "and ran at 0.69x `hf-assisted`; over the other nine",
        {
            "0.69x": lambda: first_problem_ratio(_FP32, "auto", "hf-assisted"),
            "8.27": lambda: median_without_first(_FP32, "auto"),
            "8.01": lambda: median_without_first(_FP32, "hf-assisted"),
            "7.77": lambda: median_without_first(_FP32, "sd@g12"),
        },
    ),
    *held(
        "`auto` 8.79 tok/s, 1.02x `hf-assisted` (8.58), 1.09x",
        {
            "8.79": lambda: tps(_FP32_RERUN, "auto"),
            "1.02x": lambda: speedup(_FP32_RERUN, "auto", "hf-assisted"),
            "8.58": lambda: tps(_FP32_RERUN, "hf-assisted"),
            "1.09x": lambda: speedup(_FP32_RERUN, "auto", "sd@g12"),
        },
    ),
    *held(
        "`sd@g12` (8.05), faster than `ar` on all ten (1.87x",
        {
            "8.05": lambda: tps(_FP32_RERUN, "sd@g12"),
            "1.87x": lambda: min(per_problem(_FP32_RERUN, "auto")),
            "2.76x": lambda: max(per_problem(_FP32_RERUN, "auto")),
        },
    ),
    *held("predicted speed was 15.5% above", {"15.5%": lambda: planner(_FP32_RERUN) - 1}),
    *held(
        "more after that change: `auto` 8.62 tok/s",
        {
            "8.62": lambda: tps(_FP32_CAL, "auto"),
            "1.045x": lambda: speedup(_FP32_CAL, "auto", "hf-assisted"),
            "8.24": lambda: tps(_FP32_CAL, "hf-assisted"),
            "1.035x": lambda: speedup(_FP32_CAL, "auto", "sd@g12"),
            "8.32": lambda: tps(_FP32_CAL, "sd@g12"),
        },
    ),
    *held(
        "faster than `ar` on all ten (1.81x-2.94x)",
        {
            "1.81x": lambda: min(per_problem(_FP32_CAL, "auto")),
            "2.94x": lambda: max(per_problem(_FP32_CAL, "auto")),
            "0.998": lambda: planner(_FP32_CAL),
        },
    ),
    *held(
        "realised one (median; per problem 0.82-1.19)",
        {"0.82": lambda: min(planner_ratios(_FP32_CAL)), "1.19": lambda: max(planner_ratios(_FP32_CAL))},
    ),
    *held(
        "make plain decoding 1.95x faster than bf16 (8.25",
        {"1.95x": lambda: tps(_INT8, "ar") / tps(_BF16, "ar"), "8.25": lambda: tps(_INT8, "ar")},
    ),
    *held(
        "against 4.24 tok/s, runs back to back; per problem 1.63x-2.44x)",
        {
            "4.24": lambda: tps(_BF16, "ar"),
            "1.63x": lambda: min(per_problem(_INT8, "ar", other=_BF16)),
            "2.44x": lambda: max(per_problem(_INT8, "ar", other=_BF16)),
        },
    ),
    *held(
        "speculation adds only 1.26x on top (`auto` 10.43",
        {"1.26x": lambda: speedup(_INT8, "auto"), "10.43": lambda: tps(_INT8, "auto")},
    ),
    *held(
        "the fastest configuration on this machine stays `auto` in bf16 (12.22)", {"12.22": lambda: tps(_BF16, "auto")}
    ),
    *held("problems, run later the same day on the same machine: `ar` 9.82", {"9.82": lambda: tps(_W8A8, "ar")}),
    *held(
        "(2.32x bf16 `ar`, 1.19x int8",
        {"2.32x": lambda: tps(_W8A8, "ar") / tps(_BF16, "ar"), "1.19x": lambda: tps(_W8A8, "ar") / tps(_INT8, "ar")},
    ),
    *held(
        "`ar`; per problem 2.04x-2.86x) and `auto` 14.90",
        {
            "2.04x": lambda: min(per_problem(_W8A8, "ar", other=_BF16)),
            "2.86x": lambda: max(per_problem(_W8A8, "ar", other=_BF16)),
            "14.90": lambda: tps(_W8A8, "auto"),
            "1.52x": lambda: speedup(_W8A8, "auto"),
            "1.22x": lambda: tps(_W8A8, "auto") / tps(_BF16, "auto"),
        },
    ),
    *held(
        "problem 1.03x-1.55x)",
        {
            "1.03x": lambda: min(per_problem(_W8A8, "auto", "auto", other=_BF16)),
            "1.55x": lambda: max(per_problem(_W8A8, "auto", "auto", other=_BF16)),
        },
    ),
    *held(
        "w8a8 `ar` 2.30x and `auto` 1.27x bf16's",
        {
            "2.30x": lambda: on_problems_of(_W8A8, _BF16_AFTER, "ar"),
            "1.27x": lambda: on_problems_of(_W8A8, _BF16_AFTER, "auto"),
        },
    ),
    *held(
        "`auto` ran 1.15x `hf-assisted` instead of 0.69x",
        {
            "1.15x": lambda: speedup("auto-fp32-rates-check.jsonl", "auto", "hf-assisted"),
            "0.69x": lambda: first_problem_ratio(_FP32, "auto", "hf-assisted"),
        },
    ),
    # the AVX2-only machine
    *held(
        "speed was within 6%, 13% and 15% of the realised one",
        {"6%": lambda: planner(_ONEDNN) - 1, "13%": lambda: planner(_MKL) - 1, "15%": lambda: planner(_INT8_AVX2) - 1},
    ),
    *held(
        "so `lr@k1` ran at 0.51x and `lr-sd@k1g12` at 1.48x",
        {
            "0.51x": lambda: speedup("lr-modes-onednn-cpu.jsonl", "lr@k1"),
            "1.48x": lambda: speedup("lr-modes-onednn-cpu.jsonl", "lr-sd@k1g12"),
        },
    ),
    *held("against 1.55x for `sd@g12`", {"1.55x": lambda: speedup("lr-modes-onednn-cpu.jsonl", "sd@g12")}),
    *held(
        "but ran at 0.95x of `sd@g12` and 0.86x of `hf-assisted`",
        {"0.95x": lambda: speedup(_ONEDNN, "auto", "sd@g12"), "0.86x": lambda: speedup(_ONEDNN, "auto", "hf-assisted")},
    ),
    *held(
        "(0.96x and 0.92x under the BLAS linears)",
        {"0.96x": lambda: speedup(_MKL, "auto", "sd@g12"), "0.92x": lambda: speedup(_MKL, "auto", "hf-assisted")},
    ),
    *held(
        "gave `auto` 1.04x the best fixed mode under oneDNN and 0.89x",
        {
            "1.04x": lambda: over_best_fixed("auto-avx2emu-onednn-cpu.jsonl"),
            "0.89x": lambda: over_best_fixed("auto-avx2emu-default-cpu.jsonl"),
        },
    ),
    *held("That run gave `auto` 5.33 tok/s", {"5.33": lambda: tps(_MKLCAP, "auto")}),
    *held(
        "1.024x `sd@g12` (5.20) and 1.09x `hf-assisted` (4.87), 2.11x `ar`",
        {
            "1.024x": lambda: speedup(_MKLCAP, "auto", "sd@g12"),
            "5.20": lambda: tps(_MKLCAP, "sd@g12"),
            "1.09x": lambda: speedup(_MKLCAP, "auto", "hf-assisted"),
            "4.87": lambda: tps(_MKLCAP, "hf-assisted"),
            "2.11x": lambda: speedup(_MKLCAP, "auto"),
        },
    ),
    *held(
        "Int8 weights make plain decoding 1.83x faster there (4.4 vs 2.4",
        {
            "1.83x": lambda: tps(_INT8_AVX2, "ar") / tps(_ONEDNN, "ar"),
            "4.4": lambda: tps(_INT8_AVX2, "ar"),
            "2.4": lambda: tps(_ONEDNN, "ar"),
        },
    ),
    *held("`auto` on int8 weights (4.64 tok/s)", {"4.64": lambda: tps(_INT8_AVX2, "auto")}),
]


# The sections whose figures are not all held yet (the log's history, oldest runs last).
