"""Planning over an engine under load: other runs' requests in flight make rows dearer.

R rows sent while B requests of other runs are in flight cost what R + B rows cost alone
(planning/planner.py, theory.costed.request_cycle). The client counts its requests in flight; the
benchmark's ``auto`` runs read that count when they plan, and measure the endpoints once however
many run at once.
"""

from __future__ import annotations

import asyncio
import json
import types

import pytest
from lr_helpers import at, engine_planner, engine_policy, request_table
from test_engine_client import FakeEngine

from lookahead_reasoning import engine_runtime
from lookahead_reasoning.bench.engine import EngineBench, run_engine_bench
from lookahead_reasoning.errors import ConfigError, EngineError
from lookahead_reasoning.settings import CyclePlan
from lookahead_reasoning.planning import CostTable, endpoints
from lookahead_reasoning.runtime.engine.client import Endpoint, EngineClient
from lookahead_reasoning.theory.costed import StepRates, chunk_cycle, request_cycle


def budget_costs(budget: int = 4, widest: int = 8) -> CostTable:
    """An engine whose batch is free up to ``budget`` rows and grows in proportion beyond it (a GPU
    below and above its compute budget); a draft that costs half a target step."""
    return request_table(lambda r, n: (0.05 + 0.03 * n) * max(1.0, r / budget), rows=range(1, widest + 1),
                         draft=lambda n: 0.6 * n / 40)


STEP = StepRates(0.6, 40.0, 40.0)


def priced(plan: CyclePlan, costs: CostTable, load: int = 0, step: StepRates = STEP):
    """(tokens, seconds) of one cycle of ``plan`` on ``costs`` at ``load``."""
    if plan.k == 0:
        cycle = chunk_cycle(plan.chunk or step.target_tokens, costs.target, load)
    else:
        cycle = request_cycle(plan.k, plan.schedule, step, costs.target, costs.draft, load, costs.overlap)
    return cycle.tokens, cycle.seconds


def test_a_plan_under_load_is_priced_as_the_same_plan_with_more_rows():
    costs = budget_costs()
    for plan in (CyclePlan(2), CyclePlan(0, chunk=256), CyclePlan(0)):
        tokens, seconds = priced(plan, costs, load=3)
        rows = 1 if plan.k == 0 else plan.k + 1
        n = plan.chunk or STEP.target_tokens
        alone, loaded = costs.target(rows, n), costs.target(rows + 3, n)
        assert seconds - priced(plan, costs)[1] == pytest.approx(loaded - alone)
        assert tokens == priced(plan, costs)[0]  # load changes the time, not what a cycle writes


def test_rows_between_measured_counts_are_interpolated():
    per_token = {1: 0.02, 4: 0.05, 8: 0.13}
    costs = request_table(lambda r, n: per_token[r] * n, rows=(1, 4, 8))
    t = costs.target
    assert t(2, 40) == pytest.approx(t(1, 40) + (t(4, 40) - t(1, 40)) / 3)
    assert t(6, 40) == pytest.approx((t(4, 40) + t(8, 40)) / 2)
    assert t(10, 40) > t(8, 40)
    assert t(1, 256) == pytest.approx(0.02 * 256)  # a chunk past the longest probe: the line through the last two


def test_the_planner_speculates_less_as_other_requests_fill_the_batch():
    chosen = []
    for load in range(4):
        planner = engine_planner(budget_costs(), load=lambda load=load: load)
        plan = engine_policy(planner).plan(at(0, True))
        assert planner.busy == load
        assert planner.rate(plan, 0) == pytest.approx(planner.estimate(plan, 0).rate)
        tokens, seconds = priced(plan, planner.costs, load, planner.book.step.model())
        assert planner.estimate(plan, 0).seconds == pytest.approx(seconds)
        chosen.append(plan.k)
    assert chosen[0] >= 2  # an idle engine: three or four rows cost what one does
    assert chosen == sorted(chosen, reverse=True)
    assert chosen[-1] == 0  # the budget is full of other runs' requests: extra rows cost, stand aside


def test_under_load_a_sync_cycle_pays_the_overlap_for_its_drafts():
    """Alone, a sync cycle's drafts run while the target's endpoint is idle; with other runs' requests
    in flight they run beside those rows and pay the measured overlap, as an async cycle does."""
    costs, step = budget_costs(), StepRates(0.9, 40.0, 40.0)
    sync = CyclePlan(2, 1, "sync")
    alone, busy = priced(sync, costs, 0, step)[1], priced(sync, costs, 3, step)[1]
    costs.overlap = 4.0
    assert priced(sync, costs, 0, step)[1] == pytest.approx(alone)  # no load: nothing runs beside the drafts
    drafting = 2 * costs.draft(1, step.draft_tokens)
    assert priced(sync, costs, 3, step)[1] == pytest.approx(busy + 3 * drafting)
    chunk = CyclePlan(0, chunk=256)
    assert priced(chunk, costs, 3, step) == priced(chunk, budget_costs(), 3, step)


