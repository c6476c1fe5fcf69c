"""Numbers the prose quotes are recomputed from the committed files they come from, so that a count
edited by hand, or a file rerun without its sentence, fails here instead of misleading a reader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_log import (
    cache_off_ratios,
    h100_machine,
    pair_rates,
    pair_step_rates,
    schedule_rates,
    schedule_ratio,
    schedules,
)
from test_harness_table import _script as harness_table_script
from theory_sources import check_output

from lookahead_reasoning.bench.grading import same_answer
from lookahead_reasoning.bench.report import fidelity_table, load_results, markdown_table, summarize

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = (ROOT / "README.md").read_text(encoding="utf-8")
BENCH_README = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
THEORY_README = (ROOT / "theory" / "README.md").read_text(encoding="utf-8")


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (RESULTS / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _end_to_end(exact_name: str, loose_name: str) -> tuple[int, int, int, float, list[dict]]:
    """(answers of ``ar`` kept by likelihood@0.3, by exact, problems, likelihood's alpha1 over exact's, the
    likelihood runs) of one pair of end-to-end files over llama.cpp."""
    exact, loose = load_results(RESULTS / exact_name), load_results(RESULTS / loose_name)
    ar = {r["problem_id"]: r for r in exact if r["mode"] == "ar"}

    def kept(records):
        runs = [r for r in records if r["mode"] != "ar"]
        return sum(same_answer(r["predicted"], ar[r["problem_id"]]["predicted"]) for r in runs), len(runs)

    def alpha1(records):
        runs = [r for r in records if r["mode"] != "ar"]
        return sum(r["accepted_steps"] for r in runs) / sum(r["judged_pairs"] for r in runs)

    (same_exact, n), (same_loose, n_loose) = kept(exact), kept(loose)
    assert n == n_loose == len(ar)
    return same_loose, same_exact, n, alpha1(loose) / alpha1(exact), [r for r in loose if r["mode"] != "ar"]


def test_the_end_to_end_verifier_sentence_is_what_its_files_hold():
    same_loose, same_exact, n, ratio, loose = _end_to_end("e2e-llamacpp.jsonl", "e2e-llamacpp-likelihood@0.3.jsonl")
    assert f"kept `ar`'s answer on {same_loose} of {n}, `exact` on {same_exact}" in README
    assert f"accepted {ratio:.2f}x what `exact` accepted" in README
    assert all(r["verifier_threshold"] == 0.3 for r in loose)  # the record says its threshold, not only the file name
    same_loose, same_exact, n, ratio, loose = _end_to_end("e2e-llamacpp-nocache-avx512.jsonl",
                                                          "e2e-llamacpp-nocache-avx512-likelihood@0.3.jsonl")
    both = f"both kept `ar`'s answer on {same_exact} of {n}" if same_loose == same_exact else \
        f"kept `ar`'s answer on {same_loose} of {n}, `exact` on {same_exact}"
    kept_batched = _agreement(["floor-llamacpp-nocache-avx512.jsonl"], "ar-batched")[0]
    assert (f"with the engine's prompt cache off, it accepted {ratio:.2f}x what `exact` accepted there and {both} "
            f"(`ar` beside a second request: {kept_batched})") in README
    assert all(r["verifier_threshold"] == 0.3 and r["cache_prompt"] is False for r in loose)


def test_the_bank_and_flip_counts_quoted_are_the_files():
    pairs = [r for name in ("pairs-gsm8k.jsonl", "pairs-gsm8k-llamacpp.jsonl") for r in _jsonl(name)
             if "agreed_tokens" in r]
    flips = _jsonl("flips-gsm8k-llamacpp.jsonl")
    assert f"bank pairs accepted (of {len(pairs)})" in README
    assert f"(`flips`, {len(flips)} pairs)" in README


def test_theory_readme_counts_the_checks_check_py_runs():
    [(count, failed)] = re.findall(r"^(\d+) checks, (\d+) failed", check_output(), re.M)
    assert failed == "0"
    assert f"# {count} checks" in THEORY_README


@pytest.mark.parametrize("name", ["gsm8k10-cpu.jsonl", "gsm8k5-sd-cpu.jsonl"])
def test_report_tables_reprinted_in_the_run_log_are_what_report_prints(name):
    records = load_results(RESULTS / name)
    for line in markdown_table(summarize(records)).splitlines()[2:]:
        assert line in BENCH_README, f"benchmarks/README.md quotes another row for {name}: {line}"
    assert fidelity_table(records)  # both files compare their modes with ar


def _agreement(names: list[str], mode: str) -> tuple[int, int, int]:
    """(same answer as ar, same text as ar, runs) of ``mode`` against ``ar`` on the same problems, over files."""
    answers = texts = runs = 0
    for name in names:
        records = load_results(RESULTS / name)
        ar = {r["problem_id"]: r for r in records if r["mode"] == "ar"}
        for r in records:
            if r["mode"] == mode and r["problem_id"] in ar:
                a = ar[r["problem_id"]]
                answers += same_answer(r["predicted"], a["predicted"])
                texts += r["text"] == a["text"]
                runs += 1
    return answers, texts, runs


def test_the_modes_table_gives_what_each_runtime_reproduced_of_ar():
    """The Modes table's last column, recomputed: every count against ``ar`` on the same problems."""
    modes = README[README.index("## Modes"):README.index("## Verifiers")]
    cases = {
        "`auto`": (["auto-bf16-calibrated-cpu.jsonl", "engine-scale-pytorch-cpu.jsonl"], "auto", "bf16: answer {}/{n}, text {}/{n}"),
        "`lr`": (["e2e-llamacpp.jsonl"], "lr@k2", "llama.cpp: answer {}/{n}, text {}/{n}"),
        "`sd`": (["auto-bf16-calibrated-cpu.jsonl"], "sd@g12", "bf16: answer {}/{n}, text {}/{n}"),
        "`sd-ngram`": (["engine-llamacpp-avx512-cpu.jsonl"], "ngram", "llama.cpp's own `ngram`: answer {}/{n}, text {}/{n}"),
    }
    for mode, (names, recorded, template) in cases.items():
        [row] = [line for line in modes.splitlines() if line.startswith(f"| {mode} |")]
        answers, texts, n = _agreement(names, recorded)
        assert template.format(answers, texts, n=n) in row, (mode, answers, texts, n, row)
    [lr_row] = [line for line in modes.splitlines() if line.startswith("| `lr` |")]
    answers, texts, n = _agreement(["e2e-llamacpp-nocache-avx512.jsonl"], "lr@k2")
    assert f"llama.cpp with its prompt cache off: answer {answers}/{n}, text {texts}/{n}" in lr_row
    assert (f"`lr` with `exact` and the cache off kept `ar`'s answer on {answers} of the same {n} problems and its text on "
            f"{texts}.") in README
    [ar_row] = [line for line in modes.splitlines() if line.startswith("| `ar` |")]
    again, batched = (_agreement(["floor-llamacpp-avx512.jsonl"], m) for m in ("ar-again", "ar-batched"))
    assert (f"run again: answer {again[0]}/{again[2]}, text {again[1]}/{again[2]}; beside a second request: "
            f"{batched[0]}/{batched[2]}, {batched[1]}/{batched[2]}") in ar_row
    again, batched = (_agreement(["floor-llamacpp-nocache-avx512.jsonl"], m) for m in ("ar-again", "ar-batched"))
    assert (f"llama.cpp with its prompt cache off, run again: answer {again[0]}/{again[2]}, text {again[1]}/{again[2]}; "
            f"beside a second request: {batched[0]}/{batched[2]}, {batched[1]}/{batched[2]}") in ar_row
    assert (f"beside a second request `ar` kept {batched[0]} of {batched[2]} answers and {batched[1]} of {batched[2]} "
            "texts with the cache off") in README
    again, batched = (_agreement(["floor-vllm-avx512.jsonl"], m) for m in ("ar-again", "ar-batched"))
    assert (f"vLLM (CPU, bf16), run again: answer {again[0]}/{again[2]}, text {again[1]}/{again[2]}; "
            f"beside a second request: {batched[0]}/{batched[2]}, {batched[1]}/{batched[2]}") in ar_row
    bf16 = _agreement(["floor-pytorch-bf16-avx512.jsonl"], "ar-batched")
    assert f"bf16, as one row of a batch of two: answer {bf16[0]}/{bf16[2]}, text {bf16[1]}/{bf16[2]}" in ar_row
    fp32 = _agreement(["floor-pytorch-float32-avx512.jsonl"], "ar-batched")
    assert f"float32, as one row of a batch of two: answer {fp32[0]}/{fp32[2]}, text {fp32[1]}/{fp32[2]}" in ar_row
    assert (f"decoded as one row of a batch of two in float32, kept its own text on {fp32[1]} of {fp32[2]} problems "
            f"and its answer on {fp32[0]}") in modes
    assert (f"`ar` itself, decoded as one row of a batch of two, kept its own answer on {bf16[0]} of {bf16[2]} "
            f"problems and its text on {bf16[1]}") in modes


