"""Forward schedules (``runtime.schedule``): a run's session verbs recorded, and replayed on other weights.

A replay must make the very forwards the recorded run made (rows, new tokens per row, cached columns),
through the same forks, selections and rollbacks, on the eager cache and on the static cache, or say
where it parted from the record.
"""

from __future__ import annotations

import copy

import pytest

from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning.runtime.compiled import FastPathConfig
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.steps import StepConfig
from lookahead_reasoning.runtime.schedule import ScheduleRecorder, forwards, host_gaps, replay, summary
from lookahead_reasoning.testing import perturbed_copy, tiny_model

QUESTION = "Ann has 3 apples and buys 4 more. How many apples does she have?"
RUNS = (("lr", {"k": 2}), ("lr-sd", {"k": 2, "gamma": 4}), ("sd", {"gamma": 5}), ("auto", {}))


def _shape(events):
    """Everything of a schedule but its clock readings."""
    return [e[:8] if e[0] == "fwd" else e for e in events]


@pytest.fixture(scope="module")
def recorded():
    target = LM.from_loaded(tiny_model("qwen2", seed=0))
    draft = perturbed_copy(target, 0.3, seed=1)
    for lm in (target, draft):
        lm.eos_ids = frozenset()  # the whole budget: several cycles, forks and rollbacks
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", fast_path="off",
                             steps=StepConfig(delimiters=(" ", ".", "a", "e", "o"), max_step_tokens=12))
    recorder = ScheduleRecorder()
    recorder.attach(target, "target")
    recorder.attach(draft, "draft")
    out = {}
    for mode, kw in RUNS:
        calls = (target.stats.calls, draft.stats.calls)
        with recorder.recording() as events:
            gen.generate(QUESTION, mode=mode, max_new_tokens=96, **kw)
        out[mode] = (events, (target.stats.calls - calls[0], draft.stats.calls - calls[1]))
    return out


def test_a_recorded_schedule_holds_every_forward_of_the_run(recorded):
    for mode, (events, calls) in recorded.items():
        assert (len(forwards(events, "target")), len(forwards(events, "draft"))) == calls, mode
        assert len(host_gaps(events)) == sum(calls) - 1 and all(g >= 0 for g in host_gaps(events))
    lr = summary(recorded["lr"][0])
    assert lr["forks"] >= 2 and max(map(int, lr["target"]["rows"])) >= 2  # the cycles forked rows


def test_a_recorded_forward_is_timed_with_its_devices_work(monkeypatch):
    """A model's forward does not wait for its device, so the recorder waits before it reads the clock: once
    a forward, on the device the forward's result lies on (on a CPU, a wait that returns at once)."""
    import lookahead_reasoning.runtime.session as session_module

    waited = []
    monkeypatch.setattr(session_module, "wait_for", lambda device: waited.append(device.type))
    lm = LM.from_loaded(tiny_model("qwen2", seed=0))
    recorder = ScheduleRecorder()
    recorder.attach(lm, "target")
    with recorder.recording() as events:
        s = lm.session([[5, 6, 7]])
        for t in range(3):
            s.extend(0, [8 + t])
            s.argmax()
    assert waited == ["cpu"] * len(forwards(events, "target")) and len(waited) == 3
    ScheduleRecorder.detach(lm)
    lm.session([[5, 6, 7]]).logits()  # no recorder: no wait
    assert len(waited) == 3


@pytest.mark.parametrize("fast", [None, FastPathConfig(backend="rehearsed-graphs", length=64)],
                         ids=["dynamic-cache", "static-cache"])
def test_a_replay_on_other_weights_makes_the_same_forwards(recorded, fast):
    """Replayed on models of the same shape with other weights (the static cache too, which has to grow
    past 64 columns): recorded again, the replay's schedule is the original's, clock aside."""
    target, draft = LM.from_loaded(tiny_model("qwen2", seed=5)), LM.from_loaded(tiny_model("qwen2", seed=6))
    for lm in (target, draft):
        lm.use_fast_path(fast)
    recorder = ScheduleRecorder()
    recorder.attach(target, "target")
    recorder.attach(draft, "draft")
    for mode, (events, calls) in recorded.items():
        with recorder.recording() as again:
            done = replay(events, {"target": target, "draft": draft})
        assert _shape(again) == _shape(events), mode
        assert (done.forwards["target"], done.forwards["draft"]) == calls
        assert 0 < done.forward_s <= done.wall_s


