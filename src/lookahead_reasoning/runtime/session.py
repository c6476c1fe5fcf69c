"""A model's view of B token sequences that share one KV cache: :class:`Session`.

Every loop in :mod:`lookahead_reasoning.decoding` is written against this small interface:

* ``rows``: the token ids of each row (prompt and generated text);
* ``logits(extra)``: feed each row's uncached tokens (plus optional ``extra`` drafted tokens) in one
  forward pass and return the next-token logits (``argmax(extra)``: the same forward, their argmax);
* ``set_rows(new_rows)``: move the rows to new token lists. The cache keeps the longest prefix
  that the old and new rows share, drops the rest (crop for one row, holes for several) and the
  new tokens are fed on the next ``logits`` call. This one verb covers accepting drafted tokens,
  rolling back rejected ones, and starting branches from a shared prefix;
* ``fork(k)`` / ``select(rows)``: branch a prefix into k rows and keep the chosen one;
* ``argmax_ahead(active, after)``: greedy decoding with the host one token behind the device (the
  compiled path): a forward fed the previous forward's argmax where it lies, queued before the host reads it.

Invariant: ``cached[b] <= len(rows[b])`` and the first ``cached[b]`` tokens of row b are the real
columns of the cache row b, in order (``argmax_ahead`` puts a row one token ahead of ``rows`` until the
host has read that token). A row needs at least one uncached token to produce logits;
``logits`` re-feeds the last token when a row has none.

A model with a recorder attached (:class:`~.schedule.ScheduleRecorder`) has every verb of its sessions
recorded: the forward schedule of a run, to replay elsewhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import torch

from ..cache import KVState
from ..cache.static import upload
from ..stopping import common_prefix
from .clock import wait_for


@dataclass(frozen=True)
class ForwardCall:
    """One ``Session.logits`` call as a session reports it: the ``extra`` tokens and ``active`` flags it was
    given, ``keep``, the tokens each row ``fed``, the cache ``columns`` before it, and its clock: when it
    started and the ``seconds`` it took, the device's work included (a recorded forward waits for it)."""

    extra: list[list[int]]
    active: list[bool]
    keep: int
    fed: list[int]
    columns: int
    started: float
    seconds: float


class Pending:
    """Greedy tokens a forward computed, (B, 1) long on its device (``ids``), that the host reads later
    (:meth:`read`). On a GPU their copy to the host is queued behind the forward at once (into page-locked
    memory, ``non_blocking``), so reading them waits for that forward only: one queued after it keeps the
    device busy meanwhile. Elsewhere they are copied where they lie and read when asked. A recorded forward
    overwrites ``ids`` at its next replay: feed them on before that."""

    def __init__(self, ids: torch.Tensor):
        self.ids, self.ready = ids, None
        if ids.is_cuda:
            self.held = torch.empty(ids.shape, dtype=ids.dtype, pin_memory=True)
            self.held.copy_(ids, non_blocking=True)
            self.ready = torch.cuda.Event()  # reached once the copy has run
            self.ready.record()
        else:
            self.held = ids.clone()

    def read(self) -> list[int]:
        """Each row's token: the host's one wait for them."""
        if self.ready is not None:
            self.ready.synchronize()
        return self.held[:, -1].tolist()


class Forward(Protocol):
    """What a session needs of its model (:class:`~.lm.LM` is one): the pad id and one forward pass
    over new tokens of B rows that extends a KV state."""

    pad_id: int

    def forward(self, input_ids: torch.Tensor, state: KVState | None = None, new_mask: torch.Tensor | None = None,
                keep: int = 1, greedy: bool = False) -> tuple[torch.Tensor, KVState]: ...