@pytest.mark.parametrize("name, modes", [("floor-llamacpp-avx512.jsonl", ("ar-again", "ar-batched")),
                                         ("floor-llamacpp-nocache-avx512.jsonl", ("ar-again", "ar-batched")),
                                         ("floor-vllm-avx512.jsonl", ("ar-again", "ar-batched")),
                                         ("floor-pytorch-bf16-avx512.jsonl", ("ar-batched",)),
                                         ("floor-pytorch-float32-avx512.jsonl", ("ar-batched",))])
def test_the_noise_floor_tables_are_what_report_prints(name, modes):
    table = fidelity_table(load_results(RESULTS / name))
    assert table in BENCH_README, f"benchmarks/README.md quotes another floor table for {name}"
    runs = 20 if "vllm" in name else 50
    for mode in modes:
        assert f"| {mode} | {runs} |" in table


def test_the_run_log_quotes_how_often_precision_alone_moves_the_text():
    """float32 ``ar`` against bf16 ``ar`` on the floor's problems (each one row alone), as benchmarks/README
    quotes it."""
    alone = [{r["problem_id"]: r for r in load_results(RESULTS / name) if r["mode"] == "ar"}
             for name in ("floor-pytorch-float32-avx512.jsonl", "floor-pytorch-bf16-avx512.jsonl")]
    shared = sorted(set(alone[0]) & set(alone[1]))
    texts = sum(alone[0][p]["text"] == alone[1][p]["text"] for p in shared)
    answers = sum(same_answer(alone[0][p]["predicted"], alone[1][p]["predicted"]) for p in shared)
    assert (f"float32 `ar` and bf16 `ar`, each one row alone, wrote the\n  same text on {texts} of the {len(shared)} "
            f"problems and the same answer on {answers}.") in BENCH_README


