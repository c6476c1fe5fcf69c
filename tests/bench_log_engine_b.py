"""The run log's engine sections under load and after the one stack (benchmarks/README.md): many requests at
once, the two reruns under load, the reasoning-length run, the engine and PyTorch runs before and after the
one stack, and what the one loop adds to a token; tables printed again from their files, prose held to them.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

from bench_log import (
    RESULTS,
    ROOT,
    Table,
    cells,
    held,
    median,
    per_problem,
    planner_ratios,
    records,
    same_text,
    speedup,
    tps,
)
from figure_check import Source

from lookahead_reasoning.planning.estimates import StepBook

sys.path.insert(0, str(ROOT / "benchmarks"))
from engine_load import row as load_row  # noqa: E402  (the load table's own computation)
from engine_long import window_rates  # noqa: E402

# the load runs: a prefix names the files of C = 1, 2, 4 (``<prefix>-c<C>.jsonl``); the others are one C's file
_LOAD, _PREPARED, _ONESTACK = "engine-load-avx2-cpu", "engine-load-avx2-prepared-cpu", "engine-load-avx2-onestack-cpu"
_PREPARED8, _AUTOFIRST = "engine-load-avx2-prepared8-cpu-c2.jsonl", "engine-load-avx2-autofirst-cpu-c2.jsonl"
_CLOSED_POOL = "engine-load-avx2-closed-pool-cpu-c2.jsonl"
_NO_OVERLAP4 = "engine-load-avx2-no-sync-overlap-cpu-c4.jsonl"
_AVX512_C1, _AVX512_C2 = "engine-load-avx512-cpu-c1.jsonl", "engine-load-avx512-cpu-c2.jsonl"
_LONG = "engine-long-avx2-cpu.jsonl"
_ENGINE = {
    "before": "engine-onestack-before-avx2-cpu.jsonl",
    "after: one driver": "engine-onestack-after-avx2-cpu.jsonl",
    "after: one planner (2026-11-26)": "engine-onestack-planner-avx2-cpu.jsonl",
}
_TORCH = {"before": "torch-onestack-before-avx2-cpu.jsonl", "after": "torch-onestack-after-avx2-cpu.jsonl"}
_LOOP = RESULTS / "loop-overhead-avx512-bf16.md"


# ------------------------------------------------------------------------------------------ under load


def _load(name: str, mode: str) -> dict:
    """Throughput, latency and one request's tok/s of ``mode`` in a load results file (``engine_load.row``)."""
    return load_row([r for r in records(name) if r["mode"] == mode])


def _level(prefix: str, c: int) -> str:
    return f"{prefix}-c{c}.jsonl"


def _vs_ar(name: str, mode: str, over: str | None = None) -> float:
    """Throughput of ``mode`` over ``ar``'s (``ar`` of ``over``'s file if given)."""
    return _load(name, mode)["throughput"] / _load(over or name, "ar")["throughput"]


def _load_cells(prefix: str, c: int, mode: str) -> list[str]:
    """A row of ``engine_load.table`` without its problems column and its last one."""
    name = _level(prefix, c)
    r = _load(name, mode)
    return [str(c), f"`{mode}`", f"{r['throughput']:.2f}", f"{_vs_ar(name, mode):.2f}x", f"{r['latency']:.1f}"]


def _load_table(prefix: str, modes: list[str], last: str) -> list[str]:
    """The load table at C = 1, 2, 4; the last column is one request's tok/s (``last`` "request") or, for
    ``auto``, its ratio to ``ar`` in the first table (``last`` "first")."""
    rows = []
    for c in (1, 2, 4):
        for mode in modes:
            if last == "request":
                end = f"{_load(_level(prefix, c), mode)['per_request']:.2f}"
            else:
                end = f"{_vs_ar(_level(_LOAD, c), mode):.2f}x" if mode != "ar" else ""
            rows.append(cells(*_load_cells(prefix, c, mode), end).replace("|  |", "| |"))
    return rows