class Session:
    """B rows of token ids and one KV cache over their first ``cached[b]`` tokens.

    Made by :meth:`LM.session <lookahead_reasoning.runtime.lm.LM.session>`; code outside the runtime
    layer asks the model for one rather than calling this constructor.
    """

    def __init__(self, lm: Forward, rows: Sequence[Sequence[int]]):
        if not rows or any(len(r) == 0 for r in rows):
            raise ValueError("every row needs at least one token")
        self.lm = lm
        self.rows: list[list[int]] = [list(r) for r in rows]
        self.cached: list[int] = [0] * len(self.rows)
        self.kv: KVState | None = None
        self.recorder: Any = getattr(lm, "recorder", None)  # (ScheduleRecorder, model name) or None
        if self.recorder is not None:
            self.recorder[0].new(self.recorder[1], self)

    @property
    def batch_size(self) -> int:
        return len(self.rows)

    # ------------------------------------------------------------------ forward
    def logits(self, extra: Sequence[Sequence[int]] | None = None, keep: int = 1,
               active: Sequence[bool] | None = None) -> torch.Tensor:
        """Feed every active row's uncached tokens, then its ``extra`` tokens, in ONE forward pass.

        ``extra[b]`` (drafted tokens) is appended to ``rows[b]`` and cached like the rest; roll it back
        with ``set_rows``. Rows are aligned on the right: row b's new tokens end at the last column,
        pads sit before them (in the middle of the row).

        Returns:
            (B, keep, V) float32: logits at the last ``keep`` positions of each row, i.e. the
            next-token distribution after each of the row's last ``keep`` tokens. Inactive rows are
            fed only pads and their logits are meaningless.
        """
        return self.feed(extra, keep, active, greedy=False)

    def argmax(self, extra: Sequence[Sequence[int]] | None = None, keep: int = 1,
               active: Sequence[bool] | None = None) -> torch.Tensor:
        """(B, keep) long: the most likely next token at the same positions as :meth:`logits`' (what greedy
        decoding picks), the same forward. On the compiled path a forward keeping one position computes it
        inside its recording, and only the ids leave the device."""
        return self.feed(extra, keep, active, greedy=True)

    def feed(self, extra: Sequence[Sequence[int]] | None = None, keep: int = 1, active: Sequence[bool] | None = None,
             greedy: bool = False) -> torch.Tensor:
        """One forward pass: :meth:`logits` or, with ``greedy``, :meth:`argmax` (a loop that may do either calls this)."""
        bsz = self.batch_size
        active = [True] * bsz if active is None else list(active)
        extra = [[] for _ in range(bsz)] if extra is None else [list(e) for e in extra]
        for b in range(bsz):
            if active[b] and self.cached[b] == len(self.rows[b]):
                self.uncache_last(b)
            if active[b]:
                self.rows[b].extend(extra[b])
        chunks = [self.rows[b][self.cached[b]:] if active[b] else [] for b in range(bsz)]
        columns = 0 if self.kv is None else self.kv.length
        n = max(len(c) for c in chunks)  # new tokens per row of this forward (shorter rows left-padded)
        ids = torch.full((bsz, n), self.lm.pad_id, dtype=torch.long)
        mask = torch.zeros((bsz, n), dtype=torch.long)
        for b, chunk in enumerate(chunks):
            if chunk:
                ids[b, n - len(chunk):] = torch.tensor(chunk, dtype=torch.long)
                mask[b, n - len(chunk):] = 1
            self.cached[b] = len(self.rows[b]) if active[b] else self.cached[b]
        started = time.perf_counter()
        logits, self.kv = self.lm.forward(ids, self.kv, mask, keep=keep, greedy=greedy)
        if self.recorder is not None:  # its time in full: a forward does not wait for its device
            wait_for(logits.device)
            self.recorder[0].forward(self.recorder[1], self, ForwardCall(extra, active, keep, [len(c) for c in chunks],
                                                                         columns, started, time.perf_counter() - started))
        return logits

    @property
    def reads_ahead(self) -> bool:
        """Whether greedy decoding may run a token ahead of the host (:meth:`argmax_ahead`): on the compiled
        path, unless the verbs are recorded (a recorder reads every token a forward is fed)."""
        return getattr(self.lm, "fast", None) is not None and self.recorder is None

    def argmax_ahead(self, active: Sequence[bool], after: Pending | None = None) -> Pending:
        """:meth:`argmax` of one position a row, left on the device. With ``after``, each active row is fed the
        token ``after`` holds for it, on the device, before the host has read it (an inactive row a pad): the
        token is in the cache at once and joins ``rows`` when the host has it (:meth:`extend`); a row that must
        not keep it (it stopped at that token) gives the column back (:meth:`uncache_last`)."""
        if after is None:
            return Pending(self.feed(None, 1, active, greedy=True))
        fed = torch.tensor([[int(a)] for a in active], dtype=torch.long)  # (B, 1) on the host
        ids = after.ids
        if not all(active):
            ids = torch.where(upload(fed, ids.device) > 0, ids, self.lm.pad_id)
        for b in range(self.batch_size):
            self.cached[b] += int(active[b])
        top, self.kv = self.lm.forward(ids, self.kv, fed, keep=1, greedy=True)
        return Pending(top)

    # ------------------------------------------------------------------ edits
    def set_rows(self, new_rows: Sequence[Sequence[int]]) -> None:
        """Replace the rows; keep the cache for the longest common prefix of each old and new row."""
        if len(new_rows) != self.batch_size:
            raise ValueError(f"set_rows got {len(new_rows)} rows for a session of {self.batch_size}")
        for b, new in enumerate(new_rows):
            new = list(new)
            if not new:
                raise ValueError("every row needs at least one token")
            keep = common_prefix(self.rows[b], new, self.cached[b])
            if keep < self.cached[b] and self.kv is not None:
                self.kv.truncate_row(b, keep)
                self.cached[b] = keep
            self.rows[b] = new
        if self.recorder is not None:
            self.recorder[0].set_rows(self)

    def extend(self, row: int, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to one row (they are fed on the next ``logits`` call)."""
        self.rows[row].extend(tokens)
        if self.recorder is not None:
            self.recorder[0].extend(self, row, len(tokens))

    def fork(self, k: int) -> "Session":
        """A new session with every row repeated ``k`` times, sharing (a copy of) this cache."""
        child = Session.__new__(Session)
        child.lm = self.lm
        child.rows = [list(r) for r in self.rows for _ in range(k)]
        child.cached = [c for c in self.cached for _ in range(k)]
        child.kv = self.kv.fork(k) if self.kv is not None else None
        child.recorder = self.recorder
        if self.recorder is not None:
            self.recorder[0].fork(self, child, k)
        return child

    def select(self, rows: Sequence[int]) -> "Session":
        """Keep only ``rows``, in that order (in place); with one row left, holes are compacted away."""
        rows = list(rows)
        if self.recorder is not None:
            self.recorder[0].select(self, rows)
        self.rows = [self.rows[r] for r in rows]
        self.cached = [self.cached[r] for r in rows]
        if self.kv is not None:
            self.kv.select(rows)
            self.kv.trim()
            if len(rows) == 1:
                self.kv.compact()
        return self

    def uncache_last(self, row: int) -> None:
        """Drop the last cached token of ``row`` from the cache (it stays in ``rows``, fed again by the next
        forward that feeds the row)."""
        self.cached[row] -= 1
        if self.kv is not None:
            self.kv.truncate_row(row, self.cached[row])