def test_the_client_counts_its_requests_in_flight_and_forgets_failed_ones():
    client = EngineClient(Endpoint("http://127.0.0.1:9", retries=0, engine="openai"))  # no /v1/models to ask
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
    assert (seen, after, client.in_flight) == (3, 0, 0)


def test_concurrent_auto_runs_measure_the_endpoints_once(tmp_path, monkeypatch):
    measured = []

    async def fake_planner(target, draft, context):
        measured.append(list(context))
        await asyncio.sleep(3.0)  # the others must wait, not measure too
        client = target.client
        return engine_planner(budget_costs(), accepted=1, rejected=30, load=lambda: client.in_flight)

    monkeypatch.setattr(engine_runtime, "ameasured_planner", fake_planner)
    data, out = tmp_path / "problems.jsonl", tmp_path / "results.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                            for i in range(3)))
    with FakeEngine(text="2 \\boxed{2}", stop=None) as engine:
        bench = EngineBench(str(data), str(out), engine.url, draft=engine.url, modes=("auto",),
                            max_new_tokens=16, concurrency=3)
        run_engine_bench(bench, progress=False)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(measured) == 1 and len(records) == 3
    assert all(r["concurrency"] == 3 and r["plans"] for r in records)
    assert {r["batch"] for r in records} == {f"{records[0]['problem_id']}/auto"}  # one batch, named by its first run
    assert len({r["batch_wall_s"] for r in records}) == 1
    assert records[0]["batch_wall_s"] < 3.0  # measured before the batch, not inside its wall time


def test_one_slow_probe_does_not_bend_the_cost_table(monkeypatch):
    tries = iter([0.26, 1.70, 0.27])  # one try of (1 row, 8 tokens) meets a passing load

    async def timed(steps, context, rows, n):
        return n, (next(tries, None) or 0.0333 * n * (1 + 0.3 * (rows - 1)))

    class Quiet:
        class client:
            @staticmethod
            async def acomplete(*args, **kwargs):
                return None

    monkeypatch.setattr(endpoints, "_timed", timed)
    costs = asyncio.run(endpoints.ameasure(Quiet(), None, [1, 2, 3], rows=2))
    assert costs.per == "request" and costs.draft is None
    assert costs.target.points[1] == {8: 0.27, 40: pytest.approx(0.0333 * 40)}
    assert set(costs.target.points[2]) == {8, 40}  # one point per (rows, tokens)
    assert costs.target(1, 24) == pytest.approx((0.27 + 0.0333 * 40) / 2)


def test_request_costs_survive_a_round_trip_through_json():
    costs = budget_costs()
    costs.overlap = 2.5
    again = CostTable.from_json(json.loads(json.dumps(costs.to_json())))
    for rows in (1, 3, 6, 8, 11):
        assert again.target(rows, 100) == pytest.approx(costs.target(rows, 100))
    assert again.draft(1, 40) == pytest.approx(costs.draft(1, 40))
    assert (again.per, again.overlap, again.target.padding) == ("request", 2.5, False)
    with pytest.raises(ConfigError, match="not a cost table"):
        CostTable.from_json({"rows": []})
    with pytest.raises(ConfigError, match="1-row curve"):
        CostTable.from_json({**costs.to_json(), "target": {**costs.target.to_json(), "points": {}}})


def _chunk_trace(ids: int, wall_s: float, end: str = "eos"):
    from lookahead_reasoning.decoding.results import CycleTrace
    from lookahead_reasoning.steps import Step

    return CycleTrace([], [Step(list(range(ids)), "x" * ids, end)], [], 0, True, 0.0, wall_s, 0.0, 1,
                      tokens=ids, wall_s=wall_s)


def test_a_chunk_that_meets_eos_early_is_calibrated_for_the_tokens_it_wrote():
    """A chunk priced for 256 tokens that stops at EOS after 64, in the time its price gives 64 tokens,
    was predicted right: the calibration must stay 1 (it fell to 0.25 when the whole price was counted)."""
    planner = engine_planner(budget_costs(), accepted=1, rejected=30)
    policy = engine_policy(planner)
    policy.plan(at(0, True))  # a run's first cycle: not calibrated
    policy.learn(_chunk_trace(256, 9.0, "budget"))
    plan = policy.plan(at(256, False))
    assert plan.chunk == 256 and planner.book.factor(plan.label) == 1.0
    estimate = planner.estimate(plan, 256)
    policy.learn(_chunk_trace(64, estimate.seconds * 64 / estimate.tokens))
    assert planner.book.factor(plan.label) == pytest.approx(1.0)
    policy.plan(at(320, False))
    policy.learn(_chunk_trace(100, 2 * estimate.seconds * 100 / estimate.tokens))  # twice as slow as priced
    assert planner.book.factor(plan.label) < 1.0
    assert planner.book.factor("ar") == planner.book.factor(plan.label)  # one plain step shares the chunks' factor