def _walls(name: str, mode: str) -> list[float]:
    """Wall seconds of each batch of ``mode``, in the order the batches ran."""
    return list({r["batch"]: r["batch_wall_s"] for r in records(name) if r["mode"] == mode}.values())


def _latency_over_ar(c: int) -> float:
    return _load(_level(_LOAD, c), "auto")["latency"] / _load(_level(_LOAD, c), "ar")["latency"]


def _lr_run() -> dict:
    """The one run of the C = 4 attempt that planned sync LR cycles."""
    return next(r for r in records(_NO_OVERLAP4) if r["mode"] == "auto" and "lr@k1" in r["plans"])


# ------------------------------------------------------------------------------------------ the long run


def _long_pairs() -> list[tuple[dict, dict]]:
    """(``ar``, ``auto``) records of each prompt of the reasoning-length run, in prompt order."""
    by = {(r["problem_id"], r["mode"]): r for r in records(_LONG)}
    ids = sorted({r["problem_id"] for r in records(_LONG)}, key=lambda i: int(i.rpartition("-")[2]))
    return [(by[i, "ar"], by[i, "auto"]) for i in ids]


def _long_row(ar: dict, auto: dict) -> str:
    """One prompt: its GSM8K problems (from its id, ``gsm8k-o<offset>-b<bundle>-<i>``), tokens, both speeds."""
    offset, bundle, i = map(int, re.fullmatch(r"gsm8k-o(\d+)-b(\d+)-(\d+)", ar["problem_id"]).groups())
    first = offset + i * bundle
    return cells(
        str(i),
        f"{first}-{first + bundle - 1}",
        str(ar["new_tokens"]),
        f"{ar['tokens_per_s']:.2f}",
        f"{auto['tokens_per_s']:.2f}",
        f"{auto['tokens_per_s'] / ar['tokens_per_s']:.2f}",
        str(auto["cycles"]),
    )


def _long_ratios() -> list[float]:
    return [auto["tokens_per_s"] / ar["tokens_per_s"] for ar, auto in _long_pairs()]


def _at_least_median() -> str:
    """On how many prompts ``auto`` ran at least its ratio of the medians, "k of n"."""
    ratios = _long_ratios()
    return f"{sum(x >= speedup(_LONG, 'auto') for x in ratios)} of {len(ratios)}"


def _window_medians(mode: str, window: int = 256) -> list[float]:
    """Median tok/s per window over the prompts whose answer reached it, while at least half did (the plot's)."""
    rates = [window_rates(r["timeline"], window, r["new_tokens"]) for r in records(_LONG) if r["mode"] == mode]
    reached = [[x[w] for x in rates if len(x) > w] for w in range(max(map(len, rates)))]
    return [median(v) for v in reached if 2 * len(v) >= len(rates)]


# ------------------------------------------------------------------------------------------ one stack


def _correct(name: str, mode: str) -> int:
    return sum(r["correct"] for r in records(name) if r["mode"] == mode)


def _plans(name: str) -> str:
    """``auto``'s cycles per plan, stop thresholds aside, the token-SD plans as one gamma range."""
    counts: Counter[str] = Counter()
    for r in records(name):
        if r["mode"] == "auto":
            counts.update({re.sub(r"s[\d.]+$", "", plan): n for plan, n in r["plans"].items()})
    gammas = sorted(int(p[len("sd@g") :]) for p in counts if p.startswith("sd@g"))
    sd = [f"sd@g{gammas[0]}-g{gammas[-1]} {sum(counts[f'sd@g{g}'] for g in gammas)}"] if gammas else []
    return ", ".join(sd + [f"{p} {n}" for p, n in sorted(counts.items()) if not p.startswith("sd@g")])


