"""Accuracy through lm-evaluation-harness: the target alone (``--model hf``) against Lookahead Reasoning
(``--model lookahead``) in mode ``auto`` and in mode ``lr`` with the ``exact`` and the ``likelihood``
verifiers, on the same GSM8K problems, with the wall time of each; and this library's own loop with nothing
drafted (``ar``), which tells how much of a speed-up is the loop's and how much the speculation's.

    .venv/bin/python benchmarks/harness_table.py --out runs/harness --offset 100 --limit 50   # resumes
    .venv/bin/python benchmarks/harness_table.py --out runs/harness --report                  # the table only
    .venv/bin/python benchmarks/harness_table.py --out runs/harness-side --interleave --limit 8  # times side by side

Each configuration is one ``lookahead-reasoning eval`` run (the harness's own command line, with this
library's model and the local task ``gsm8k_lookahead``; ``--apply_chat_template``, greedy, 512 tokens),
printed before it starts so that it can be run by hand. Every answer is kept in a SQLite file as it is
written (the harness's ``--use_cache``), so an interrupted run starts again where it stopped; its time
is added up over the runs it took (``times.jsonl``, one line per run, written even when interrupted).
Each answer's own time is kept too (``answers.jsonl``: the seconds from the start of generation, or from
the answer before, to the moment the answer is kept), so that the time of a problem is counted once however
often a run was stopped and started again, and no model load is counted in it. ``--report`` prints, per
configuration, the accuracy under both of the task's filters (the ``\\boxed{}`` number, the last number),
on how many problems its ``\\boxed{}`` answer and its whole text are the target's alone (``hf``), the median
seconds a problem, their sum, and the wall time of the runs.

The machine's speed drifts by the hour, so configurations run hours apart do not compare their times.
``--interleave`` times them side by side instead: problem by problem, every configuration answers the
problem before the next one starts (the order of the configurations turns by one each problem, so none
always runs first), each as its own ``eval`` run of that one problem; the report then gives each
configuration's seconds a problem (median and range) and, problem by problem, how many times longer the
target alone and this library's loop with nothing drafted took than each configuration (median and range).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
CONFIGS = {  # name -> (the harness's model, its model_args); {target_dir}: the target as a transformers folder
    "hf": ("hf", "pretrained={target_dir},dtype={dtype}"),
    "ar": ("lookahead", "target={target},draft=none,mode=ar,dtype={dtype}"),  # this library's loop, nothing drafted
    "auto": ("lookahead", "target={target},draft={draft},mode=auto,dtype={dtype}"),
    "lr-exact": ("lookahead", "target={target},draft={draft},mode=lr,verifier=exact,dtype={dtype}"),
    "lr-likelihood": ("lookahead", "target={target},draft={draft},mode=lr,verifier=likelihood,threshold=0.3,"
                                   "dtype={dtype}"),
}
FILTERS = ("boxed", "last-number")


def command(name: str, args: argparse.Namespace, target_dir: str, offset: int | None = None,
            limit: int | None = None) -> list[str]:
    """The ``lookahead-reasoning eval`` command line of configuration ``name`` (``offset``, ``limit``: the
    problems, default the run's)."""
    model, model_args = CONFIGS[name]
    model_args = model_args.format(target=TARGET, draft=DRAFT, target_dir=target_dir, dtype=args.dtype)
    out = Path(args.out)
    offset, limit = (args.offset if offset is None else offset), (args.limit if limit is None else limit)
    return ["lookahead-reasoning", "eval", "--model", model, "--model_args", model_args, "--tasks", "gsm8k_lookahead",
            "--apply_chat_template", "--device", "cpu", "--gsm8k", str(args.dataset), "--gsm8k-offset",
            str(offset), "--gsm8k-limit", str(limit), "--use_cache", str(out / f"{name}.sqlite"),
            "--output_path", str(out / name), "--log_samples"]


def interleave(names: list[str], args: argparse.Namespace, target_dir: str, out: Path) -> int:
    """Every configuration answers each problem in turn (module docstring); a (configuration, problem) whose
    answer is timed already is skipped, so a stopped run resumes. Its answers go to ``answers.jsonl`` under the
    label ``configuration#problem``."""
    done = {entry["config"] for entry in _read(out / "answers.jsonl")}
    for i, offset in enumerate(range(args.offset, args.offset + args.limit)):
        for name in names[i % len(names):] + names[:i % len(names)]:
            label = f"{name}#{offset}"
            if label in done:
                continue
            rc = run(label, command(name, args, target_dir, offset, 1), out)
            if rc != 0:
                print(f"{label}: the harness stopped with an error; run again to resume", file=sys.stderr)
                return 1
    return 0


def side_by_side(out: Path) -> str:
    """The report of an ``--interleave`` run: seconds a problem per configuration, and per problem how many
    times longer ``hf`` and ``ar`` took than each configuration."""
    seconds: dict[str, dict[int, float]] = {}
    for entry in _read(out / "answers.jsonl"):
        name, _, problem = entry["config"].partition("#")
        seconds.setdefault(name, {})[int(problem)] = entry["seconds"]
    both = sorted(set.intersection(*(set(v) for v in seconds.values()))) if seconds else []

    def spread(values: list[float], unit: str = "") -> str:
        return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}-{max(values):.2f})" if values else "-"
    rows = [f"{len(both)} problems ({both[0] if both else '-'}-{both[-1] if both else '-'}), every configuration in "
            "turn on each; median (range) over the problems", "",
            "| configuration | s a problem | hf's time over this one's | ar's time over this one's |", "|---|---|---|---|"]
    for name in (n for n in CONFIGS if n in seconds):
        mine = [seconds[name][p] for p in both]
        over = {base: [seconds[base][p] / seconds[name][p] for p in both] if base in seconds else []
                for base in ("hf", "ar")}
        rows.append(f"| {name} | {spread(mine)} | {spread(over['hf'], 'x')} | {spread(over['ar'], 'x')} |")
    return "\n".join(rows)


