"""What a ``gpu_compiled.py`` run measured, read on any machine: tables, the planner's predictions, a map.

    python benchmarks/gpu_report.py benchmarks/results/gpu-compiled-h100.json --plot benchmarks/results/gpu-compiled-h100.png

1. Greedy AR per shape: eager against the compiled path, and the memory-bandwidth time of one token
   (bf16 weights read once at ``--bandwidth`` bytes/s).
2. T(R, n) on the compiled path and beta(R) = T(R, n) / T(1, n).
3. Per (target, draft) pair: the draft's c = T_d(1, 1) / T(1, 1), eager and compiled.
4. The cost model against the realised cycles: each mode's run, its forwards priced by the measured
   T(R, n) (``planning.costs.CostGrid``) and summed, against the run's wall time.
5. The planner's predicted speedups over ``ar`` (``planning.planner.Planner``: the theory's costed cycle
   formulas on the measured tables) of the best ``sd``, ``lr`` and ``lr-sd`` plans, at the offline pair's
   measured acceptance and at the paper's step acceptance, and the plan mode ``auto`` would pick.
6. The map: the step acceptance alpha1 above which an LR plan beats every plan without drafted steps,
   per target size, eager and compiled (``--plot``).

Given the file of a ``gpu_schedules.py`` call instead, it prints that call's tables (``gpu_schedules.py --report``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lookahead_reasoning.planning.costs import CostGrid, CostTable
from lookahead_reasoning.planning.estimates import Beta, Book, Mean, StepBook, TokenBook
from lookahead_reasoning.planning.planner import Planner, PlannerConfig
from lookahead_reasoning.testing import REAL_SHAPES, REAL_VOCABS

DRAFT = "qwen2.5-coder-0.5b"
TARGETS = ("qwen2.5-coder-1.5b", "qwen2.5-7b", "qwen2.5-32b")
# Acceptance (notebook 10, section 5: auto-bf16-cpu.jsonl): the offline pair's token alpha (accepted / judged),
# its step alpha1 with the exact verifier, and its steps' length; the paper's alpha1 (GSM8K, 7B judge,
# R1-Distill 1.5B -> 32B).
OFFLINE = {"alpha": 0.90, "alpha1": 0.40, "step_tokens": 41.0}
PAPER_ALPHA1 = 0.63
CONTEXT = 300  # cached tokens the planner prices at (the measured tables are at 256)
H100_BANDWIDTH = 3.35e12


def weight_bytes(name: str) -> float:
    """bf16 bytes a decoded token reads: every layer's weights and the output layer (untied, as drawn)."""
    s = REAL_SHAPES[name]
    h, kv = s["hidden"], s["hidden"] // s["heads"] * s["kv_heads"]
    layer = h * h * 2 + h * kv * 2 + 3 * h * s["intermediate"]
    return 2.0 * (s["layers"] * layer + REAL_VOCABS[name] * h)


def grid(points: dict[str, dict[str, float]]) -> CostGrid:
    return CostGrid({int(r): {int(n): s for n, s in row.items()} for r, row in points.items()}, prefix=256)


def book(alpha: float, alpha1: float, step_tokens: float, cycle_overhead: float = 0.0) -> Book:
    """A book that prices every plan at these rates (the same alpha at every draft confidence)."""
    step = StepBook(alpha1=Beta(alpha1 * 100, (1 - alpha1) * 100),
                    bands=[Beta(alpha1 * 100, (1 - alpha1) * 100) for _ in range(5)],
                    target_tokens=Mean(step_tokens, 100.0), draft_tokens=Mean(step_tokens, 100.0),
                    agreement=Mean(0.0, 100.0), verify_s=Mean(0.0, 100.0), cycle_overhead=Mean(cycle_overhead, 100.0))
    return Book(TokenBook.from_rates(0.7, alpha, alpha), step)


CONFIG = PlannerConfig(gammas=(4, 6, 8, 12), row_gammas=(0, 4, 8, 12), draft_stop_below_choices=(), margin=0.0,
                       learn=False, refine=False, progress=False)