def test_the_budget_split_page_quotes_where_each_split_stops_gaining():
    """docs/03 says up to which budget M the best split keeps gaining, per schedule, and what it reaches
    there: recomputed from the theory at the page's rates (the first M at which the best speedup over
    M = 1..64 is reached)."""
    from lookahead_reasoning.theory import best_split

    page = (ROOT / "docs" / "07_budget_split.md").read_text(encoding="utf-8")
    quoted = re.search(r"keeps rising until M = (\d+) in async mode \(([\d.]+)x\) and M = (\d+) in sync mode\s+"
                       r"\(([\d.]+)x\)", page)
    assert quoted, "docs/03 no longer quotes where the split stops gaining: update this test with the page"
    for mode, m, speed in (("async", *quoted.group(1, 2)), ("sync", *quoted.group(3, 4))):
        best = [best_split(0.6, 0.2, 0.7, 0.1, budget, mode).best.speedup for budget in range(1, 65)]
        top = max(best)
        assert int(m) == next(i + 1 for i, s in enumerate(best) if s >= top - 1e-12), (mode, m)
        assert float(speed) == round(top, 2), (mode, speed, top)


def test_the_verifiers_end_to_end_table_gives_the_floor_rows_of_its_runtime():
    """The end-to-end verifier table of the run log sets llama.cpp's own floor beside its rows."""
    records = load_results(RESULTS / "floor-llamacpp-avx512.jsonl")
    for mode, label in (("ar-again", "`ar` run again"), ("ar-batched", "`ar` beside a second request")):
        answers, _, n = _agreement(["floor-llamacpp-avx512.jsonl"], mode)
        correct = sum(r["correct"] for r in records if r["mode"] == mode)
        assert f"| floor: {label} | {answers}/{n} | {correct}/{n} |" in BENCH_README, mode


