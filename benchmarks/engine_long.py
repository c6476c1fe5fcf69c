"""Reasoning-length runs over llama.cpp's server: what decoding costs as the answer grows.

    .venv/bin/python benchmarks/engine_long.py --out benchmarks/results/engine-long-cpu.jsonl \
        --offset 500 --limit 10 --bundle 8 --max-new-tokens 2048 --modes ar,auto

GSM8K answers are short (300-500 tokens), so each prompt here bundles ``--bundle`` consecutive
problems ("solve them one after another"): the model writes one long chain of steps, as a reasoning
model does on a hard problem. Every record carries a timeline (tokens so far, seconds) after each
request (``ar`` decodes in requests of ``--window`` tokens that continue the ids so far; the engine's
prefix cache keeps the resent prefix cheap) or each cycle (LR modes, ``auto``). The plot draws tok/s in
windows of ``--window`` tokens against the position in the answer, the median over prompts per mode.
The run resumes from --out; ``--plot-only`` redraws from it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

INSTRUCTION = ("Solve the following {n} problems one after another. For each problem, reason step by step "
               "and give its final answer in \\boxed{{}} before moving on to the next one.")


def bundles(dataset: str, offset: int, limit: int, size: int) -> Path:
    """A JSON-lines file of ``limit`` prompts, each ``size`` consecutive problems from ``offset`` on;
    the answer is the last problem's. The same arguments always give the same file (and problem ids)."""
    lines = Path(dataset).read_text(encoding="utf-8").splitlines()
    out = Path(tempfile.gettempdir()) / "lookahead-bundles" / f"gsm8k-o{offset}-b{size}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(limit):
        group = [json.loads(line) for line in lines[offset + i * size: offset + (i + 1) * size]]
        text = "\n\n".join(f"Problem {j + 1}: {p['question']}" for j, p in enumerate(group))
        rows.append({"question": INSTRUCTION.format(n=len(group)) + "\n\n" + text, "answer": group[-1]["answer"]})
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out


def window_rates(timeline: list[list[float]], window: int, tokens: int) -> list[float]:
    """tok/s in each full window of ``window`` tokens, reading the time at each window's edge off the
    timeline (linear between its points: cycles do not end on the edges)."""
    points = np.array([[0.0, 0.0]] + [list(p) for p in timeline], dtype=float)
    edges = np.arange(0, tokens + 1, window, dtype=float)
    seconds = np.interp(edges, points[:, 0], points[:, 1])
    return [float(window / dt) if dt > 0 else float("nan") for dt in np.diff(seconds)]


def plot(records: list[dict], window: int, path: Path) -> dict[str, list[float]]:
    """Median tok/s per window, per mode, drawn with the quartiles; returns the medians."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    medians: dict[str, list[float]] = {}
    for mode in sorted({r["mode"] for r in records}):
        rates = [window_rates(r["timeline"], window, r["new_tokens"]) for r in records if r["mode"] == mode]
        # a window's median over the prompts whose answer reached it, while at least half of them did
        reached = [[x[w] for x in rates if len(x) > w] for w in range(max(len(x) for x in rates))]
        reached = [v for v in reached if 2 * len(v) >= len(rates)]
        centres = (np.arange(len(reached)) + 0.5) * window
        medians[mode] = [round(float(np.median(v)), 2) for v in reached]
        ax.plot(centres, medians[mode], marker="o", label=f"{mode} ({len(rates)} prompts)")
        ax.fill_between(centres, [np.percentile(v, 25) for v in reached], [np.percentile(v, 75) for v in reached],
                        alpha=0.2)
    ax.set_xlabel(f"position in the answer (tokens; windows of {window})")
    ax.set_ylabel("tokens / s in the window")
    ax.set_ylim(bottom=0)
    ax.set_title("Decoding speed over a long answer, llama-server on a 2-core CPU")
    ax.legend()
    fig.text(0.01, 0.01, "Median and quartiles over the prompts whose answer reached the window (drawn while at "
             "least half did). Each prompt bundles GSM8K problems.", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    return medians


def summary(records: list[dict]) -> None:
    """Median tok/s per mode and its ratio to ``ar`` (ratio of medians)."""
    rates = {m: float(np.median([r["tokens_per_s"] for r in records if r["mode"] == m]))
             for m in sorted({r["mode"] for r in records})}
    tokens = {m: int(np.median([r["new_tokens"] for r in records if r["mode"] == m])) for m in rates}
    for mode, rate in rates.items():
        ratio = f"{rate / rates['ar']:.2f}x ar" if "ar" in rates else ""
        print(f"{mode:>8}: {rate:6.2f} tok/s median, {tokens[mode]} tokens median  {ratio}")


def main() -> int:
    from engine_run import servers

    from lookahead_reasoning.bench.results import read_records
    from lookahead_reasoning.bench.engine import EngineBench, run_engine_bench

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--dataset", default=str(ROOT.parent / "shared/data/gsm8k/train.jsonl"))
    p.add_argument("--offset", type=int, default=500)
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--bundle", type=int, default=8, help="GSM8K problems per prompt")
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--modes", default="ar,auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--plot-only", action="store_true")
    args = p.parse_args()
    out = Path(args.out)
    if not args.plot_only:
        data = bundles(args.dataset, args.offset, args.limit, args.bundle)
        with servers(args.modes, args.threads, parallel=4, context=16384) as urls:
            run_engine_bench(EngineBench(str(data), str(out), **urls, modes=args.modes,
                                         max_new_tokens=args.max_new_tokens, window=args.window))
    records = [r for r in read_records(out) if r.get("timeline")]
    medians = plot(records, args.window, out.with_suffix(".png"))
    summary(records)
    print(json.dumps({"tok/s per window (medians)": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
