"""The run log's sections on lm-evaluation-harness, vLLM, the likelihood verifiers and the noise floor
(benchmarks/README.md), held to their files."""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from typing import Callable

from bench_log import (
    RESULTS,
    ROOT,
    Table,
    bank_share,
    cells,
    foreign_steps,
    harm,
    held,
    like,
    median,
    mode_row,
    per_problem,
    planner,
    planner_ratios,
    records,
    speedup,
    tps,
)
from figure_check import Source
from test_harness_table import _script as _harness_script

from lookahead_reasoning.bench.flips import Z95, kept_foreign_steps
from lookahead_reasoning.bench.grading import same_answer
from lookahead_reasoning.bench.report import fidelity_table, tokens_per_target_request
from lookahead_reasoning.verifiers.likelihood import DEFAULT_THRESHOLDS

_HARNESS, _SIDE = RESULTS / "harness", RESULTS / "harness-side"


# ------------------------------------------------------------------------------------------ lm-evaluation-harness


@functools.cache
def _harness_report() -> str:
    """``harness_table.py --report`` on the committed 50 problems."""
    return _harness_script().report(_HARNESS)


@functools.cache
def _side_report() -> str:
    """``harness_table.py --interleave --report`` on the committed side-by-side answers."""
    return _harness_script().side_by_side(_SIDE)


def _rows(table: str) -> dict[str, list[str]]:
    """A printed table's cells by the first cell of each row."""
    return {
        c[0]: c
        for c in (
            [cell.strip() for cell in line.strip("|").split("|")]
            for line in table.splitlines()
            if line.startswith("| ") and "---" not in line
        )
    }


def _harness_cell(config: str, column: int) -> float:
    return float(_rows(_harness_report())[config][column])


def _side_spread(config: str, column: int) -> tuple[float, float, float]:
    """(median, low, high) of a side-by-side cell ("2.67x (2.28-3.35)")."""
    median, _, spread = _rows(_side_report())[config][column].partition(" (")
    low, high = spread.rstrip(")").split("-")
    return float(median.rstrip("x")), float(low), float(high)


def _likelihood_threshold() -> float:
    """The likelihood verifier's threshold, as the harness's results file records the run's model_args."""
    [found] = (_HARNESS / "lr-likelihood").rglob("results_*.json")
    return json.loads(found.read_text(encoding="utf-8"))["config"]["model_args"]["threshold"]


_HF, _AR = 2, 3  # the side-by-side columns: hf's time over this one's, ar's time over this one's

TABLES: list[Table] = [
    ("harness: 50 problems", lambda: _harness_report().splitlines()),
    ("harness: side by side", lambda: [line for line in _side_report().splitlines() if line]),
]

SOURCES: list[Source] = [
    *held("with the `likelihood` verifier (threshold 0.3)", {"0.3": _likelihood_threshold}),
    *held(
        "target's 0.64, and `lr` with the likelihood verifier 0.62",
        {"0.64": lambda: _harness_cell("hf", 2), "0.62": lambda: _harness_cell("lr-likelihood", 2)},
    ),
    *held(
        "- `auto` took 2.67x less time a problem than `hf`",
        {
            "2.67x": lambda: _side_spread("auto", _HF)[0],
            "2.28": lambda: _side_spread("auto", _HF)[1],
            "3.35x": lambda: _side_spread("auto", _HF)[2],
            "2.75x": lambda: _side_spread("auto", _AR)[0],
        },
    ),
    *held(
        "less than `ar` (2.25-3.26x)",
        {
            "2.25": lambda: _side_spread("auto", _AR)[1],
            "3.26x": lambda: _side_spread("auto", _AR)[2],
            "0.99x": lambda: _side_spread("ar", _HF)[0],
        },
    ),
    *held(
        "(0.88-1.12x), although on the 50 problems timed hours apart it looked 1.1x faster",
        {
            "0.88": lambda: _side_spread("ar", _HF)[1],
            "1.12x": lambda: _side_spread("ar", _HF)[2],
            "1.1x": lambda: _harness_cell("hf", 6) / _harness_cell("ar", 6),
        },
    ),
    *held(
        "`hf`'s time over `lr`'s is 0.92x with `exact` and",
        {"0.92x": lambda: _side_spread("lr-exact", _HF)[0], "0.93x": lambda: _side_spread("lr-likelihood", _HF)[0]},
    ),
]


