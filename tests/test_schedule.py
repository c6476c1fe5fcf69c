"""Forward schedules (``runtime.schedule``): a run's session verbs recorded, and replayed on other weights.

A replay must make the very forwards the recorded run made (rows, new tokens per row, cached columns),
through the same forks, selections and rollbacks, on the eager cache and on the static cache, or say
where it parted from the record.
"""

from __future__ import annotations

import copy

import pytest
import torch

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
    sys.modules[name] = module  # where its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


def _like_a_gpu(monkeypatch):
    """A generator on this CPU puts its models on the compiled path unless told otherwise, as one on a GPU does
    (there the default is CUDA graphs): a check whose reference forgot ``fast_path="off"`` compares the compiled
    path with itself here too."""
    import lookahead_reasoning.generator as generator
    import lookahead_reasoning.runtime.lm as lm

    for module in (generator, lm):  # where the generator asks, and where the model puts itself on the path
        monkeypatch.setattr(module, "default_backend", lambda device: "rehearsed-graphs")


def test_the_gpu_call_runs_end_to_end_on_the_cpu(tmp_path, capsys, monkeypatch):
    """What the GPU machine will run, rehearsed: schedules recorded (tiny models) and packed, then the call on
    small shapes with the CUDA backends' stand-ins, and its report printed. The file holds the eager loops'
    reference and every configuration's tokens beside it, each shape's contexts with the columns their tokens
    read (just under a span's edge: one span each, the cache never grown, nothing made while timing), one
    profiled step that was a replay, and a status for every section and step."""
    import json

    record, gpu = _script("record_schedules"), _script("gpu_schedules")
    raw, packed, out = tmp_path / "schedules.jsonl", tmp_path / "schedules.jsonl.gz", tmp_path / "gpu.json"
    assert record.main(["--rehearse", "--out", str(raw), "--configs", "ar,lr@k2-exact,auto-h100"]) == 0
    assert record.main(["--out", str(raw), "--pack", str(packed)]) == 0
    _like_a_gpu(monkeypatch)
    assert gpu.main(["--rehearse", "--schedules", str(packed), "--out", str(out), "--budget-s", "600"]) == 0
    data = json.loads(out.read_text())
    statuses = {s: data[s]["status"] for s in gpu.SECTIONS}
    assert set(statuses.values()) == {"ok"}, statuses
    candidate, flex, sdpa = (gpu.config_name(*c) for c in gpu.CONFIGS)
    ran = {candidate: "inductor", flex: "rehearsed-graphs", sdpa: "rehearsed-graphs"}  # the CPU's stand-ins

    reference, configs = data["lossless"]["reference"], data["lossless"]["configs"]
    assert reference["ran"] == {"target": "off", "draft": "off"} and reference["device"] == "cpu"
    assert set(reference["tokens"]) == {"ar", "lr@k2"} and all(len(t) == 32 for t in reference["tokens"].values())
    for name in (flex, sdpa):
        assert configs[name]["status"] == "ok" and configs[name]["all_same"], name
        assert configs[name]["ran"] == f"{ran[name]}/{configs[name]['attention']}" and configs[name]["graphs_made"] > 0
    assert configs[candidate]["status"] == "ok" and configs[candidate]["all_same"], configs[candidate]
    assert configs[candidate]["ran"] == "inductor/flex", configs[candidate]  # the candidate, compiled on the CPU
    compile_ = data["compile"]
    assert compile_["cold_compiles"] == compile_["warm_compiles"] == 1 and compile_["cold_s"] > compile_["warm_s"] > 0

    profile = data["profile"]
    assert profile["replayed"] and profile["ran"] == "rehearsed-graphs" and profile["kernels_per_forward"] > 0
    assert (profile["cached"], profile["columns"]) == (202, 256)
    for shape in gpu.SHAPES:
        entry = data["contexts"]["shapes"][shape]
        assert entry["status"] == "ok" and entry["contexts"] == [200, 900] and entry["length"] == 1024, shape
        for name, config in entry["configs"].items():
            assert config["status"] == "ok" and config["ran"] == ran[name], (shape, name)
            assert [(p["cached"], p["columns"]) for p in config["points"]] == [(200, [256]), (900, [1024])]
            assert all(p["ms_per_token"] > 0 for p in config["points"])
            assert config["grown"] == config["made_while_timed"] == 0
    runs = data["replay"]["runs"]
    assert {r["config"] for r in runs} == {"ar", "lr@k2-exact", "auto-h100"}
    assert all(r["wall_s"] >= r["forward_s"] > 0 for r in runs)
    checks = data["budget"]["checks"]
    assert len(checks) == 1 + 1 + 3 + 2 + 3 * 4 + 1 and all(c["left_s"] >= c["needs_s"] for c in checks)

    capsys.readouterr()
    gpu.main(["--report", str(out), "--schedules", str(packed)])
    table = capsys.readouterr().out
    assert "lossless, against the eager loops on cpu (target off, draft off), 2 modes:" in table
    assert f"| {sdpa} | rehearsed-graphs | " in table and "| lr@k2-exact |" in table and "| ar | " in table
    monkeypatch.setattr("sys.argv", ["gpu_report.py", str(out)])
    _script("gpu_report").main()  # gpu_report.py knows the file, and prints the same tables
    assert f"| {sdpa} | rehearsed-graphs | " in capsys.readouterr().out


