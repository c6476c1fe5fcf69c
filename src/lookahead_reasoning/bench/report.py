"""Turn a results JSONL (and its shards) into markdown tables and PNG plots.

Per mode (:func:`markdown_table`): runs, accuracy (with its spread over samples when a run repeated
each problem), tokens/s (median and mean), speedup over ``ar`` two ways (ratio of the medians;
median of the per-problem ratios), the measured alpha (the theory's, accepted / judged), alpha1, c, c1 (medians), the speedup the
theory predicts from them, and for mode ``auto`` the planner's predicted speed over the realised one
(median over runs).

Fidelity against ``ar`` on the same problems and samples (:func:`fidelity_table`): answers kept (both
right), lost (``ar`` right, the mode wrong), won (the reverse), the shares with the same final answer
and with the same text, and the mean tokens the target wrote on rows that were thrown away. A noise-floor
file (``benchmarks/noise_floor.py``: ``ar-batched``, ``ar`` decoded in a batch of two) gives the same row
for the runtime itself, with nothing speculative.
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
from ..theory import predict
from ..theory.predict import judged_alpha
from .grading import same_answer


def _key(rec: dict[str, Any]) -> tuple:
    return rec.get("problem_id"), rec.get("mode"), int(rec.get("sample", 0) or 0)


def load_results(path: str | Path) -> list[dict[str, Any]]:
    """Records of ``path`` and of its shards (``path.shard*``); a torn last line is skipped.

    Raises DatasetError when there is no such file, or when no line of it is a result record (an
    empty file, or one of something else): a report of nothing would hide the mistake.
    """
    path = Path(path)
    files = ([path] if path.exists() else []) + [Path(p) for p in sorted(glob.glob(str(path) + ".shard*"))]
    if not files:
        raise DatasetError(f"no results at {path} (nor shards {path}.shard*)")
    records, seen, lines = [], set(), 0
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise DatasetError(f"cannot read results from {f} ({exc.strerror or exc})") from None
        for line in text.splitlines():
            lines += bool(line.strip())
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and {"problem_id", "mode"} <= rec.keys() and _key(rec) not in seen:
                seen.add(_key(rec))
                records.append(rec)
    if not records:
        raise DatasetError(f"{path} holds no benchmark results ({lines} non-empty lines, none a record with "
                           "problem_id and mode): is it the output of `lookahead-reasoning bench`?")
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
    accuracy_spread: float | None = None  # standard deviation of the accuracy over samples
    planner_ratio: float | None = None  # mode auto: predicted / realised tokens/s, median over runs


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else None


def _accuracy(recs: list[dict[str, Any]]) -> tuple[float, float | None]:
    """Mean accuracy, and its spread over samples (None with one sample)."""
    by_sample: dict[int, list[bool]] = {}
    for r in recs:
        by_sample.setdefault(int(r.get("sample", 0) or 0), []).append(bool(r.get("correct")))
    per = [sum(v) / len(v) for v in by_sample.values()]
    return statistics.mean(per), (statistics.stdev(per) if len(per) > 1 else None)


def summarize(records: list[dict[str, Any]]) -> list[ModeRow]:
    """One row per mode, in the order modes first appear."""
    modes = list(dict.fromkeys(r["mode"] for r in records))
    ar = {(r["problem_id"], r.get("sample", 0)): r for r in records if r["mode"] == "ar"}
    ar_median = _median([r.get("tokens_per_s") for r in ar.values()])
    rows = []
    for mode in modes:
        recs = [r for r in records if r["mode"] == mode]
        tps = [r.get("tokens_per_s") for r in recs if r.get("tokens_per_s")]
        med = _median(tps)
        base = [(r, ar.get((r["problem_id"], r.get("sample", 0)))) for r in recs]
        ratios = [r["tokens_per_s"] / a["tokens_per_s"] for r, a in base
                  if a is not None and r.get("tokens_per_s") and a.get("tokens_per_s")]
        stats = {key: _median([r.get(key) for r in recs]) for key in ("alpha1", "c", "c1", "k", "gamma")}
        stats["alpha"] = _median([theory_alpha(r) for r in recs])
        accuracy, spread = _accuracy(recs)
        planner = _median([r["predicted_tok_s"] / r["tokens_per_s"] for r in recs
                           if r.get("predicted_tok_s") and r.get("tokens_per_s")])
        rows.append(ModeRow(
            mode, len(recs), accuracy, med or float("nan"), statistics.mean(tps) if tps else float("nan"),
            (med / ar_median) if (med and ar_median) else None, _median(ratios),
            stats["alpha"], stats["alpha1"], stats["c"], stats["c1"], _predict(mode, stats), spread, planner))
    return rows


def by_verifier(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records, with a mode that ran with more than one verifier (results files put together)
    named ``mode [verifier]`` in each record, so that the runs of each verifier make a row of their own."""
    verifiers: dict[str, set] = {}
    for r in records:
        verifiers.setdefault(r["mode"], set()).add(r.get("verifier"))
    return [{**r, "mode": f"{r['mode']} [{r.get('verifier')}]"} if len(verifiers[r["mode"]]) > 1 else r
            for r in records]