def best_by_kind(costs: CostTable, rates: Book) -> dict[str, tuple[str, float]]:
    """The fastest plan of each kind (ar, sd, lr, lr-sd) and its predicted tokens/s."""
    planner = Planner(costs, rates, CONFIG, draft_stop_below=None)
    best: dict[str, tuple[str, float]] = {}
    for plan in planner.candidates():
        kind = "ar" if plan.k == 0 and plan.gamma == 0 else "sd" if plan.k == 0 else "lr" if plan.gamma == 0 else "lr-sd"
        rate = planner.rate(plan, CONTEXT)
        if kind not in best or rate > best[kind][1]:
            best[kind] = (plan.label, rate)
    return best


def pays_above(costs: CostTable, alpha: float, step_tokens: float) -> float | None:
    """The smallest alpha1 (to 0.01) at which an LR plan is predicted faster than every plan without drafted steps."""
    for i in range(1, 100):
        best = best_by_kind(costs, book(alpha, i / 100, step_tokens))
        alone = max(best["ar"][1], best["sd"][1])
        if max(best["lr"][1], best["lr-sd"][1]) > alone:
            return i / 100
    return None


def realised(run: dict[str, Any], target: CostGrid, draft: CostGrid) -> tuple[float, float]:
    """(the run's forwards priced by the tables, the seconds the library measured in them), summed."""
    priced = measured = 0.0
    for who, rows, n, cached, seconds in run["forwards"]:
        table = target if who == "target" else draft
        priced += table(rows, n, cached) if n <= 32 else seconds  # prefill: no grid point; take what it took
        measured += seconds
    return priced, measured


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result")
    ap.add_argument("--bandwidth", type=float, default=H100_BANDWIDTH, help="bytes/s of the GPU's memory")
    ap.add_argument("--plot", help="write the map of where the step layer pays here (PNG)")
    args = ap.parse_args()
    data = json.load(open(args.result, encoding="utf-8"))
    if "contexts" in data:  # a gpu_schedules.py call's file: the tables its --report prints
        from gpu_schedules import SCHEDULES, print_report

        print_report(data, SCHEDULES)
        return
    shapes = {n: s for n, s in data["shapes"].items() if "points" in s}
    print(f"{data['env'].get('name', data['env']['device'])}, torch {data['env']['torch']}, "
          f"transformers {data['env']['transformers']}, backend {data['backend']}\n")

    print("| shape | eager AR ms/token | compiled AR ms/token | speedup | inductor+graphs | bandwidth time | compiled / bandwidth |")
    print("|---|---|---|---|---|---|---|")
    for name, s in shapes.items():
        floor = weight_bytes(name) / args.bandwidth * 1e3
        ind = data.get("inductor", {}).get(name, {}).get("ar_ms") if isinstance(data.get("inductor"), dict) else None
        print(f"| {name} | {s['eager_ar_ms']:.1f} | {s['compiled_ar_ms']:.2f} | {s['eager_ar_ms'] / s['compiled_ar_ms']:.1f}x | "
              f"{f'{ind:.2f}' if ind else '-'} | {floor:.2f} | {s['compiled_ar_ms'] / floor:.1f}x |")

    print("\nT(R, n) on the compiled path, ms (256 cached tokens); beta(R) = T(R, n) / T(1, n)")
    for name, s in shapes.items():
        p = {int(r): {int(n): v for n, v in row.items()} for r, row in s["points"].items()}
        worst = max(p[r][n] / p[1][n] for r in p if r <= 4 for n in p[r] if n <= 13)
        print(f"- {name}: T(1,1) {p[1][1] * 1e3:.2f}, T(1,13) {p[1][13] * 1e3:.2f}, T(4,1) {p[4][1] * 1e3:.2f}, "
              f"T(4,13) {p[4][13] * 1e3:.2f}, T(8,16) {p[8][16] * 1e3:.2f}; beta(R <= 4, n <= 13) <= {worst:.2f}; "
              f"beta(8, 16) {p[8][16] / p[1][16]:.2f}")

    if DRAFT not in shapes:
        return
    d_compiled, d_eager = grid(shapes[DRAFT]["points"]), grid(shapes[DRAFT]["eager_points"])
    print("\n| target (draft 0.5B) | c eager | c compiled | mode | tok/s | forwards priced / wall | measured in forwards / wall |")
    print("|---|---|---|---|---|---|---|")
    for name in TARGETS:
        if name not in shapes:
            continue
        t_compiled, t_eager = grid(shapes[name]["points"]), grid(shapes[name]["eager_points"])
        c_eager, c_compiled = d_eager(1, 1) / t_eager(1, 1), d_compiled(1, 1) / t_compiled(1, 1)
        runs = data.get("cycles", {}).get(name, {}).get("runs", [])
        for i, run in enumerate(runs):
            priced, measured = realised(run, t_compiled, d_compiled)
            lead = f"| {name} | {c_eager:.2f} | {c_compiled:.2f} |" if i == 0 else "| | | |"
            print(f"{lead} {run['mode']} | {run['tokens'] / run['wall_s']:.1f} | {priced / run['wall_s']:.2f} | "
                  f"{measured / run['wall_s']:.2f} |")

    print("\nPredicted speedup over ar (the planner's costed formulas on the measured tables; context 300)")
    print("| target (draft 0.5B) | path | rates | best sd | best lr | best lr-sd | auto picks |")
    print("|---|---|---|---|---|---|---|")
    scenarios = {"offline pair (alpha 0.90, alpha1 0.40)": (OFFLINE["alpha"], OFFLINE["alpha1"]),
                 f"paper's alpha1 {PAPER_ALPHA1} (alpha 0.90)": (OFFLINE["alpha"], PAPER_ALPHA1)}
    thresholds: dict[str, dict[str, float | None]] = {"eager": {}, "compiled": {}}
    for name in TARGETS:
        if name not in shapes:
            continue
        tables = {"eager": CostTable(grid(shapes[name]["eager_points"]), d_eager),
                  "compiled": CostTable(grid(shapes[name]["points"]), d_compiled)}
        for path, costs in tables.items():
            for label, (alpha, alpha1) in scenarios.items():
                best = best_by_kind(costs, book(alpha, alpha1, OFFLINE["step_tokens"]))
                ar = best["ar"][1]
                pick = max(best.values(), key=lambda b: b[1])[0]
                print(f"| {name} | {path} | {label} | {best['sd'][1] / ar:.2f}x `{best['sd'][0]}` | "
                      f"{best['lr'][1] / ar:.2f}x `{best['lr'][0]}` | {best['lr-sd'][1] / ar:.2f}x `{best['lr-sd'][0]}` | `{pick}` |")
            thresholds[path][name] = pays_above(costs, OFFLINE["alpha"], OFFLINE["step_tokens"])
    print("\nalpha1 above which an LR plan beats every plan without drafted steps (alpha 0.90, 41-token steps):")
    for path, rows in thresholds.items():
        print(f"- {path}: " + ", ".join(f"{n} {'never' if v is None else v}" for n, v in rows.items()))

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for path, style in (("eager", "o--"), ("compiled", "s-")):
            xs = [weight_bytes(n) / 2e9 for n in thresholds[path]]
            ys = [1.0 if v is None else v for v in thresholds[path].values()]
            ax.plot(xs, ys, style, label=f"{path}: LR pays above this alpha1")
        ax.axhline(OFFLINE["alpha1"], color="gray", lw=1, ls=":")
        ax.text(1.3, OFFLINE["alpha1"] + 0.01, "offline pair, exact verifier (0.40)", fontsize=8, color="gray")
        ax.axhline(PAPER_ALPHA1, color="gray", lw=1, ls=":")
        ax.text(1.3, PAPER_ALPHA1 + 0.01, "paper, 7B judge (0.63)", fontsize=8, color="gray")
        ax.set_xscale("log")
        sizes = [weight_bytes(n) / 2e9 for n in TARGETS if n in shapes]
        ax.set_xticks(sizes, [f"{s:.1f}B" for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("target parameters (draft: the 0.5B's shape); 1.0 = never")
        ax.set_ylabel("step acceptance alpha1")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"Where the step layer pays ({data['env'].get('name', 'GPU')}, token alpha 0.90)", fontsize=10)
        ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"\nwrote {args.plot}")


if __name__ == "__main__":
    main()