# ------------------------------------------------------------------------------------------ vLLM

_VLLM, _VLLM_SD = "engine-vllm-avx2-cpu.jsonl", "engine-vllm-sd-avx2-cpu.jsonl"
_VLLM_LRSD = "engine-vllm-lrsd-avx2-cpu.jsonl"
_SCALE = "engine-vllm-scale-{}-avx2-cpu.jsonl"


def _near_tie() -> float:
    """The nats within which the engine tests let a first difference from the engine's greedy text pass."""
    from test_engine_real import NEAR_TIE

    return NEAR_TIE


SOURCES += [
    *held(
        "| `ar` (vLLM's plain decoding) | 2.92 | 1.00x |",
        {"2.92": lambda: tps(_VLLM, "ar"), "1.00x": lambda: speedup(_VLLM, "ar")},
    ),
    *held(
        "alpha1 0.00 (median; `exact` kept 1 of the 14 drafted steps judged)",
        {
            "2.13": lambda: tps(_VLLM, "lr@k2"),
            "0.73x": lambda: speedup(_VLLM, "lr@k2"),
            "0.69": lambda: min(per_problem(_VLLM, "lr@k2")),
            "0.84x": lambda: max(per_problem(_VLLM, "lr@k2")),
            "0.00": lambda: mode_row(_VLLM, "lr@k2").alpha1,
        },
    ),
    *held(
        "cycles on 700; `ar@c256` alone on 701 and 702",
        {
            "2.73": lambda: tps(_VLLM, "auto"),
            "0.93x": lambda: speedup(_VLLM, "auto"),
            "0.92": lambda: min(per_problem(_VLLM, "auto")),
            "1.08x": lambda: max(per_problem(_VLLM, "auto")),
        },
    ),
    *held(
        "predicted over realised speed per problem 1.06 (median; 1.01-1.12)",
        {
            "1.06": lambda: planner(_VLLM),
            "1.01": lambda: min(planner_ratios(_VLLM)),
            "1.12": lambda: max(planner_ratios(_VLLM)),
        },
    ),
    *held(
        "| `ar` | 3.44 | 1.00x | - |", {"3.44": lambda: tps(_VLLM_SD, "ar"), "1.00x": lambda: speedup(_VLLM_SD, "ar")}
    ),
    *held(
        "| `sd` (vLLM, draft model) |", {"2.51": lambda: tps(_VLLM_SD, "sd"), "0.73x": lambda: speedup(_VLLM_SD, "sd")}
    ),
    *held(
        "| `ngram` (vLLM, prompt lookup) |",
        {"1.19": lambda: tps(_VLLM_SD, "ngram"), "0.35x": lambda: speedup(_VLLM_SD, "ngram")},
    ),
    *held(
        "the server's SD alone 2.30 tok/s, `lr-sd@k2` 1.63 tok/s (0.71x)",
        {
            "2.30": lambda: tps(_VLLM_LRSD, "sd"),
            "1.63": lambda: tps(_VLLM_LRSD, "lr-sd@k2"),
            "0.71x": lambda: speedup(_VLLM_LRSD, "lr-sd@k2", "sd"),
        },
    ),
    *held(
        "16.53 tok/s (median; its Q4 weights wrote another text on problem 700)",
        {"16.53": lambda: tps(_SCALE.format("llamacpp"), "ar"), "2.91": lambda: tps(_SCALE.format("torch"), "ar")},
    ),
    *held("(top-2 within 0.5 nats)", {"0.5": _near_tie}),
]


# ------------------------------------------------------------------------------------------ the verifiers

_E2E, _E2E_LIKELIHOOD, _FLOOR = "e2e-llamacpp.jsonl", "e2e-llamacpp-likelihood@0.3.jsonl", "floor-llamacpp-avx512.jsonl"
_FIDELITY = "fidelity30-fp32-cpu.jsonl"  # lr (k 2) with embedding-numbers on GSM8K train 200-229


