"""The compiled path (``runtime.compiled`` over ``cache.static``) against the eager reference, on tiny
float32 models.

* Greedy, every mode on the static cache writes the eager ``DynamicCache`` path's tokens (which are greedy
  AR's), with k, gamma and width varied: run as it is (backend "eager": the bucket shapes, scratch rows and
  parked rows with no compiler) and compiled by inductor on this CPU (the kernels a GPU would get are
  Triton's, the graph the same).
* A property test drives both caches through the same random appends, forks, rollbacks and selections and
  compares every row's keys and values, and the logits.
* Once warm, a 256-token ``lr-sd`` run compiles nothing.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning.cache import KVState, StaticKVState
from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.cache.static import attended_columns
from lookahead_reasoning.runtime.compiled import FastPathConfig, default_backend
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.sampling import SamplingConfig
from lookahead_reasoning.testing import perturbed_copy, tiny_model

QUESTION = "Ann has 3 apples and buys 4 more. How many apples does she have?"
GREEDY = (("ar", {}), ("sd", {}), ("sd", {"gamma": 5}), ("sd-ngram", {}), ("lr", {"k": 2}), ("lr", {"k": 3}),
          ("lr", {"k": 2, "width": 2}), ("lr-sd", {}), ("lr-sd", {"k": 2, "gamma": 4}), ("auto", {}))
SAMPLED = (("sd", {"sampling": SamplingConfig(temperature=0.8)}), ("lr-sd", {"sampling": SamplingConfig(temperature=0.8)}))
# Inductor compiles one graph per bucket shape (several seconds each on two cores): few buckets here.
INDUCTOR = FastPathConfig(backend="inductor", row_buckets=(1, 4), token_buckets=(1, 16))


def _pair() -> tuple[LM, LM]:
    target = LM.from_loaded(tiny_model("qwen2", seed=0))  # 4 query heads on 2 key heads: grouped queries
    return target, perturbed_copy(target, 0.3, seed=1)


@pytest.fixture(scope="module")
def reference():
    """Eager tokens of every case, and a pair of models to run them again on the compiled path."""
    target, draft = _pair()
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", k=2, fast_path="off")
    prompt = target.prompt_ids(QUESTION)
    ar = gen.generate(prompt, mode="ar", max_new_tokens=64).token_ids
    tokens = {i: gen.generate(prompt, mode=mode, max_new_tokens=64, **kw).token_ids
              for i, (mode, kw) in enumerate(GREEDY + SAMPLED)}
    assert all(tokens[i] == ar for i in range(len(GREEDY)))  # lossless on the eager path itself
    return gen, prompt, tokens


FLEX = FastPathConfig(backend="rehearsed-graphs", attention="flex")  # flex attention's reference code on a CPU
# Flex attention compiled by inductor under its block mask (blocks of 16 columns: a row's unused ones are skipped).
INDUCTOR_FLEX = FastPathConfig(backend="inductor", attention="flex", block=16, row_buckets=(1, 4),
                               token_buckets=(1, 16))


@pytest.mark.parametrize("backend", ["eager", "rehearsed-graphs", INDUCTOR, FLEX, INDUCTOR_FLEX],
                         ids=["static-eager", "rehearsed-graphs", "static-inductor", "flex-attention", "inductor-flex"])
def test_every_mode_writes_the_eager_paths_tokens_on_the_compiled_path(reference, backend):
    gen, prompt, tokens = reference
    gen.target.use_fast_path(backend)
    gen.draft.use_fast_path(backend)
    try:
        cases = GREEDY + (SAMPLED if backend not in (INDUCTOR, INDUCTOR_FLEX) else ())  # sampled: the same draws
        got = {i: gen.generate(prompt, mode=mode, max_new_tokens=64, **kw).token_ids for i, (mode, kw) in enumerate(cases)}
        wrong = [cases[i] for i in got if got[i] != tokens[i]]
        assert not wrong, wrong
        session = gen.target.session([prompt])
        session.logits()
        assert isinstance(session.kv, StaticKVState)  # it ran on the static cache
        if backend in (INDUCTOR, INDUCTOR_FLEX):
            assert gen.target.fast.compiles >= 4 and gen.draft.fast.compiles >= 1
        if backend in ("rehearsed-graphs", FLEX):  # the rows x tokens x columns recordings were replayed
            assert gen.target.fast.captures >= 4 and gen.draft.fast.captures >= 1
    finally:
        gen.target.use_fast_path(None)
        gen.draft.use_fast_path(None)


@pytest.mark.parametrize("stale", ["ids", "mask", "cols"])
def test_a_replay_that_does_not_copy_one_of_its_inputs_is_seen(reference, monkeypatch, stale):
    """The rehearsal checks the graphs' inputs: a replay that leaves one of its recorded inputs as the
    recording left it writes other tokens than the eager path (so the lossless test above would fail):
    the ids or the new tokens' columns not copied in, or the mask, which a recording reads where the arena
    keeps it, read from a copy taken when it was recorded."""
    import lookahead_reasoning.runtime.graphs as graphs

    def replay(graph, *inputs):
        for name, static, value in zip(("ids", "mask", "cols"), graph.inputs, inputs):
            if name != stale and name != "mask":
                static.copy_(value)
        graph._launch()
        return graph.output

    if stale == "mask":  # every input cloned at recording, the mask too
        init = graphs.Graph.__init__
        monkeypatch.setattr(graphs.Graph, "__init__", lambda self, fn, inputs, pool, fixed=None:
                            init(self, fn, tuple(x.clone() for x in inputs), pool, fixed))
    monkeypatch.setattr(graphs.Graph, "replay", replay)
    gen, prompt, tokens = reference
    gen.target.use_fast_path("rehearsed-graphs")
    gen.draft.use_fast_path("rehearsed-graphs")
    try:
        assert gen.generate(prompt, mode="lr", k=2, max_new_tokens=64).token_ids != tokens[GREEDY.index(("lr", {"k": 2}))]
    finally:
        gen.target.use_fast_path(None)
        gen.draft.use_fast_path(None)


def test_a_replay_that_runs_no_python_swaps_no_layer(monkeypatch):
    """A CUDA graph's replay runs none of the model's code, so it enters none of what that code needs: no
    fused stand-in is set in place of a layer and set back (about 400 module attributes a token for the
    1.5B, host time for nothing), and the attention setting stays as it is. A stand-in for a CUDA graph
    (the rehearsal's bookkeeping, a replay that runs nothing) shows it on a CPU; the recording swaps. A model
    whose weights were replaced since is still refused by name at a replay (its recordings read stale stacks)."""
    import lookahead_reasoning.runtime.backends as backends
    from lookahead_reasoning.testing import KernelsOnly

    monkeypatch.setattr(backends, "RehearsedGraph", KernelsOnly)  # replays like a CUDA graph: no Python
    lm = LM.from_loaded(tiny_model("qwen2", seed=0)).use_fast_path("rehearsed-graphs")
    assert len(lm.fast.fused.stacks) and len(lm.fast.norms.swaps)
    sets = []
    real = torch.nn.Module.__setattr__
    monkeypatch.setattr(torch.nn.Module, "__setattr__", lambda m, k, v: sets.append(k) or real(m, k, v))
    s = lm.session([[5, 6, 7, 8]])
    s.argmax()
    s.extend(0, [9])
    s.argmax()  # the one-token bucket recorded: its code ran with the stand-ins in place
    assert sets
    sets.clear()
    for t in range(5):
        s.extend(0, [10 + t])
        s.argmax()
    assert sets == []
    monkeypatch.undo()
    from lookahead_reasoning.models.kernels import quantize_draft_int8

    quantize_draft_int8(lm.model)  # the recordings read the stacks made of the weights it replaces
    s.extend(0, [20])
    with pytest.raises(ConfigError, match="weights changed since its fast path was made"):
        s.argmax()


def test_a_one_token_forward_runs_the_head_and_its_argmax_in_its_recording(monkeypatch):
    """A forward of one new token a row (every decoding step) replays the head and its argmax with the rest:
    no head runs after the graph, and the logits and ``argmax`` are the eager path's. A forward of several
    tokens runs the head after its graph, on the kept positions only."""
    import lookahead_reasoning.runtime.compiled as compiled

    after = []
    monkeypatch.setattr(compiled.FastPath, "logits", lambda self, hidden: after.append(tuple(hidden.shape)) or
                        self.head(hidden).float())
    eager_lm = LM(_MODEL.model, _MODEL.tokenizer)
    graph_lm = LM(_MODEL.model, _MODEL.tokenizer).use_fast_path("rehearsed-graphs")
    sessions = [lm.session([[5, 6, 7, 8, 9, 10], [5, 6, 7, 11, 12, 13]]) for lm in (eager_lm, graph_lm)]
    torch.testing.assert_close(sessions[1].logits(keep=2), sessions[0].logits(keep=2), rtol=1e-4, atol=1e-4)
    assert after == [(2, 2, _MODEL.model.config.hidden_size)]  # six tokens a row: the head after the graph
    for i in range(6):
        for s in sessions:
            s.extend(0, [20 + i])
            s.extend(1, [40 + i])
        if i % 2:
            eager, graph = (s.logits() for s in sessions)
            torch.testing.assert_close(graph, eager, rtol=1e-4, atol=1e-4)
        else:
            eager, graph = (s.argmax() for s in sessions)
            assert graph.shape == (2, 1) and graph.dtype == torch.long and torch.equal(graph, eager)
    assert len(after) == 1  # one token a row: the head and argmax were replayed with the forward
    assert isinstance(graph_lm.fast.recordings.graphs[(2, 1, 256)].output, tuple)


def test_a_warm_lr_sd_run_compiles_nothing(monkeypatch):
    """Everything a 256-token ``lr-sd`` run needs is compiled by the first such run: a second, on another
    prompt (other lengths, other cache columns), compiles nothing more."""
    target, draft = _pair()
    for lm in (target, draft):
        monkeypatch.setattr(lm, "eos_ids", frozenset())  # the whole budget, whatever the random text
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", fast_path=INDUCTOR)
    first = gen.generate(QUESTION, mode="lr-sd", max_new_tokens=256)
    warm = (target.fast.compiles, draft.fast.compiles)
    assert warm[0] >= 2 and warm[1] >= 1 and first.num_tokens == 256
    second = gen.generate("Tom has 12 pens and gives away 5. How many are left?", mode="lr-sd", max_new_tokens=256)
    assert second.num_tokens == 256
    assert (target.fast.compiles, draft.fast.compiles) == warm


# ---------------------------------------------------------------------------------------------- the cache
_MODEL = tiny_model("qwen2", seed=3)


def _both(length: int = 512):
    eager = LM(_MODEL.model, _MODEL.tokenizer)
    static = LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(FastPathConfig(backend="eager", rows=8, length=length))
    return eager, static


def _same_cache(eager, static) -> None:
    assert eager.rows == static.rows and eager.cached == static.cached
    if eager.kv is None:
        return
    assert isinstance(eager.kv, KVState) and isinstance(static.kv, StaticKVState)
    for row in range(eager.batch_size):
        for layer in range(_MODEL.model.config.num_hidden_layers):
            for mine, theirs in zip(eager.kv.real_kv(layer, row), static.kv.real_kv(layer, row)):
                torch.testing.assert_close(theirs, mine, rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_static_cache_holds_what_the_dynamic_cache_holds(data):
    """Random appends (ragged: rows feed different numbers of tokens), forks, rollbacks, selections and
    copies, done to a DynamicCache session and a static-cache session alike: the same logits, and every
    row (of the live sessions and of the copies set aside, which later forwards must leave untouched)
    holds the same keys and values at its real columns."""
    eager_lm, static_lm = _both()
    prompt = data.draw(st.lists(st.integers(3, 200), min_size=1, max_size=12), label="prompt")
    live = [eager_lm.session([prompt]), static_lm.session([prompt])]
    kept: list[list] = []
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        eager, static = live
        rows = eager.batch_size
        op = data.draw(st.sampled_from(["feed", "feed", "fork", "rollback", "select", "copy"]), label="op")
        if op == "feed" or eager.kv is None:
            extra = [data.draw(st.lists(st.integers(3, 200), max_size=5), label="extra") for _ in range(rows)]
            keep = data.draw(st.integers(1, 1 + min(len(e) for e in extra)), label="keep")
            torch.testing.assert_close(static.logits(extra=extra, keep=keep), eager.logits(extra=extra, keep=keep),
                                       rtol=1e-4, atol=1e-4)
        elif op == "fork" and rows * 2 <= 8:
            k = data.draw(st.integers(1, 8 // rows), label="k")
            live = [eager.fork(k), static.fork(k)]
        elif op == "rollback":
            cuts = [data.draw(st.integers(1, len(r)), label="cut") for r in eager.rows]
            for session in live:
                session.set_rows([r[:c] for r, c in zip(session.rows, cuts)])
        elif op == "select":
            order = data.draw(st.lists(st.integers(0, rows - 1), min_size=1, max_size=rows, unique=True), label="rows")
            for session in live:
                session.select(order)
        elif op == "copy":
            kept.append([eager.fork(1), static.fork(1)])
        _same_cache(*live)
    for eager, static in kept:
        _same_cache(eager, static)


# Every sequence of three of the edits the cycles make, after two rows that hold different tokens. Each
# is applied to a DynamicCache session and a static-cache session alike; the logits of every forward and
# the keys and values of every row (the live session's and those of the copies set aside) must agree.
# A fork of two rows fed differently, then parked by a copy and cut to one row (what ``TorchVerbs.scores``
# does: ``fork(1).select([m])``), is the case the random walk above took thousands of examples to meet.
EDITS = ("feed", "fork2", "fork1", "copy", "select0", "select1", "reverse", "rollback")


def _edit(op: str, live: list, kept: list, step: int) -> list:
    """Apply one edit of :data:`EDITS` to both sessions of ``live``; return the sessions to go on with."""
    eager, static = live
    rows = eager.batch_size
    if op == "feed":  # ragged: row b feeds 1 + (b + step) % 3 tokens
        extra = [[3 + (7 * b + 11 * step + i) % 190 for i in range(1 + (b + step) % 3)] for b in range(rows)]
        torch.testing.assert_close(static.logits(extra=extra, keep=2), eager.logits(extra=extra, keep=2),
                                   rtol=1e-4, atol=1e-4)
    elif op == "fork2" and rows * 2 <= 8:
        return [eager.fork(2), static.fork(2)]
    elif op == "fork1":
        return [eager.fork(1), static.fork(1)]
    elif op == "copy":
        kept.append([eager.fork(1), static.fork(1)])
    elif op in ("select0", "select1", "reverse"):
        order = {"select0": [0], "select1": [rows - 1], "reverse": list(range(rows))[::-1]}[op]
        for session in live:
            session.select(order)
    elif op == "rollback":  # row b loses 1 + b % 2 of its tokens (keeping at least one)
        cuts = [max(1, len(r) - 1 - b % 2) for b, r in enumerate(eager.rows)]
        for session in live:
            session.set_rows([r[:c] for r, c in zip(session.rows, cuts)])
    return live


# Flex attention compiled by inductor under its block mask, in blocks of 16 columns over the 96 a row may hold: the
# blocks a row holds no column in are skipped by inductor's CPU kernel, as by the GPU's. One bucket shape (every
# forward of the edits runs as 8 rows x 4 tokens), so one compile serves every case.
FLEX_EDITS = FastPathConfig(backend="inductor", attention="flex", block=16, rows=8, length=96, row_buckets=(8,),
                            token_buckets=(4,))
EDIT_PATHS = {"static-eager": FastPathConfig(backend="eager", rows=8, length=96), "flex-inductor": FLEX_EDITS}


@pytest.mark.parametrize("path", EDIT_PATHS)
@pytest.mark.parametrize("first", EDITS)
def test_every_short_sequence_of_the_cycles_edits_leaves_both_caches_alike(first, path):
    """All 8**4 sequences of four edits (this case's first one fixed), then a forward: on the static cache run as
    it is, and compiled by inductor with flex attention reading only the key blocks each row holds columns in."""
    eager_lm = LM(_MODEL.model, _MODEL.tokenizer)
    static_lm = LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(EDIT_PATHS[path])
    start = [eager_lm.session([[5, 6, 7, 8]]), static_lm.session([[5, 6, 7, 8]])]
    _edit("feed", start, [], 0)
    start = _edit("fork2", start, [], 0)
    _edit("feed", start, [], 1)  # two rows that hold different tokens
    for rest in itertools.product(EDITS, repeat=3):
        live, kept = [start[0].fork(1), start[1].fork(1)], []
        for step, op in enumerate((first, *rest, "feed"), start=2):
            live = _edit(op, live, kept, step)
            _same_cache(*live)
        for pair in kept:
            _same_cache(*pair)


def _decode_rows_apart(lm, steps: int = 12):
    """A 30-token prompt forked in three rows that decode ``steps`` one-token steps apart, the second row cut back
    to its first five tokens halfway (a run of holes in the middle of its row, a whole block of 16 among them);
    each forward's logits, and the session."""
    s = lm.session([list(range(3, 33))])
    out = [s.logits()]
    s = s.fork(3)
    for t in range(steps):
        for row in range(3):
            s.extend(row, [40 + 7 * row + t])
        if t == steps // 2:
            s.set_rows([s.rows[0], s.rows[1][:5], s.rows[2]])
        out.append(s.logits())
    return out, s


def test_a_decoding_steps_block_mask_reads_the_blocks_a_row_holds_not_the_allocation(monkeypatch):
    """Flex attention reads, of each row, only the key blocks that hold a column the row attends: the block mask a
    decoding step uses lists, per row, exactly the blocks (of 16 columns) that hold one of the row's real columns
    (its new token's own among them): for the scratch row a bucket adds, its own column's block alone; for the row
    cut back, not the block of holes in its middle. None of the other blocks of the 256 attended columns is read,
    nor any of the 1024 allocated. The logits are the eager path's (flex attention's reference code)."""
    import lookahead_reasoning.runtime.compiled as compiled

    seen = []
    real = compiled.block_mask
    monkeypatch.setattr(compiled, "block_mask", lambda mask, cols, groups, block: seen.append(
        (mask.clone(), cols.clone())) or real(mask, cols, groups, block))
    config = FastPathConfig(backend="eager", attention="flex", block=16, length=1024, row_buckets=(1, 4),
                            token_buckets=(1,))
    want, _ = _decode_rows_apart(LM(_MODEL.model, _MODEL.tokenizer))
    lm = LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(config)
    got, s = _decode_rows_apart(lm)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    mask, cols = seen[-1]  # the last decoding step: 4 rows (3 and a scratch row) x 256 attended columns
    blocks = real(mask, cols, 2, 16)
    assert blocks.seq_lengths == (2, 256) and lm.fast.arena.shape.length == 1024
    listed = [blocks.kv_indices[r, 0, 0, :blocks.kv_num_blocks[r, 0, 0]].tolist() for r in range(4)]
    for row in range(4):
        held = s.kv.mask[row].nonzero().flatten() if row < 3 else cols  # the state's columns, the new token's included
        assert sorted(listed[row]) == sorted({int(c) // 16 for c in held}) and len(listed[row]) < 256 // 16, row
    assert len(listed[3]) == 1 and set(range(min(listed[1]), max(listed[1]))) - set(listed[1])  # a block skipped


def _dropping_last_used_block(real):
    """A deliberate break of :func:`~lookahead_reasoning.runtime.attention.used_blocks`: each row's last used
    block left out."""
    def used_blocks(mask, cols, groups, block=16):
        hit = real(mask, cols, groups, block)
        last = hit.shape[-1] - 1 - hit.flip(-1).to(torch.int8).argmax(dim=-1, keepdim=True)
        return hit.scatter(-1, last, False)
    return used_blocks


def test_a_block_mask_that_drops_a_used_block_is_seen(monkeypatch):
    """A deliberate break: the block mask leaves out the last block each row holds columns in. Compiled by
    inductor (on this CPU as on a GPU) flex attention then never reads those columns, and the logits are not the
    eager path's: the equivalence tests above can fail. (Flex attention's reference code, run uncompiled, applies
    the rule to every column and would not notice: the block mask's own test above would.)"""
    import lookahead_reasoning.runtime.attention as attention

    want, _ = _decode_rows_apart(LM(_MODEL.model, _MODEL.tokenizer), steps=4)
    config = FastPathConfig(backend="inductor", attention="flex", block=16, length=96, row_buckets=(4,),
                            token_buckets=(1,))
    lm, broken_lm = (LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(config) for _ in range(2))
    got, _ = _decode_rows_apart(lm, steps=4)
    torch.testing.assert_close(got[-1], want[-1], rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(attention, "used_blocks", _dropping_last_used_block(attention.used_blocks))
    broken, _ = _decode_rows_apart(broken_lm, steps=4)
    assert not any(torch.allclose(b, w, rtol=1e-4, atol=1e-4) for b, w in zip(broken[1:], want[1:]))
    assert lm.fast.compiles == broken_lm.fast.compiles == 1  # compiled, not run as it is


def test_a_parked_fork_cut_to_one_row_runs_on_the_static_cache():
    """The sequence that once failed: two rows fed apart, a copy of them cut to its first row, fed again."""
    eager_lm, static_lm = _both()
    for lm in (eager_lm, static_lm):
        s = lm.session([[5, 6, 7, 8]])
        s.logits(extra=[[9]], keep=1)
        s2 = s.fork(2)
        s2.logits(extra=[[10], [11]], keep=1)
        s3 = s2.fork(1)
        s3.select([0])
        lm.last = s3.logits(extra=[[12]], keep=1)
    torch.testing.assert_close(static_lm.last, eager_lm.last, rtol=1e-4, atol=1e-4)


def _decode_then_roll_back(lm):
    """A prompt (of a bucket's length: no dummy tokens to crop off), forked in two rows that decode six
    one-token steps; then the second row's last three tokens rolled back (holes in the middle of its row)
    and both fed again."""
    s = lm.session([[5, 6, 7, 8]])
    s.logits()
    s = s.fork(2)
    for t in range(6):
        s.extend(0, [20 + t])
        s.extend(1, [40 + t])
        s.logits()
    steady = lm.fast.arena.mask_writes if lm.fast is not None else None
    s.set_rows([s.rows[0], s.rows[1][:-3]])
    return steady, s.logits(extra=[[60], [61]]), s


def test_the_device_mask_is_appended_to_while_decoding_and_written_whole_after_an_edit():
    """The arena's device mask follows the resident state: a decoding step copies its new column (the
    prompt's forward and the fork's first wrote the mask whole, and nothing since), and a rollback, which
    edits the state's mask in place, makes the next forward write it whole; attention then reads what the
    eager path reads."""
    eager_lm, static_lm = _both()
    _, want, eager = _decode_then_roll_back(eager_lm)
    steady, got, s = _decode_then_roll_back(static_lm)
    assert steady == 2 and static_lm.fast.arena.mask_writes == 3  # the prompt's, the fork's first, the rollback's
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for session in (eager, s):  # a hole punched in place (the same tensor, edited): written whole too
        session.kv.mask[0, 5] = 0
        session.extend(0, [62])
        session.extend(1, [63])
    torch.testing.assert_close(s.logits(), eager.logits(), rtol=1e-4, atol=1e-4)
    assert static_lm.fast.arena.mask_writes == 4
    device_mask = static_lm.fast.arena.mask
    assert s.kv.mask.device.type == "cpu"  # the verbs read the host's copy
    assert torch.equal(device_mask[:2, :s.kv.length], s.kv.mask) and not device_mask[:, s.kv.length:].any()
    assert not s.kv.mask.all() and not device_mask[2:].any()  # the scratch rows a bucket adds see nothing but themselves


def test_a_device_mask_that_is_only_appended_to_is_seen(monkeypatch):
    """A deliberate break: the device's mask only ever appended to, never written whole after an edit. The
    columns a rollback freed stay visible, and the logits after it are not the eager path's."""
    import lookahead_reasoning.cache.static as static_cache

    def append_only(arena, state, full_mask):
        b, t = state.mask.shape
        arena.mask[:b, t:full_mask.shape[1]].copy_(full_mask[:, t:])

    monkeypatch.setattr(static_cache.StaticArena, "sync_mask", append_only)
    eager_lm, static_lm = _both()
    _, want, _ = _decode_then_roll_back(eager_lm)
    _, got, _ = _decode_then_roll_back(static_lm)
    assert not torch.allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rows_beyond_the_static_cache_are_refused_by_name():
    lm = LM.from_loaded(tiny_model("qwen2", seed=0)).use_fast_path(FastPathConfig(backend="eager", rows=2, length=32,
                                                                                   row_buckets=(1, 2), token_buckets=(1,)))
    with pytest.raises(ConfigError, match=r"at most 2 rows .*FastPathConfig\(rows"):
        lm.session([[5, 6]] * 3).logits()


@pytest.mark.parametrize("sized", [True, False], ids=["sized-for-its-budget", "grown-mid-run"])
def test_a_run_longer_than_the_static_cache_writes_the_eager_tokens(monkeypatch, sized):
    """No sizing by the user: 300 new tokens on a cache allocated for 32 columns, in every mode that forks rows.
    A run sizes the cache for its prompt and budget at its start (once: no mode grows it midway); where that
    did not happen (here skipped), a row that outgrows the cache makes it grow."""
    import lookahead_reasoning.runtime.compiled as compiled

    if not sized:
        monkeypatch.setattr(compiled.FastPath, "reserve", lambda self, columns: None)
    target, draft = _pair()
    for lm in (target, draft):
        lm.eos_ids = frozenset()  # the whole budget, whatever the random text
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", k=2, fast_path="off")
    prompt = target.prompt_ids(QUESTION)
    eager = {mode: gen.generate(prompt, mode=mode, max_new_tokens=300).token_ids for mode in ("ar", "lr", "lr-sd")}
    for lm in (target, draft):
        lm.use_fast_path(FastPathConfig(backend="eager", rows=8, length=32))
    got = {mode: gen.generate(prompt, mode=mode, max_new_tokens=300).token_ids for mode in eager}
    assert got == eager and len(got["ar"]) == 300
    assert target.fast.arena.shape.length >= len(prompt) + 300
    assert target.fast.grown == 1 if sized else target.fast.grown >= 1


def test_a_cache_the_memory_cannot_hold_is_refused_by_name(monkeypatch):
    import lookahead_reasoning.runtime.compiled as compiled

    lm = LM.from_loaded(tiny_model("qwen2", seed=0)).use_fast_path(FastPathConfig(backend="eager", length=32))
    session = lm.session([list(range(3, 30))])
    session.logits()
    monkeypatch.setattr(compiled, "free_bytes", lambda device: 1000)
    with pytest.raises(ConfigError, match=r"needs 1024 columns per row .*can give 0.0 GB: generate fewer tokens"):
        session.logits(extra=[list(range(3, 10))])


def test_attention_reads_the_used_columns_rounded_up_not_the_allocation():
    assert [attended_columns(u, 65536) for u in (1, 256, 257, 3000, 4097, 8193, 30000)] == \
        [256, 256, 512, 4096, 8192, 12288, 32768]
    assert attended_columns(700, 600) == 600  # never past the allocation
    lm = LM.from_loaded(tiny_model("qwen2", seed=0)).use_fast_path(FastPathConfig(backend="rehearsed-graphs",
                                                                                   length=4096))
    session = lm.session([list(range(3, 200))])
    session.logits()
    for i in range(80):  # from 197 to 277 columns: the recordings read 256, then 512 columns
        session.logits(extra=[[5 + i % 50]])
    assert sorted({span for rows, n, span in lm.fast.recordings.graphs}) == [256, 512]


def test_one_inductor_compile_serves_every_attended_span():
    """Inductor compiles a bucket shape once, whatever columns attention reads: decoding from 197 to 277
    columns (spans of 256, then 512) compiles one graph (a compile is 25-40 s for a real model on a GPU, and
    a long run crosses a span every few thousand tokens), and writes the eager path's logits throughout."""
    eager_lm = LM(_MODEL.model, _MODEL.tokenizer)
    lm = LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(FastPathConfig(backend="inductor", row_buckets=(1,),
                                                                          token_buckets=(1, 16)))
    sessions = [x.session([list(range(3, 200))]) for x in (eager_lm, lm)]
    for s in sessions:
        s.logits()  # 197 tokens: past the token buckets, run uncompiled
    for i in range(80):
        for s in sessions:
            s.extend(0, [5 + i % 50])
        eager, compiled = (s.logits() for s in sessions)
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)
    assert attended_columns(sessions[1].kv.length, 4096) == 512 and lm.fast.compiles == 1


@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_a_cache_that_grows_compiles_nothing_more(attention):
    """Inductor compiles a bucket shape once, whatever the cache's length: decoding past the first allocation
    (304 columns, grown to 1024 midway) compiles nothing more, the attended columns at the cache's length just
    before it grows (304) and below it after (512), and the logits are the eager path's throughout (a compile
    is 25-40 s a shape for a real model on a GPU; a reasoning run outgrows a first allocation)."""
    loaded = tiny_model("qwen2", seed=11)  # a model of its own: no other test's compile serves it
    eager_lm = LM(loaded.model, loaded.tokenizer)
    lm = LM(loaded.model, loaded.tokenizer).use_fast_path(FastPathConfig(
        backend="inductor", attention=attention, block=16, length=304, row_buckets=(1,), token_buckets=(1, 16)))
    sessions = [x.session([list(range(3, 200))]) for x in (eager_lm, lm)]
    for s in sessions:
        s.logits()  # 197 tokens: past the token buckets, run uncompiled
    compiles, spans = [], []
    for i in range(130):  # 197 to 327 columns
        for s in sessions:
            s.extend(0, [5 + i % 50])
        eager, compiled = (s.logits() for s in sessions)
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)
        compiles.append(lm.fast.compiles)
        spans.append(attended_columns(sessions[1].kv.length, lm.fast.arena.shape.length))
    assert lm.fast.grown == 1 and lm.fast.arena.shape.length == 1024
    assert sorted(set(spans)) == [256, 304, 512] and set(compiles) == {1}


def test_fused_products_run_one_product_a_group_over_the_models_own_memory(monkeypatch):
    """q/k/v and gate/up each run as one product: three fewer linear products a layer than unfused, the
    same logits, the model's weights views into the stacked ones (nothing held twice), the eager path
    untouched; a second fast path on the same model reuses the stacks."""
    import torch.nn.functional as F

    loaded = tiny_model("qwen2", seed=5)
    layers = loaded.model.model.layers
    eager = LM(loaded.model, loaded.tokenizer)
    prompt = eager.prompt_ids(QUESTION)
    reference = eager.session([prompt, prompt[:-3]]).logits(keep=1)
    unfused = LM(loaded.model, loaded.tokenizer).use_fast_path(FastPathConfig(backend="eager", length=64, fuse=False))
    fused = LM(loaded.model, loaded.tokenizer).use_fast_path(FastPathConfig(backend="eager", length=64))
    assert unfused.fast.fused is None and len(fused.fast.fused.stacks) == 2 * len(layers)
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        stack = attn._lookahead_stack.weight
        assert [attn.q_proj.weight.data_ptr(), attn.k_proj.weight.data_ptr(), attn.v_proj.weight.data_ptr()] == [
            stack[0].data_ptr(), stack[attn.q_proj.out_features].data_ptr(),
            stack[attn.q_proj.out_features + attn.k_proj.out_features].data_ptr()]
        assert mlp.up_proj.weight.data_ptr() == mlp._lookahead_stack.weight[mlp.gate_proj.out_features].data_ptr()
        assert type(attn.q_proj) is torch.nn.Linear  # the model's own layers stay in place between forwards

    calls = []
    real = F.linear
    monkeypatch.setattr(F, "linear", lambda x, w, b=None: calls.append(w.shape) or real(x, w, b))
    out = {}
    for name, lm in (("unfused", unfused), ("fused", fused)):
        calls.clear()
        out[name] = lm.session([prompt, prompt[:-3]]).logits(keep=1)
        out[name + " products"] = len(calls)
    assert out["unfused products"] - out["fused products"] == 3 * len(layers)
    torch.testing.assert_close(out["fused"], out["unfused"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["fused"], reference, rtol=1e-4, atol=1e-4)
    monkeypatch.undo()
    torch.testing.assert_close(eager.session([prompt, prompt[:-3]]).logits(keep=1), reference, rtol=0, atol=0)
    again = LM(loaded.model, loaded.tokenizer).use_fast_path(FastPathConfig(backend="eager", length=64))
    assert all(a is b for a, b in zip(again.fast.fused.stacks, fused.fast.fused.stacks))


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen3"])
def test_every_architecture_writes_the_eager_tokens_on_the_compiled_path(arch):
    """The compiled path hands the decoder a ready (R, 1, n, W) mask, which every architecture takes as it
    is (a Llama model once received none and stopped); greedy AR and LR write the eager path's tokens."""
    target = LM.from_loaded(tiny_model(arch, seed=2))
    draft = perturbed_copy(target, 0.3, seed=1)
    gen = LookaheadGenerator(target=target, draft=draft, verifier="exact", k=2, fast_path="off")
    prompt = target.prompt_ids(QUESTION)
    want = {mode: gen.generate(prompt, mode=mode, max_new_tokens=24).token_ids for mode in ("ar", "lr")}
    for lm in (target, draft):
        lm.use_fast_path(FastPathConfig(backend="rehearsed-graphs", length=64))
    assert {mode: gen.generate(prompt, mode=mode, max_new_tokens=24).token_ids for mode in want} == want
    assert target.fast.captures > 0 and draft.fast.captures > 0  # they ran on the recorded forwards


@pytest.mark.parametrize("arch", ["qwen2", "llama", "qwen3"])
def test_fused_norms_run_one_rms_norm_a_norm_and_give_the_models_logits(monkeypatch, arch):
    """With ``fuse`` every RMS norm of the decoder runs as one ``F.rms_norm`` (one kernel on a GPU, eight in
    the model's code): two a layer and the last one (and a Qwen3 layer's query and key norms, two more).
    The logits are the eager path's (float32), the model's own norms are back after each forward, and
    ``fuse=False`` calls none."""
    import torch.nn.functional as F

    loaded = tiny_model(arch, seed=5)
    model, tok = loaded.model, loaded.tokenizer
    layers = model.config.num_hidden_layers
    eager = LM(model, tok)
    prompt = eager.prompt_ids(QUESTION)
    reference = eager.session([prompt, prompt[:-3]]).logits(keep=2)
    fused = LM(model, tok).use_fast_path(FastPathConfig(backend="eager", length=64))
    unfused = LM(model, tok).use_fast_path(FastPathConfig(backend="eager", length=64, fuse=False))
    assert len(fused.fast.norms.swaps) == (4 if arch == "qwen3" else 2) * layers + 1 and unfused.fast.norms is None
    calls = []
    real = F.rms_norm
    monkeypatch.setattr(F, "rms_norm", lambda x, shape, w=None, eps=None: calls.append(x.shape) or real(x, shape, w, eps))
    got = fused.session([prompt, prompt[:-3]]).logits(keep=2)
    assert len(calls) == len(fused.fast.norms.swaps)
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-4)
    calls.clear()
    unfused.session([prompt]).logits()
    assert calls == []
    assert type(model.model.norm).__name__.endswith("RMSNorm")  # the model's own, back in place


@pytest.mark.parametrize("n", [1, 3])
def test_flex_attention_reads_the_mask_as_sdpa_does(n):
    """The two attention functions agree on grouped queries under the masks made from one (R, W) mask of held
    columns with holes (a parked row's pads, columns past the causal edge, whole blocks past the rows' ends,
    a scratch row that holds nothing but its own column), for one new token (one mask row for every folded
    query) and several; flex attention's block mask has blocks of 16 columns."""
    from lookahead_reasoning.runtime.attention import additive_mask, block_mask, flex_masked_attention, masked_attention

    g = torch.Generator().manual_seed(n)
    b, hq, hkv, width, d = 3, 4, 2, 256, 16
    query = torch.randn(b, hq, n, d, generator=g)
    key, value = torch.randn(b, hkv, width, d, generator=g), torch.randn(b, hkv, width, d, generator=g)
    cols = torch.arange(100 - n, 100)  # the new tokens' columns
    held = (torch.rand(b, width, generator=g) > 0.3).long()
    held[:, 100:], held[:2, cols], held[2] = 0, 1, 0
    bias = additive_mask(held, cols, hq // hkv, torch.float32)
    sdpa, _ = masked_attention(None, query, key, value, bias, scaling=0.25)
    flex, _ = flex_masked_attention(None, query, key, value, block_mask(held, cols, hq // hkv, 16), scaling=0.25)
    assert sdpa.shape == (b, n, hq, d)
    torch.testing.assert_close(flex, sdpa, rtol=1e-5, atol=1e-5)
    unmasked, _ = masked_attention(None, query, key, value, torch.zeros(b, 1, 1, width), scaling=0.25)
    assert not torch.allclose(unmasked, sdpa, atol=1e-3)  # the mask matters to the comparison


def test_a_group_with_some_layers_biased_and_some_not_stays_apart():
    """Qwen2's q/k/v carry biases and its MLP none; a model whose key projection alone lost its bias keeps
    its attention projections apart (one product could not add the others' biases), and still runs."""
    loaded = tiny_model("qwen2", seed=7)
    for layer in loaded.model.model.layers:
        layer.self_attn.k_proj.bias = None
    eager = LM(loaded.model, loaded.tokenizer)
    prompt = eager.prompt_ids(QUESTION)
    reference = eager.session([prompt]).logits(keep=1)
    lm = LM(loaded.model, loaded.tokenizer).use_fast_path(FastPathConfig(backend="eager", length=64))
    assert len(lm.fast.fused.stacks) == len(loaded.model.model.layers)  # the MLPs only
    torch.testing.assert_close(lm.session([prompt]).logits(keep=1), reference, rtol=1e-4, atol=1e-4)


def test_a_quantised_draft_keeps_its_own_layers_and_a_changed_model_is_refused_by_name():
    """Layers that are not plain nn.Linear (the int8 draft) are left unfused, and still run; a model
    quantised after its fast path was made is refused by name, not run on stale stacked weights."""
    from lookahead_reasoning.models.kernels import quantize_draft_int8

    loaded = tiny_model("qwen2", seed=6)
    stale = LM(loaded.model, loaded.tokenizer).use_fast_path(FastPathConfig(backend="eager", length=64))
    prompt = stale.prompt_ids(QUESTION)
    quantize_draft_int8(loaded.model)
    with pytest.raises(ConfigError, match="weights changed since its fast path was made"):
        stale.session([prompt]).logits()
    lm = LM(loaded.model, loaded.tokenizer).use_fast_path(FastPathConfig(backend="eager", length=64))
    assert len(lm.fast.fused.stacks) == 0
    eager = LM(loaded.model, loaded.tokenizer)
    torch.testing.assert_close(lm.session([prompt]).logits(keep=1), eager.session([prompt]).logits(keep=1),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad, message", [
    ({"backend": "tensorrt"}, "backend must be one of"),
    ({"fuse": "yes"}, "fuse must be True or False"),
    ({"attention": "flash"}, "attention must be one of auto, sdpa, flex"),
    ({"block": 48}, "block must be 16, 32, 64, 128 or 256 columns"),
    ({"rows": 0}, "rows must be an integer"),
    ({"length": 4}, "length .* must be an integer >= 16"),
    ({"row_buckets": (4, 2)}, "row_buckets must be increasing"),
    ({"rows": 4, "row_buckets": (1, 8)}, "row_buckets go up to 8"),
])
def test_a_fast_path_config_that_cannot_work_is_refused(bad, message):
    with pytest.raises(ConfigError, match=message):
        FastPathConfig(**bad)


def test_the_generator_chooses_the_fast_path_by_device_and_a_user_can_turn_it_off():
    target = LM.from_loaded(tiny_model("qwen2", seed=0))
    assert default_backend(torch.device("cpu")) is None
    assert default_backend(torch.device("cuda")) == "inductor+cuda-graphs"
    assert FastPathConfig().backend == "inductor+cuda-graphs"  # a config's default is the GPU's too
    LookaheadGenerator(target=target)  # auto on a CPU: the eager loops
    assert target.fast is None
    LookaheadGenerator(target=target, fast_path="eager")
    assert target.fast is not None and target.fast.config.backend == "eager"
    LookaheadGenerator(target=target, fast_path="off")
    assert target.fast is None
    with pytest.raises(ConfigError, match="needs the model on a CUDA device"):
        LookaheadGenerator(target=target, fast_path="cuda-graphs")
    with pytest.raises(ConfigError, match="fast_path must be one of"):
        LookaheadGenerator(target="no-such-model-is-loaded", fast_path="fastest")
    with pytest.raises(ConfigError, match="fast_path"):
        LookaheadGenerator(target="http://127.0.0.1:9/v1", fast_path="cuda-graphs")