def _onestack_row(code: str, name: str, plans: bool = False) -> str:
    """``ar`` against ``auto`` in one file: medians, their ratio, its range per problem, texts and answers."""
    ratios, runs = per_problem(name, "auto"), sum(r["mode"] == "ar" for r in records(name))
    return cells(
        code,
        f"{tps(name, 'ar'):.2f}",
        f"{tps(name, 'auto'):.2f}",
        f"{speedup(name, 'auto'):.2f}x",
        f"{min(ratios):.2f}-{max(ratios):.2f}x",
        f"{same_text(name, 'auto')}/{runs}",
        f"{_correct(name, 'ar')}, {_correct(name, 'auto')}",
        *([_plans(name)] if plans else []),
    )


# ------------------------------------------------------------------------------------------ the one loop


def _loop_times() -> dict[str, list[tuple[float, float]]]:
    """(plain, one loop) ms a token per problem and mode, from the printed lines of the committed output."""
    found: dict[str, list[tuple[float, float]]] = {}
    for mode, plain, one in re.findall(
        r"^\S+ (\w+): plain ([\d.]+) ms/token, one loop ([\d.]+)$", _LOOP.read_text(encoding="utf-8"), flags=re.M
    ):
        found.setdefault(mode, []).append((float(plain), float(one)))
    return found


def _loop_ratios(mode: str) -> list[float]:
    return [one / plain for plain, one in _loop_times()[mode]]


def _loop_row(mode: str) -> str:
    """A row of the committed table, with the per-problem range; "same tokens" is the committed table's."""
    times, ratios = _loop_times()[mode], _loop_ratios(mode)
    same = re.search(rf"^\| {mode} \|.*\| (\d+/\d+) \|$", _LOOP.read_text(encoding="utf-8"), flags=re.M).group(1)
    return cells(
        mode,
        f"{median([p for p, _ in times]):.1f}",
        f"{median([o for _, o in times]):.1f}",
        f"{median(ratios):.3f}",
        f"{min(ratios):.2f}-{max(ratios):.2f}",
        same,
    )


TABLES: list[Table] = [
    ("many requests at once", lambda: _load_table(_LOAD, ["ar", "sd", "auto"], "request")),
    ("under load, runs warmed before the clock", lambda: _load_table(_PREPARED, ["ar", "auto"], "first")),
    ("under load with one planner", lambda: _load_table(_ONESTACK, ["ar", "auto"], "first")),
    ("a reasoning-length run", lambda: [_long_row(ar, auto) for ar, auto in _long_pairs()]),
    ("one stack over the engine", lambda: [_onestack_row(code, name) for code, name in _ENGINE.items()]),
    ("one stack in PyTorch", lambda: [_onestack_row(code, name, plans=True) for code, name in _TORCH.items()]),
    ("the one loop against the plain loops", lambda: [_loop_row("ar"), _loop_row("sd")]),
]

_C1, _C2, _C4 = (_level(_LOAD, c) for c in (1, 2, 4))
_P2 = _level(_PREPARED, 2)


def _throughput(name: str, mode: str) -> float:
    return _load(name, mode)["throughput"]