def _bank_row(verifier: str) -> str:
    """A row of the bank table: acceptance on the bank, flips among the non-exact pairs continued, answers kept."""
    row = harm()[verifier]
    rate = f"{row.rate:.1%} ({row.low * 100:.1f}-{row.high:.1%})" if row.continued else "-"
    default = verifier == f"likelihood@{DEFAULT_THRESHOLDS['min-prob']}"
    return cells(
        f"`{verifier}`" + " (default threshold)" * default,
        f"{bank_share(verifier):.1%}",
        str(row.continued),
        str(row.flips),
        rate,
        f"{row.retention:.1%}",
    )


def _kept_bar() -> float:
    """The share of answers a verifier must be predicted to keep, as notebook 13's rule writes it."""
    notebook = (ROOT / "notebooks" / "13_what_a_verifier_costs.ipynb").read_text(encoding="utf-8")
    return float(re.search(r"retention >= ([0-9.]+)", notebook).group(1))


def _runs(name: str, mode: str = "lr@k2") -> list[dict]:
    return [r for r in records(name) if r["mode"] == mode]


def _keeps(run: dict, base: str = _E2E) -> bool:
    """Whether a run gave the answer ``ar`` gave on its problem (``ar`` of file ``base``)."""
    ar = {r["problem_id"]: r["predicted"] for r in _runs(base, "ar")}
    return same_answer(run["predicted"], ar[run["problem_id"]])


def alpha1_pooled(name: str, mode: str = "lr@k2") -> tuple[int, int]:
    """(steps accepted, steps judged) over a file's runs of ``mode``."""
    return (
        sum(r.get("accepted_steps") or 0 for r in _runs(name, mode)),
        sum(r.get("judged_pairs") or 0 for r in _runs(name, mode)),
    )


def _alpha1_share(name: str) -> float:
    accepted, judged = alpha1_pooled(name)
    return accepted / judged


def _e2e_row(label: str, name: str, mode: str, base: str = _E2E, timed: bool = True) -> str:
    """A row of the end-to-end table: answers kept against ``base``'s ``ar``, right answers, the pooled alpha1,
    and for the timed runs tokens per target request and the median tokens a second."""
    runs = _runs(name, mode)
    accepted, judged = alpha1_pooled(name, mode)
    kept = "-" if mode == "ar" else f"{sum(_keeps(r, base) for r in runs)}/{len(runs)}"
    alpha1 = f"{accepted / judged:.3f} ({accepted}/{judged})" if judged else "-"
    speed = [f"{statistics.mean(tokens_per_target_request(r) for r in runs):.1f}", f"{tps(name, mode):.2f}"]
    return "  " + cells(
        label, kept, f"{sum(r['correct'] for r in runs)}/{len(runs)}", alpha1, *(speed if timed else ["-", "-"])
    )


def _own_steps_only(kept_foreign: bool) -> list[dict]:
    """The likelihood runs that kept drafted steps of their own (or kept only the target's)."""
    return [r for r in _runs(_E2E_LIKELIHOOD) if (kept_foreign_steps(r) > 0) == kept_foreign]


def _share_kept(runs: list[dict], base: str = _E2E) -> float:
    return sum(_keeps(r, base) for r in runs) / len(runs)


def _predicted_kept(verifier: str, steps: float) -> float:
    """(1 - flip rate) ^ (foreign steps kept per run)."""
    return (1 - harm()[verifier].rate) ** steps


def _predicted_foreign() -> float:
    """What the flip rate of ``likelihood@0.3`` predicts the runs that kept drafted steps of their own keep."""
    return _predicted_kept("likelihood@0.3", statistics.mean(map(kept_foreign_steps, _own_steps_only(True))))


def _minutes_a_problem(*names: str) -> float:
    """The runs' own seconds over their files, in minutes a problem."""
    runs = [r for name in names for r in records(name)]
    return sum(r["wall_time_s"] for r in runs) / len({r["problem_id"] for r in runs}) / 60