def test_chunks_teach_the_step_rates_nothing():
    planner = engine_planner(budget_costs(), accepted=1, rejected=30)
    policy = engine_policy(planner)
    before = (planner.book.step.target_tokens.value, planner.book.step.target_tokens.weight)
    points = json.dumps(planner.costs.to_json())
    for done in (0, 256):
        plan = policy.plan(at(done, done == 0))
        assert plan.chunk
        policy.learn(_chunk_trace(200, 8.0))  # a 200-token chunk that met EOS: not a 200-token step
    after = planner.book.step.target_tokens
    assert (after.value, after.weight) == before
    assert json.dumps(planner.costs.to_json()) == points  # nor a row measurement


def test_a_sync_cycle_teaches_the_request_table_at_its_rows_plus_the_load():
    from lookahead_reasoning.decoding.results import CycleTrace
    from lookahead_reasoning.steps import Step

    costs = request_table(lambda r, n: (0.05 + 0.03 * n) * max(1.0, r / 4), draft=lambda n: 0.001 * n, overlap=8.0)
    # a cheap draft, and async cycles that pay dearly for overlapping it: the planner runs sync ones
    planner = engine_planner(costs, accepted=30, rejected=1, max_k=1, load=lambda: 1)
    policy = engine_policy(planner)
    policy.plan(at(0, True))  # the first cycle teaches nothing of costs
    policy.learn(CycleTrace([], [Step([1] * 40, "x", "delimiter")], [], 0, True, 0.0, 9.0, 0.0, 2, tokens=40, wall_s=9.0))
    plan = policy.plan(at(40, True))
    assert (plan.k, plan.schedule) == (1, "sync")
    before = planner.costs.target(3, 40)
    steps = [Step([1] * 40, "x", "delimiter"), Step([2] * 40, "y", "delimiter")]
    policy.learn(CycleTrace(steps[:1], steps, [], 0, True, 0.1, 4 * before, 0.0, 2, tokens=40, wall_s=4 * before))
    assert planner.costs.target(3, 40) > before  # 2 rows + 1 request of another run, slower than the table said
    assert planner.costs.target(2, 40) == pytest.approx(0.05 + 0.03 * 40)


def test_async_plans_pay_for_a_draft_and_a_target_that_slow_each_other():
    """The overlap ``ameasure`` finds (a draft and a target request at once, over the dearer alone)
    multiplies the async price: where the two servers fight for one CPU's cores, async LR must not win."""
    costs, step = budget_costs(), StepRates(0.9, 40.0, 40.0)
    planner = engine_planner(costs, accepted=9, rejected=1)
    async_plan = CyclePlan(2, 1, "async")
    base = priced(async_plan, costs, 0, step)[1]
    first = engine_policy(planner).plan(at(0, True))
    assert first.k > 0 and planner.rate(first, 0) == max(planner.rate(p, 0) for p in planner.candidates())
    costs.overlap = 8.0
    assert priced(async_plan, costs, 0, step)[1] == pytest.approx(8 * base)
    assert priced(CyclePlan(2, 1, "sync"), costs, 0, step) == priced(CyclePlan(2, 1, "sync"), budget_costs(), 0, step)
    assert engine_policy(planner).plan(at(0, True)).schedule != "async"

    class Endpoint:
        class client:
            @staticmethod
            async def acomplete(*args, **kwargs):
                return None

    running, clock = {"n": 0}, {"now": 0.0}

    async def timed(steps, context, rows, n):  # 20 ms alone, 100 ms beside another request, on a simulated clock
        running["n"] += 1
        start = clock["now"]
        await asyncio.sleep(0)
        seconds = 0.1 if running["n"] > 1 else 0.02
        await asyncio.sleep(0)
        clock["now"] = max(clock["now"], start + seconds)
        running["n"] -= 1
        return n, seconds

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(endpoints, "_timed", timed)
        mp.setattr(endpoints, "time", types.SimpleNamespace(perf_counter=lambda: clock["now"]))
        measured = asyncio.run(endpoints.ameasure(Endpoint(), Endpoint(), [1, 2], rows=1, repeats=1))
        alone = asyncio.run(endpoints.ameasure(Endpoint(), None, [1, 2], rows=1, repeats=1))
    assert measured.overlap == pytest.approx(5.0)
    assert alone.overlap == 1.0  # no draft, nothing to overlap
