"""Turn a results JSONL (and its shards) into a markdown table and PNG plots.

Per mode: problems, accuracy, tokens/s (median and mean over problems), speedup over ``ar`` two
ways (ratio of the medians; median of the per-problem ratios), the measured alpha, alpha1, c, c1
(medians over problems) and the speedup the theory predicts from them.
"""

from __future__ import annotations

import glob
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DatasetError


def load_results(path: str | Path) -> list[dict[str, Any]]:
    """Records of ``path`` and of its shards (``path.shard*``); a torn last line is skipped."""
    path = Path(path)
    files = ([path] if path.exists() else []) + [Path(p) for p in sorted(glob.glob(str(path) + ".shard*"))]
    if not files:
        raise DatasetError(f"no results at {path} (nor shards {path}.shard*)")
    records, seen = [], set()
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            key = (rec.get("problem_id"), rec.get("mode"))
            if key not in seen:
                seen.add(key)
                records.append(rec)
    return records


@dataclass
class ModeRow:
    mode: str
    n: int
    accuracy: float
    tps_median: float
    tps_mean: float
    speedup_of_medians: float | None
    median_speedup: float | None
    alpha: float | None
    alpha1: float | None
    c: float | None
    c1: float | None
    predicted: float | None


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else None


def summarize(records: list[dict[str, Any]]) -> list[ModeRow]:
    """One row per mode, in the order modes first appear."""
    modes = list(dict.fromkeys(r["mode"] for r in records))
    ar = {r["problem_id"]: r for r in records if r["mode"] == "ar"}
    ar_median = _median([r.get("tokens_per_s") for r in ar.values()])
    rows = []
    for mode in modes:
        recs = [r for r in records if r["mode"] == mode]
        tps = [r.get("tokens_per_s") for r in recs if r.get("tokens_per_s")]
        med = _median(tps)
        ratios = [r["tokens_per_s"] / ar[r["problem_id"]]["tokens_per_s"] for r in recs
                  if r["problem_id"] in ar and r.get("tokens_per_s") and ar[r["problem_id"]].get("tokens_per_s")]
        stats = {key: _median([r.get(key) for r in recs]) for key in ("alpha", "alpha1", "c", "c1", "k", "gamma")}
        rows.append(ModeRow(
            mode, len(recs), sum(bool(r.get("correct")) for r in recs) / len(recs) if recs else float("nan"),
            med or float("nan"), statistics.mean(tps) if tps else float("nan"),
            (med / ar_median) if (med and ar_median) else None, _median(ratios),
            stats["alpha"], stats["alpha1"], stats["c"], stats["c1"], _predict(mode, stats)))
    return rows


def _predict(mode: str, stats: dict[str, Any]) -> float | None:
    """The theory's speedup for this mode from the measured rates, where the inputs exist."""
    try:
        from ..theory import predict
    except ImportError:
        return None
    try:
        as_int = {key: int(round(stats[key])) if stats.get(key) is not None else None for key in ("gamma", "k")}
        pred = predict({"alpha": stats.get("alpha"), "gamma": as_int["gamma"], "c": stats.get("c"),
                        "alpha1": stats.get("alpha1"), "c1": stats.get("c1"), "k": as_int["k"]})
    except Exception:  # incomplete or out-of-range measurements: no prediction
        return None
    field = {"sd": "sd", "sd-ngram": "sd", "lr": "lr_sync", "lr-sd": "lr_sd"}.get(mode.partition("@")[0])
    return getattr(pred, field, None) if field else None


def markdown_table(rows: list[ModeRow]) -> str:
    def f(x: float | None, digits: int = 2) -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"

    lines = ["| mode | n | accuracy | tok/s median | tok/s mean | speedup (ratio of medians) | "
             "speedup (median ratio) | alpha | alpha1 | c | c1 | predicted |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.mode} | {r.n} | {f(r.accuracy)} | {f(r.tps_median)} | {f(r.tps_mean)} | "
                     f"{f(r.speedup_of_medians)} | {f(r.median_speedup)} | {f(r.alpha)} | {f(r.alpha1)} | "
                     f"{f(r.c)} | {f(r.c1)} | {f(r.predicted)} |")
    return "\n".join(lines)


def plot(rows: list[ModeRow], records: list[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """speedup.png, accept_hist.png, predicted.png in ``out_dir``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [r.mode for r in rows]
    ax.bar(names, [r.speedup_of_medians or 0 for r in rows], color="#4c72b0")
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_ylabel("speedup over ar (ratio of medians)")
    ax.set_title("tokens/s relative to autoregressive")
    fig.tight_layout()
    written.append(out_dir / "speedup.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    hist_modes = [m for m in names if any(r.get("accept_histogram") for r in records if r["mode"] == m)]
    if hist_modes:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for m in hist_modes:
            total: list[int] = []
            for r in records:
                if r["mode"] == m:
                    for i, c in enumerate(r.get("accept_histogram") or []):
                        total += [0] * (i + 1 - len(total))
                        total[i] += c
            s = sum(total) or 1
            ax.plot(range(len(total)), [c / s for c in total], marker="o", label=m)
        ax.set_xlabel("drafted tokens accepted per target forward")
        ax.set_ylabel("share of iterations")
        ax.legend()
        fig.tight_layout()
        written.append(out_dir / "accept_hist.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)

    pairs = [(r.predicted, r.speedup_of_medians, r.mode) for r in rows if r.predicted and r.speedup_of_medians]
    if pairs:
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        for pred, meas, name in pairs:
            ax.scatter(pred, meas)
            ax.annotate(name, (pred, meas))
        hi = max(max(p, m) for p, m, _ in pairs) * 1.1
        ax.plot([0, hi], [0, hi], color="grey", ls="--", lw=1)
        ax.set_xlabel("predicted speedup (theory)")
        ax.set_ylabel("measured speedup")
        fig.tight_layout()
        written.append(out_dir / "predicted.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    return written
