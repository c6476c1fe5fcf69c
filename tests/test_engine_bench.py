"""The engine benchmark's timelines and planners, against the loopback engine of test_engine_client.

A timeline is what the reasoning-length plot draws: after each request (plain modes, decoding in
windows) or each cycle (LR modes), the tokens written so far and the seconds since the start. Runs
of ``auto`` at the same time each plan with their own planner, sharing what they learn.
"""

from __future__ import annotations

import json
import time

from lr_helpers import at
from test_engine_client import FakeEngine

from lookahead_reasoning.bench.engine import EngineBench, EngineURLs, run_engine_bench
from lookahead_reasoning.engines import runs
from lookahead_reasoning.plan import CyclePlan
from lookahead_reasoning.planning.engine import EngineCosts, EnginePlanner
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
        bench = EngineBench(str(data), str(out), EngineURLs(engine.url, engine.url), modes=("ar", "lr@k1"),
                            max_new_tokens=40, window=8)
        run_engine_bench(bench, progress=False)
    records = {r["mode"]: r for r in map(json.loads, out.read_text().splitlines())}
    lr = records["lr@k1"]
    assert len(lr["timeline"]) >= 2  # one point per cycle
    for record in records.values():
        _timeline_is_sound(record)


def test_no_window_no_timeline(tmp_path):
    data, out = _problems(tmp_path, 1), tmp_path / "results.jsonl"
    with FakeEngine(text="2 \\boxed{2}") as engine:
        run_engine_bench(EngineBench(str(data), str(out), EngineURLs(engine.url), modes=("ar",)), progress=False)
    [record] = map(json.loads, out.read_text().splitlines())
    assert "timeline" not in record


def test_a_forked_planner_keeps_its_own_plan_and_shares_what_it_learns():
    costs = EngineCosts()
    planner = EnginePlanner(costs)
    planner.last = (CyclePlan(1), 60.0, 1.0, 2.0)
    other = planner.fork()
    assert other.last is None and other.costs is planner.costs and other.rates is planner.rates
    assert other.calibration is planner.calibration
    other.calibration["sync"] = [1.0, 2.0]
    assert planner.factor(CyclePlan(1)) == 0.5  # learned by one run, used by the other


def test_every_endpoint_is_warmed_before_the_first_timed_run(tmp_path):
    data, out = _problems(tmp_path, 1), tmp_path / "results.jsonl"
    with FakeEngine(text="2 \\boxed{2}", stop=None) as target, FakeEngine(text="2", stop=None) as draft:
        run_engine_bench(EngineBench(str(data), str(out), EngineURLs(target.url, draft.url), modes=("ar",)),
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
    warm, ar = EnginePair.warm, runs.ar

    def timed_warm(self, *args, **kwargs):
        warm(self, *args, **kwargs)
        events.append(("warmed", time.perf_counter()))

    def timed_ar(*args, **kwargs):
        events.append(("timed", time.perf_counter()))
        return ar(*args, **kwargs)

    monkeypatch.setattr(EnginePair, "warm", timed_warm)
    monkeypatch.setattr(runs, "ar", timed_ar)
    with FakeEngine(text="2 \\boxed{2}", stop=None, delays={ord("B"): 0.5}) as target:
        run_engine_bench(EngineBench(str(data), str(out), EngineURLs(target.url), modes=("ar",), concurrency=2,
                                     max_new_tokens=16), progress=False)
    kinds = [kind for kind, _ in events]
    assert kinds == ["warmed", "warmed", "warmed", "timed", "timed"], kinds  # the bench's, then A's and B's
    assert len(out.read_text().splitlines()) == 2


def test_a_price_tie_at_a_step_boundary_goes_to_the_chunk():
    costs = EngineCosts()
    for rows in (1, 2):  # seconds in proportion to tokens: a chunk and one step cost the same per token
        costs.record_rows(rows, 8, 0.03 * 8 * rows)
        costs.record_rows(rows, 40, 0.03 * 40 * rows)
    planner = EnginePlanner(costs, max_k=1)
    plan = planner.plan(at(0, True))
    assert planner.rate(CyclePlan(0)) == planner.rate(CyclePlan(0, chunk=planner.chunk))
    assert plan == CyclePlan(0, chunk=planner.chunk)


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
    costs = EngineCosts()
    for rows in (1, 2):
        costs.record_rows(rows, 8, 0.05 + 0.03 * 8 * rows)
        costs.record_rows(rows, 40, 0.05 + 0.03 * 40 * rows)
    planner = EnginePlanner(costs, max_k=1)
    planner.calibration["plain"] = [3.0, 1.0]  # plain decoding ran three times slower than priced
    plan = planner.plan(at(0, True))
    assert plan.k >= 1 or plan.chunk == planner.chunk
    planner.calibration["plain"] = [1.0, 1.0]
    planner.calibration["sync"] = planner.calibration["async"] = [10.0, 1.0]  # LR hopeless
    assert planner.plan(at(0, True)) == planner.plan(at(40, False)) == CyclePlan(0, chunk=planner.chunk)