SOURCES: list[Source] = [
    # Many requests at once
    *held(
        "a second request adds 21% throughput and a fourth 33% over one",
        {
            "21%": lambda: _throughput(_C2, "ar") / _throughput(_C1, "ar") - 1,
            "33%": lambda: _throughput(_C4, "ar") / _throughput(_C1, "ar") - 1,
        },
    ),
    *held(
        "the busier the engine (0.56x, 0.46x, 0.23x)",
        {"0.56x": lambda: _vs_ar(_C1, "sd"), "0.46x": lambda: _vs_ar(_C2, "sd"), "0.23x": lambda: _vs_ar(_C4, "sd")},
    ),
    *held(
        "latency 5-13% above `ar`'s",
        {
            "5": lambda: min(_latency_over_ar(c) for c in (1, 2, 4)) * 100 - 100,
            "13%": lambda: max(_latency_over_ar(c) for c in (1, 2, 4)) - 1,
            "0.67x": lambda: _vs_ar(_C2, "auto"),
            "0.77x": lambda: _vs_ar(_C4, "auto"),
        },
    ),
    *held(
        "reached 9.30 tok/s at C = 2 on the problems above (0.54x",
        {"9.30": lambda: _throughput(_CLOSED_POOL, "auto"), "0.54x": lambda: _vs_ar(_CLOSED_POOL, "auto", _C2)},
    ),
    *held(
        "4.28 tok/s at C = 4 on problems 600-607",
        {
            "4.28": lambda: _throughput(_NO_OVERLAP4, "auto"),
            "0.27x": lambda: _vs_ar(_NO_OVERLAP4, "auto"),
            "16.09": lambda: _throughput(_NO_OVERLAP4, "ar"),
        },
    ),
    # the prior of a fresh planner's alpha1 (a code default)
    *held("alpha1 0.5) priced `lr@k1` above a chunk", {"0.5": lambda: StepBook().alpha1.mean}),
    *held("`lr@k1` ran at 1.29 tok/s", {"1.29": lambda: _lr_run()["tokens_per_s"]}),
    *held(
        "`ar` 28.56 tok/s, `sd` 12.66 (0.44x), `auto` 28.32",
        {
            "28.56": lambda: _throughput(_AVX512_C1, "ar"),
            "12.66": lambda: _throughput(_AVX512_C1, "sd"),
            "0.44x": lambda: _vs_ar(_AVX512_C1, "sd"),
            "28.32": lambda: _throughput(_AVX512_C1, "auto"),
            "0.99x": lambda: _vs_ar(_AVX512_C1, "auto"),
        },
    ),
    *held("its C = 2 run has `ar` only (31.09 tok/s", {"31.09": lambda: _throughput(_AVX512_C2, "ar")}),
    # Under load again, every run of a batch warmed before any is timed
    *held(
        "batches took 32.9 s and 21.6 s against `ar`'s 26.5 s and 23.5 s",
        {
            "32.9": lambda: _walls(_P2, "auto")[0],
            "21.6": lambda: _walls(_P2, "auto")[1],
            "26.5": lambda: _walls(_P2, "ar")[0],
            "23.5": lambda: _walls(_P2, "ar")[1],
        },
    ),
    *held(
        "`ar` 17.68 tok/s, `auto` 16.67 (0.94x). Again only `auto`'s first batch was slow (36.2 s",
        {
            "17.68": lambda: _throughput(_PREPARED8, "ar"),
            "16.67": lambda: _throughput(_PREPARED8, "auto"),
            "0.94x": lambda: _vs_ar(_PREPARED8, "auto"),
            "36.2": lambda: _walls(_PREPARED8, "auto")[0],
        },
    ),
    *held(
        "`ar`'s 26.4 s for the same two requests); its other three batches took 22.2, 22.3 and 27.9 s",
        {
            "26.4": lambda: _walls(_PREPARED8, "ar")[0],
            "22.2": lambda: _walls(_PREPARED8, "auto")[1],
            "22.3": lambda: _walls(_PREPARED8, "auto")[2],
            "27.9": lambda: _walls(_PREPARED8, "auto")[3],
        },
    ),
    *held(
        "26.1, 21.8 and 28.2. At C > 1",
        {
            "26.1": lambda: _walls(_PREPARED8, "ar")[1],
            "21.8": lambda: _walls(_PREPARED8, "ar")[2],
            "28.2": lambda: _walls(_PREPARED8, "ar")[3],
        },
    ),
    # Under load with one planner, and the cause of the old loss
    *held(
        "`engine-load-avx2-autofirst-cpu-c2.jsonl`), `auto` made 1.08x", {"1.08x": lambda: _vs_ar(_AUTOFIRST, "auto")}
    ),
    *held(
        "32.3 s for problems 600-601 against 24.0, 21.4 and 27.6 s",
        {
            "32.3": lambda: _walls(_AUTOFIRST, "ar")[0],
            "24.0": lambda: _walls(_AUTOFIRST, "ar")[1],
            "21.4": lambda: _walls(_AUTOFIRST, "ar")[2],
            "27.6": lambda: _walls(_AUTOFIRST, "ar")[3],
        },
    ),
    *held(
        "27.9 s for the same two requests). With `ar` first it had been `auto`'s first batch (36.2 s",
        {"27.9": lambda: _walls(_AUTOFIRST, "auto")[0], "36.2": lambda: _walls(_PREPARED8, "auto")[0]},
    ),
    *held("`ar`'s 26.4 s). The slow batch", {"26.4": lambda: _walls(_PREPARED8, "ar")[0]}),
    # A reasoning-length run
    *held(
        "Medians over the 10 prompts: `ar` 10.47 tok/s, `auto` 10.11 (0.97x)",
        {
            "10.47": lambda: tps(_LONG, "ar"),
            "10.11": lambda: tps(_LONG, "auto"),
            "0.97x": lambda: speedup(_LONG, "auto"),
        },
    ),
    *held(
        "0.88-1.15x, >= 0.97x on 5 of 10",
        {
            "0.88": lambda: min(_long_ratios()),
            "1.15x": lambda: max(_long_ratios()),
            "0.97x": lambda: speedup(_LONG, "auto"),
        },
    ),
    ("0.88-1.15x, >= 0.97x on 5 of 10", "5 of 10", lambda: _at_least_median()),
    *held("the median window goes from 11.6 tok/s in the first", {"11.6": lambda: _window_medians("ar")[0]}),
    *held("256 tokens to 8.9 in the last window", {"8.9": lambda: _window_medians("ar")[-1]}),
    # One stack: the engine run before and after
    *held(
        "`auto` ran at the same speed both times (4.49 and 4.55 tok/s); `ar` drifted by 8%",
        {
            "4.49": lambda: tps(_TORCH["before"], "auto"),
            "4.55": lambda: tps(_TORCH["after"], "auto"),
            "8%": lambda: tps(_TORCH["before"], "ar") / tps(_TORCH["after"], "ar") - 1,
        },
    ),
    *held(
        "realised speed per problem: before 0.93-1.37, after 0.97-1.21",
        {
            "0.93": lambda: min(planner_ratios(_TORCH["before"])),
            "1.37": lambda: max(planner_ratios(_TORCH["before"])),
            "0.97": lambda: min(planner_ratios(_TORCH["after"])),
            "1.21": lambda: max(planner_ratios(_TORCH["after"])),
        },
    ),
    # Modes are plans: what the one loop adds to a token
    *held(
        "inside a spread of 0.97-1.18 (the first problem's one-loop run was 18% slower, the others within 6%)",
        {
            "0.97": lambda: min(_loop_ratios("ar")),
            "1.18": lambda: max(_loop_ratios("ar")),
            "18%": lambda: _loop_ratios("ar")[0] - 1,
            "6%": lambda: max(abs(x - 1) for x in _loop_ratios("ar")[1:]),
        },
    ),
    *held(
        "`sd` it was faster on all five problems (by 2-7%)",
        {"2": lambda: 100 - max(_loop_ratios("sd")) * 100, "7%": lambda: 1 - min(_loop_ratios("sd"))},
    ),
]

HELD = [
    "Many requests at once (AVX2-only CPU)",
    "Under load again, every run of a batch warmed before any is timed (AVX2-only CPU)",
    "Under load with one planner, and the cause of the old loss (AVX2-only CPU)",
    "A reasoning-length run (AVX2-only CPU)",
    "One stack: the engine run before and after (AVX2-only CPU)",
    "Modes are plans: what the one loop adds to a token (avx512_bf16 CPU)",
]