def test_the_lossless_reference_is_the_eager_loops_on_the_device(monkeypatch):
    """gpu_compiled's lossless check: the reference runs no forward on the compiled path even where a generator
    would put the models on it by default (a GPU's); a configuration's tokens run there and are compared."""
    from lookahead_reasoning.runtime.compiled import FastPath

    gpu = _script("gpu_compiled")
    _like_a_gpu(monkeypatch)
    compiled_forwards = []
    run = FastPath.run
    monkeypatch.setattr(FastPath, "run", lambda self, *a, **kw: compiled_forwards.append(1) or run(self, *a, **kw))
    target, draft, prompt = gpu.lossless_models(torch.device("cpu"))
    modes = (("ar", {}), ("sd", {"gamma": 3}))
    reference = gpu.lossless_reference(target, draft, prompt, modes, tokens=12)
    assert compiled_forwards == [] and reference["ran"] == {"target": "off", "draft": "off"}
    config = FastPathConfig(backend="rehearsed-graphs", length=64)
    out = gpu.lossless_config(target, draft, prompt, reference, config, modes, again=0)
    assert len(compiled_forwards) > 0 and out["all_same"] and out["ran"] == "rehearsed-graphs/sdpa"
    assert target.fast is None and draft.fast is None


def test_a_shape_keeps_the_contexts_its_memory_holds(monkeypatch):
    """gpu_schedules' memory guard: the static cache of each context (rounded up to its span, the timed tokens
    included) beside the weights and a margin; the contexts that do not fit are dropped with the figures, and a
    shape that holds none is skipped before any weight is drawn."""
    gpu = _script("gpu_schedules")
    weights, column = gpu.planned_bytes("qwen2.5-32b", gpu.ON_GPU)
    assert 65e9 < weights < 66e9 and column == 64 * 2 * 8 * 128 * 2  # layers, keys and values, heads, head size, bf16
    free = weights + 3e9 + column * 4096
    kept, dropped = gpu.fitting(gpu.ON_GPU.contexts, 72, weights, column, free, margin=3e9)
    assert kept == [900, 3900] and set(dropped) == {"15900", "31900"}
    assert dropped["15900"].startswith("needs 72.8 GB (65.5 of weights, 4.3 of static cache)")
    assert gpu.fitting((900,), 72, weights, column, None, 3e9) == ([900], {})  # memory unknown: every context tried
    monkeypatch.setattr(gpu, "free_memory", lambda device: 10e9)
    with pytest.raises(gpu.Skip, match="qwen2.5-32b does not fit: needs 68.8 GB"):
        gpu.draw("qwen2.5-32b", torch.device("cpu"), gpu.ON_GPU)


def test_a_call_out_of_budget_records_every_section_as_skipped(tmp_path):
    """With no time left every step is skipped, saying so, and the file still has every section."""
    import json

    gpu = _script("gpu_schedules")
    out = tmp_path / "gpu.json"
    assert gpu.main(["--rehearse", "--out", str(out), "--budget-s", "0"]) == 0
    data = json.loads(out.read_text())
    assert all(data[s]["status"] == "skipped" for s in gpu.SECTIONS)
    assert data["env"]["message"].startswith("0 s left, the step needs about 1 s")
    assert all(c["status"] == "skipped" for c in data["lossless"]["configs"].values())
    assert all(s["configs"] and all(c["message"] == "the shape was skipped" for c in s["configs"].values())
               for s in data["contexts"]["shapes"].values())


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
