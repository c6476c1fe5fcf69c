"""The engine benchmark's timelines and planners, against the loopback engine of test_engine_client.

A timeline is what the reasoning-length plot draws: after each request (plain modes, decoding in
windows) or each cycle (LR modes), the tokens written so far and the seconds since the start. Runs
of ``auto`` at the same time each plan with their own planner, sharing what they learn.
"""

from __future__ import annotations

import json
import time

import pytest
from lr_helpers import at, engine_planner, engine_policy, request_table
from test_engine_client import FakeEngine

from lookahead_reasoning.bench.engine import EngineBench, run_engine_bench
from lookahead_reasoning import engine_runtime as runs
from lookahead_reasoning.settings import CyclePlan
from lookahead_reasoning.presets import DEFAULT_MAX_NEW_TOKENS
from lookahead_reasoning.runtime.engine.pair import EnginePair


def _problems(tmp_path, n: int):
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                            for i in range(n)))
    return data


def _timeline_is_sound(record: dict) -> None:
    tokens = [t for t, _ in record["timeline"]]
    seconds = [s for _, s in record["timeline"]]
    assert tokens == sorted(tokens) and seconds == sorted(seconds) and tokens[-1] == record["new_tokens"]
    assert 0 < seconds[0] and tokens[0] > 0


def test_records_carry_a_timeline_when_a_window_is_given(tmp_path):
    data, out = _problems(tmp_path, 1), tmp_path / "results.jsonl"
    with FakeEngine(text="One step") as engine:  # every request writes one step and stops at "\n\n"
        bench = EngineBench(str(data), str(out), engine.url, draft=engine.url, modes=("ar", "lr@k1"),
                            max_new_tokens=40, window=8)
        run_engine_bench(bench, progress=False)
    records = {r["mode"]: r for r in map(json.loads, out.read_text().splitlines())}
    lr = records["lr@k1"]
    assert len(lr["timeline"]) >= 2  # one point per cycle
    assert len(lr["cycle_log"]) == lr["cycles"] and lr["target_rows"] == sum(c["rows"] for c in lr["cycle_log"])
    assert "cycle_log" not in records["ar"]
    for record in records.values():
        _timeline_is_sound(record)


def test_a_windowed_plain_mode_goes_through_the_runtimes_front_door(tmp_path, monkeypatch):
    """Plain modes decoding in windows run through EngineRuntime.agenerate as every mode does, so the runtime's
    check of the mode and settings holds for them too (the one with the run's budget is the run's own)."""
    checked, check = [], runs.EngineRuntime.check
    monkeypatch.setattr(runs.EngineRuntime, "check",
                        staticmethod(lambda mode, settings: (checked.append((mode, settings)), check(mode, settings))))
    data, out = _problems(tmp_path, 1), tmp_path / "results.jsonl"
    with FakeEngine(text="One step") as engine:
        run_engine_bench(EngineBench(str(data), str(out), engine.url, ngram=engine.url, modes=("ar", "ngram"),
                                     max_new_tokens=40, window=8), progress=False)
        asked = [r["max_tokens"] for r in engine.requests]
    assert sorted(mode for mode, settings in checked if settings.max_new_tokens == 40) == ["ar", "ar"]
    assert 8 in asked and 40 not in asked  # each request of at most a window
    for record in map(json.loads, out.read_text().splitlines()):
        _timeline_is_sound(record)


def test_no_window_no_timeline(tmp_path):
    data, out = _problems(tmp_path, 1), tmp_path / "results.jsonl"
    with FakeEngine(text="2 \\boxed{2}") as engine:
        run_engine_bench(EngineBench(str(data), str(out), engine.url, modes=("ar",)), progress=False)
    [record] = map(json.loads, out.read_text().splitlines())
    assert "timeline" not in record and "cache_prompt" not in record


def test_records_say_how_the_servers_were_started(tmp_path):
    data, out = _problems(tmp_path, 1), tmp_path / "results.jsonl"
    with FakeEngine(text="2 \\boxed{2}") as engine:
        bench = EngineBench(str(data), str(out), engine.url, modes=("ar",), server={"cache_prompt": False})
        run_engine_bench(bench, progress=False)
    [record] = map(json.loads, out.read_text().splitlines())
    assert record["cache_prompt"] is False


def test_a_forked_planner_keeps_its_own_plan_and_shares_what_it_learns():
    planner = engine_planner(request_table(lambda r, n: 0.03 * n * r))
    planner.current = CyclePlan(1)
    other = planner.fork()
    assert other.current is None and other.costs is planner.costs and other.book is planner.book
    other.book.record_cycle("lr@k1", 10, 1.0, 20.0)  # one run realised half its predicted speed
    assert planner.book.factor("lr@k1") < 1.0  # learned by one run, used by the other
    assert planner.book.factor("lr@k1-async") == 1.0  # async cycles keep their own


