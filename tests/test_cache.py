"""``KVState``: clone, fork, select, crop, truncate_row, trim and compact, each followed by more
decoding, give the logits of a fresh run of the same tokens (the model on one row, no cache).
After every edit the cache tensors and the mask agree on the number of columns."""

from __future__ import annotations

import pytest
import torch

from lookahead_reasoning.cache import KVState

from conftest import LOGIT_ATOL as ATOL, max_abs_diff, reference_logits, tiny_lm


def cache_columns(state: KVState) -> set[int]:
    """Number of columns in every cache layer (a set: one value when they agree)."""
    return {int(layer.keys.shape[-2]) for layer in state.cache.layers}


def cache_rows(state: KVState) -> set[int]:
    return {int(layer.keys.shape[0]) for layer in state.cache.layers}


def consistent(state: KVState) -> bool:
    return cache_columns(state) == {state.length} and cache_rows(state) == {state.batch_size}


def prefill(lm, rows):
    """Left-padded prefill of ``rows``; returns the state."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.tensor(r)
        mask[b, width - len(r):] = 1
    _, state = lm.forward(ids, None, mask)
    return state


def step(lm, state, tokens):
    """Feed one token per row (None: a pad for that row) and return the (B, V) logits."""
    ids = torch.tensor([[lm.pad_id if t is None else t] for t in tokens])
    mask = torch.tensor([[0 if t is None else 1] for t in tokens])
    logits, state = lm.forward(ids, state, mask)
    return logits[:, -1]


def check_rows(lm, logits, rows):
    for b, row in enumerate(rows):
        assert max_abs_diff(logits[b], reference_logits(lm, row)[-1]) < ATOL, f"row {b}"


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_fork_then_different_extensions(arch_name):
    lm = tiny_lm(arch_name)
    rows = [[1, 2, 3], list(range(10, 30))]
    parent = prefill(lm, rows)
    forked = parent.fork(3)
    assert forked.batch_size == 6 and consistent(forked) and consistent(parent)
    assert forked.mask.tolist() == [m for m in parent.mask.tolist() for _ in range(3)]
    # extensions of very different lengths: 1, 9 and 33 tokens; fed right-aligned in one forward
    exts = [list(range(40, 40 + n)) for n in (1, 9, 33)] * 2
    width = max(len(e) for e in exts)
    ids = torch.full((6, width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((6, width), dtype=torch.long)
    for b, e in enumerate(exts):
        ids[b, width - len(e):] = torch.tensor(e)
        mask[b, width - len(e):] = 1
    logits, forked = lm.forward(ids, forked, mask)
    full = [rows[b // 3] + exts[b] for b in range(6)]
    check_rows(lm, logits[:, -1], full)
    # a second step, one token each, still matches
    check_rows(lm, step(lm, forked, [7] * 6), [r + [7] for r in full])
    # the parent never saw the branches
    assert parent.length == 20 and consistent(parent)
    check_rows(lm, step(lm, parent, [8, 9]), [rows[0] + [8], rows[1] + [9]])


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_select_keeps_the_right_rows(arch_name):
    lm = tiny_lm(arch_name)
    rows = [[1, 2], [3, 4, 5, 6, 7], [8], list(range(20, 32))]
    state = prefill(lm, rows)
    state.select([3, 0])
    assert state.batch_size == 2 and consistent(state)
    check_rows(lm, step(lm, state, [9, 10]), [rows[3] + [9], rows[0] + [10]])
    state.select(torch.tensor([1]))
    check_rows(lm, step(lm, state, [11]), [rows[0] + [10, 11]])


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_crop_then_continue(arch_name):
    lm = tiny_lm(arch_name)
    row = list(range(30, 50))
    state = prefill(lm, [row])
    state.crop(7)
    assert state.length == 7 and consistent(state)
    check_rows(lm, step(lm, state, [3]), [row[:7] + [3]])
    state.crop(state.length)  # no-op
    assert state.length == 8
    with pytest.raises(ValueError):
        state.crop(9)
    with pytest.raises(ValueError):
        state.crop(-1)


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_truncate_row_trim_compact_then_continue(arch_name):
    lm = tiny_lm(arch_name)
    rows = [list(range(10, 16)), list(range(20, 30)), [5, 6, 7]]
    state = prefill(lm, rows)  # width 10
    # several rows: the truncated row's columns become holes; nothing is cropped while others use them
    state.truncate_row(1, 4)
    assert state.row_lengths().tolist() == [6, 4, 3] and state.length == 10 and consistent(state)
    rows[1] = rows[1][:4]
    check_rows(lm, step(lm, state, [1, 2, 3]), [r + [t] for r, t in zip(rows, [1, 2, 3])])
    rows = [r + [t] for r, t in zip(rows, [1, 2, 3])]
    # truncating the last columns of every row: trim crops the all-hole tail
    state.truncate_row(0, 6)  # drops the token just fed to row 0
    state.truncate_row(2, 3)
    state.truncate_row(1, 4)
    assert state.length == 10 and consistent(state)
    rows = [r[:-1] for r in rows]
    logits = step(lm, state, [4, None, 5])  # row 1 is fed a pad: its logits are meaningless
    rows[0].append(4)
    rows[2].append(5)
    check_rows(lm, logits[[0, 2]], [rows[0], rows[2]])
    # cut rows 0 and 2 back: trim drops the tail, compact the all-hole columns left in the middle
    before = state.row_lengths().tolist()
    state.truncate_row(0, 2)
    state.truncate_row(2, 1)
    rows[0], rows[2] = rows[0][:2], rows[2][:1]
    state.compact()
    assert state.row_lengths().tolist() == [2, before[1], 1] and consistent(state)
    assert bool(state.mask.any(dim=0).all())
    check_rows(lm, step(lm, state, [6, 7, 8]), [r + [t] for r, t in zip(rows, [6, 7, 8])])


def test_truncate_single_row_crops_for_real():
    lm = tiny_lm("qwen2")
    row = list(range(40, 52))
    state = prefill(lm, [row])
    state.truncate_row(0, 5)
    assert state.length == 5 and consistent(state)
    check_rows(lm, step(lm, state, [1]), [row[:5] + [1]])
    state.truncate_row(0, 99)  # more than it has: no change
    assert state.length == 6


def test_trim_only_drops_trailing_all_hole_columns():
    lm = tiny_lm("llama")
    state = prefill(lm, [[1, 2, 3], [4, 5, 6]])
    step(lm, state, [None, 7])
    step(lm, state, [None, None])  # an all-hole column at the end
    state.mask[1, -2:] = 0  # row 1's token 7 becomes a hole too (as truncate_row would do)
    state.trim()
    assert state.length == 3 and consistent(state)


def test_clone_is_independent():
    lm = tiny_lm("llama")
    rows = [[1, 2, 3, 4], [5, 6]]
    state = prefill(lm, rows)
    mask_before = state.mask.clone()
    copy = state.clone()
    step(lm, copy, [7, 8])
    step(lm, copy, [9, 10])
    assert torch.equal(state.mask, mask_before) and consistent(state) and state.length == 4
    assert copy.length == 6 and consistent(copy)
    check_rows(lm, step(lm, state, [11, 12]), [rows[0] + [11], rows[1] + [12]])


def test_fork_and_select_of_an_empty_cache():
    """A state cropped to nothing can still be forked / selected and fed with the new batch size."""
    lm = tiny_lm("qwen2")
    state = prefill(lm, [[1, 2, 3]])
    state.crop(0)
    forked = state.fork(3)
    assert forked.batch_size == 3 and forked.length == 0
    logits, forked = lm.forward(torch.tensor([[4], [5], [6]]), forked)
    assert consistent(forked)
    check_rows(lm, logits[:, -1], [[4], [5], [6]])
    two = prefill(lm, [[1], [2]])
    two.crop(0)
    two.select([1])
    logits, two = lm.forward(torch.tensor([[7, 8]]), two)
    check_rows(lm, logits[:, -1], [[7, 8]])


def test_fork_rejects_k_below_one():
    lm = tiny_lm("qwen2")
    state = prefill(lm, [[1, 2]])
    with pytest.raises(ValueError):
        state.fork(0)