def test_a_replay_that_parts_from_its_record_says_where(recorded):
    events = copy.deepcopy(recorded["lr"][0])
    fwd = [e for e in events if e[0] == "fwd" and e[1] == "target"][5]
    fwd[6] = [n + 1 for n in fwd[6]]  # the record says one more token per row was fed
    target, draft = LM.from_loaded(tiny_model("qwen2", seed=5)), LM.from_loaded(tiny_model("qwen2", seed=6))
    with pytest.raises(ValueError, match="replay of forward 5 of the target fed"):
        replay(events, {"target": target, "draft": draft})


def _script(name: str):
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_replay_runs_end_to_end_on_the_cpu(tmp_path, capsys):
    """What the GPU machine will run, rehearsed: schedules recorded (tiny models), packed, replayed on the
    static cache's graph bookkeeping for every target shape (made small), and the report printed."""
    import json

    record, gpu = _script("record_schedules"), _script("gpu_schedules")
    raw, packed, out = tmp_path / "schedules.jsonl", tmp_path / "schedules.jsonl.gz", tmp_path / "gpu.json"
    assert record.main(["--rehearse", "--out", str(raw), "--configs", "ar,lr@k2-exact,auto-h100"]) == 0
    assert record.main(["--out", str(raw), "--pack", str(packed)]) == 0
    assert gpu.main(["--rehearse", "--schedules", str(packed), "--out", str(out), "--budget-s", "120"]) == 0
    data = json.loads(out.read_text())
    assert data["lossless"]["rehearsed-graphs"]["all_same"]
    assert set(data["context"]["ms_per_token"]) == {"256", "1024"}
    assert set(data["context"]["unfused_ms_per_token"]) == {"256"}  # the fused products' A/B
    assert set(data["flex"]["ms_per_token"]) == {"256"}  # flex attention beside the masked SDPA
    assert data["flex"]["same_greedy_tokens_as_sdpa"] == 32  # float32 on the CPU: the same choices
    inductor = data["inductor"]  # compile costs, cold and from the kernel cache; no new compile for a longer span
    assert inductor["cold_compiles"] == inductor["cached_compiles"] == inductor["compiles_after"] == 1
    assert inductor["cold_compile_s"] > 0 and inductor["cached_compile_s"] > 0 and set(inductor["ms_per_token"]) == {"256"}
    for name in gpu.TARGETS:
        runs = data["replay"][name]["runs"]
        assert {r["config"] for r in runs} == {"ar", "lr@k2-exact", "auto-h100"}, name
        assert all(r["wall_s"] >= r["forward_s"] > 0 for r in runs)
    capsys.readouterr()
    gpu.main(["--report", str(out), "--schedules", str(packed)])
    table = capsys.readouterr().out
    assert "| lr@k2-exact |" in table and "| ar | " in table
    assert "the same unfused (q/k/v and gate/up as separate products, the model's own norms): 256: " in table
    assert "the same with flex attention: 256: " in table
    assert "the same compiled by inductor (inductor): 256: " in table


def test_decoding_alone_is_timed_without_the_prompts_forward():
    """gpu_compiled.decode_only_ms: one forward over the prompt, then one-token forwards fed the argmax."""
    from lookahead_reasoning.runtime.lm import LM
    from lookahead_reasoning.testing import tiny_model

    gpu = _script("gpu_compiled")
    lm = LM.from_loaded(tiny_model("qwen2", seed=0))
    seen = []
    lm.listeners.append(lambda timing: seen.append((timing.rows, timing.n, timing.cached)))
    assert gpu.decode_only_ms(lm, tokens=5, prompt_tokens=40) > 0
    assert seen[0] == (1, 40, 0) and seen[1:] == [(1, 1, 40 + i) for i in range(8 + 5)]


def test_the_replay_host_timing_runs_and_restores_the_graph_class(tmp_path):
    """benchmarks/replay_host.py runs end to end (one short run) and leaves the compiled path recording with
    the rehearsal's graphs, as it found it."""
    import json

    import lookahead_reasoning.runtime.backends as backends
    from lookahead_reasoning.runtime.graphs import RehearsedGraph

    out = tmp_path / "host.json"
    assert _script("replay_host").main(["--repeats", "1", "--tokens", "2", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["us_per_token"]) == {"2", "28", "64"}
    assert all(v["as built"] > 0 and v["stand-ins every replay"] > 0 for v in data["us_per_token"].values())
    assert backends.RehearsedGraph is RehearsedGraph
