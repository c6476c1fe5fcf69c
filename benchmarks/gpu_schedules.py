"""Which compiled path should be the default, measured on a GPU: one command, one JSON file, under 8 minutes.

No weights travel to a GPU machine: models are drawn there with random weights of real shapes
(``testing.REAL_SHAPES``), bf16. Three configurations of the compiled path are measured, each named in the
file by its ``FastPathConfig`` fields (backend/attention):

* ``inductor+cuda-graphs/flex``, the candidate default: inductor's kernels recorded as CUDA graphs, the
  attention through flex attention (as the runtime builds it: a block mask from the cache's mask, where it has one);
* ``cuda-graphs/flex``: flex attention in CUDA graphs recorded by hand, no inductor;
* ``cuda-graphs/sdpa``: the masked SDPA kernel in CUDA graphs recorded by hand;

against the eager loops on the same device (``fast_path="off"``: a ``DynamicCache``, nothing compiled).

1. ``env``: the GPU, torch and transformers, whether ``torch.compile`` works, the free memory.
2. ``lossless``: tiny float32 models on the device, every mode greedy and two sampled: the eager loops'
   tokens (``reference``), then each configuration's beside them (``all_same``).
3. ``compile``: the candidate's decoding step of the 1.5B shape compiled into an empty inductor kernel cache
   (a fresh ``TORCHINDUCTOR_CACHE_DIR``), then again from that cache, as a later run would: seconds, compiles.
4. ``profile``: torch.profiler around ONE decoding step of the candidate replayed from its recording, after
   checking that it was one: the step ran at a bucket shape and neither recorded nor compiled anything.
5. ``contexts``: per shape (1.5B, 7B, 32B) and configuration, greedy AR milliseconds a token after 900, 3900,
   15900 and 31900 cached tokens, each beside the columns the timed tokens' attention read. Attention reads
   the used columns rounded up to a span (256, 512, ... 4096, then steps of 4096), so each context sits just
   under a span's edge and all its tokens read one span; the static cache holds the longest context from the
   start (it never grows, so nothing is recorded or compiled again). A shape whose weights and cache do not fit
   the free memory (PyTorch's cached blocks counted) loses its longest contexts, or is skipped, with a message.
6. ``replay``: the real offline pair's forward schedules (``benchmarks/record_schedules.py``: GSM8K, real
   acceptance) replayed on the 1.5B and 0.5B shapes with SDPA on CUDA graphs, problem by problem while time lasts.

Every entry has a ``status``: "ok", "failed" (with its ``error``) or "skipped" (with its ``message``); the file
is written again after every step (a temporary file renamed over it), so a failure or a call cut short keeps
the rest. The budget (``--budget-s``) runs from the process's start, imports included; before every step
the seconds it is expected to need are set against what is left, and a step that would not fit is skipped
(``budget.checks`` lists every check). Between shapes every model is freed before the next is drawn.

    python benchmarks/gpu_schedules.py --out gpu-schedules.json                     # a CUDA machine
    python benchmarks/gpu_schedules.py --rehearse --out rehearsal.json              # the same code on a CPU
    python benchmarks/gpu_schedules.py --report gpu-schedules.json                  # the tables, anywhere

A rehearsal runs the same code on a CPU with small shapes and short contexts. The CUDA backends run there as
their stand-ins: ``cuda-graphs`` as ``rehearsed-graphs`` (the graphs' bookkeeping, each replay running the
forward), ``inductor+cuda-graphs`` as ``inductor`` (the profile, which needs a recording, as ``rehearsed-graphs``);
every entry's ``ran`` says what ran.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # the budget's clock, started before the imports below, which it counts

import argparse  # noqa: E402
import gc  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_compiled import (  # noqa: E402
    LOSSLESS, Budget, Report, Skip, env, fixed_ids, kernel_summary, lossless_config, lossless_models,
    lossless_reference, overall, shared_vocab, sync)

from lookahead_reasoning.cache.static import ArenaShape, attended_columns, free_bytes  # noqa: E402
from lookahead_reasoning.planning.costs import price_schedule  # noqa: E402
from lookahead_reasoning.runtime.compiled import GRAPH_BACKENDS, FastPathConfig  # noqa: E402
from lookahead_reasoning.runtime.lm import LM  # noqa: E402
from lookahead_reasoning.runtime.schedule import host_gaps, replay  # noqa: E402
from lookahead_reasoning.testing import real_shape_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = ROOT / "benchmarks" / "results" / "schedules" / "gsm8k-100-119.jsonl.gz"
DRAFT = "qwen2.5-coder-0.5b"
SHAPES = ("qwen2.5-coder-1.5b", "qwen2.5-7b", "qwen2.5-32b")
CONFIGS = (("inductor+cuda-graphs", "flex"), ("cuda-graphs", "flex"), ("cuda-graphs", "sdpa"))  # the candidate first
CANDIDATE = CONFIGS[0]
REPLAYED = ("cuda-graphs", "sdpa")  # the schedules' configuration: one recording per bucket shape, no compiler
STAND_INS = {"cuda-graphs": "rehearsed-graphs", "inductor+cuda-graphs": "inductor"}  # on a CPU
SECTIONS = ("env", "lossless", "compile", "profile", "contexts", "replay")
NO_EDGE = 10 ** 9  # an arena length that caps no span

# Seconds each step is expected to take on an H100, from the committed runs (inductor compiled a 28-layer
# decoding step in 25-40 s; a graph records in about a second; the 32B decoded at 36 ms a token): a step
# starts only if these fit in what is left. A rehearsal's are these times Plan.scale.
NEEDS = {"env": 20, "reference": 20, "compile": 80, "profile": 15, "replay": 90,
         "lossless": {"inductor+cuda-graphs/flex": 90, "cuda-graphs/flex": 45, "cuda-graphs/sdpa": 15}}
SHAPE_NEEDS = {  # drawing a shape's weights, then each configuration: compiles and recordings, four timed contexts
    "qwen2.5-coder-1.5b": (5, {"inductor+cuda-graphs/flex": 45, "cuda-graphs/flex": 30, "cuda-graphs/sdpa": 10}),
    "qwen2.5-7b": (10, {"inductor+cuda-graphs/flex": 60, "cuda-graphs/flex": 35, "cuda-graphs/sdpa": 15}),
    "qwen2.5-32b": (30, {"inductor+cuda-graphs/flex": 120, "cuda-graphs/flex": 60, "cuda-graphs/sdpa": 40}),
}


def span(used: int) -> int:
    """The columns attention reads with ``used`` columns held, in a cache long enough for them."""
    return attended_columns(used, NO_EDGE)


@dataclass(frozen=True)
class Plan:
    """How much one call measures: a GPU's sizes (:data:`ON_GPU`) or a CPU rehearsal's (:data:`REHEARSAL`)."""

    contexts: tuple[int, ...] = (900, 3900, 15900, 31900)  # cached tokens before each timed window
    warm: int = 8  # decoding steps before a window is timed (its span's graph recorded)
    tokens: int = 64  # decoding steps timed per context
    chunk: int = 4096  # prompt tokens a prefill forward feeds
    profile_at: int = 3900  # cached tokens before the profiled step
    modes: tuple = LOSSLESS  # the lossless check's modes
    lossless_tokens: int = 96
    again: int = 256  # tokens of the warm lr-sd run that may record nothing new (0: not run)
    shape: dict = field(default_factory=dict)  # changes to every real shape (a rehearsal's are small)
    scale: float = 1.0  # of NEEDS
    margin: float = 3e9  # bytes kept free beside a shape's weights and static cache (activations, a prefill's mask)
    problems: int | None = None  # the schedules' first few problems only (None: all)

    def __post_init__(self) -> None:
        for context in (*self.contexts, self.profile_at):
            first, last = span(context + 1), span(context + self.warm + self.tokens)
            if first != last:
                raise ValueError(f"decoding after {context} cached tokens reads {first} columns, then {last}: "
                                 "take a context further below a span's edge")

    def needs(self, seconds: float) -> float:
        return seconds * self.scale


ON_GPU = Plan()
REHEARSAL = Plan(contexts=(200, 900), warm=2, tokens=4, chunk=512, profile_at=200, modes=LOSSLESS[:1] + LOSSLESS[4:5],
                 lossless_tokens=32, again=0, scale=0.05, margin=0.2e9, problems=1,
                 shape={"layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "intermediate": 256})


def config_name(backend: str, attention: str) -> str:
    return f"{backend}/{attention}"


def runs_as(backend: str, device: torch.device, replayed: bool = False) -> str:
    """The backend that runs for ``backend`` on ``device``: itself on a GPU; on a CPU its stand-in
    (``replayed``: a step that needs a recording, whose stand-in is always rehearsed-graphs)."""
    if device.type == "cuda":
        return backend
    return "rehearsed-graphs" if replayed else STAND_INS.get(backend, backend)


def decoding_config(backend: str, attention: str, length: int, device: torch.device,
                    replayed: bool = False) -> FastPathConfig:
    """What greedy AR runs, and nothing more: one row, the one-token bucket, a static cache of ``length`` columns."""
    return FastPathConfig(backend=runs_as(backend, device, replayed), attention=attention, rows=1, length=length,
                          row_buckets=(1,), token_buckets=(1,))


# ---------------------------------------------------------------------------------------------- memory

def free_memory(device: torch.device) -> int | None:
    """Bytes a new tensor can take: on a GPU the free memory plus the blocks PyTorch holds cached but unused
    (``mem_get_info`` counts those as taken); the host's free memory on a CPU."""
    if device.type != "cuda":
        return free_bytes(device)
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def release() -> None:
    """Free what the models let go: Python's cycles, dynamo's compiled code (which holds its paths'
    tensors), and the GPU's cached blocks."""
    gc.collect()
    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def planned_bytes(name: str, plan: Plan) -> tuple[int, int]:
    """(bytes of the shape's weights, bytes of one column of its one-row static cache) in bf16, read from the
    model built on the meta device (no memory)."""
    lm = real_shape_lm(name, "meta", **plan.shape)
    mc = lm.model.config
    head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // mc.num_attention_heads
    column = ArenaShape(mc.num_hidden_layers, mc.num_key_value_heads, head_dim, 1, 1).bytes(torch.bfloat16)
    return sum(p.numel() * p.element_size() for p in lm.model.parameters()), column