TABLES += [
    (
        "verifiers: the bank and the flips",
        lambda: [
            _bank_row(v)
            for v in (
                "exact",
                "embedding@0.85",
                "embedding@0.95",
                "embedding-numbers",
                "likelihood@0.1",
                "likelihood@0.2",
                "likelihood@0.3",
                "likelihood@0.4",
                "likelihood-numbers@0.3",
            )
        ],
    ),
    (
        "verifiers: end to end over llama.cpp",
        lambda: [
            _e2e_row("`ar`", _E2E, "ar"),
            _e2e_row("`lr` `exact`", _E2E, "lr@k2"),
            _e2e_row("`lr` `likelihood@0.3`", _E2E_LIKELIHOOD, "lr@k2"),
            _e2e_row("floor: `ar` run again", _FLOOR, "ar-again", _FLOOR, timed=False),
            _e2e_row("floor: `ar` beside a second request", _FLOOR, "ar-batched", _FLOOR, timed=False),
        ],
    ),
]


SOURCES += [
    *held("| verifier | bank accepted |", {"95%": lambda: math.erf(Z95 / math.sqrt(2))}),  # the interval's cover
    *held("accepts no pair with other numbers and flips 16.0%", {"16.0%": lambda: harm()["embedding-numbers"].rate}),
    *held("below) kept 1.70 drafted steps per problem", {"1.70": lambda: foreign_steps(_FIDELITY, "lr")}),
    *held(
        "on its cycle log); (1 - 0.160) ^ 1.70 predicts 74%",
        {
            "0.160": lambda: harm()["embedding-numbers"].rate,
            "1.70": lambda: foreign_steps(_FIDELITY, "lr"),
            "74%": lambda: _predicted_kept("embedding-numbers", foreign_steps(_FIDELITY, "lr")),
            "82%": lambda: (1 - harm()["embedding-numbers"].low) ** foreign_steps(_FIDELITY, "lr"),
        },
    ),
    *held("and the run kept 22 of 30 (73%)", {"73%": lambda: _share_kept(_runs(_FIDELITY, "lr"), _FIDELITY)}),
    *held("whose predicted answers kept stay >= 90%", {"90%": _kept_bar}),
    *held("1.45x `exact`'s acceptance", {"1.45x": lambda: bank_share("likelihood@0.3") / bank_share("exact")}),
    *held(
        "it keeps 98% predicted at 23.9%",
        {
            "98%": lambda: harm()["likelihood-numbers@0.3"].retention,
            "23.9%": lambda: bank_share("likelihood-numbers@0.3"),
        },
    ),
    *held("minutes a problem for the three runs", {"3.2": lambda: _minutes_a_problem(_E2E, _E2E_LIKELIHOOD)}),
    *held(
        "`likelihood@0.3` accepts 1.61x what `exact` accepts",
        {"1.61x": lambda: _alpha1_share(_E2E_LIKELIHOOD) / _alpha1_share(_E2E)},
    ),
    *held(
        "`exact` does (82% against 84%). Neither reaches 90%",
        {"82%": lambda: _share_kept(_runs(_E2E_LIKELIHOOD)), "84%": lambda: _share_kept(_runs(_E2E)), "90%": _kept_bar},
    ),
    *held(
        "simply run again, keeps 86% of its answers, and 82% beside",
        {
            "86%": lambda: _share_kept(_runs(_FLOOR, "ar-again"), _FLOOR),
            "82%": lambda: _share_kept(_runs(_FLOOR, "ar-batched"), _FLOOR),
        },
    ),
    *held(
        "only the target's own steps kept 28 of 31 answers (90%: the engine's share)",
        {"90%": lambda: _share_kept(_own_steps_only(False))},
    ),
    *held(
        "steps of their own kept 13 (68%), where the flip rate predicts 82%, 74%",
        {
            "68%": lambda: _share_kept(_own_steps_only(True)),
            "82%": _predicted_foreign,
            "74%": lambda: _predicted_foreign() * _share_kept(_own_steps_only(False)),
        },
    ),
    *held("no verifier meets all three bars (an alpha1 at which the step layer pays, 90% kept", {"90%": _kept_bar}),
]


# ------------------------------------------------------------------------------------------ the noise floor

