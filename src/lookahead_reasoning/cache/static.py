"""A preallocated KV cache for the compiled path: :class:`StaticArena` and :class:`StaticKVState`.

A compiled forward (a CUDA graph, an inductor kernel) reads and writes fixed tensors at fixed
addresses, so its cache cannot grow by concatenation as a ``DynamicCache`` does. Here one model's
cache is an *arena*:

* the **working rows**: per layer, a keys tensor and a values tensor of shape (R_max, H_kv, L + 1, D)
  (one tensor each, not views of a shared one: a compiler then writes into them in place; the column past
  the L a row may use is never written nor read, so the columns attention reads are never all of a tensor's,
  a case a compiler would otherwise compile apart: a view of every column is contiguous, of fewer it is not); every
  forward of the compiled path runs on their first R rows, writing the new tokens' keys and values at
  columns T .. T + n - 1. They are allocated once and reallocated longer only when a row outgrows L
  (:meth:`StaticArena.grow`: a run of any length needs no sizing up front);
* **parked rows**: read-only snapshots of rows that are not running now (:class:`Parked`);
* the working rows' **mask** (R_max, L + 1) on the device: 1 at the columns a working row holds, what a
  forward's attention reads (a view of it, so a recorded forward reads it where it lies, with no copy).
  A state's own (B, T) mask stays on the host, where the verbs read and edit it without waiting for the
  device; the device's copy follows it by appending the new tokens' columns
  (:meth:`StaticArena.sync_mask`), and is written whole again only when the state changed it otherwise.
  What goes from the host to the device goes by :func:`upload`, which never makes the host wait.

At any time one state is *resident*: its B rows are working rows 0 .. B - 1. Another state's rows are
parked. Running a state that is parked makes it resident: the resident one is copied out (its first
T columns), the new one copied in. Snapshots are never written, so states share them freely:
``fork`` and ``clone`` of a parked state copy nothing (copy on write, the write being the copy into
the working rows at its next forward).

The verbs are :class:`~.kv.KVState`'s, with the same meaning: the (B, T) ``mask`` says which of the
T columns hold real tokens, and rolling a row back only moves T or clears mask entries (nothing is
truncated; the columns past T are overwritten by the next forward). Invariant: every column of the
working rows holds finite numbers (zeros at first, then keys and values a forward wrote), because a
masked column still enters attention, as weight 0 times its value.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, replace

import torch

from ..errors import ConfigError
from .kv import Columns


FIRST_SPAN, SPAN_STEP = 256, 4096  # attended columns: 256, 512, ... doubling to 4096, then steps of 4096


def attended_columns(used: int, length: int) -> int:
    """The columns a forward's attention reads when its rows hold ``used`` columns (these tokens
    included) in an arena of ``length``: the next of 256, 512, 1024, 2048, 4096, 8192, 12288, ... (at
    most twice the used ones below 4096, at most 4095 more above), capped at ``length``."""
    span = FIRST_SPAN
    while span < used:
        span = span * 2 if span < SPAN_STEP else span + SPAN_STEP
    return min(span, length)


def free_bytes(device: torch.device) -> int | None:
    """Bytes ``device`` can still allocate: on a GPU its free memory and the blocks PyTorch holds in its cache
    but no tensor uses (freed tensors' memory, which PyTorch keeps for later allocations); the host's free
    memory for a CPU (None where the system does not say)."""
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0] + cached)
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def upload(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` on ``device``, without making the host wait. A copy from ordinary (pageable) memory to a GPU
    first waits for the work queued before it, so the host would stop queueing; from page-locked memory,
    ``non_blocking``, it is queued like a kernel (PyTorch's page-locked block is not reused until the copy
    has run). A tensor on ``device`` already, or any tensor off CUDA, is handed back as it is."""
    if device.type == "cuda" and host.device.type == "cpu":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


@dataclass(frozen=True)
class ArenaShape:
    """What an arena holds: ``layers`` x (keys, values) x ``rows`` x ``kv_heads`` x ``length`` x ``head_dim``."""

    layers: int
    kv_heads: int
    head_dim: int
    rows: int  # R_max: the most rows one forward may run
    length: int  # L: the most columns a state may have

    def bytes(self, dtype: torch.dtype) -> int:
        return 2 * self.layers * self.rows * self.kv_heads * self.length * self.head_dim * dtype.itemsize


@dataclass(frozen=True)
class Parked:
    """Rows kept out of the working rows: per layer a keys and a values block (B0, H_kv, T0, D), never
    written, and ``rows`` (B,), the block row each of the state's rows reads (blocks are shared)."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    rows: torch.Tensor

    def pick(self, rows: torch.Tensor) -> "Parked":
        return Parked(self.keys, self.values, self.rows[rows])


class StaticArena:
    """One model's preallocated working rows and the state resident in them."""

    def __init__(self, shape: ArenaShape, dtype: torch.dtype, device: torch.device | str):
        self.shape = shape
        size = (shape.rows, shape.kv_heads, shape.length + 1, shape.head_dim)  # a spare column (module docstring)
        self.keys = [torch.zeros(size, dtype=dtype, device=device) for _ in range(shape.layers)]
        self.values = [torch.zeros(size, dtype=dtype, device=device) for _ in range(shape.layers)]
        self.device = torch.device(device)
        self.mask = torch.zeros(shape.rows, shape.length + 1, dtype=torch.long, device=device)
        self._resident: weakref.ReferenceType | None = None
        self._mask_of: tuple[weakref.ReferenceType, torch.Tensor, int] | None = None  # see sync_mask
        self.copies = 0  # rows copied into or out of the working rows (what residency costs)
        self.mask_writes = 0  # times the device's mask was written whole (sync_mask), not appended to

    @property
    def resident(self) -> "StaticKVState | None":
        return None if self._resident is None else self._resident()

    def state(self, rows: int) -> "StaticKVState":
        """A new empty state of ``rows`` rows, resident (the state it displaces is parked first)."""
        self.check_rows(rows)
        self._evict()
        state = StaticKVState(self, torch.zeros(rows, 0, dtype=torch.long), parked=None)  # the mask on the host
        self._resident = weakref.ref(state)
        return state

    def write(self, layer: int, rows: int, span: int, at: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
              keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write (rows, H_kv, n, D) keys and values of ``layer`` at ``at`` = (row (rows, 1, 1), head (1, H_kv, 1),
        column (1, 1, n)) indices; return the first ``rows`` working rows' first ``span`` columns (the
        ones attention reads): (rows, H_kv, span, D) each, views at fixed addresses."""
        self.keys[layer].index_put_(at, keys)
        self.values[layer].index_put_(at, values)
        return self.keys[layer][:rows, :, :span], self.values[layer][:rows, :, :span]

    def sync_mask(self, state: "StaticKVState", full_mask: torch.Tensor) -> None:
        """Make the device's mask hold the resident ``state``'s rows once this forward's tokens are in:
        ``full_mask`` (B, T + n) (its mask and the new columns') in rows 0 .. B - 1, zeros everywhere else
        (the columns past T + n and the scratch rows a bucket adds). When the device already holds
        ``state.mask`` as the last forward left it (the same tensor, unedited: a decoding step), only
        the n new columns are copied; otherwise (another state, a crop, a select, an edit in place) the
        whole mask is written again. ``full_mask`` becomes what the next forward is compared with."""
        b, t = state.mask.shape
        mine = self._mask_of
        if mine is not None and mine[0]() is state and mine[1] is state.mask and mine[2] == state.mask._version:
            self.mask[:b, t:full_mask.shape[1]].copy_(upload(full_mask[:, t:], self.device))
        else:
            self.mask.zero_()
            self.mask[:b, :full_mask.shape[1]].copy_(upload(full_mask, self.device))
            self.mask_writes += 1
        self._mask_of = (weakref.ref(state), full_mask, full_mask._version)

    def reserve(self, columns: int, budget: float | None) -> None:
        """Make the working rows hold ``columns`` columns: twice as long as now, or, where that does not fit
        in ``budget`` bytes, just long enough (in steps of 1024). ConfigError naming the sizes where even
        that does not fit (None: no limit known)."""
        if columns <= self.shape.length:
            return
        old = self.shape
        need = -(-columns // 1024) * 1024

        def size(length: int) -> int:
            return replace(old, length=length).bytes(self.keys[0].dtype)

        length = max(need, 2 * old.length)
        if budget is not None and size(length) >= budget:
            length = need
        if budget is not None and size(length) >= budget:
            raise ConfigError(f"the static cache needs {length} columns per row for {columns} tokens "
                              f"({size(length) / 1e9:.1f} GB for {old.rows} rows) and the {self.device.type} can give "
                              f"{budget / 1e9:.1f} GB: generate fewer tokens, give the compiled path fewer rows "
                              "(FastPathConfig(rows=...)), or run eagerly (fast_path='off')")
        self.grow(length)

    def columns_within(self, budget: float) -> int:
        """The most columns a row can have, in steps of 1024, with every working row in ``budget`` bytes."""
        column = replace(self.shape, length=1).bytes(self.keys[0].dtype)
        return int(budget // column) // 1024 * 1024

    def grow(self, length: int) -> None:
        """Make every working row ``length`` columns long (new tensors: the resident rows' first T columns
        are copied over, the new columns are zeros; so is the device's mask). Parked snapshots are separate
        tensors and stay."""
        if length <= self.shape.length:
            return
        resident = self.resident
        t = 0 if resident is None else resident.length
        self.shape = replace(self.shape, length=length)
        for works in (self.keys, self.values):
            for layer, old in enumerate(works):
                new = old.new_zeros((self.shape.rows, self.shape.kv_heads, length + 1, self.shape.head_dim))
                new[:, :, :t] = old[:, :, :t]
                works[layer] = new
        mask, self.mask = self.mask, self.mask.new_zeros((self.shape.rows, length + 1))
        self.mask[:, :mask.shape[1]] = mask

    # ------------------------------------------------------------------ residency
    def make_resident(self, state: "StaticKVState") -> None:
        """Copy ``state``'s parked rows into working rows 0 .. B - 1 (parking the state that was there)."""
        if state.parked is None:
            return
        self.check_rows(state.batch_size)
        self._evict()
        b, t, parked = state.batch_size, state.length, state.parked
        if t:
            blocks = parked.keys + parked.values
            rows = parked.rows.tolist()
            if rows == list(range(b)):  # the block's first b rows, in order: one copy per tensor
                sources = [block[:b, :, :t] for block in blocks]
            elif len(set(rows)) == 1:  # one row repeated (a fork of one row): a broadcast copy
                sources = [block[rows[0]:rows[0] + 1, :, :t].expand(b, -1, -1, -1) for block in blocks]
            else:
                at = upload(parked.rows, blocks[0].device)
                sources = [block.index_select(0, at)[:, :, :t] for block in blocks]
            torch._foreach_copy_([work[:b, :, :t] for work in self.keys + self.values], sources)
        self.copies += b
        state.parked = None
        self._resident = weakref.ref(state)

    def _evict(self) -> None:
        """Park the resident state: one snapshot of its rows' first T columns."""
        state = self.resident
        self._resident = None
        if state is None or state.parked is not None:
            return
        b, t = state.batch_size, state.length
        state.parked = Parked(tuple(k[:b, :, :t].clone() for k in self.keys),
                              tuple(v[:b, :, :t].clone() for v in self.values), torch.arange(b))
        self.copies += b

    def check_rows(self, rows: int) -> None:
        if rows > self.shape.rows:
            raise ConfigError(f"the static cache runs at most {self.shape.rows} rows at once, asked for {rows}; "
                             "give the compiled path more rows (FastPathConfig(rows=...))")


class StaticKVState(Columns):
    """B rows of an arena: resident (``parked`` is None) or parked (read-only snapshots)."""

    def __init__(self, arena: StaticArena, mask: torch.Tensor, parked: Parked | None):
        self.arena = arena
        self.mask = mask
        self.parked = parked

    def real_kv(self, layer: int, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        cols = self.real_columns(row).to(self.arena.device)
        if self.parked is None:
            return self.arena.keys[layer][row][:, cols], self.arena.values[layer][row][:, cols]
        at = int(self.parked.rows[row])
        return self.parked.keys[layer][at][:, cols], self.parked.values[layer][at][:, cols]

    def _parked(self) -> Parked:
        """This state's rows as snapshots (parks it first when it is resident)."""
        if self.parked is None:
            self.arena._evict()
        assert self.parked is not None
        return self.parked

    # ----------------------------------------------------------------- copies
    def clone(self) -> "StaticKVState":
        """A copy that later forwards of either leave untouched (it shares the read-only snapshots)."""
        return self.fork(1)

    def fork(self, k: int) -> "StaticKVState":
        """Every row repeated ``k`` times (row i -> rows i*k .. i*k + k - 1); copies nothing now."""
        if k < 1:
            raise ValueError(f"fork needs k >= 1, got {k}")
        parked = self._parked()
        return StaticKVState(self.arena, self.mask.repeat_interleave(k, dim=0),
                             parked.pick(torch.arange(self.batch_size).repeat_interleave(k)))

    # ----------------------------------------------------------------- edits
    def select(self, rows: list[int] | torch.Tensor) -> "StaticKVState":
        """Keep only ``rows`` (in that order)."""
        order = torch.as_tensor(rows, dtype=torch.long).cpu()
        if self.parked is not None:
            self.parked = self.parked.pick(order)
        elif not torch.equal(order, torch.arange(order.numel())):
            idx, t = upload(order, self.arena.device), self.length
            for work in self.arena.keys + self.arena.values:
                work[:idx.numel(), :, :t] = work.index_select(0, idx)[:, :, :t]
            self.arena.copies += idx.numel()
        self.mask = self.mask[order.to(self.mask.device)]
        return self

    def _gather(self, idx: torch.Tensor) -> None:
        """Keep only the columns ``idx`` of this state's rows, parked or working (:meth:`~.kv.Columns.compact`)."""
        if self.parked is not None:
            p = self.parked
            self.parked = Parked(tuple(k.index_select(2, idx.to(k.device)) for k in p.keys),
                                 tuple(v.index_select(2, idx.to(v.device)) for v in p.values), p.rows)
        else:
            b, at = self.batch_size, upload(idx, self.arena.device)
            for work in self.arena.keys + self.arena.values:
                work[:b, :, :at.numel()] = work[:b].index_select(2, at)
            self.arena.copies += b


__all__ = ["FIRST_SPAN", "ArenaShape", "Parked", "StaticArena", "StaticKVState", "attended_columns", "free_bytes",
           "upload"]