def fitting(contexts: tuple[int, ...], last: int, weights: int, column: int, free: int | None,
            margin: float) -> tuple[list[int], dict[str, str]]:
    """The contexts whose static cache (up to ``last`` tokens past each, rounded up to its span) fits in ``free``
    bytes beside ``weights``, ``margin`` kept spare; and, for the others, why not."""
    kept, dropped = [], {}
    for context in contexts:
        needs = weights + column * span(context + last) + margin
        if free is None or needs <= free:
            kept.append(context)
        else:
            cache = column * span(context + last)
            dropped[str(context)] = (f"needs {needs / 1e9:.1f} GB ({weights / 1e9:.1f} of weights, "
                                     f"{cache / 1e9:.1f} of static cache), {free / 1e9:.1f} GB free")
    return kept, dropped


def draw(name: str, device: torch.device, plan: Plan) -> tuple[LM, dict]:
    """The shape's model on ``device``, and the contexts its memory holds (Skip if none)."""
    release()
    weights, column = planned_bytes(name, plan)
    free = free_memory(device)
    contexts, dropped = fitting(plan.contexts, plan.warm + plan.tokens, weights, column, free, plan.margin)
    if not contexts:
        raise Skip(f"{name} does not fit: {dropped[str(plan.contexts[0])]}")
    start = time.perf_counter()
    lm = real_shape_lm(name, device, **plan.shape)
    sync(device)
    facts = {"weights_gb": round(weights / 1e9, 2), "free_gb": None if free is None else round(free / 1e9, 2),
             "contexts": contexts, "dropped": dropped, "length": span(contexts[-1] + plan.warm + plan.tokens),
             "draw_s": round(time.perf_counter() - start, 2)}
    print(f"[draw] {name}: {facts}", flush=True)
    return lm, facts


