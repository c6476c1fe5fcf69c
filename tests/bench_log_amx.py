"""The run log's section on the Intel Xeon with AMX (benchmarks/README.md): llama.cpp's builds side by side,
both runtimes' modes on the same problems, and what rows and tokens cost PyTorch there; tables printed again
from their files, prose held to them."""

from __future__ import annotations

import functools
import json
import statistics

from bench_log import RESULTS, Table, cells, cost_points, held, planner, records, torch_pin, tps
from figure_check import Source

from lookahead_reasoning.bench.grading import same_answer

_TORCH, _ENGINE = "auto-bf16-amx-cpu.jsonl", "engine-llamacpp-amx-cpu.jsonl"
_MODES = {_TORCH: ("ar", "sd@g12", "auto"), _ENGINE: ("ar", "sd", "auto")}
_RUNTIME = {_TORCH: "PyTorch, bf16", _ENGINE: "llama.cpp's server, Q4_K_M"}


@functools.cache
def _builds() -> dict:
    return json.loads((RESULTS / "llamacpp-amx-builds-cpu.json").read_text(encoding="utf-8"))


def _build_table() -> list[str]:
    m = _builds()["medians"]
    labels = {"prefill_tps": "prefill, ~460-token prompt", "decode_tps": "one row", "rows4_tps": "four rows at once"}
    return [cells(label, f"{m['amx'][k]:.1f}", f"{m['no-amx'][k]:.1f}", f"{m['amx'][k] / m['no-amx'][k]:.2f}")
            for k, label in labels.items()]


def _same_answers(name: str, mode: str) -> str:
    if mode == "ar":
        return "-"
    base = {r["problem_id"]: r["predicted"] for r in records(name) if r["mode"] == "ar"}
    pairs = [(r["predicted"], base[r["problem_id"]]) for r in records(name) if r["mode"] == mode]
    return f"{sum(same_answer(a, b) for a, b in pairs)}/{len(pairs)}"


def _accuracy(name: str, mode: str) -> str:
    runs = [r for r in records(name) if r["mode"] == mode]
    return f"{sum(r['correct'] for r in runs)}/{len(runs)}"


def _modes_table() -> list[str]:
    return [cells(_RUNTIME[name], f"`{mode}`", f"{tps(name, mode):.2f}", f"{tps(name, mode) / tps(name, 'ar'):.2f}",
                  f"{tps(name, mode) / tps(_TORCH, 'ar'):.2f}", _same_answers(name, mode), _accuracy(name, mode))
            for name in (_TORCH, _ENGINE) for mode in _MODES[name]]


def _beta(rows: int, n: int = 1) -> float:
    t = cost_points("amx-bf16")
    return t[rows][n] / t[1][1]


def _cost_table() -> list[str]:
    amx, avx = cost_points("amx-bf16"), cost_points("avx512-bf16")
    rows = []
    for r, n in ((1, 1), (2, 1), (3, 1), (1, 13), (2, 13), (3, 13)):
        rows.append(cells(f"T({r}, {n})", f"{amx[r][n] * 1e3:.1f} ms", f"{amx[r][n] / amx[1][1]:.2f}",
                          f"{avx[r][n] * 1e3:.1f} ms", f"{avx[r][n] / avx[1][1]:.2f}"))
    return rows


HELD = ["An Intel Xeon with AMX: both runtimes side by side"]

TABLES: list[Table] = [
    ("llama.cpp built with and without ggml's AMX kernels", _build_table),
    ("both runtimes' modes on the AMX machine", _modes_table),
    ("the PyTorch cost table on the AMX machine beside the avx512_bf16 one", _cost_table),
]

def _build_runs(build: str, key: str) -> list[float]:
    return [r[key] for r in _builds()["runs"][build]]


def _draft_ms(name: str) -> float:
    from lookahead_reasoning.planning import CostTable

    table = CostTable.from_json(json.loads((RESULTS / f"cpu-costs-{name}.json").read_text(encoding="utf-8"))["table"])
    return table.draft.seconds(1, 1, 300) * 1e3


def _forward_ratio() -> float:
    """How much longer a forward takes here than on the avx512_bf16 machine (median over the target's points)."""
    amx, avx = cost_points("amx-bf16"), cost_points("avx512-bf16")
    return statistics.median(amx[r][n] / avx[r][n] for r in amx for n in amx[r] if n in avx.get(r, {}))


def _break_even_k1() -> float:
    from bench_log import pair_step_rates
    from lookahead_reasoning.planning import CostTable
    from lookahead_reasoning.theory.breakeven import Machine, break_even

    t = CostTable.from_json(json.loads((RESULTS / "cpu-costs-amx-bf16.json").read_text(encoding="utf-8"))["table"])
    machine = Machine(lambda r, n: t.target.seconds(r, n, 300), lambda r, n: t.draft.seconds(r, n, 300))
    return break_even(*pair_step_rates(), machine).alpha1[1]


SOURCES: list[Source] = [
    ("tells this kind), torch 2.13 CPU, 2026-11-29", "2.13", torch_pin),
    *held("A prompt runs through the AMX kernels 1.52x faster", {
        "1.52x": lambda: _builds()["medians"]["amx"]["prefill_tps"] / _builds()["medians"]["no-amx"]["prefill_tps"]}),
    *held("the one-row figures of the two builds overlap run by run", {
        "9.3": lambda: min(_build_runs("amx", "decode_tps")), "10.7": lambda: max(_build_runs("amx", "decode_tps")),
        "10.3": lambda: min(_build_runs("no-amx", "decode_tps")),
        "10.5": lambda: max(_build_runs("no-amx", "decode_tps"))}),
    *held("its predicted speed was 0.99 of the realised one", {"0.99": lambda: planner(_TORCH)}),
    *held("SD ran at 0.94x plain decoding", {"0.94x": lambda: tps(_ENGINE, "sd") / tps(_ENGINE, "ar")}),
    *held("3.07x this library's PyTorch `ar` and 1.23x its `auto`", {
        "3.07x": lambda: tps(_ENGINE, "ar") / tps(_TORCH, "ar"), "1.23x": lambda: tps(_ENGINE, "ar") / tps(_TORCH, "auto")}),
    *held("Every forward takes about 1.8x as long as on the EPYC", {"1.8x": _forward_ratio}),
    *held("and 13 tokens cost 1.17 forwards", {"1.17": lambda: _beta(1, 13)}),
    *held("the int8 draft is dearer here", {"66.1": lambda: _draft_ms("amx-bf16"), "20.8": lambda: _draft_ms("avx512-bf16")}),
    *held("pays only above a step acceptance of 0.71", {"0.71": _break_even_k1}),
]
