"""The benchmark runner on a tiny model: results appended as they finish, resume after a kill,
shards merged by the report, clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookahead_reasoning import ConfigError, LookaheadGenerator, Settings, StepConfig
from lookahead_reasoning.bench.report import load_results, markdown_table, plot, summarize
from lookahead_reasoning.bench.runner import BenchConfig, ModeRunner, done_pairs, run_bench, shard_path
from lookahead_reasoning.options import GeneratorSpec, decoding_settings
from lookahead_reasoning.planning import PlannerConfig

from lr_helpers import exact, tiny_lm

QUESTIONS = [("What is 1 + 1?", "2"), ("What is 2 + 2?", "4"), ("What is 3 + 3?", "6")]


@pytest.fixture()
def dataset(tmp_path):
    path = tmp_path / "mini.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": f"... #### {a}"}) + "\n" for q, a in QUESTIONS))
    return path


def _runner(config: BenchConfig) -> ModeRunner:
    settings = Settings.preset(k=2, gamma=4, steps=StepConfig((" ",), 8))  # for every mode the benchmark runs
    gen = LookaheadGenerator(target=tiny_lm(0), draft=tiny_lm(1), verifier=exact(), settings=settings,
                             planner=PlannerConfig(progress=False, learn=False))
    return ModeRunner(config, generator=gen)


class CountingRunner:
    """Wraps a ModeRunner, counts real runs, and can raise KeyboardInterrupt after n of them."""

    def __init__(self, inner: ModeRunner, interrupt_after: int | None = None):
        self.inner, self.interrupt_after, self.calls = inner, interrupt_after, []

    def warmup(self):
        pass

    def run(self, problem, mode, sample=0):
        if self.interrupt_after is not None and len(self.calls) == self.interrupt_after:
            raise KeyboardInterrupt
        self.calls.append((problem.id, mode))
        return self.inner.run(problem, mode, sample)


def test_all_modes_run_and_report(dataset, tmp_path):
    out = tmp_path / "res.jsonl"
    config = BenchConfig(dataset=str(dataset), out=str(out), modes="ar,sd,sd-ngram,lr,lr-sd,hf-generate,hf-assisted",
                         max_new_tokens=12)
    run_bench(config, runner=_runner(config), progress=False)
    records = load_results(out)
    assert len(records) == 3 * 7
    by = {(r["problem_id"], r["mode"]): r for r in records}
    for pid in {r["problem_id"] for r in records}:
        # greedy everywhere: our AR and transformers' own generate agree token for token on fp32 tiny models
        assert by[(pid, "ar")]["text"] == by[(pid, "hf-generate")]["text"]
        assert by[(pid, "ar")]["text"] == by[(pid, "sd")]["text"] == by[(pid, "lr-sd")]["text"]
        assert by[(pid, "ar")]["text"] == by[(pid, "hf-assisted")]["text"]
    rows = summarize(records)
    assert [r.mode for r in rows][0] in config.modes and len(rows) == 7
    ar_row = next(r for r in rows if r.mode == "ar")
    assert ar_row.speedup_of_medians == pytest.approx(1.0) and ar_row.n == 3
    table = markdown_table(rows)
    assert table.count("\n") == 7 + 1 and "| lr |" in table
    pngs = plot(rows, records, tmp_path / "plots")
    assert all(p.exists() and p.stat().st_size > 1000 for p in pngs)


def test_interrupted_run_resumes_without_redoing(dataset, tmp_path):
    out = tmp_path / "res.jsonl"
    config = BenchConfig(dataset=str(dataset), out=str(out), modes=("ar", "lr"), max_new_tokens=8)
    first = CountingRunner(_runner(config), interrupt_after=2)  # killed after the first problem
    with pytest.raises(KeyboardInterrupt):
        run_bench(config, runner=first, progress=False)
    assert len(done_pairs(out)) == 2
    second = CountingRunner(_runner(config))
    run_bench(config, runner=second, progress=False)
    assert set(first.calls).isdisjoint(second.calls)
    assert len(second.calls) == 4 and len(done_pairs(out)) == 6
    third = CountingRunner(_runner(config))
    run_bench(config, runner=third, progress=False)
    assert third.calls == []


def test_torn_last_line_is_ignored_and_redone(dataset, tmp_path):
    out = tmp_path / "res.jsonl"
    config = BenchConfig(dataset=str(dataset), out=str(out), modes=("ar",), max_new_tokens=4, limit=2)
    run_bench(config, runner=CountingRunner(_runner(config)), progress=False)
    lines = out.read_text().splitlines()
    out.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # a write cut by a kill
    again = CountingRunner(_runner(config))
    run_bench(config, runner=again, progress=False)
    assert len(again.calls) == 1 and len(load_results(out)) == 2


def test_shards_are_merged_by_the_report(dataset, tmp_path):
    out = tmp_path / "res.jsonl"
    config = BenchConfig(dataset=str(dataset), out=str(out), modes=("ar",), max_new_tokens=4)
    for rank in (0, 1):
        run_bench(config, runner=_runner(config), progress=False, process_index=rank, num_processes=2)
    assert shard_path(out, 0, 2).exists() and shard_path(out, 1, 2).exists() and not out.exists()
    ids = [r["problem_id"] for r in load_results(out)]
    assert len(ids) == 3 and len(set(ids)) == 3


def test_modes_interleave_per_problem(dataset, tmp_path):
    config = BenchConfig(dataset=str(dataset), out=str(tmp_path / "r.jsonl"), modes=("ar", "sd", "lr"),
                         max_new_tokens=4)
    counting = CountingRunner(_runner(config))
    run_bench(config, runner=counting, progress=False)
    problems = [pid for pid, _ in counting.calls]
    assert problems == sorted(problems, key=problems.index)  # one problem at a time
    firsts = [counting.calls[i * 3][1] for i in range(3)]
    assert firsts == ["ar", "sd", "lr"]  # the order rotates from problem to problem


def test_bad_input(dataset, tmp_path):
    with pytest.raises(ConfigError, match="unknown mode"):
        BenchConfig(dataset=str(dataset), out=str(tmp_path / "r.jsonl"), modes="ar,warp")
    blocked = tmp_path / "file"
    blocked.write_text("x")
    config = BenchConfig(dataset=str(dataset), out=str(blocked / "r.jsonl"), modes="ar")
    with pytest.raises(ConfigError, match="cannot write results"):
        run_bench(config, runner=CountingRunner(_runner(config)), progress=False)
    from lookahead_reasoning.errors import DatasetError

    with pytest.raises(DatasetError):
        run_bench(BenchConfig(dataset=str(tmp_path / "missing.jsonl"), out=str(tmp_path / "r.jsonl")),
                  runner=CountingRunner(None), progress=False)
    with pytest.raises(DatasetError, match="no results"):
        load_results(tmp_path / "nothing.jsonl")


def test_mode_suffixes_sweep_gamma_and_k(dataset, tmp_path):
    from lookahead_reasoning.bench.runner import parse_mode

    assert parse_mode("ar") == ("ar", None, None)
    assert parse_mode("sd@g6") == ("sd", None, 6)
    assert parse_mode("lr-sd@k2g3") == ("lr-sd", 2, 3)
    assert parse_mode("hf-assisted@g5") == ("hf-assisted", None, 5)
    out = tmp_path / "sweep.jsonl"
    modes = "ar,sd@g1,sd@g3,lr@k1,lr@k3,lr-sd@k2g2,hf-assisted@g2,hf-lookup@g3"
    config = BenchConfig(dataset=str(dataset), out=str(out), modes=modes, limit=2, max_new_tokens=10)
    run_bench(config, runner=_runner(config), progress=False)
    records = load_results(out)
    by = {(r["problem_id"], r["mode"]): r for r in records}
    assert {r["mode"] for r in records} == set(modes.split(","))
    for pid in {r["problem_id"] for r in records}:
        # each variant really ran with its own gamma / k (greedy: the text is AR's every time)
        assert by[(pid, "sd@g1")]["gamma"] == 1 and by[(pid, "sd@g3")]["gamma"] == 3
        g1, g3 = by[(pid, "sd@g1")], by[(pid, "sd@g3")]
        assert g1["drafted"] <= sum(g1["accept_histogram"]) < g3["drafted"] <= 3 * sum(g3["accept_histogram"])
        assert by[(pid, "lr@k1")]["k"] == 1 and by[(pid, "lr@k3")]["k"] == 3
        assert by[(pid, "hf-lookup@g3")]["gamma"] == 3
        for mode in modes.split(","):
            if not mode.startswith("lr@"):
                assert by[(pid, mode)]["text"] == by[(pid, "ar")]["text"], mode
    rows = summarize(records)
    assert {r.mode for r in rows} == set(modes.split(","))


@pytest.mark.parametrize("bad, message", [
    ("sd@x4", "bad mode .sd@x4.: write base"), ("sd@g0", "must be >= 1"), ("ar@g4", "does not apply"),
    ("sd@k2", "only applies to lr"), ("auto@g4", "does not apply"), ("warp@g2", "unknown mode"), ("sd,sd", "listed twice"),
])
def test_bad_mode_suffixes(dataset, tmp_path, bad, message):
    with pytest.raises(ConfigError, match=message):
        BenchConfig(dataset=str(dataset), out=str(tmp_path / "r.jsonl"), modes=bad)


def test_sampled_evaluation_repeats_each_problem_and_reports_the_spread(dataset, tmp_path):
    from lookahead_reasoning import SamplingConfig
    from lookahead_reasoning.bench.report import fidelity_table

    out = tmp_path / "sampled.jsonl"
    config = BenchConfig(dataset=str(dataset), out=str(out), modes=("ar", "lr"), max_new_tokens=10, limit=2, samples=3,
                         generator=GeneratorSpec(settings=decoding_settings({"temperature": 1.0})))
    runner = _runner(config)
    runner.gen.settings = runner.gen.settings.with_overrides(sampling=SamplingConfig(temperature=1.0))
    run_bench(config, runner=runner, progress=False)
    records = load_results(out)
    assert len(records) == 2 * 2 * 3 and {r["sample"] for r in records} == {0, 1, 2}
    assert {r["seed"] for r in records} == {0, 1, 2} and all(r["temperature"] == 1.0 for r in records)
    texts = {r["text"] for r in records if r["mode"] == "ar" and r["problem_id"] == records[0]["problem_id"]}
    assert len(texts) > 1  # another seed, another sample
    rows = {r.mode: r for r in summarize(records)}
    assert rows["ar"].n == 6 and rows["ar"].accuracy_spread is not None
    assert "± " in markdown_table(list(rows.values()))
    table = fidelity_table(records)
    assert "| lr | 6 |" in table  # every (problem, sample) compared with ar's own
    lr = [r for r in records if r["mode"] == "lr"]
    assert all("cycle_log" in r and "target_tokens_discarded" in r for r in lr)
    assert all({"drafted", "target", "verdicts"} <= r["cycle_log"][0].keys() for r in lr if r["cycle_log"])
    again = CountingRunner(_runner(config))
    run_bench(config, runner=again, progress=False)
    assert again.calls == []  # every (problem, mode, sample) was done


def test_ctrl_c_while_a_record_is_saved_still_saves_it_whole(tmp_path, monkeypatch):
    """A SIGINT that arrives while a finished run's record is being written is held until the record
    is on disk, then raised: the run is not lost, and the file resumes."""
    import os
    import signal

    import lookahead_reasoning.bench.results as results

    out = tmp_path / "r.jsonl"
    results.append_record(out, {"problem_id": "p-0", "mode": "ar", "sample": 0})
    real_last_byte = results._last_byte

    def interrupted_last_byte(path):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of saving
        return real_last_byte(path)

    monkeypatch.setattr(results, "_last_byte", interrupted_last_byte)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job ignores it
    try:
        with pytest.raises(KeyboardInterrupt):
            results.append_record(out, {"problem_id": "p-1", "mode": "ar", "sample": 0})
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C works as before afterwards
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert results.done_pairs(out) == {("p-0", "ar", 0), ("p-1", "ar", 0)}
    assert out.read_text(encoding="utf-8").endswith("\n")


def test_a_results_file_of_another_setup_is_not_resumed(dataset, tmp_path):
    out = tmp_path / "res.jsonl"
    config = BenchConfig(dataset=str(dataset), out=str(out), modes=("ar",), max_new_tokens=4, limit=1)
    run_bench(config, runner=CountingRunner(_runner(config)), progress=False)
    before = out.read_text(encoding="utf-8")
    other = BenchConfig(dataset=str(dataset), out=str(out), modes=("ar",), max_new_tokens=4, limit=2,
                        generator=GeneratorSpec(target="another-target"))
    never = CountingRunner(None)
    with pytest.raises(ConfigError, match="holds results of another setup \\(target 'qwen2.5-coder-1.5b'; this run: "
                                          "target 'another-target'\\): resuming would mix them; give another --out"):
        run_bench(other, runner=never, progress=False)
    assert never.calls == [] and out.read_text(encoding="utf-8") == before


def test_report_puts_results_files_together_by_verifier_and_compares_answers_by_value(tmp_path, capsys):
    from lookahead_reasoning.bench.report import by_verifier, fidelity_table
    from lookahead_reasoning.cli import main

    def run(pid, mode, verifier, predicted, **more):
        return {"problem_id": pid, "mode": mode, "verifier": verifier, "predicted": predicted, "correct": predicted in ("5", "5.0"),
                "engine": True, "new_tokens": 120, "tokens_per_s": 10.0, **more}

    exact = [run(p, "ar", "exact", "5", text=f"{p}: 5") for p in ("a", "b")] + \
        [run(p, "lr@k2", "exact", "5.0", cycles=4, target_rows=8, alpha1=0.2, text=t) for p, t in (("a", "a: 5"), ("b", "b: 5.0"))]
    loose = [run("a", "lr@k2", "likelihood", "7", cycles=3, target_rows=4, alpha1=0.5),
             run("b", "lr@k2", "likelihood", "5", cycles=3, target_rows=4, alpha1=0.5)]
    records = by_verifier(exact + loose)
    assert [r["mode"] for r in records] == ["ar", "ar"] + ["lr@k2 [exact]"] * 2 + ["lr@k2 [likelihood]"] * 2
    table = fidelity_table(records)
    assert "tokens per target request (mean; ar 120.0)" in table
    assert "| lr@k2 [exact] | 2 | 2 | 0 | 0 | 1.00 | 0.50 | - | 15.0 |" in table  # "5.0" is "5"; one text differs
    assert "| lr@k2 [likelihood] | 2 | 1 | 1 | 0 | 0.50 | - | - | 30.0 |" in table  # no texts: no text column
    files = [tmp_path / "exact.jsonl", tmp_path / "loose.jsonl"]
    for path, part in zip(files, (exact, loose)):
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
    assert main(["report", *map(str, files), "--no-plots"]) == 0
    assert "| lr@k2 [likelihood] | 2 | 1 | 1 | 0 | 0.50 |" in capsys.readouterr().out


def test_each_estimator_of_alpha_is_read_as_what_it_is_in_records_of_every_generation():
    """Records name the two token-level rates apart (``alpha_judged``, ``accepted_per_drafted``); files
    written earlier called accepted / judged ``alpha`` beside an ``acceptance_rate``, and the oldest called
    accepted / drafted ``alpha``: the theory's alpha is read as accepted / judged from each."""
    from lookahead_reasoning.bench.report import theory_alpha
    from lookahead_reasoning.decoding.results import SDStats

    stats = SDStats(gamma=4)
    for kept in (4, 1, 0, 2):  # 7 accepted of 16 drafted; 3 rejections judged
        stats.record(4, kept)
    new = stats.summary()
    assert (theory_alpha(new), new["accepted_per_drafted"]) == (0.7, 0.4375)
    middle = {"alpha": 0.7, "acceptance_rate": 0.4375, "accepted": 7, "drafted": 16}
    assert theory_alpha(middle) == 0.7
    oldest = {"alpha": 0.4375, "accepted": 7, "drafted": 16, "gamma": 4, "accept_histogram": [1, 1, 1, 0, 1]}
    assert theory_alpha(oldest) == 0.7