# ---------------------------------------------------------------------------------------------- decoding

def prefill(session: Any, ids: list[int], context: int, chunk: int) -> None:
    """Feed ``session``'s row up to ``context`` tokens, ``chunk`` a forward."""
    while len(session.rows[0]) < context:
        held = len(session.rows[0])
        session.extend(0, ids[held:min(held + chunk, context)])
        session.logits()


def decode(session: Any, steps: int, vocab: int) -> None:
    """``steps`` greedy decoding steps: one token fed a forward, its argmax read before the next (as a decoding
    loop reads it)."""
    for i in range(steps):
        session.extend(0, [(13 + 7 * i) % vocab])
        session.argmax().tolist()


def decoding_point(lm: LM, session: Any, plan: Plan) -> dict:
    """Milliseconds a token of ``plan.tokens`` decoding steps after ``plan.warm`` untimed ones, and the columns
    the attention of each step read (from the forwards' cached columns, as the static path rounds them)."""
    cached, vocab, used = len(session.rows[0]), shared_vocab(lm), []
    with lm.metered(lambda t: used.append(t.cached + t.n)):
        decode(session, plan.warm, vocab)
        sync(lm.device)
        start = time.perf_counter()
        decode(session, plan.tokens, vocab)
        sync(lm.device)
        seconds = time.perf_counter() - start
    length = lm.fast.arena.shape.length if lm.fast is not None else NO_EDGE
    return {"cached": cached, "ms_per_token": round(seconds / plan.tokens * 1000, 3),
            "columns": sorted({attended_columns(u, length) for u in used}), "tokens": plan.tokens}