def test_the_gpu_recheck_quotes_what_its_two_files_hold():
    generate = json.loads((RESULTS / "gpu-generate-h100.json").read_text(encoding="utf-8"))
    runs = generate["runs"]
    assert len(runs) == 20 and all(run["same_tokens"] and run["device"] == "cuda:0" for run in runs.values())
    assert {run["judged_pairs"] for label, run in runs.items() if "/lr" in label} == {3}
    assert "All 20 calls gave the ids of `model.generate`'s own greedy loop" in BENCH_README
    compiled = json.loads((RESULTS / "gpu-compiled-h100-recheck.json").read_text(encoding="utf-8"))
    same = compiled["lossless"]["cuda-graphs"]
    assert same["all_same"] and len(same["same_tokens"]) == 12
    assert same["graphs_made_by_a_warm_256_token_lr_sd_run"] == 0
    quoted = {"0.5B": "qwen2.5-coder-0.5b", "1.5B": "qwen2.5-coder-1.5b", "7B": "qwen2.5-7b", "32B": "qwen2.5-32b"}
    for short, name in quoted.items():
        assert f"{short} {compiled['shapes'][name]['compiled_ar_ms']:.2f} (" in BENCH_README


def _harness_rows() -> dict[str, list[str]]:
    table = harness_table_script().report(RESULTS / "harness")
    assert table in BENCH_README  # the run log prints what --report prints from the committed files
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in table.splitlines()[2:])}


def test_the_harness_table_and_the_readme_s_sentence_are_the_committed_results():
    rows = _harness_rows()
    assert set(rows) == {"hf", "ar", "auto", "lr-exact", "lr-likelihood"} and {r[1] for r in rows.values()} == {"50"}
    boxed = {name: row[2] for name, row in rows.items()}
    side = harness_table_script().side_by_side(RESULTS / "harness-side")
    assert side in BENCH_README  # the run log prints what --interleave --report prints from the committed answers
    auto = next(line for line in side.splitlines() if line.startswith("| auto |")).split("|")
    sentence = (f"the harness scored the target alone (`--model hf`) {boxed['hf']} and `--model lookahead` "
                f"{boxed['auto']} in `auto` at {auto[3].split()[0]} less time a problem "
                f"({auto[4].split()[0]} against this library's loop")
    assert sentence in " ".join(README.split())
    assert f"{boxed['lr-exact']} in `lr` with `exact` and {boxed['lr-likelihood']} with the likelihood verifier" \
        in " ".join(README.split())


def test_what_int8_keeps_of_its_own_ar_is_what_the_runs_hold():
    float32, bf16 = _agreement(["auto-int8-cpu.jsonl"], "auto"), _agreement(["auto-int8-avx512-cpu.jsonl"], "auto")
    assert float32[0] == float32[2] and bf16[0] == bf16[2]  # every answer kept, in both
    assert (f"`auto` kept the int8 `ar`'s answer on {bf16[0]} of\n{bf16[2]} problems in both int8 runs, but its text on "
            f"{float32[1]} of {float32[2]} with float32 activations") in BENCH_README
    assert f"and on {bf16[1]} of {bf16[2]} with bf16 ones" in BENCH_README


