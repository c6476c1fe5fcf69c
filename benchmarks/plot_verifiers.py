"""Redraw the verifier figures of the step-pair bank, readable: acceptance against a harm proxy.

    .venv/bin/python benchmarks/plot_verifiers.py          # writes results/verifier-ablation.png and verifier-judges-20.png

``verifier-ablation.png``: every verifier that runs offline, scored again on all pairs of the bank,
``results/pairs-gsm8k.jsonl`` and ``results/pairs-gsm8k-llamacpp.jsonl`` (the embedding model is the
offline all-MiniLM-L6-v2; half a minute on two cores): the embedding verifier along its threshold,
``embedding-numbers`` along the same thresholds, and ``exact``; ``random`` and the cascade come from the committed table
``results/verifier-ablation.json`` (the random draws are the ones that run made). The harm proxy is
the share of accepted pairs whose two steps carry other numbers. ``verifier-judges-20.png``: the LLM
judges from ``results/verifier-judges-20.json`` (they need chat models, so they are not run here),
beside the offline verifiers on the same first 20 pairs.

Both figures name every verifier in a legend (no text placed on the data, so no label can overlap
another) and mark thresholds with small labels set off below the curve.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lookahead_reasoning.bench.ablation import load_pairs, numbers_differ
from lookahead_reasoning.verifiers import make_verifier

RESULTS = Path(__file__).resolve().parent / "results"
THRESHOLDS = np.round(np.arange(0.50, 1.0001, 0.025), 3)
SHOWN = (0.6, 0.8, 0.85, 0.9, 0.95)


def _point(accepted: np.ndarray, differ: np.ndarray) -> tuple[float, float]:
    """(acceptance, share of accepted pairs whose numbers differ)."""
    return float(accepted.mean()), float(differ[accepted].mean()) if accepted.any() else 0.0


def _scores(pairs: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    texts = [(p["draft"], p["target"]) for p in pairs]
    cosine = np.array([v.score for v in make_verifier("embedding", threshold=0.0).verify(texts)], dtype=float)
    exact = np.array([v.accepted for v in make_verifier("exact").verify(texts)])
    return cosine, exact, np.array(numbers_differ(pairs))


def _frontier(ax, cosine, exact, differ, shown: tuple[float, ...] = SHOWN) -> None:
    curves = {"embedding (cosine >= t)": cosine >= THRESHOLDS[:, None],
              "embedding-numbers (cosine >= t, same numbers)": (cosine >= THRESHOLDS[:, None]) & ~differ}
    for (label, accepted), color in zip(curves.items(), ("C0", "C1")):
        pts = [_point(a, differ) for a in accepted]
        ax.plot([a for a, _ in pts], [h for _, h in pts], marker=".", color=color, lw=1.2, label=label)
        if color == "C0":  # threshold labels on one curve only, set off below it
            for t, (a, h) in zip(THRESHOLDS, pts):
                if any(abs(t - s) < 1e-9 for s in shown):
                    ax.annotate(f"t = {t:g}", (a, h), fontsize=7, color=color, xytext=(2, -12),
                                textcoords="offset points")
    a, h = _point(exact, differ)
    ax.scatter([a], [h], marker="s", s=60, color="C2", zorder=3, label=f"exact ({a:.0%} accepted)")


def _finish(fig, ax, limits: tuple[float, float], xlabel: str, title: str, path: Path) -> None:
    """Axes, labels, legend; save to ``path`` and close."""
    import matplotlib.pyplot as plt

    ax.set_xlim(0, limits[0]); ax.set_ylim(-0.02, limits[1])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of accepted pairs with other numbers\n(harm proxy; lower is safer)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, nargs="+", default=[RESULTS / "pairs-gsm8k.jsonl",
                                                                  RESULTS / "pairs-gsm8k-llamacpp.jsonl"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    pairs = load_pairs(args.pairs)
    cosine, exact, differ = _scores(pairs)
    committed = {r["verifier"]: r for r in json.loads((RESULTS / "verifier-ablation.json").read_text())["rows"]}

    fig, ax = plt.subplots(figsize=(8, 5))
    _frontier(ax, cosine, exact, differ)
    for name, marker, color in (("random", "X", "grey"), ("cascade:exact+embedding", "D", "C4")):
        row = committed.get(name)
        if row:
            ax.scatter([row["accept_rate"]], [row["numbers_differ_accepted"]], marker=marker, s=60, color=color,
                       zorder=3, label=f"{name} (committed run)")
    _finish(fig, ax, (1, 0.5), "share of pairs accepted (more: faster step layer)",
            f"verifiers on {len(pairs)} recorded step pairs (GSM8K train 300-399)", args.out / "verifier-ablation.png")

    judges = json.loads((RESULTS / "verifier-judges-20.json").read_text())
    n = judges["n_pairs"]
    fig, ax = plt.subplots(figsize=(8, 5))
    _frontier(ax, cosine[:n], exact[:n], differ[:n], shown=(0.85, 0.95))
    for row, marker in zip(judges["rows"], ("^", "v", "P")):
        ax.scatter([row["accept_rate"]], [row["numbers_differ_accepted"]], marker=marker, s=80, color="C3", zorder=3,
                   label=f"{row['verifier']} (committed, {row['median_latency_ms'] / 1e3:.0f} s per pair)")
    _finish(fig, ax, (1.05, 0.6), "share of pairs accepted",
            f"the paper's judges (0.5B judge, 1.5B target) on the first {n} pairs", args.out / "verifier-judges-20.png")
    print(f"wrote {args.out / 'verifier-ablation.png'} and {args.out / 'verifier-judges-20.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