def time_contexts(lm: LM, contexts: list[int], plan: Plan) -> list[dict]:
    """:func:`decoding_point` after each of ``contexts`` cached tokens, in one session prefilled up to each in turn."""
    ids = fixed_ids(lm, max(contexts))
    session = lm.session([ids[:min(plan.chunk, contexts[0])]])
    session.logits()
    points = []
    for context in contexts:
        prefill(session, ids, context, plan.chunk)
        points.append(decoding_point(lm, session, plan))
    return points


def install(lm: LM, config: FastPathConfig) -> bool:
    """Put ``lm`` on ``config`` unless it is on it already (True when it was not): the old path's cache and
    recordings freed before the new cache is made."""
    if lm.fast is not None and lm.fast.config == config:
        return False
    lm.use_fast_path(None)
    release()
    lm.use_fast_path(config)
    return True


def contexts_of(lm: LM, facts: dict, backend: str, attention: str, plan: Plan) -> dict:
    """One configuration at the shape's contexts: installed, its decoding step compiled or recorded at every
    context's span (``prepare_s``), then timed (``points``); ``grown`` and the compiles after say that the
    timing made nothing more."""
    spans = tuple(span(c + 1) for c in facts["contexts"])
    start = time.perf_counter()
    install(lm, decoding_config(backend, attention, facts["length"], lm.device))
    lm.fast.warm(rows=(1,), tokens=(1,), spans=spans)
    sync(lm.device)
    out: dict[str, Any] = {"backend": backend, "attention": attention, "ran": lm.fast.config.backend,
                           "prepare_s": round(time.perf_counter() - start, 2)}
    made = (lm.fast.compiles, lm.fast.captures)
    out["points"] = time_contexts(lm, facts["contexts"], plan)
    out.update(compiles=lm.fast.compiles, captures=lm.fast.captures, grown=lm.fast.grown,
               made_while_timed=lm.fast.compiles + lm.fast.captures - sum(made))
    print(f"[contexts] {lm.name} {config_name(backend, attention)} ({out['ran']}): " + ", ".join(
        f"{p['cached']} cached ({p['columns']} columns) {p['ms_per_token']} ms" for p in out["points"]), flush=True)
    return out


# ---------------------------------------------------------------------------------------------- the call

class Call:
    """One call's device, plan and report, and the one real-shape model held between its steps."""

    def __init__(self, device: torch.device, plan: Plan, report: Report, args: argparse.Namespace):
        self.device, self.plan, self.report, self.args = device, plan, report, args
        self.data = report.data
        self.held: tuple[str, LM, dict] | None = None

    def step(self, into: dict, name: str, needs_s: float, fn: Callable[[], dict], label: str | None = None) -> dict:
        return self.report.section(into, name, self.plan.needs(needs_s), fn, label)

    def model(self, name: str) -> tuple[LM, dict]:
        """The model of shape ``name`` and what its draw found: the held one, or a new draw once the held one
        is freed."""
        if self.held is None or self.held[0] != name:
            self.let_go()
            self.held = (name, *draw(name, self.device, self.plan))
        return self.held[1], self.held[2]

    def let_go(self) -> None:
        self.held = None
        release()

    def wanted(self, section: str) -> bool:
        """Whether ``--sections`` asks for ``section``; if not, it is recorded as skipped."""
        if section in self.args.sections.split(","):
            return True
        self.data[section] = {"status": "skipped", "message": "not asked for (--sections)"}
        return False