def test_the_flip_counts_of_the_run_log_are_the_file():
    flips = _jsonl("flips-gsm8k-llamacpp.jsonl")
    first = sum(f["index"] <= 344 for f in flips)  # the first file holds problems 300-344
    assert (f"{len(flips)} of the 538 complete non-exact pairs ({first} of the first\nfile, "
            f"{len(flips) - first} of the second)") in BENCH_README


def test_the_schedules_priced_for_the_h100_are_what_the_pack_and_its_table_give():
    """Every row of the run log's table of recorded schedules priced by the first H100 run's tables."""
    import statistics

    runs = schedules()
    targets = ("qwen2.5-coder-1.5b", "qwen2.5-7b", "qwen2.5-32b")
    configs = list(dict.fromkeys(r["config"] for r in runs))
    problems = sorted({r["index"] for r in runs})
    assert len(configs) == 8 and len(runs) == len(problems) * len(configs)  # every problem in every configuration
    assert f"answered GSM8K train {problems[0]}-{problems[-1]} (untuned)" in BENCH_README
    assert f"every session verb of every run ({len(runs)} runs," in BENCH_README
    # "problems 100-109 with torch on both cores, 110-119 in two processes of one thread each"
    assert {r["index"] for r in runs if r["threads"] == 2} == set(range(100, 110))
    assert {r["index"] for r in runs if r["threads"] == 1} == set(range(110, 120))
    assert "problems 100-109 with\ntorch on both cores, 110-119 in two processes of one thread each" in BENCH_README
    for config in configs:
        mine = [r for r in runs if r["config"] == config]
        alpha1 = [r["summary"]["alpha1"] for r in mine if r["summary"].get("alpha1") is not None]
        cells = [f"{statistics.median(alpha1):.2f}" if alpha1 and config.startswith("lr") else "-"]
        for t in targets:
            rates = schedule_rates(t)
            ours = [rates[(config, r["problem_id"])] for r in mine]
            cells.append(f"{statistics.median(ours):.0f} tok/s, {schedule_ratio(config, t)}")
        row = f"| {config} | " + " | ".join(cells) + " |"
        assert row in BENCH_README, row


def test_the_break_even_table_is_what_theory_breakeven_gives_on_each_committed_table():
    from lookahead_reasoning.planning import CostTable
    from lookahead_reasoning.theory.breakeven import Machine, break_even, break_even_requests

    alpha, step = pair_rates()
    assert f"token alpha {alpha:.2f}" in BENCH_README and f"{step:.0f} tokens a step" in BENCH_README
    rates = pair_step_rates()

    def shown(points: dict) -> tuple[str, str]:
        return tuple("never" if points[k] is None else f"{points[k]:.2f}" for k in (1, 2))

    for name in ("cpu-costs-avx512-bf16.json", "cpu-costs-amx-bf16.json", "cpu-costs-avx2emu-fp32.json"):
        t = CostTable.from_json(json.loads((RESULTS / name).read_text(encoding="utf-8"))["table"])
        target, draft = (lambda r, n: t.target.seconds(r, n, 300)), (lambda r, n: t.draft.seconds(r, n, 300))
        k1, k2 = shown(break_even(*rates, Machine(target, draft)).alpha1)
        row = (f"[{name}](results/{name}) | {target(1, 1) * 1e3:.1f} ms | {target(2, 1) / target(1, 1):.2f} | "
               f"{target(1, 13) * 1e3:.1f} ms | {draft(1, 1) * 1e3:.1f} ms | {k1} | {k2} |")
        assert row in BENCH_README, row
    engine = CostTable.from_json(json.loads((RESULTS / "engine-costs-avx512-cpu.json").read_text(encoding="utf-8"))["table"])
    k1, k2 = shown(break_even_requests(rates[0], engine.target, engine.draft, overlap=engine.overlap).alpha1)
    assert f"`engine-costs-avx512-cpu.json` | - | - | - | - | {k1} | {k2} |" in BENCH_README
    for key, label in (("eager_points", "eager"), ("points", "compiled")):
        cols = [shown(break_even(*rates, h100_machine(target, key)).alpha1)
                for target in ("qwen2.5-coder-1.5b", "qwen2.5-7b", "qwen2.5-32b")]
        row = (f"| H100 {label}, 1.5B / 7B / 32B target | - | - | - | - | {' / '.join(c[0] for c in cols)} | "
               f"{' / '.join(c[1] for c in cols)} |")
        assert row in BENCH_README, row


