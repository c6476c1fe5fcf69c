"""One picture of several benchmark runs side by side: each mode's speedup over ``ar`` per run (ratio
of medians, the report's number), and which plans mode ``auto`` ran in each.

Every bar is labelled with its value, written vertically so that neighbouring bars never overlap
(``ar`` is 1 by definition and is drawn as the dashed line, not as bars); both legends sit outside
the axes, under them.

    .venv/bin/python benchmarks/plot_regimes.py benchmarks/results/auto-onednn-cpu.jsonl:"float32, oneDNN linears" \
        benchmarks/results/auto-mkl-cpu.jsonl:"float32, default linears" --out benchmarks/results/auto-regimes.png
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from lookahead_reasoning.bench.report import load_results, summarize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="RESULTS.jsonl:label")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(Path(spec.partition(":")[0]), spec.partition(":")[2] or spec) for spec in args.runs]
    tables = [(label, load_results(path)) for path, label in runs]
    modes = [m for m in dict.fromkeys(row.mode for _, records in tables for row in summarize(records)) if m != "ar"]
    fig, (bars, mix) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 1.4]})
    width = 0.8 / len(tables)
    for i, (label, records) in enumerate(tables):
        speed = {row.mode: row.speedup_of_medians or 0.0 for row in summarize(records)}
        xs = [m + (i - (len(tables) - 1) / 2) * width for m in range(len(modes))]
        ran = [(x, speed[mode]) for x, mode in zip(xs, modes) if mode in speed]  # a run may skip modes
        drawn = bars.bar([x for x, _ in ran], [v for _, v in ran], width, label=label)
        bars.bar_label(drawn, fmt="%.2f", fontsize=7, rotation=90, padding=2)
    top = max((row.speedup_of_medians or 0.0) for _, records in tables for row in summarize(records))
    bars.set_ylim(0, top * 1.18)  # room for the vertical labels
    bars.axhline(1.0, color="grey", lw=1, ls="--", label="ar (1 by definition)")
    bars.set_xticks(range(len(modes)), modes, rotation=30, ha="right")
    bars.set_ylabel("speedup over ar (ratio of medians)")
    bars.set_title("tokens/s against plain decoding, same run")
    bars.legend(fontsize=8, ncol=min(3, len(tables) + 1), loc="upper center", bbox_to_anchor=(0.5, -0.28))
    kinds = ["ar", "sd", "lr", "lr-sd"]
    for i, (label, records) in enumerate(tables):
        counts: Counter[str] = Counter()
        for rec in records:
            if rec.get("mode", "").startswith("auto"):
                for plan, n in (rec.get("plans") or {}).items():
                    counts[plan.partition("@")[0]] += n
        total = sum(counts.values()) or 1
        left = 0.0
        for kind, color in zip(kinds, ("#999999", "#4c72b0", "#dd8452", "#55a868")):
            share = counts[kind] / total
            mix.barh(i, share, left=left, color=color, label=kind if i == 0 else None)
            left += share
    mix.set_yticks(range(len(tables)), [label for label, _ in tables], fontsize=8)
    mix.set_xlabel("share of auto's cycles")
    mix.set_title("plans auto chose")
    mix.set_xlim(0, 1)
    mix.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