def lossless_section(call: Call) -> None:
    """The eager loops' tokens on the device, then each configuration's against them."""
    entry = call.data["lossless"] = {"status": "running", "configs": {}}
    models: dict[str, Any] = {}

    def reference() -> dict:
        models.update(zip(("target", "draft", "prompt"), lossless_models(call.device)))
        return lossless_reference(**models, modes=call.plan.modes, tokens=call.plan.lossless_tokens)

    call.step(entry, "reference", NEEDS["reference"], reference, "lossless/reference")
    for backend, attention in CONFIGS:
        name = config_name(backend, attention)
        if entry["reference"]["status"] == "ok":
            call.step(entry["configs"], name, NEEDS["lossless"][name],
                      lambda b=backend, a=attention: lossless_of(call, models, b, a), f"lossless/{name}")
        else:
            entry["configs"][name] = {"status": "skipped", "message": "no reference"}
        release()
    entry["status"] = overall([entry["reference"], *entry["configs"].values()])
    models.clear()
    release()


def lossless_of(call: Call, models: dict, backend: str, attention: str) -> dict:
    """One configuration's tokens against the reference's (:func:`gpu_compiled.lossless_config`)."""
    config = FastPathConfig(backend=runs_as(backend, call.device), attention=attention, length=1024)
    return {"backend": backend, "attention": attention, **lossless_config(
        models["target"], models["draft"], models["prompt"], call.data["lossless"]["reference"], config,
        call.plan.modes, call.plan.again)}


