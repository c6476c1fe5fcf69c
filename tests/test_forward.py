"""``LM.forward`` and ``Session``: batched, padded, cached forwards equal each row run alone.

The reference is the model called on one row with no padding and no cache (``reference_logits``).
Pads are fed in two places, as the decoding loops do: on the left of a first chunk (rows of
different length) and in the middle of a row (each later chunk right-aligned after a cached prefix).
"""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel

from lookahead_reasoning.decoding import generate
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.errors import ConfigError, PromptError
from lookahead_reasoning.runtime import lm as lm_module
from lookahead_reasoning.runtime.clock import EventClock, HostClock, clock_for, wait_for
from lookahead_reasoning.runtime.compiled import CUDA_ATTENTION

from conftest import LOGIT_ATOL as ATOL, ORDINARY_IDS, feed_chunks, max_abs_diff, reference_logits, tiny_lm
VOCAB_IDS = st.sampled_from(ORDINARY_IDS)  # byte and merge tokens of the tiny tokenizer
chunk = st.lists(VOCAB_IDS, min_size=1, max_size=6)
# each row is a list of chunks; row r's chunk i is fed in forward pass i (rows with fewer chunks get pads)
rows_of_chunks = st.lists(st.lists(chunk, min_size=1, max_size=3), min_size=1, max_size=4)


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
@settings(max_examples=30, deadline=None)
@given(rows=rows_of_chunks)
def test_padded_chunked_batch_equals_rows_alone(arch_name, rows):
    lm = tiny_lm(arch_name)
    got, state = feed_chunks(lm, rows)
    for b, r in enumerate(rows):
        flat = [t for c in r for t in c]
        assert state.row_lengths()[b] == len(flat)
        assert max_abs_diff(got[b], reference_logits(lm, flat)) < ATOL


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_left_padding_and_middle_pads_explicit(arch_name):
    """A fixed case of both kinds of pads: a 1-token row beside a 12-token row, then uneven chunks."""
    lm = tiny_lm(arch_name)
    rows = [[[5], [7, 8, 9, 10, 11], [12]], [list(range(40, 52)), [3], [1, 2, 3, 4]]]
    got, state = feed_chunks(lm, rows)
    # the mask has holes in the middle of row 0 (left pads of chunk 0, middle pads of chunk 2)
    assert state.mask[0].tolist() == [0] * 11 + [1] + [1] * 5 + [0, 0, 0, 1]
    for b, r in enumerate(rows):
        flat = [t for c in r for t in c]
        assert max_abs_diff(got[b], reference_logits(lm, flat)) < ATOL


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
@settings(max_examples=15, deadline=None)
@given(rows=rows_of_chunks, extra=st.integers(1, 5))
def test_forwards_padded_to_a_larger_n_equal_rows_alone(arch_name, rows, extra):
    """A padding policy (``LM.metered(pad_to=...)``, mode auto's cost table) feeds every forward ``extra`` more tokens
    per row: the logits, the cache's length and mask, and the real-token count are those of the
    unpadded forwards."""
    lm = tiny_lm(arch_name)
    _, plain = feed_chunks(lm, rows)
    ns, installed = [], (lm.pad_to, list(lm.listeners))
    before = lm.stats.copy()
    with lm.metered(lambda t: ns.append(t.n), pad_to=lambda r, n: n + extra):
        got, state = feed_chunks(lm, rows)
    assert (lm.pad_to, lm.listeners) == installed
    assert torch.equal(state.mask, plain.mask) and state.cache.get_seq_length() == plain.length
    assert lm.stats.since(before).tokens == sum(len(c) for r in rows for c in r)
    assert ns == [max(len(r[i]) if i < len(r) else 0 for r in rows) + extra
                      for i in range(max(len(r) for r in rows))]
    for b, r in enumerate(rows):
        assert max_abs_diff(got[b], reference_logits(lm, [t for c in r for t in c])) < ATOL