_FLOORS = (
    "floor-llamacpp-avx512.jsonl",
    "floor-llamacpp-nocache-avx512.jsonl",
    "floor-vllm-avx512.jsonl",
    "floor-pytorch-bf16-avx512.jsonl",
    "floor-pytorch-float32-avx512.jsonl",
)
_NOCACHE, _BF16_RUNS = _FLOORS[1], ("auto-bf16-calibrated-cpu.jsonl", "engine-scale-pytorch-cpu.jsonl")
_SAME_ANSWER, _SAME_TEXT = 5, 6  # columns of fidelity_table


def _fidelity(names: tuple[str, ...], mode: str, column: int) -> float:
    """A cell of ``report``'s fidelity table of the files put together."""
    return float(_rows(fidelity_table([r for name in names for r in records(name)]))[mode][column])


def _cache_off(mode: str) -> list[float]:
    """``mode``'s tokens a second with llama.cpp's prompt cache off over with it on, problem by problem."""
    return per_problem("prompt-cache-off-avx512.jsonl", mode, mode, other="prompt-cache-on-avx512.jsonl")


TABLES += [
    (f"noise floor: {name}", lambda name=name: fidelity_table(list(records(name))).splitlines()) for name in _FLOORS
]

SOURCES += [
    *held(
        "(the end-to-end run above): 0.84 and 0.42, inside the floor (0.82-0.86",
        {
            "0.84": lambda: _fidelity((_E2E,), "lr@k2", _SAME_ANSWER),
            "0.42": lambda: _fidelity((_E2E,), "lr@k2", _SAME_TEXT),
            "0.82": lambda: _fidelity((_FLOOR,), "ar-batched", _SAME_ANSWER),
            "0.86": lambda: _fidelity((_FLOOR,), "ar-again", _SAME_ANSWER),
            "0.38": lambda: _fidelity((_FLOOR,), "ar-batched", _SAME_TEXT),
            "0.50": lambda: _fidelity((_FLOOR,), "ar-again", _SAME_TEXT),
        },
    ),
    *held(
        "is held to 0.92 of `ar`'s answers and 0.40 of its texts",
        {
            "0.92": lambda: _fidelity((_NOCACHE,), "ar-batched", _SAME_ANSWER),
            "0.40": lambda: _fidelity((_NOCACHE,), "ar-batched", _SAME_TEXT),
        },
    ),
    *held("`ar` ran at 0.91 of its", {"0.91": lambda: median(_cache_off("ar"))}),
    *held(
        "cache-on speed (median of the per-problem ratios, 0.75-1.53) and `lr@k2` with `exact` at 0.73",
        {
            "0.75": lambda: min(_cache_off("ar")),
            "1.53": lambda: max(_cache_off("ar")),
            "0.73": lambda: median(_cache_off("lr@k2")),
            "0.49": lambda: min(_cache_off("lr@k2")),
            "0.88": lambda: max(_cache_off("lr@k2")),
        },
    ),
    *held(
        "its text on 11 (0.90 and 0.55;",
        {
            "0.90": lambda: _fidelity(_BF16_RUNS, "auto", _SAME_ANSWER),
            "0.55": lambda: _fidelity(_BF16_RUNS, "auto", _SAME_TEXT),
        },
    ),
    *held(
        "`sd@g12` on 10 of 10 and 7 of 10, against 0.90 of the",
        {"0.90": lambda: _fidelity((_FLOORS[3],), "ar-batched", _SAME_ANSWER)},
    ),
    *held("answers and 0.50 of the texts here.", {"0.50": lambda: _fidelity((_FLOORS[3],), "ar-batched", _SAME_TEXT)}),
]

# ------------------------------------------------------------------- lr over llama.cpp with the prompt cache off

_OFF, _OFF_LIKELIHOOD = "e2e-llamacpp-nocache-avx512.jsonl", "e2e-llamacpp-nocache-avx512-likelihood@0.3.jsonl"
_FLOOR_OFF = "floor-llamacpp-nocache-avx512.jsonl"


def _off_problems() -> set[str]:
    """The problems the cache-off ``lr`` runs finished (every run of both files)."""
    return {r["problem_id"] for r in records(_OFF) if r["mode"] == "ar"}