def test_every_endpoint_is_warmed_before_the_first_timed_run(tmp_path):
    data, out = _problems(tmp_path, 1), tmp_path / "results.jsonl"
    with FakeEngine(text="2 \\boxed{2}", stop=None) as target, FakeEngine(text="2", stop=None) as draft:
        run_engine_bench(EngineBench(str(data), str(out), target.url, draft=draft.url, modes=("ar",)),
                         progress=False)
        assert [r["max_tokens"] for r in draft.requests] == [16]  # ar never asks the draft: only the warm-up
        # the run's warm-up, then one just before the timed run, then the run
        assert [r["max_tokens"] for r in target.requests] == [16, 4, DEFAULT_MAX_NEW_TOKENS]
        # the warm-up just before the run sends the problem's own prompt: every mode finds it cached,
        # none pays its prefill in the timed run (the first mode on a problem did, and ran slower)
        assert target.requests[1]["prompt"] == target.requests[2]["prompt"] != target.requests[0]["prompt"]
    assert json.loads(out.read_text())["mode"] == "ar"


def test_a_batch_warms_every_run_before_it_times_any(tmp_path, monkeypatch):
    """At concurrency C, a run that warms its endpoints while another run of its batch decodes slows
    that one on a shared CPU (auto warms the draft too, ar does not: under load auto lost 23-33% of
    ar's throughput that way). Here problem B's requests are slow: its warm-up must still end before
    problem A's timed request starts."""
    data, out = tmp_path / "problems.jsonl", tmp_path / "results.jsonl"
    data.write_text("".join(json.dumps({"question": f"{c}: what is 1 + 1?", "answer": "#### 2"}) + "\n" for c in "AB"))
    events: list[tuple[str, float]] = []
    warm, generate = EnginePair.warm, runs.EngineRuntime.agenerate

    def timed_warm(self, *args, **kwargs):
        warm(self, *args, **kwargs)
        events.append(("warmed", time.perf_counter()))

    async def timed_generate(*args, **kwargs):
        events.append(("timed", time.perf_counter()))
        return await generate(*args, **kwargs)

    monkeypatch.setattr(EnginePair, "warm", timed_warm)
    monkeypatch.setattr(runs.EngineRuntime, "agenerate", timed_generate)
    with FakeEngine(text="2 \\boxed{2}", stop=None, delays={ord("B"): 0.5}) as target:
        run_engine_bench(EngineBench(str(data), str(out), target.url, modes=("ar",), concurrency=2,
                                     max_new_tokens=16), progress=False)
    kinds = [kind for kind, _ in events]
    assert kinds == ["warmed", "warmed", "warmed", "timed", "timed"], kinds  # the bench's, then A's and B's
    assert len(out.read_text().splitlines()) == 2


def test_a_price_tie_at_a_step_boundary_goes_to_the_chunk():
    # seconds in proportion to tokens: a chunk and one step cost the same per token
    planner = engine_planner(request_table(lambda r, n: 0.03 * n * r, rows=(1, 2)), max_k=1)
    plan = engine_policy(planner).plan(at(0, True))
    chunk = planner.config.chunk
    assert planner.rate(CyclePlan(0), 0) == pytest.approx(planner.rate(CyclePlan(0, chunk=chunk), 0))
    assert (plan.k, plan.chunk) == (0, chunk)


def test_every_mode_follows_different_modes_across_problems():
    from collections import defaultdict

    from lookahead_reasoning.bench.engine import mode_order

    modes = ("ar", "sd", "ngram", "lr@k2", "lr-sd@k2", "auto")
    before, first = defaultdict(set), set()
    for i in range(2 * len(modes)):
        order = mode_order(modes, i)
        assert sorted(order) == sorted(modes)
        first.add(order[0])
        for a, b in zip(order, order[1:]):
            before[b].add(a)
    assert first == set(modes) and all(len(before[m]) >= 2 for m in modes)


def test_at_a_boundary_plain_decoding_is_a_chunk_never_a_single_step():
    """One plain step at a boundary is a chunk cut short plus one more request: the planner takes the
    chunk whatever the calibration says (plain steps and chunks share one), and a single step only
    mid-step, to reach the boundary where a better LR plan can start."""
    planner = engine_planner(request_table(lambda r, n: 0.05 + 0.03 * n * r, rows=(1, 2)), max_k=1)
    policy, chunk = engine_policy(planner), planner.config.chunk
    planner.book.calibration["ar"].value = 1 / 3  # plain decoding ran three times slower than priced
    plan = policy.plan(at(0, True))
    assert plan.k >= 1 or plan.chunk == chunk
    planner.book.calibration["ar"].value = 1.0
    planner.book.calibration["lr"].value = 0.1  # LR hopeless, in either schedule
    planner.book.calibration["lr-async"] = type(planner.book.calibration["lr"])(0.1)
    assert policy.plan(at(0, True)).chunk == chunk
    assert policy.plan(at(40, False)).chunk == chunk