def tokens_per_target_request(record: dict[str, Any]) -> float | None:
    """Over engines, the answer's tokens per request to the target: one request per target row of a
    cycle (one for a plain run); None for this process's runs."""
    if not record.get("engine"):
        return None
    rows = record.get("target_rows") if record.get("cycles") else 1
    return record.get("new_tokens", 0) / rows if rows else None


def fidelity_table(records: list[dict[str, Any]]) -> str:
    """Per mode against ``ar`` on the same (problem, sample): answers kept / lost / won, the share with
    the same final answer, and the mean target tokens thrown away per run. Empty without ``ar``."""
    ar = {(r["problem_id"], r.get("sample", 0)): r for r in records if r["mode"] == "ar"}
    if not ar:
        return ""
    per_request = [t for t in map(tokens_per_target_request, ar.values()) if t is not None]
    lines = ["| mode | runs vs ar | kept | lost | won | same answer as ar | same text as ar | target tokens thrown away (mean) |"
             + (f" tokens per target request (mean; ar {statistics.mean(per_request):.1f}) |" if per_request else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if per_request else "")]
    for mode in dict.fromkeys(r["mode"] for r in records if r["mode"] != "ar"):
        pairs = [(r, ar[(r["problem_id"], r.get("sample", 0))]) for r in records
                 if r["mode"] == mode and (r["problem_id"], r.get("sample", 0)) in ar]
        if not pairs:
            continue
        kept = sum(bool(r.get("correct")) and bool(a.get("correct")) for r, a in pairs)
        lost = sum(not r.get("correct") and bool(a.get("correct")) for r, a in pairs)
        won = sum(bool(r.get("correct")) and not a.get("correct") for r, a in pairs)
        same = sum(same_answer(r.get("predicted"), a.get("predicted")) for r, a in pairs) / len(pairs)
        texts = [(r.get("text"), a.get("text")) for r, a in pairs if r.get("text") is not None and a.get("text") is not None]
        same_text = f"{sum(t == u for t, u in texts) / len(texts):.2f}" if texts else "-"
        thrown = [r["target_tokens_discarded"] for r, _ in pairs if r.get("target_tokens_discarded") is not None]
        mine = [t for t in (tokens_per_target_request(r) for r, _ in pairs) if t is not None]
        lines.append(f"| {mode} | {len(pairs)} | {kept} | {lost} | {won} | {same:.2f} | {same_text} | "
                     + (f"{statistics.mean(thrown):.1f} |" if thrown else "- |")
                     + ((f" {statistics.mean(mine):.1f} |" if mine else " - |") if per_request else ""))
    return "\n".join(lines)


def theory_alpha(record: dict[str, Any]) -> float | None:
    """A record's alpha as the theory means it (accepted / judged), whichever year wrote it: its
    ``alpha_judged``; in files written before that name, ``alpha`` where the record also carries
    ``acceptance_rate`` (runs that counted rejections), else estimated from its histogram (the oldest
    runs, whose ``alpha`` was accepted / drafted; :func:`~..theory.predict.judged_alpha`)."""
    if "alpha_judged" in record:
        return record["alpha_judged"]
    return record.get("alpha") if "acceptance_rate" in record else judged_alpha(record)