def _append(path: Path, entry: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def run(name: str, argv: list[str], out: Path) -> int:
    """Run one configuration; its time goes to ``times.jsonl`` whatever the outcome."""
    print("$ " + " ".join(argv), flush=True)
    start, rc = time.perf_counter(), None
    try:
        rc = subprocess.call([sys.executable, __file__, "--timed", name, str(out / "answers.jsonl"), *argv[2:]])
        return rc
    finally:
        _append(out / "times.jsonl", {"config": name, "seconds": round(time.perf_counter() - start, 1), "rc": rc})


def timed_eval(name: str, log: Path, eval_argv: list[str]) -> None:
    """``lookahead-reasoning eval`` in this process, with the seconds of each answer appended to ``log`` as
    the harness keeps it (its cache hook): timed from the start of generation or from the answer before."""
    from lm_eval.api import model as harness_model

    from lookahead_reasoning.integrations import harness

    clock: dict[str, float] = {}
    keep, route = harness_model.CacheHook.add_partial, harness_model.CachingLM.__getattr__

    def routed(self, attr: str):
        fn = route(self, attr)
        if attr != "generate_until":
            return fn

        def generate(requests):
            clock["last"] = time.perf_counter()
            return fn(requests)
        return generate

    def kept(self, attr: str, request, result) -> None:
        keep(self, attr, request, result)
        if attr == "generate_until" and "last" in clock:
            now = time.perf_counter()
            _append(log, {"config": name, "seconds": round(now - clock["last"], 2)})
            clock["last"] = now

    harness_model.CacheHook.add_partial, harness_model.CachingLM.__getattr__ = kept, routed
    harness.main(eval_argv)


def report(out: Path) -> str:
    """The markdown table of every configuration with results under ``out``."""
    times: dict[str, float] = {}
    for entry in _read(out / "times.jsonl"):
        times[entry["config"]] = times.get(entry["config"], 0.0) + entry["seconds"]
    answers: dict[str, list[float]] = {}
    for entry in _read(out / "answers.jsonl"):
        answers.setdefault(entry["config"], []).append(entry["seconds"])
    rows = ["| configuration | problems | accuracy (boxed) | accuracy (last number) | same answer as hf | same text as hf "
            "| s a problem (median) | problems timed | their sum (min) | wall time of the runs (min) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    baseline = _samples(out, "hf")
    for name in CONFIGS:
        found = sorted((out / name).rglob("results_*.json"))
        if not found:
            continue
        mine = _samples(out, name)
        shared = sorted(set(mine) & set(baseline))
        same = [sum(mine[i][part] == baseline[i][part] for i in shared) for part in (1, 0)]
        scores = json.loads(found[-1].read_text(encoding="utf-8"))
        task = scores["results"]["gsm8k_lookahead"]
        n = scores.get("n-samples", {}).get("gsm8k_lookahead", {}).get("effective")
        accuracy = [f"{task[f'exact_match,{f}']:.2f}" for f in FILTERS]
        each = answers.get(name, [])
        median = f"{statistics.median(each):.1f}" if each else "-"
        rows.append(f"| {name} | {n} | {accuracy[0]} | {accuracy[1]} | {same[0]}/{len(shared)} | {same[1]}/{len(shared)} "
                    f"| {median} | {len(each)} | {sum(each) / 60:.1f} | {times.get(name, 0.0) / 60:.1f} |")
    return "\n".join(rows)


def _samples(out: Path, name: str) -> dict[int, tuple[str, str]]:
    """(text, the \\boxed{} answer) of each problem in configuration ``name``'s last samples file."""
    found = sorted((out / name).rglob("samples_*.jsonl"))
    if not found:
        return {}
    kept = {}
    for line in found[-1].read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        if sample["filter"] == FILTERS[0]:
            answer = sample["filtered_resps"]
            kept[sample["doc_id"]] = (sample["resps"][0][0], answer[0] if isinstance(answer, list) else answer)
    return kept


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def main() -> int:
    # a stop is a KeyboardInterrupt even where the shell that started this in the background ignores SIGINT
    # (its children then hear it too), and for SIGTERM: the run's time is written either way
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if sys.argv[1:2] == ["--timed"]:  # one configuration's run, in the process run() starts
        timed_eval(sys.argv[2], Path(sys.argv[3]), sys.argv[4:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="a folder: results, answer caches and times (resumes)")
    p.add_argument("--dataset", default=str(ROOT.parent / "shared/data/gsm8k/train.jsonl"))
    p.add_argument("--offset", type=int, default=100)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--dtype", default="auto", help="both models' dtype (auto: bf16 where the CPU has it, else float32)")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"a comma list of {', '.join(CONFIGS)}")
    p.add_argument("--report", action="store_true", help="print the table of what has run, and run nothing")
    p.add_argument("--interleave", action="store_true",
                   help="time the configurations side by side: each problem answered by every configuration in turn")
    args = p.parse_args()
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        p.error(f"--configs: unknown {', '.join(unknown)} (choose from {', '.join(CONFIGS)})")
    out = Path(args.out)
    if not args.report:
        from lookahead_reasoning.models.offline import convert_offline
        from lookahead_reasoning.models.placement import resolve_dtype

        # one dtype for both models: "auto" is this library's choice (bf16 where the CPU has it), which the
        # harness's hf model would read as the checkpoint's own dtype
        args.dtype = str(resolve_dtype(args.dtype, "cpu")).removeprefix("torch.")
        out.mkdir(parents=True, exist_ok=True)
        target_dir = str(convert_offline(TARGET))
        if args.interleave:
            try:
                rc = interleave(names, args, target_dir, out)
            except KeyboardInterrupt:
                print("interrupted; the answers timed so far are kept: run again to resume", file=sys.stderr)
                return 130
            print(side_by_side(out))
            return rc
        for name in names:
            try:
                rc = run(name, command(name, args, target_dir), out)
            except KeyboardInterrupt:
                print(f"{name}: interrupted; its answers so far and its time are kept: run again to resume",
                      file=sys.stderr)
                return 130
            if rc != 0:
                print(f"{name}: the harness stopped with an error; run again to resume", file=sys.stderr)
                return 1
    print(side_by_side(out) if args.interleave else report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