def test_batches_meet_each_group_of_problems_in_every_mode_in_turn():
    """C problems of one mode at a time, each group of C once per mode, the mode that goes first turning
    per group (so no mode's batch always follows the same state of the server); done pairs left out."""
    from lookahead_reasoning.bench.datasets import Problem
    from lookahead_reasoning.bench.engine import batch_order

    problems = [Problem(f"p{i}", "q", "1", "test", i) for i in range(6)]
    batches = batch_order(problems, ("ar", "auto"), 2)
    assert [[p.id for p, _ in b] for b in batches] == [["p0", "p1"]] * 2 + [["p2", "p3"]] * 2 + [["p4", "p5"]] * 2
    assert all(len({m for _, m in b}) == 1 for b in batches)
    firsts = [batches[i][0][1] for i in range(0, 6, 2)]
    assert set(firsts) == {"ar", "auto"}
    assert [[(p.id, m) for p, m in b] for b in batch_order(problems[:2], ("ar", "auto"), 1)] == [
        [("p0", "ar")], [("p0", "auto")], [("p1", "auto")], [("p1", "ar")]]  # C = 1: mode_order per problem
    left = batch_order(problems[:2], ("ar", "auto"), 2, {("p0", "ar", 0)})
    assert [[(p.id, m) for p, m in b] for b in left] == [[("p1", "ar")], [("p0", "auto"), ("p1", "auto")]]


def test_a_failed_run_loses_no_other_result_of_its_batch_and_the_bench_resumes(tmp_path):
    """At C = 2 one problem's requests fail: the other run of its batch is written, the error (naming
    the endpoint) stops the bench, and a rerun with the same file runs only what is missing."""
    from lookahead_reasoning.errors import EngineError

    data, out = tmp_path / "problems.jsonl", tmp_path / "results.jsonl"
    data.write_text("".join(json.dumps({"question": f"{c}: what is 1 + 1?", "answer": "#### 2"}) + "\n" for c in "AB"))
    with FakeEngine(text="2 \\boxed{2}", stop=None, fails={ord("B")}) as target:
        bench = EngineBench(str(data), str(out), target.url, modes=("ar",), concurrency=2,
                            max_new_tokens=32)
        with pytest.raises(EngineError, match=target.url.replace(".", r"\.")):
            run_engine_bench(bench, progress=False)
    [kept] = map(json.loads, out.read_text().splitlines())
    assert kept["index"] == 0 and kept["correct"]
    with FakeEngine(text="2 \\boxed{2}", stop=None) as target:
        run_engine_bench(EngineBench(str(data), str(out), target.url, modes=("ar",), concurrency=2,
                                     max_new_tokens=32), progress=False)
        assert len([r for r in target.requests if r["max_tokens"] == 32]) == 1  # only the missing run
    ids = [json.loads(line)["problem_id"] for line in out.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 2 and ids[0] == kept["problem_id"]


def test_an_interrupted_batch_keeps_the_runs_that_had_finished(tmp_path):
    """At C = 2 the bench is stopped (as Ctrl-C stops it) while one run of a batch is still decoding: the
    run that had finished is written, and a rerun runs only the other."""
    import asyncio

    from lookahead_reasoning.bench.engine import arun_engine_bench

    data, out = tmp_path / "problems.jsonl", tmp_path / "results.jsonl"
    data.write_text("".join(json.dumps({"question": f"{c}: what is 1 + 1?", "answer": "#### 2"}) + "\n" for c in "AB"))
    with FakeEngine(text="2 \\boxed{2}", stop=None, delays={ord("B"): 1.5}) as target:
        bench = EngineBench(str(data), str(out), target.url, modes=("ar",), concurrency=2,
                            max_new_tokens=32)

        async def stop_after_the_first_record():
            task = asyncio.create_task(arun_engine_bench(bench, progress=False))
            while len([r for r in target.requests if r["max_tokens"] == 32]) < 2:  # both runs under way
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # A has answered; B takes 1.5 s
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(stop_after_the_first_record())
    [kept] = map(json.loads, out.read_text().splitlines())
    assert kept["index"] == 0 and kept["batch_wall_s"] is None  # the batch never ended: no batch time
    with FakeEngine(text="2 \\boxed{2}", stop=None) as target:
        run_engine_bench(EngineBench(str(data), str(out), target.url, modes=("ar",), concurrency=2,
                                     max_new_tokens=32), progress=False)
        assert len([r for r in target.requests if r["max_tokens"] == 32]) == 1