def test_keep_limits_logits_and_stats_count_real_tokens():
    lm = tiny_lm("qwen2")
    ids = torch.tensor([[1, 2, 3, 4], [0, 0, 5, 6]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    logits, state = lm.forward(ids, None, mask, keep=2)
    assert logits.shape == (2, 2, lm.vocab_size) and logits.dtype == torch.float32
    assert (lm.stats.calls, lm.stats.tokens) == (1, 6)
    assert state.length == 4
    # keep larger than the chunk gives the whole chunk
    logits, state = lm.forward(torch.tensor([[7], [8]]), state, keep=5)
    assert logits.shape == (2, 1, lm.vocab_size)
    assert (lm.stats.calls, lm.stats.tokens) == (2, 8)
    assert max_abs_diff(logits[1, 0], reference_logits(lm, [5, 6, 8])[-1]) < ATOL


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
@pytest.mark.parametrize("n, keep", [(1, 1), (4, 1), (4, 2), (4, 4), (3, 9)])
def test_lm_head_sees_compact_hidden_states(arch_name, n, keep):
    """The output layer must get a compact (B, keep, H) input, not a strided view of the n positions:
    torch's bf16 CPU matmul copies the whole output matrix for the strided view (a 40x slower LM
    head on every multi-token forward that keeps fewer positions). The logits must not change."""
    lm = tiny_lm(arch_name)
    seen = []
    hook = lm.model.get_output_embeddings().register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    try:
        ids = torch.tensor([[9, 10, 11, 12, 13][:n]] * 2)
        logits, _ = lm.forward(ids, None, keep=keep)
    finally:
        hook.remove()
    [x] = seen
    kept = min(keep, n)
    assert tuple(x.shape[:2]) == (2, kept)
    assert x.stride() == torch.empty(x.shape).stride()  # compact: batch stride kept * H, not n * H
    assert max_abs_diff(logits[0], reference_logits(lm, [9, 10, 11, 12, 13][:n])[-kept:]) < ATOL


def test_forward_rejects_bad_shapes():
    lm = tiny_lm("llama")
    with pytest.raises(ConfigError):
        lm.forward(torch.tensor([1, 2, 3]))
    with pytest.raises(ConfigError):
        lm.forward(torch.zeros((1, 0), dtype=torch.long))
    _, state = lm.forward(torch.tensor([[1, 2]]))
    with pytest.raises(ConfigError):
        lm.forward(torch.tensor([[1], [2]]), state)


# ---------------------------------------------------------------------------------------- Session

def last_logits_ok(lm, session: Session, logits: torch.Tensor, rows=None) -> None:
    for b, row in enumerate(session.rows if rows is None else rows):
        assert max_abs_diff(logits[b, -1], reference_logits(lm, row)[-1]) < ATOL, f"row {b}"


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_session_extra_set_rows_fork_select(arch_name):
    lm = tiny_lm(arch_name)
    session = Session(lm, [[1, 2, 3], list(range(60, 90))])
    last_logits_ok(lm, session, session.logits())
    # drafted extras of different length, all positions scored
    logits = session.logits(extra=[[4, 5, 6], [7]], keep=4)
    assert session.rows[0][-3:] == [4, 5, 6] and session.rows[1][-1] == 7
    ref0 = reference_logits(lm, session.rows[0])
    assert max_abs_diff(logits[0], ref0[-4:]) < ATOL
    assert max_abs_diff(logits[1, -2:], reference_logits(lm, session.rows[1])[-2:]) < ATOL
    # roll back part of row 0, replace row 1's tail: the next logits follow the new rows
    session.set_rows([[1, 2, 3, 4, 9], list(range(60, 80)) + [11, 12]])
    last_logits_ok(lm, session, session.logits())
    # a row with nothing new re-feeds its last token; an inactive row keeps its cache as it is
    rows_before = [list(r) for r in session.rows]
    logits = session.logits(active=[True, False])
    assert session.rows == rows_before
    assert max_abs_diff(logits[0, -1], reference_logits(lm, rows_before[0])[-1]) < ATOL
    # fork: 3 branches per row, each extended differently, some by a lot
    child = session.fork(3)
    assert child.batch_size == 6 and session.batch_size == 2
    for b in range(6):
        child.extend(b, list(range(100 + b, 100 + b + 1 + 7 * (b % 3))))
    last_logits_ok(lm, child, child.logits())
    # the parent is untouched by the child's forwards
    session.extend(1, [42])
    last_logits_ok(lm, session, session.logits())
    # select two branches in a new order, continue decoding
    keep_rows = [child.rows[4], child.rows[1]]
    child.select([4, 1])
    assert child.rows == keep_rows
    child.extend(0, [13, 14])
    child.extend(1, [15])
    last_logits_ok(lm, child, child.logits())
    # select down to one row compacts the holes away
    child.select([1])
    assert int(child.kv.mask.min()) == 1
    child.extend(0, [16])
    last_logits_ok(lm, child, child.logits())


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_session_random_edits_match_reference(data):
    """Random sequences of extend / set_rows (rollbacks) / logits on 2 rows match the reference."""
    lm = tiny_lm("qwen2")
    rows = data.draw(st.lists(st.lists(VOCAB_IDS, min_size=1, max_size=8), min_size=2, max_size=2))
    session = Session(lm, rows)
    for _ in range(4):
        new_rows = []
        for row in session.rows:
            cut = data.draw(st.integers(1, len(row)))
            tail = data.draw(st.lists(VOCAB_IDS, max_size=5))
            new_rows.append(row[:cut] + tail)
        session.set_rows(new_rows)
        extra = data.draw(st.lists(st.lists(VOCAB_IDS, max_size=3), min_size=2, max_size=2))
        keep = max(len(e) for e in extra) + 1
        logits = session.logits(extra=extra, keep=keep)
        for b, row in enumerate(session.rows):
            n = len(extra[b]) + 1
            ref = reference_logits(lm, row)[-n:]
            assert max_abs_diff(logits[b, keep - n:], ref) < ATOL
        assert session.cached == [len(r) for r in session.rows]
        assert session.kv.row_lengths().tolist() == session.cached


def test_session_rejects_empty_rows():
    lm = tiny_lm("qwen2")
    with pytest.raises(ValueError):
        Session(lm, [[1], []])
    session = Session(lm, [[1, 2]])
    with pytest.raises(ValueError):
        session.set_rows([[]])
    with pytest.raises(ValueError):
        session.set_rows([[1], [2]])


class _PastKeyValuesOnly(torch.nn.Module):
    """A model whose forward takes its cache as ``past_key_values`` only (transformers before 5.24)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config, self.generation_config = inner, inner.config, inner.generation_config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                logits_to_keep=0):
        from lookahead_reasoning.runtime.lm import cache_argument

        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=use_cache, logits_to_keep=logits_to_keep,
                          **{cache_argument(self.inner): past_key_values})


def test_the_cache_goes_by_the_name_the_forward_takes(recwarn):
    """``cache=`` where the model's forward has it (no deprecation warning), ``past_key_values=`` where
    it has only that; both give the same logits and cache over two chunks."""
    from lookahead_reasoning.runtime.lm import LM
    from lookahead_reasoning.runtime.lm import cache_argument

    new = tiny_lm("qwen2")
    old = LM(_PastKeyValuesOnly(new.model), new.tokenizer, name="old-signature")
    assert cache_argument(new.model) == "cache" and new.cache_arg == "cache"
    assert old.cache_arg == "past_key_values"
    rows = [[[5, 6, 7], [8, 9]], [[10], [11, 12, 13]]]
    got_new, state_new = feed_chunks(new, rows)
    got_old, state_old = feed_chunks(old, rows)
    for b in range(len(rows)):
        assert max_abs_diff(got_new[b], got_old[b]) == 0.0
    assert state_new.row_lengths().tolist() == state_old.row_lengths().tolist()
    assert not [w for w in recwarn.list if "past_key_values" in str(w.message)]


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_a_forward_uses_no_deprecated_name(arch_name, monkeypatch):
    """transformers logs, not warns, when the cache is passed or read by its old name: catch the log."""
    from transformers.utils import generic

    said: list[str] = []
    monkeypatch.setattr(generic.logger, "warning_once", lambda msg, *a, **k: said.append(str(msg)))
    lm = tiny_lm(arch_name)
    feed_chunks(lm, [[[5, 6], [7]], [[8], [9, 10]]])
    assert not [m for m in said if "deprecated" in m], said


# ------------------------------------------------------------------------------------- CUDA guards

def test_a_forward_runs_under_the_attention_kernels_its_device_allows(monkeypatch):
    """Every forward enters ``attention_kernels`` for its own device; on CUDA that list leaves cuDNN's
    attention out (it plans each new key length again, which made decoding 2.9x slower on an H100) and
    keeps every other kernel; elsewhere nothing is restricted. The list must also run a forward as is."""
    seen = []
    allowed = lm_module.attention_kernels
    monkeypatch.setattr(lm_module, "attention_kernels", lambda device: seen.append(device) or allowed(device))
    lm = tiny_lm("qwen2")
    row = [5, 6, 7, 8]
    logits, _ = lm.forward(torch.tensor([row]), keep=len(row))
    assert seen == [torch.device("cpu")]
    assert set(CUDA_ATTENTION) == {SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH}
    assert SDPBackend.CUDNN_ATTENTION not in CUDA_ATTENTION
    assert type(allowed(torch.device("cpu"))).__name__ == "nullcontext"
    with sdpa_kernel(list(CUDA_ATTENTION)):
        restricted, _ = lm.forward(torch.tensor([row]), keep=len(row))
    assert max_abs_diff(restricted, logits) < ATOL and max_abs_diff(logits[0], reference_logits(lm, row)) < ATOL


class _StandInEvent:
    """A CUDA event's bookkeeping on a CPU: the i-th event recorded is stamped at i**2 ms of device time
    (so every forward's lap is a different length) and is reached once the stand-in device gets to it."""

    stamped: list = []
    reached = 0  # events the device has reached

    def record(self, stream=None):
        self.at = len(_StandInEvent.stamped)
        _StandInEvent.stamped.append(self)

    def query(self):
        return self.at < _StandInEvent.reached

    def synchronize(self):
        _StandInEvent.reached = max(_StandInEvent.reached, self.at + 1)

    def elapsed_time(self, last):
        return float(last.at ** 2 - self.at ** 2)


def test_a_gpu_forward_is_timed_by_events_and_nothing_waits_for_it(monkeypatch):
    """On a GPU a forward is timed by two events and the host does not wait: its time reaches the listeners
    and ``stats`` at a later forward once the device has reached its last event (in the order the forwards
    ran), or when ``stats`` is read or a ``metered`` block ends, which wait for it. Nothing synchronizes."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: pytest.fail("a forward waited for the device"))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    _StandInEvent.stamped, _StandInEvent.reached = [], 0
    assert isinstance(clock_for(torch.device("cuda", 0)), EventClock)
    assert isinstance(clock_for(torch.device("cpu")), HostClock)
    lm = tiny_lm("qwen2")
    lm.clock = EventClock(torch.device("cuda", 0), event=_StandInEvent)
    seen = []
    with lm.metered(seen.append):
        session = lm.session([[5, 6, 7, 8]])
        session.logits()
        assert seen == [] and lm.timings.stats.calls == 1  # counted at once, timed later
        _StandInEvent.reached = 2  # the device got through the first forward
        session.logits(extra=[[9]])
        assert [(t.n, t.cached, t.seconds) for t in seen] == [(4, 0, 0.001)]  # events 0 and 1: 1 ms
        session.logits(extra=[[10, 11]])
        assert len(seen) == 1  # the second forward is not reached yet
    assert [(t.n, t.cached, t.seconds) for t in seen] == [(4, 0, 0.001), (2, 3, 0.005), (3, 4, 0.009)]
    session.logits(extra=[[12]])
    assert lm.stats.calls == 4 and lm.stats.seconds == pytest.approx(0.001 + 0.005 + 0.009 + 0.013)
    assert len(seen) == 3  # the listener left with the block


def test_a_profile_point_waits_for_the_device_where_a_forward_does_not(monkeypatch):
    """A model's forward never waits for its device, but a profile point (``planning.costs.forward_seconds``)
    reads the host's clock around one, so it waits for the device after each forward it times. ``wait_for``
    waits on a CUDA device only."""
    import lookahead_reasoning.planning.costs as costs

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    wait_for(torch.device("cuda", 1))
    wait_for(torch.device("cpu"))
    assert waited == [torch.device("cuda", 1)]
    order = []
    monkeypatch.setattr(costs, "wait_for", lambda device: order.append(("wait", device.type)))
    lm = tiny_lm("qwen2")
    lm.listeners.append(lambda timing: order.append(("forward", timing.rows, timing.n)))
    prefix = lm.session([[5, 6, 7, 8]])
    prefix.logits()
    order.clear()
    assert costs.forward_seconds(lm, prefix, 2, 3, repeats=2) > 0
    assert order == [("forward", 2, 3), ("wait", "cpu")] * 2


def test_a_cpu_forward_is_timed_by_the_host_and_handed_on_at_once():
    """On a CPU the forward's work is done when it returns: its time reaches the listener before ``forward``
    returns, and it is the host's clock around the call."""
    lm = tiny_lm("qwen2")
    seen = []
    lm.listeners.append(seen.append)
    before = time.perf_counter()
    lm.forward(torch.tensor([[5, 6, 7]]), keep=2)
    spent = time.perf_counter() - before
    assert len(seen) == 1 and 0 < seen[0].seconds <= spent and lm.timings.laps == []
    assert lm.stats.seconds == seen[0].seconds


def test_a_session_over_ids_outside_the_vocabulary_is_refused_by_name():
    """``generate`` over raw ids reaches the model through ``LM.session``: an id the embedding has no row
    for is named there, not left to fail inside torch's embedding."""
    lm = tiny_lm("qwen2")
    for bad in ([5, lm.vocab_size], [-1, 5]):
        with pytest.raises(PromptError, match=rf"token ids \[{bad[0] if bad[0] < 0 else bad[1]}\] are outside"):
            generate(lm, bad, max_new_tokens=2)
    assert generate(lm, [5, lm.vocab_size - 1], max_new_tokens=2).num_tokens >= 1