def _off_runs(name: str, mode: str) -> list[dict]:
    return [r for r in _runs(name, mode) if r["problem_id"] in _off_problems()]


def _kept_of_ar(name: str, mode: str, base: str = _OFF) -> tuple[int, int, int]:
    """(same answer, same text, runs) of ``mode`` against ``base``'s ``ar`` on the cache-off runs' problems."""
    ar = {r["problem_id"]: r for r in _runs(base, "ar")}
    runs = _off_runs(name, mode)
    answers = sum(same_answer(r["predicted"], ar[r["problem_id"]]["predicted"]) for r in runs)
    return answers, sum(r["text"] == ar[r["problem_id"]]["text"] for r in runs), len(runs)


def _off_row(label: str, name: str, mode: str, base: str = _OFF) -> str:
    """A row of the cache-off table: answers and texts kept of ``base``'s ``ar``, right answers, pooled alpha1,
    and tokens per target request."""
    runs = _off_runs(name, mode)
    answers, texts, n = _kept_of_ar(name, mode, base)
    accepted = sum(r.get("accepted_steps") or 0 for r in runs)
    judged = sum(r.get("judged_pairs") or 0 for r in runs)
    kept = ["-", "-"] if mode == "ar" else [f"{answers}/{n}", f"{texts}/{n}"]
    per_request = [t for t in map(tokens_per_target_request, runs) if t is not None]
    return cells(
        label,
        *kept,
        f"{sum(r['correct'] for r in runs)}/{n}",
        f"{accepted / judged:.3f} ({accepted}/{judged})" if judged else "-",
        f"{statistics.mean(per_request):.1f}" if per_request else "-",
    )


def _off_share(name: str, mode: str, what: int, base: str = _OFF) -> float:
    """The share of runs that kept ``base``'s ``ar``'s answer (``what`` 0) or text (1)."""
    kept = _kept_of_ar(name, mode, base)
    return kept[what] / kept[2]


TABLES += [
    (
        "noise floor: lr over llama.cpp with the prompt cache off",
        lambda: [
            _off_row("`ar`", _OFF, "ar"),
            _off_row("`lr` `exact`", _OFF, "lr@k2"),
            _off_row("`lr` `likelihood@0.3`", _OFF_LIKELIHOOD, "lr@k2"),
            _off_row("floor: `ar` beside a second request", _FLOOR_OFF, "ar-batched", _FLOOR_OFF),
        ],
    ),
]


def _stated(context: str, written_as: str, value: Callable[[], float]) -> Source:
    """A source for a figure the log writes as ``written_as`` is written ("0.00"): the figure is what the files give
    now, so the log must state exactly that on the line with ``context``."""
    return (context, like(written_as, value()), lambda: like(written_as, value()))


SOURCES += [
    _stated("`lr` with `exact` kept `ar`'s answer on a share of", "0.00", lambda: _off_share(_OFF, "lr@k2", 0)),
    _stated("of them and its text on a share of", "0.00", lambda: _off_share(_OFF, "lr@k2", 1)),
    _stated("with `likelihood@0.3`, answers", "0.00", lambda: _off_share(_OFF_LIKELIHOOD, "lr@k2", 0)),
    _stated("with `likelihood@0.3`, answers", "0.00", lambda: _off_share(_OFF_LIKELIHOOD, "lr@k2", 1)),
    _stated(
        "`ar` beside a second request, on the same problems:",
        "0.00",
        lambda: _off_share(_FLOOR_OFF, "ar-batched", 0, _FLOOR_OFF),
    ),
    _stated(
        "`ar` beside a second request, on the same problems:",
        "0.00",
        lambda: _off_share(_FLOOR_OFF, "ar-batched", 1, _FLOOR_OFF),
    ),
]


HELD: list[str] = [
    "Through lm-evaluation-harness: the target alone against the library (avx512_bf16 CPU)",
    "Lookahead Reasoning over vLLM (AVX2-only CPU)",
    "Verifiers judged by the target's likelihood, and what accepted steps do to the answer (AVX2-only CPU)",
    "The noise floor: what a runtime changes with nothing but the batch",
]
