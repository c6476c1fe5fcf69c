"""Planning over an engine under load: other runs' requests in flight make rows dearer.

R rows sent while B requests of other runs are in flight cost what R + B rows cost alone
(engines/planning.py). The client counts its requests in flight; the benchmark's ``auto`` runs read
that count when they plan, and measure the endpoints once however many run at once.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from lr_helpers import at
from test_engine_client import FakeEngine

from lookahead_reasoning.bench import engine as engine_bench
from lookahead_reasoning.bench.engine import EngineBench, EngineURLs, run_engine_bench
from lookahead_reasoning.errors import EngineError
from lookahead_reasoning.plan import CyclePlan
from lookahead_reasoning.planning.engine import EngineCosts, EnginePlanner, StepRates, price
from lookahead_reasoning.runtime.engine.client import Endpoint, EngineClient


def budget_costs(budget: int = 4, widest: int = 8) -> EngineCosts:
    """An engine whose batch is free up to ``budget`` rows and grows in proportion beyond it (a GPU
    below and above its compute budget); a draft that costs half a target step."""
    costs = EngineCosts()
    for rows in range(1, widest + 1):
        for n in (8, 40):
            costs.record_rows(rows, n, (0.05 + 0.03 * n) * max(1.0, rows / budget))
    for n in (8, 40):
        costs.draft.add(n, 0.6 * n / 40)
    return costs


def test_a_plan_under_load_is_priced_as_the_same_plan_with_more_rows():
    costs, rates = budget_costs(), StepRates(accepted=3, rejected=2)
    for plan in (CyclePlan(2), CyclePlan(0, chunk=256), CyclePlan(0)):
        tokens, seconds = price(plan, costs, rates, load=3)
        lt = rates.target_tokens
        rows = 1 if plan.k == 0 else plan.k + 1
        n = plan.chunk or lt
        alone = costs.target_s(rows, n)
        loaded = costs.target_s(rows + 3, n)
        assert seconds - price(plan, costs, rates)[1] == pytest.approx(loaded - alone)
        assert tokens == price(plan, costs, rates)[0]  # load changes the time, not what a cycle writes


def test_rows_between_measured_counts_are_interpolated():
    costs = EngineCosts()
    for rows, per_token in ((1, 0.02), (4, 0.05), (8, 0.13)):
        for n in (8, 40):
            costs.record_rows(rows, n, per_token * n)
    assert costs.target_s(2, 40) == pytest.approx(costs.target_s(1, 40) + (costs.target_s(4, 40) - costs.target_s(1, 40)) / 3)
    assert costs.target_s(6, 40) == pytest.approx((costs.target_s(4, 40) + costs.target_s(8, 40)) / 2)
    assert costs.target_s(10, 40) > costs.target_s(8, 40)


def test_the_planner_speculates_less_as_other_requests_fill_the_batch():
    chosen = []
    for load in range(4):
        planner = EnginePlanner(budget_costs(), StepRates(accepted=1, rejected=1), load=lambda load=load: load)
        plan = planner.plan(at(0, True))
        assert planner.busy == load
        assert planner.last[1:3] == pytest.approx(price(plan, planner.costs, planner.rates, load))
        chosen.append(plan.k)
    assert chosen[0] >= 2  # an idle engine: three or four rows cost what one does
    assert chosen == sorted(chosen, reverse=True)
    assert chosen[-1] == 0  # the budget is full of other runs' requests: extra rows cost, stand aside


def test_under_load_a_sync_cycle_pays_the_overlap_for_its_drafts():
    """Alone, a sync cycle's drafts run while the target's endpoint is idle; with other runs' requests
    in flight they run beside those rows and pay the measured overlap, as an async cycle does."""
    costs, rates = budget_costs(), StepRates(accepted=9, rejected=1)
    sync = CyclePlan(2, 1, "sync")
    alone, busy = price(sync, costs, rates)[1], price(sync, costs, rates, load=3)[1]
    costs.overlap = 4.0
    assert price(sync, costs, rates)[1] == pytest.approx(alone)  # no load: nothing runs beside the drafts
    drafting = 2 * costs.draft(rates.draft_tokens)
    assert price(sync, costs, rates, load=3)[1] == pytest.approx(busy + 3 * drafting)
    assert price(CyclePlan(0, chunk=256), costs, rates, load=3) == price(CyclePlan(0, chunk=256), budget_costs(), rates, load=3)


def test_the_client_counts_its_requests_in_flight_and_forgets_failed_ones():
    client = EngineClient(Endpoint("http://127.0.0.1:9", retries=0))
    release = None

    async def held(method, path, body=None):
        await release.wait()
        return {"choices": [{"text": "x", "finish_reason": "stop"}]}

    async def failing(method, path, body=None):
        raise EngineError("scripted failure")

    async def scenario():
        nonlocal release
        release = asyncio.Event()
        client.arequest = held
        tasks = [asyncio.create_task(client.acomplete([1, 2], 4)) for _ in range(3)]
        await asyncio.sleep(0.01)
        seen = client.in_flight
        release.set()
        await asyncio.gather(*tasks)
        after = client.in_flight
        client.arequest = failing
        with pytest.raises(EngineError):
            await client.acomplete([1, 2], 4)
        return seen, after

    seen, after = asyncio.run(scenario())
    assert (seen, after, client.in_flight, client.load.peak) == (3, 0, 0, 3)


def test_concurrent_auto_runs_measure_the_endpoints_once(tmp_path, monkeypatch):
    measured = []

    async def fake_planner(target, draft, context):
        measured.append(list(context))
        await asyncio.sleep(3.0)  # the others must wait, not measure too
        client = target.client
        return EnginePlanner(budget_costs(), StepRates(accepted=1, rejected=30), load=lambda: client.in_flight)

    monkeypatch.setattr(engine_bench, "ameasured_planner", fake_planner)
    data, out = tmp_path / "problems.jsonl", tmp_path / "results.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                            for i in range(3)))
    with FakeEngine(text="2 \\boxed{2}", stop=None) as engine:
        bench = EngineBench(str(data), str(out), EngineURLs(engine.url, engine.url), modes=("auto",),
                            max_new_tokens=16, concurrency=3)
        run_engine_bench(bench, progress=False)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(measured) == 1 and len(records) == 3
    assert all(r["concurrency"] == 3 and r["plans"] for r in records)
    assert {r["batch"] for r in records} == {f"{records[0]['problem_id']}/auto"}  # one batch, named by its first run
    assert len({r["batch_wall_s"] for r in records}) == 1
    assert records[0]["batch_wall_s"] < 3.0  # measured before the batch, not inside its wall time


def test_one_slow_probe_does_not_bend_the_cost_fit(monkeypatch):
    from lookahead_reasoning.planning import engine as planning

    tries = iter([0.26, 1.70, 0.27])  # one try of (1 row, 8 tokens) meets a passing load

    async def timed(steps, context, rows, n):
        return n, (next(tries, None) or 0.0333 * n * (1 + 0.3 * (rows - 1)))

    class Quiet:
        class client:
            @staticmethod
            async def acomplete(*args, **kwargs):
                return None

    monkeypatch.setattr(planning, "_timed", timed)
    costs = asyncio.run(planning.ameasure(Quiet(), None, [1, 2, 3], rows=2))
    assert costs.target[1].points == [(8.0, 0.27), (40.0, pytest.approx(0.0333 * 40))]
    assert len(costs.target[2].points) == 2  # one point per (rows, tokens)
    a, b = costs.target[1].coefficients()
    assert a < 0.01 and b == pytest.approx(0.0333, rel=0.02)


def test_engine_costs_survive_a_round_trip_through_json():
    from lookahead_reasoning.planning.engine import ConfigError

    costs = budget_costs()
    again = EngineCosts.from_json(json.loads(json.dumps(costs.to_json())))
    for rows in (1, 3, 6, 8, 11):
        assert again.target_s(rows, 100) == pytest.approx(costs.target_s(rows, 100))
    assert again.draft(40) == pytest.approx(costs.draft(40))
    with pytest.raises(ConfigError, match="engine cost table"):
        EngineCosts.from_json({"rows": []})
    with pytest.raises(ConfigError, match="at least one row"):
        EngineCosts.from_json({"target": {}})


def _chunk_trace(ids: int, wall_s: float, end: str = "eos"):
    from lookahead_reasoning.decoding.results import CycleTrace
    from lookahead_reasoning.steps import Step

    return CycleTrace([], [Step(list(range(ids)), "x" * ids, end)], [], 0, True, 0.0, wall_s, 0.0, 1,
                      tokens=ids, wall_s=wall_s)


def test_a_chunk_that_meets_eos_early_is_calibrated_for_the_tokens_it_wrote():
    """A chunk priced for 256 tokens that stops at EOS after 64, in the time its price gives 64 tokens,
    was predicted right: the calibration must stay 1 (it fell to 0.25 when the whole price was counted)."""
    planner = EnginePlanner(budget_costs(), StepRates(accepted=1, rejected=30))
    planner.plan(at(0, True))  # a run's first cycle: not calibrated
    planner.learn(_chunk_trace(256, 9.0, "budget"))
    plan = planner.plan(at(256, False))
    assert plan.chunk == 256 and planner.factor(plan) == 1.0
    _, tokens, seconds, _ = planner.last
    planner.learn(_chunk_trace(64, seconds * 64 / tokens))
    assert planner.factor(plan) == pytest.approx(1.0)
    planner.plan(at(320, False))
    planner.learn(_chunk_trace(100, 2 * seconds * 100 / tokens))  # twice as slow as priced
    realised, predicted = planner.calibration["plain"]
    assert realised / predicted == pytest.approx((64 + 200) / (64 + 100))


def test_chunks_teach_the_step_rates_nothing():
    planner = EnginePlanner(budget_costs(), StepRates(accepted=1, rejected=30))
    before = (planner.rates.target_tokens, planner.rates.seen)
    for done in (0, 256):
        plan = planner.plan(at(done, done == 0))
        assert plan.chunk
        planner.learn(_chunk_trace(200, 8.0))  # a 200-token chunk that met EOS: not a 200-token step
    assert (planner.rates.target_tokens, planner.rates.seen) == before
    assert [p for p in planner.costs.target[1].points if p[0] == 200] == []  # nor a row measurement


def test_async_plans_pay_for_a_draft_and_a_target_that_slow_each_other():
    """The overlap ``ameasure`` finds (a draft and a target request at once, over the dearer alone)
    multiplies the async price: where the two servers fight for one CPU's cores, async LR must not win."""
    from lookahead_reasoning.planning import engine as planning

    costs, rates = budget_costs(), StepRates(accepted=9, rejected=1)
    planner = EnginePlanner(costs, rates)
    async_plan = CyclePlan(2, 1, "async")
    base = price(async_plan, costs, rates)[1]
    assert planner.plan(at(0, True)) == max(planner.speculative(), key=planner.rate)  # speculation pays here
    costs.overlap = 8.0
    assert price(async_plan, costs, rates)[1] == pytest.approx(8 * base)
    assert price(CyclePlan(2, 1, "sync"), costs, rates) == price(CyclePlan(2, 1, "sync"), budget_costs(), rates)
    assert planner.plan(at(0, True)).schedule != "async"
    assert EngineCosts.from_json(json.loads(json.dumps(costs.to_json()))).overlap == 8.0

    class Endpoint:
        class client:
            @staticmethod
            async def acomplete(*args, **kwargs):
                return None

    running = {"n": 0}

    async def timed(steps, context, rows, n):  # 20 ms alone, 100 ms beside another request
        running["n"] += 1
        await asyncio.sleep(0)
        seconds = 0.1 if running["n"] > 1 else 0.02
        await asyncio.sleep(seconds)
        running["n"] -= 1
        return n, seconds

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planning, "_timed", timed)
        measured = asyncio.run(planning.ameasure(Endpoint(), Endpoint(), [1, 2], rows=1, repeats=1))
        alone = asyncio.run(planning.ameasure(Endpoint(), None, [1, 2], rows=1, repeats=1))
    assert measured.overlap == pytest.approx(5.0, rel=0.3)
    assert alone.overlap == 1.0  # no draft, nothing to overlap
