"""Greedy decoding on the compiled path with the host a token behind the device, and nothing on the way that
makes the host wait.

On a GPU the host queues a forward and goes on; it waits only when it reads what the device computed (the
tokens), or when it copies from ordinary memory to the device (such a copy first waits for the work queued
before it). So a decoding step should read its tokens once, after the next forward is already queued, and move
its ids, columns and mask column to the device through page-locked memory, ``non_blocking``
(:func:`~lookahead_reasoning.cache.static.upload`). On this CPU the host and the device share one memory, so
:class:`DeviceTraffic` tells device values from host values by where they come from, and counts what crosses.

* A greedy token costs one read of device values, made after the next forward was queued (the host learns
  token t while forward t + 1 is queued), and nothing is copied to the device without an upload.
* :func:`~lookahead_reasoning.decoding.autoregressive.decode_rows_ahead` leaves the rows, the stops and the
  cache as :func:`~lookahead_reasoning.decoding.autoregressive.decode_rows` leaves them (on the same static
  cache), with EOS, budgets and a cancelled row, and writes the eager path's tokens: the forward queued past
  a stop never shows.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from lookahead_reasoning.decoding.autoregressive import decode_rows
from lookahead_reasoning.runtime.compiled import FastPath, FastPathConfig
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.sampling import SamplingConfig
from lookahead_reasoning.stopping import StopChecker, StopCondition
from lookahead_reasoning.testing import tiny_model

_MODEL = tiny_model("qwen2", seed=4)
GRAPHS = FastPathConfig(backend="rehearsed-graphs", length=256, row_buckets=(1, 4), token_buckets=(1,))


class DeviceTraffic(TorchFunctionMode):
    """What crosses between the host and the device while it is entered, seen on a CPU by where each tensor comes
    from. A *device value* is one of the static cache's tensors, what the compiled path's forward returns (its
    :meth:`FastPath.forward <lookahead_reasoning.runtime.compiled.FastPath.forward>` runs as one piece of device
    work, as a replay runs no host code), an upload (a ``non_blocking`` move to the device), or anything computed
    from one. ``reads``: the host reading a device value (``tolist``, ``item``, ``bool``, a copy into a host
    tensor, ...), each as the number of forwards queued by then; ``blocking``: a host tensor copied into a device
    tensor, or handed to the forward, without an upload; ``forwards``: the forwards queued so far."""

    READS = {torch.Tensor.tolist, torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__,
             torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.numpy, torch.Tensor.cpu, torch.equal}

    def __init__(self, lm: LM, monkeypatch):
        super().__init__()
        self.values: dict[int, torch.Tensor] = {}  # device values by id (held, so no id is reused)
        self.reads: list[int] = []
        self.blocking: list[str] = []
        self.forwards = 0
        arena = lm.fast.arena
        self._mark(arena.keys + arena.values + [arena.mask])
        real = FastPath.forward

        def forward(fast, ids, mask, cols, attention):
            self.forwards += 1
            handed = (("ids", ids), ("mask", mask), ("cols", cols))
            self.blocking += [f"{name} handed to the forward" for name, t in handed if not self._on_device(t)]
            with torch._C.DisableTorchFunction():
                out = real(fast, ids, mask, cols, attention)
            self._mark(tree_leaves(out))
            return out

        monkeypatch.setattr(FastPath, "forward", forward)

    def _on_device(self, value) -> bool:
        return isinstance(value, torch.Tensor) and id(value) in self.values

    def _mark(self, values) -> None:
        self.values.update((id(t), t) for t in values if isinstance(t, torch.Tensor))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        from_device = any(self._on_device(t) for t in tree_leaves((args, kwargs)))
        out = func(*args, **kwargs)
        if func in self.READS and from_device:
            self.reads.append(self.forwards)
        elif func is torch.Tensor.copy_ and self._on_device(args[0]) != self._on_device(args[1]):
            if self._on_device(args[0]):
                self.blocking.append("a host tensor copied into a device tensor")
            else:
                self.reads.append(self.forwards)
            return out
        elif func is torch.Tensor.__setitem__ and self._on_device(args[0]) and isinstance(args[2], torch.Tensor) \
                and args[2].dim() > 0 and not self._on_device(args[2]):
            self.blocking.append("a host tensor written into a device tensor")
        uploaded = func is torch.Tensor.to and torch._C._nn._parse_to(*args[1:], **kwargs)[2]
        if from_device or uploaded:
            self._mark(tree_leaves(out))
        return out


def _checkers(lm: LM, budgets, eos=()) -> list[StopChecker]:
    eos = eos or [()] * len(budgets)
    return [StopChecker(StopCondition(frozenset(e), (), b), lm.decode) for b, e in zip(budgets, eos)]


def _greedy(lm: LM, prompts, budgets, eos=(), on_done=None):
    """``decode_rows`` over ``prompts`` (one row each): the session, its stops, and when each token reached the host."""
    session = lm.session(prompts)
    heard = []
    hits = decode_rows(session, [len(p) for p in prompts], _checkers(lm, budgets, eos), SamplingConfig(),
                       on_token=lambda b, new: heard.append(b), on_done=on_done)
    return session, hits, heard


PROMPT = list(range(5, 45))


def test_a_greedy_token_costs_one_read_made_while_the_next_forward_is_queued(monkeypatch):
    """40 greedy tokens on the recorded forwards: the host reads device values 40 times, once a token (the
    forward's argmax, computed in its recording), each time with the following forward queued already (the
    last token's excepted: the budget ends there, and nothing is queued past it); no host tensor reaches the
    device but through an upload. The tokens are the eager path's."""
    eager, _, _ = _greedy(LM(_MODEL.model, _MODEL.tokenizer), [PROMPT], [40])
    lm = LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(GRAPHS)
    with DeviceTraffic(lm, monkeypatch) as traffic:
        session = lm.session([PROMPT])
        decode_rows(session, [len(PROMPT)], _checkers(lm, [40]), SamplingConfig())
    assert session.rows == eager.rows and len(session.rows[0]) == len(PROMPT) + 40
    assert traffic.blocking == [] and traffic.forwards == 40
    assert traffic.reads == [t + 2 for t in range(39)] + [40]  # token t read with forward t + 1 queued


def test_a_step_that_reads_its_token_before_queueing_the_next_is_seen(monkeypatch):
    """A deliberate break: the plain greedy loop on the compiled path (the host reads each token, then queues the
    next forward): one read a token, but each made with nothing queued behind it, so the device waits for the
    host at every token."""
    monkeypatch.setattr(Session, "reads_ahead", property(lambda self: False))
    lm = LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(GRAPHS)
    with DeviceTraffic(lm, monkeypatch) as traffic:
        session = lm.session([PROMPT])
        decode_rows(session, [len(PROMPT)], _checkers(lm, [12]), SamplingConfig())
    assert traffic.reads == [t + 1 for t in range(12)]


@pytest.mark.parametrize("break_", ["ids", "mask column", "columns"])
def test_a_copy_to_the_device_without_an_upload_is_seen(monkeypatch, break_):
    """Deliberate breaks: the ids moved to the device as ``LM.forward`` did before (``.to(device)``, from ordinary
    memory: it waits for the device's queued work), the mask's new column copied as it is, the new tokens' columns
    made without an upload: each is counted as a blocking copy (the tokens are the same)."""
    import lookahead_reasoning.cache.static as static
    import lookahead_reasoning.runtime.compiled as compiled
    import lookahead_reasoning.runtime.lm as lm_module

    where = {"ids": lm_module, "mask column": static, "columns": compiled}[break_]  # the one upload put back
    monkeypatch.setattr(where, "upload", lambda host, device: host.to(device))
    lm = LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(GRAPHS)
    with DeviceTraffic(lm, monkeypatch) as traffic:
        session = lm.session([PROMPT])
        decode_rows(session, [len(PROMPT)], _checkers(lm, [6]), SamplingConfig())
    assert traffic.blocking and len(session.rows[0]) == len(PROMPT) + 6


def _same_state(mine: Session, theirs: Session) -> None:
    """The same rows, cached counts and mask, and the same keys and values at every row's real columns."""
    assert mine.rows == theirs.rows and mine.cached == theirs.cached
    assert torch.equal(mine.kv.mask, theirs.kv.mask)
    for row in range(mine.batch_size):
        for layer in range(_MODEL.model.config.num_hidden_layers):
            for a, b in zip(mine.kv.real_kv(layer, row), theirs.kv.real_kv(layer, row)):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_reading_a_token_behind_leaves_the_rows_the_stops_and_the_cache_as_the_plain_loop(monkeypatch):
    """Three rows with budgets of 12, 20 and 20 tokens, the third stopping at EOS (a token it writes at its sixth
    step in a plain run), and the first one's end cancelling the second: ``decode_rows_ahead`` fed each stopping
    row its last token ahead, and gives that column back, so the rows, the stops, the cached counts, the mask and
    every row's keys and values are the plain loop's on the same static cache, and the tokens the eager path's.
    Then every row decodes two tokens more from there, alike."""
    prompts = [PROMPT, PROMPT[:25], PROMPT[10:]]
    eager_lm = LM(_MODEL.model, _MODEL.tokenizer)
    free, _, _ = _greedy(eager_lm, prompts, [20, 20, 20])
    eos = [(), (), (free.rows[2][len(prompts[2]) + 5],)]

    def cancel_second(row):
        return [1] if row == 0 else []

    runs = {}
    for name in ("eager", "plain", "ahead"):
        lm = eager_lm if name == "eager" else LM(_MODEL.model, _MODEL.tokenizer).use_fast_path(GRAPHS)
        with monkeypatch.context() as patch:
            if name == "plain":
                patch.setattr(Session, "reads_ahead", property(lambda self: False))
            runs[name] = _greedy(lm, prompts, [12, 20, 20], eos, cancel_second)
    (ahead, hits, _), (plain, plain_hits, _) = runs["ahead"], runs["plain"]
    assert [h.reason for h in hits] == ["budget", "cancelled", "eos"] and hits == plain_hits == runs["eager"][1]
    assert ahead.rows == runs["eager"][0].rows and ahead.cached == runs["eager"][0].cached
    _same_state(ahead, plain)
    for session in (ahead, plain):
        for row in range(3):
            session.extend(row, [7 + row])
    torch.testing.assert_close(ahead.logits(keep=1), plain.logits(keep=1), rtol=1e-4, atol=1e-4)
    _same_state(ahead, plain)