def compile_section(call: Call, cache: str) -> dict:
    """Seconds to compile the candidate's decoding step (the 1.5B's shape, the first context's span) into the
    empty kernel cache ``cache``, then again from it after dynamo and inductor forgot what they held in memory."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    lm, facts = call.model(SHAPES[0])
    config = decoding_config(*CANDIDATE, facts["length"], call.device)
    out: dict[str, Any] = {"shape": SHAPES[0], "backend": CANDIDATE[0], "attention": CANDIDATE[1],
                           "ran": config.backend, "cache": "a fresh TORCHINDUCTOR_CACHE_DIR, kept for the warm compile"}
    for name in ("cold", "warm"):
        lm.use_fast_path(None)
        release()
        with temporary_cache_dir(cache):
            lm.use_fast_path(config)
            start = time.perf_counter()
            lm.fast.warm(rows=(1,), tokens=(1,), spans=(span(facts["contexts"][0] + 1),))
            sync(call.device)
            out[f"{name}_s"], out[f"{name}_compiles"] = round(time.perf_counter() - start, 2), lm.fast.compiles
    out["cache_mb"] = round(sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file()) / 1e6, 1)
    print(f"[compile] {out}", flush=True)
    return out


def replayed_step(lm: LM, made: tuple[int, int], forwards: list[tuple[int, int]]) -> str | None:
    """Why the profiled step was not one replay of a recording (None when it was): its backend records none,
    its shape is not a bucket, it ran other forwards than one of one token, or it recorded or compiled."""
    fast = lm.fast
    if fast.config.backend not in GRAPH_BACKENDS:
        return f"backend {fast.config.backend} records no graph"
    if not fast.shape(1, 1)[2]:
        return "one row of one token is not a bucket shape"
    if forwards != [(1, 1)]:
        return f"the step ran the forwards (rows, tokens) {forwards}, not one of (1, 1)"
    if made[1] == 0 or (fast.compiles, fast.captures) != made:
        return f"the step found {made[1]} recordings and left {fast.captures} ({fast.compiles - made[0]} new compiles)"
    return None


def profile_section(call: Call) -> dict:
    """torch.profiler around one decoding step of the candidate after ``profile_at`` cached tokens, replayed from
    the recording the warm steps made (checked by :func:`replayed_step`; a step that was not is a failure)."""
    from torch.profiler import ProfilerActivity, profile

    lm, facts = call.model(SHAPES[0])
    install(lm, decoding_config(*CANDIDATE, facts["length"], call.device, replayed=True))
    ids, vocab = fixed_ids(lm, call.plan.profile_at), shared_vocab(lm)
    session = lm.session([ids[:min(call.plan.chunk, call.plan.profile_at)]])
    prefill(session, ids, call.plan.profile_at, call.plan.chunk)
    decode(session, call.plan.warm, vocab)
    made, forwards = (lm.fast.compiles, lm.fast.captures), []
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if call.device.type == "cuda" else [])
    with lm.metered(lambda t: forwards.append((t.rows, t.n, t.cached))):
        with profile(activities=activities) as prof:
            decode(session, 1, vocab)
            sync(call.device)
    why = replayed_step(lm, made, [f[:2] for f in forwards])
    if why is not None:
        raise RuntimeError(f"not a replay: {why}")
    launches = sum(1 for e in prof.events() if e.name == "cudaGraphLaunch")
    out = {"shape": SHAPES[0], "backend": CANDIDATE[0], "attention": CANDIDATE[1], "ran": lm.fast.config.backend,
           "cached": forwards[0][2], "columns": attended_columns(sum(forwards[0][1:]), lm.fast.arena.shape.length),
           "replayed": True, "graph_launches": launches, **kernel_summary(prof, 1, call.device)}
    print(f"[profile] {out['ran']}: {out['kernels_per_forward']:.0f} kernels, "
          f"{out['gpu_busy_ms_per_forward']:.2f} ms busy, {launches} graph launches", flush=True)
    return out


def contexts_section(call: Call, shapes: list[str]) -> None:
    """Per shape: its draw (memory checked), then every configuration at its contexts (:func:`contexts_of`)."""
    entry = call.data["contexts"] = {"status": "running", "shapes": {}}
    for name in shapes:
        draw_s, config_s = SHAPE_NEEDS.get(name, (30, {}))

        def drawn(name: str = name) -> dict:
            return call.model(name)[1]

        shape = call.step(entry["shapes"], name, draw_s, drawn, f"contexts/{name}")
        shape["configs"] = {}
        for backend, attention in CONFIGS:
            config = config_name(backend, attention)
            if shape["status"] != "ok":
                shape["configs"][config] = {"status": "skipped", "message": f"the shape was {shape['status']}"}
                continue
            call.step(shape["configs"], config, config_s.get(config, 60),
                      lambda n=name, s=shape, b=backend, a=attention: contexts_of(call.model(n)[0], s, b, a, call.plan),
                      f"contexts/{name}/{config}")
        call.let_go()
    entry["status"] = overall(entry["shapes"].values())


def replay_shape(target: LM, draft: LM, records: list[dict], seconds: float) -> dict:
    """Problem by problem while ``seconds`` last: each record replayed untimed (its graphs recorded), then timed."""
    models, device, budget, out = {"target": target, "draft": draft}, target.device, Budget(seconds), []
    for problem in dict.fromkeys(r["problem_id"] for r in records):
        if budget.left() < 0:
            break
        mine = [r for r in records if r["problem_id"] == problem]
        for rec in mine:
            replay(rec["events"], models, sync=lambda: sync(device))
        for rec in mine:
            done = replay(rec["events"], models, sync=lambda: sync(device))
            out.append({"problem_id": problem, "config": rec["config"], "new_tokens": rec["new_tokens"],
                        "wall_s": round(done.wall_s, 5), "forward_s": round(done.forward_s, 5),
                        "forwards": done.forwards})
        rates = [f"{o['config']} {o['new_tokens'] / o['wall_s']:.0f} tok/s" for o in out if o["problem_id"] == problem]
        print(f"[replay] {target.name}: {problem}: " + ", ".join(rates), flush=True)
    return {"target": target.name, "draft": draft.name, "runs": out,
            "graphs": target.fast.captures + draft.fast.captures}


def replay_section(call: Call) -> dict:
    """The recorded schedules replayed on the 1.5B target's and 0.5B draft's shapes, :data:`REPLAYED`."""
    records = load_schedules(Path(call.args.schedules), call.plan.problems)
    config = FastPathConfig(backend=runs_as(REPLAYED[0], call.device), attention=REPLAYED[1])
    call.let_go()
    target = real_shape_lm(SHAPES[0], call.device, **call.plan.shape).use_fast_path(config)
    draft = real_shape_lm(DRAFT, call.device, **call.plan.shape).use_fast_path(config)
    seconds = call.report.budget.left() - call.plan.needs(10)
    out = replay_shape(target, draft, records, seconds)
    return {"backend": REPLAYED[0], "attention": REPLAYED[1], "ran": config.backend, **out}


def load_schedules(path: Path, problems: int | None = None) -> list[dict]:
    """The recorded runs, grouped by problem in file order (``problems``: the first few only)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    order = list(dict.fromkeys(r["problem_id"] for r in records))
    keep = set(order[:problems]) if problems else set(order)
    return [r for r in records if r["problem_id"] in keep]