def _predict(mode: str, stats: dict[str, Any]) -> float | None:
    """The theory's speedup for this mode from the measured rates, where the inputs exist."""
    try:
        as_int = {key: int(round(stats[key])) if stats.get(key) is not None else None for key in ("gamma", "k")}
        pred = predict({**stats, **as_int})  # alpha, gamma, c, alpha1, c1, k
    except Exception:  # incomplete or out-of-range measurements: no prediction
        return None
    field = {"sd": "sd", "sd-ngram": "sd", "lr": "lr_sync", "lr-sd": "lr_sd"}.get(mode.partition("@")[0])  # auto: its own column
    return getattr(pred, field, None) if field else None


def markdown_table(rows: list[ModeRow]) -> str:
    def f(x: float | None, digits: int = 2) -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"

    lines = ["| mode | n | accuracy | tok/s median | tok/s mean | speedup (ratio of medians) | "
             "speedup (median ratio) | alpha | alpha1 | c | c1 | predicted | planner predicted / realised |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        accuracy = f(r.accuracy) + (f" ± {f(r.accuracy_spread)}" if r.accuracy_spread is not None else "")
        lines.append(f"| {r.mode} | {r.n} | {accuracy} | {f(r.tps_median)} | {f(r.tps_mean)} | "
                     f"{f(r.speedup_of_medians)} | {f(r.median_speedup)} | {f(r.alpha)} | {f(r.alpha1)} | "
                     f"{f(r.c)} | {f(r.c1)} | {f(r.predicted)} | {f(r.planner_ratio)} |")
    return "\n".join(lines)


def plot(rows: list[ModeRow], records: list[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """speedup.png, accept_hist.png, predicted.png in ``out_dir``; returns the paths written (a plot
    without data, such as acceptance for ``ar`` alone, is left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = {"speedup.png": _plot_speedup(plt, rows), "accept_hist.png": _plot_acceptance(plt, rows, records),
             "predicted.png": _plot_predicted(plt, rows)}
    return [save_figure(fig, out_dir / name) for name, fig in drawn.items() if fig is not None]


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _plot_speedup(plt: Any, rows: list[ModeRow]) -> Any:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([r.mode for r in rows], [r.speedup_of_medians or 0 for r in rows], color="#4c72b0")
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_ylabel("speedup over ar (ratio of medians)")
    ax.set_title("tokens/s relative to autoregressive")
    return fig


def summed_histogram(records: list[dict[str, Any]], mode: str) -> list[int]:
    """SD iterations per number of drafted tokens accepted, summed over ``mode``'s records."""
    hists = [r.get("accept_histogram") or [] for r in records if r["mode"] == mode]
    return [sum(h[i] for h in hists if i < len(h)) for i in range(max(map(len, hists), default=0))]


def _plot_acceptance(plt: Any, rows: list[ModeRow], records: list[dict[str, Any]]) -> Any:
    modes = [r.mode for r in rows if any(x.get("accept_histogram") for x in records if x["mode"] == r.mode)]
    if not modes:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for m in modes:
        total = summed_histogram(records, m)
        s = sum(total) or 1
        ax.plot(range(len(total)), [c / s for c in total], marker="o", label=m)
    ax.set_xlabel("drafted tokens accepted per target forward")
    ax.set_ylabel("share of iterations")
    ax.legend()
    return fig


def _plot_predicted(plt: Any, rows: list[ModeRow]) -> Any:
    pairs = [(r.predicted, r.speedup_of_medians, r.mode) for r in rows if r.predicted and r.speedup_of_medians]
    if not pairs:
        return None
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for pred, meas, name in pairs:
        ax.scatter(pred, meas)
        ax.annotate(name, (pred, meas))
    hi = max(max(p, m) for p, m, _ in pairs) * 1.1
    ax.plot([0, hi], [0, hi], color="grey", ls="--", lw=1)
    ax.set_xlabel("predicted speedup (theory)")
    ax.set_ylabel("measured speedup")
    return fig