def test_a_record_names_its_verifiers_rule_and_threshold():
    from lookahead_reasoning.verifiers import make_verifier
    from lookahead_reasoning.verifiers.base import verifier_fields

    assert verifier_fields(make_verifier("likelihood", threshold=0.3)) == {"verifier": "likelihood:min-prob",
                                                                           "verifier_threshold": 0.3}
    assert verifier_fields(make_verifier("exact")) == {"verifier": "exact", "verifier_threshold": None}


def _committed_records():
    """(path, record) of every line of every JSONL file under benchmarks/results/."""
    root = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    for path in sorted(root.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield path, json.loads(line)


def test_every_committed_record_names_its_rates_and_its_verifiers_threshold():
    """benchmarks/results/ holds each record's token-level rates under their own names (``alpha_judged``:
    accepted / judged, with its source where it was estimated; ``accepted_per_drafted``), never the older
    ambiguous ``alpha`` or ``acceptance_rate``, and the threshold its verifier ran at (None with
    ``verifier_threshold_recorded`` false where the run did not record it)."""
    checked = 0
    for path, record in _committed_records():
        assert "alpha" not in record and "acceptance_rate" not in record, path
        if record.get("verifier"):
            assert "verifier_threshold" in record, path
            assert record["verifier_threshold"] is not None or record["verifier"] == "exact" or \
                record.get("verifier_threshold_recorded") is False, path
        checked += 1
    assert checked > 1000


def test_every_committed_record_over_llama_cpp_says_whether_its_prompt_cache_was_on():
    """A record that ran against a llama.cpp server (its runtime, or a GGUF target or draft) carries
    ``cache_prompt``: the prompt cache moves llama.cpp's greedy text, so a reader must not have to guess it.
    Files from before the field existed say true (their requests asked for the cache, or the server's default
    kept it on); the cache-off runs say false."""
    seen: dict[str, set] = {}
    for path, record in _committed_records():
        names = [str(record.get(k) or "") for k in ("target", "draft", "target_model", "draft_model")]
        if record.get("runtime") == "llama.cpp" or any(n.endswith(".gguf") for n in names):
            assert isinstance(record.get("cache_prompt"), bool), path
            seen.setdefault(path.name, set()).add(record["cache_prompt"])
    assert all(len(values) == 1 for values in seen.values()), seen
    off = {name for name, values in seen.items() if values == {False}}
    assert off and all("nocache" in name or "cache-off" in name for name in off), off
    assert len(seen) > 30


def test_one_label_grammar_reads_every_mode_and_prints_every_plan():
    """Modes as a user types them (benchmark sweeps, engine modes) and plans as mode auto names them are one
    grammar: CyclePlan.parse reads what CyclePlan.label prints."""
    from lookahead_reasoning.settings import CyclePlan, parse_label

    plans = [CyclePlan(0, gamma=0), CyclePlan(0, gamma=0, chunk=256), CyclePlan(0, gamma=8, draft_stop_below=0.4),
             CyclePlan(2), CyclePlan(1, gamma=8), CyclePlan(2, 2, "async"), CyclePlan(1, rows=1), CyclePlan(2, 2, rows=2)]
    assert [CyclePlan.parse(p.label) for p in plans] == plans
    assert CyclePlan(1, rows=1).label == "lr@k1r1" and CyclePlan(2, 2, rows=2).label == "lr@k2w2r2"
    for bad in (dict(k=0, rows=1), dict(k=1, rows=0), dict(k=2, schedule="async", rows=1)):
        with pytest.raises(ConfigError, match="rows"):
            CyclePlan(**bad)
    assert parse_label("lr-sd@k2g3") == ("lr-sd", {"k": 2, "gamma": 3})
    assert parse_label("lr@k2w2-async") == ("lr", {"k": 2, "width": 2, "schedule": "async"})
    with pytest.raises(ConfigError, match="write base"):
        parse_label("lr@g3k2")  # the knobs in their order