def env_section(device: torch.device) -> dict:
    free = free_memory(device)
    return {**env(device), "free_gb": None if free is None else round(free / 1e9, 2)}


def run(call: Call) -> None:
    """Every section asked for, in order (each recorded, whatever happens to the others)."""
    data, shapes = call.data, call.args.shapes.split(",")
    if call.wanted("env"):
        call.step(data, "env", NEEDS["env"], lambda: env_section(call.device))
    if call.wanted("lossless"):
        lossless_section(call)
    if call.wanted("compile"):
        cache = tempfile.mkdtemp(prefix="inductor-cache-")
        try:
            call.step(data, "compile", NEEDS["compile"], lambda: compile_section(call, cache))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    if call.wanted("profile"):
        call.step(data, "profile", NEEDS["profile"], lambda: profile_section(call))
    if call.wanted("contexts"):
        contexts_section(call, shapes)
    if call.wanted("replay"):
        call.step(data, "replay", NEEDS["replay"], lambda: replay_section(call))
    call.let_go()


def main(argv: list[str] | None = None, started: float | None = None) -> int:
    """Run the call (``started``: when its budget's clock started; by default now). 0 when the file holds every
    section, each with its status; 1 when the call itself broke (its error is in the file too)."""
    args = arguments().parse_args(argv)
    if args.report:
        print_report(json.loads(Path(args.report).read_text(encoding="utf-8")), Path(args.schedules))
        return 0
    device = torch.device(args.device or ("cpu" if args.rehearse else "cuda"))
    plan = REHEARSAL if args.rehearse else ON_GPU
    budget = Budget(args.budget_s, start=started)
    report = Report(args.out, budget, {"argv": vars(args), "rehearsal": args.rehearse, "device": str(device),
                                       "configs": [config_name(*c) for c in CONFIGS],
                                       "candidate": config_name(*CANDIDATE)})
    report.data["budget"].update(clock="from the process's start" if started else "from main()",
                                 imports_s=round(budget.spent(), 1))
    for section in SECTIONS:  # what the call does not reach says so
        report.data[section] = {"status": "skipped", "message": "not reached: the call stopped before it"}
    try:
        run(Call(device, plan, report, args))
    except Exception as exc:  # noqa: BLE001 - what was measured stays in the file
        report.data["error"] = f"{type(exc).__name__}: {exc}"
        print(f"the call broke: {report.data['error']}", flush=True)
    report.save()
    print(f"wrote {args.out} in {report.data['total_s']} s")
    return 1 if "error" in report.data else 0


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-schedules.json")
    ap.add_argument("--schedules", default=str(SCHEDULES))
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --rehearse)")
    ap.add_argument("--budget-s", type=float, default=440.0, help="seconds from the process's start (imports included)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="the sections to run (the others: skipped)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="the shapes the contexts section times")
    ap.add_argument("--rehearse", action="store_true", help="a CPU run of the same code: small shapes, short contexts, "
                    "the CUDA backends' stand-ins, one problem")
    ap.add_argument("--report", default=None, help="print the tables of a finished run's JSON and stop")
    return ap


# ---------------------------------------------------------------------------------------------- the report