def test_what_the_prompt_cache_costs_is_what_the_side_by_side_files_hold():
    import statistics

    on, off = ({(r["mode"], r["problem_id"]) for r in load_results(RESULTS / f"prompt-cache-{c}-avx512.jsonl")}
               for c in ("on", "off"))
    assert on == off and len(on) == 8
    for mode, label in (("ar", "`ar` ran at"), ("lr@k2", "`lr@k2` with `exact` at")):
        ratios = cache_off_ratios(mode)
        quoted = f"{label} {statistics.median(ratios):.2f}"
        assert quoted in BENCH_README.replace("\n  ", " "), quoted
        assert f"{min(ratios):.2f}-{max(ratios):.2f}" in BENCH_README, (mode, ratios)


def test_the_theory_readme_s_break_even_names_the_plans_and_the_step_it_prices():
    """Section 9's whole numbers (its figures are held in theory_sources.py): the step length of the pair's rates
    and the gamma of the best plan without drafted steps on the bf16 CPU and on the compiled H100 with a 32B target."""
    from theory_sources import break_evens

    section = " ".join(THEORY_README.split("## 9. ", 1)[1].split())
    assert f"token alpha {pair_rates()[0]:.2f}, {pair_rates()[1]:.0f}-token steps" in section
    assert f"token SD at gamma {break_evens('cpu-bf16')['gamma']} writes" in section
    assert f"against token SD at gamma {break_evens('points qwen2.5-32b')['gamma']} (" in section


def test_what_auto_ran_is_counted_from_the_front_page_table_s_runs():
    """The plans of ``auto``'s cycles in every run the what-to-expect table links, by runtime: this library's
    PyTorch loops, llama.cpp's server and vLLM (each record of mode auto counts its cycles per plan label)."""
    expect = README.split("## What to expect", 1)[1].split("\n## ", 1)[0]
    linked = dict.fromkeys(re.findall(r"\]\(benchmarks/results/([^)]+\.jsonl)\)", expect))
    plans: dict[str, dict[str, int]] = {"torch": {}, "llama.cpp": {}, "vllm": {}}
    for name in linked:
        runtime = ("llama.cpp" if name.startswith("engine-llamacpp") else
                   "vllm" if name.startswith("engine-vllm") else "torch")
        for r in _jsonl(name):
            if r["mode"] == "auto":
                assert sum(r["plans"].values()) == r["cycles"]
                for label, n in r["plans"].items():
                    base = label.split("@")[0]
                    plans[runtime][base] = plans[runtime].get(base, 0) + n
    torch, llama, vllm = plans.values()
    total = sum(torch.values())
    assert (f"token SD on {torch['sd']} of the {total} cycles of the table's runs (the other {total - torch['sd']} "
            f"LR or LR+SD)") in README
    assert set(torch) == {"sd", "lr", "lr-sd"}
    assert set(llama) == {"ar"}
    assert f"the engine's plain decoding on all {llama['ar']}, so there it matches `ar`" in README
    assert set(vllm) == {"ar", "lr"}
    assert f"over vLLM, plain decoding on {vllm['ar']} of {sum(vllm.values())} and LR on {vllm['lr']}." in README
