"""Redraw the per-run plots of committed benchmark runs, readable whatever the number of modes.

    .venv/bin/python benchmarks/plot_runs.py                                   # every results/*.jsonl with a *-plots/ folder
    .venv/bin/python benchmarks/plot_runs.py benchmarks/results/auto-bf16-cpu.jsonl

For ``RUN.jsonl`` it writes ``RUN-plots/``:

- ``speedup.png``: each mode's median tokens/s over ``ar``'s (the report's "ratio of medians"), the
  value written on every bar, mode names rotated so that long names never overlap;
- ``accept_hist.png``: for modes with token SD, the share of SD iterations that accepted 0, 1, ...
  drafted tokens (all problems pooled);
- ``predicted.png``: for modes the closed-form theory covers, the speedup predicted from the run's own
  measured rates (the report's "predicted" column, free parallelism assumed) against the measured one,
  every mode named in the legend rather than on the point.

The numbers are the ones ``lookahead-reasoning report RUN.jsonl`` prints; only the drawing differs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lookahead_reasoning.bench.report import load_results, summarize, summed_histogram

RESULTS = Path(__file__).resolve().parent / "results"


def draw(run: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = load_results(run)
    rows = summarize(records)
    out = run.with_name(run.stem + "-plots")
    out.mkdir(exist_ok=True)
    written: list[Path] = []
    title = run.stem

    fig, ax = plt.subplots(figsize=(max(5.5, 0.75 * len(rows) + 2), 4))
    names = [r.mode for r in rows]
    bars = ax.bar(range(len(rows)), [r.speedup_of_medians or 0 for r in rows], color="#4c72b0")
    ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_xticks(range(len(rows)), names, rotation=30, ha="right")
    ax.set_ylim(0, max(r.speedup_of_medians or 0 for r in rows) * 1.15)
    ax.set_ylabel("speedup over ar\n(ratio of median tokens/s)")
    ax.set_title(f"{title}: tokens/s against plain decoding", fontsize=10)
    fig.tight_layout()
    written.append(out / "speedup.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    hist_modes = [m for m in names if any(r.get("accept_histogram") for r in records if r["mode"] == m)]
    if hist_modes:
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for m in hist_modes:
            total = summed_histogram(records, m)
            s = sum(total) or 1
            ax.plot(range(len(total)), [c / s for c in total], marker="o", label=f"{m} ({s} iterations)")
        ax.set_xlabel("drafted tokens accepted in one SD iteration")
        ax.set_ylabel("share of iterations")
        ax.set_title(f"{title}: accepted drafted tokens per target forward", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(out / "accept_hist.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)

    pairs = [(r.predicted, r.speedup_of_medians, r.mode) for r in rows if r.predicted and r.speedup_of_medians]
    if pairs:
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        for (pred, meas, name), marker in zip(pairs, "osD^vP*Xh"):
            ax.scatter(pred, meas, s=60, marker=marker, label=f"{name}: predicted {pred:.2f}, measured {meas:.2f}")
        hi = max(max(p, m) for p, m, _ in pairs) * 1.1
        ax.plot([0, hi], [0, hi], color="grey", ls="--", lw=1, label="measured = predicted")
        ax.set_xlim(0, hi); ax.set_ylim(0, hi)
        ax.set_xlabel("predicted speedup (closed form, the run's own rates)")
        ax.set_ylabel("measured speedup")
        ax.set_title(f"{title}: theory against measurement", fontsize=10)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        written.append(out / "predicted.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="results files (default: every run with a plots folder)")
    args = parser.parse_args(argv)
    runs = args.runs or sorted(p for p in RESULTS.glob("*.jsonl") if p.with_name(p.stem + "-plots").is_dir())
    for run in runs:
        for path in draw(run):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