def print_report(data: dict, schedules: Path) -> None:
    """What a call measured, section by section (a section that did not run says why)."""
    env_ = data.get("env", {})
    print(f"device: {env_.get('name', env_.get('device'))}, torch {env_.get('torch')}, "
          f"transformers {env_.get('transformers')}{' (a CPU rehearsal)' if data.get('rehearsal') else ''}")
    print_lossless(data.get("lossless", {}))
    for name in ("compile", "profile"):
        section = data.get(name, {})
        print(f"\n{name}: " + (", ".join(f"{k} {v}" for k, v in section.items() if k not in ("top", "traceback"))
                               if section.get("status") == "ok" else why_not(section)))
    print_contexts(data.get("contexts", {}))
    print_replay(data.get("replay", {}), schedules)


def why_not(entry: dict) -> str:
    return f"{entry.get('status', 'missing')}: {entry.get('error') or entry.get('message') or ''}"


def print_lossless(section: dict) -> None:
    reference = section.get("reference", {})
    if reference.get("status") != "ok":
        print(f"\nlossless: no reference ({why_not(reference)})")
        return
    ran = ", ".join(f"{model} {path}" for model, path in reference["ran"].items())
    print(f"\nlossless, against the eager loops on {reference['device']} ({ran}), {len(reference['tokens'])} modes:")
    for name, entry in section.get("configs", {}).items():
        verdict = ("all the same" if entry["all_same"] else f"differ: {entry['first_difference']}") \
            if entry.get("status") == "ok" else why_not(entry)
        print(f"- {name} (ran {entry.get('ran', '-')}): {verdict}")


def print_contexts(section: dict) -> None:
    """AR ms a token per shape, configuration and context, the attended columns beside each figure."""
    for shape, entry in section.get("shapes", {}).items():
        if entry.get("status") != "ok":
            print(f"\n{shape}: {why_not(entry)}")
            continue
        contexts = [str(c) for c in entry["contexts"]]
        print(f"\n{shape}: AR ms a token by cached tokens (attended columns)"
              + (f"; not held: {entry['dropped']}" if entry["dropped"] else ""))
        print("| configuration | ran | " + " | ".join(contexts) + " |")
        print("|---|---|" + "---|" * len(contexts))
        for config, c in entry.get("configs", {}).items():
            if c.get("status") != "ok":
                print(f"| {config} | {why_not(c)} |")
                continue
            cells = [f"{p['ms_per_token']} ({'/'.join(map(str, p['columns']))})" for p in c["points"]]
            print(f"| {config} | {c['ran']} | " + " | ".join(cells) + " |")


def print_replay(section: dict, schedules: Path) -> None:
    """Per configuration of the recorded runs: median tokens/s, speed against ar on the same problems, the price
    the H100 table puts on the same forwards against the replayed time, and the recorded host time."""
    from record_schedules import h100_costs

    if section.get("status") != "ok":
        print(f"\nreplay: {why_not(section)}")
        return
    runs = section["runs"]
    records = {(r["problem_id"], r["config"]): r for r in load_schedules(schedules)}
    costs = h100_costs()
    problems = len({r["problem_id"] for r in runs})
    print(f"\n{section['target']} <- {section['draft']} ({problems} problems, {section['ran']})")
    print("| configuration | tok/s (median) | vs ar (median of per-problem ratios) | priced / replayed "
          "| host ms a token |")
    print("|---|---|---|---|---|")
    ar = {r["problem_id"]: r for r in runs if r["config"] == "ar"}
    med = (lambda xs: f"{statistics.median(xs):.2f}" if xs else "-")
    for config in dict.fromkeys(r["config"] for r in runs):
        mine = [r for r in runs if r["config"] == config]
        rate = (lambda r: r["new_tokens"] / r["wall_s"])
        vs = [rate(r) / rate(ar[r["problem_id"]]) for r in mine if r["problem_id"] in ar]
        recs = [(r, records[(r["problem_id"], config)]) for r in mine if (r["problem_id"], config) in records]
        ratio = [price_schedule(rec["events"], costs) / r["forward_s"] for r, rec in recs]
        host = [sum(host_gaps(rec["events"])) / max(1, rec["new_tokens"]) * 1000 for _, rec in recs]
        print(f"| {config} | {med([rate(r) for r in mine])} | {med(vs)} | {med(ratio)} | {med(host)} |")


if __name__ == "__main__":
    raise SystemExit(main(started=STARTED))
