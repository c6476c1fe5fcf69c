"""One KV cache for B rows, and the mask that records which of its columns hold real tokens.

Shapes: the cache holds, per layer, keys and values of shape (B, H_kv, T, D); ``mask`` is (B, T) with
1 for a real token and 0 for a hole. Holes come from three places:

* padding, when rows of different length are fed in one forward pass (pads sit in the middle of a row:
  after the shared prefix, before each row's own new tokens);
* finished rows in a batch, which are fed a pad while the other rows go on;
* rejected speculative tokens in a batch, which cannot be cropped row by row (one tensor, one length),
  so they are masked out instead.

A hole costs memory but never changes a result: attention never looks at a masked column and the
position ids are counted over real tokens only (``cumsum(mask) - 1``). ``trim`` drops trailing
columns that are holes in every row; ``compact`` removes every all-hole column.

All methods work in place and return ``self`` unless they say otherwise. transformers 5.x notes:
``DynamicCache.crop`` takes a negative count of tokens to remove; there is no clone method
(``copy.deepcopy`` under ``no_grad``); ``batch_repeat_interleave`` and ``batch_select_indices`` are in place.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from transformers import DynamicCache


class Columns:
    """What every KV state shares: B rows of T columns and the (B, T) ``mask`` of the real ones.

    The subclasses keep the keys and values (:class:`KVState` in a ``DynamicCache``,
    :class:`~.static.StaticKVState` in preallocated tensors) and implement ``_gather`` (and ``_drop``, where a
    crop frees them); the verbs here read the mask or edit it.
    """

    mask: torch.Tensor

    # ----------------------------------------------------------------- facts
    @property
    def batch_size(self) -> int:
        return int(self.mask.shape[0])

    @property
    def length(self) -> int:
        """T: number of columns (real tokens and holes)."""
        return int(self.mask.shape[1])

    def row_lengths(self) -> torch.Tensor:
        """(B,) number of real tokens per row."""
        return self.mask.sum(dim=1)

    def real_columns(self, row: int) -> torch.Tensor:
        """(n_real,) the column index of each real token of ``row``, in order."""
        return torch.nonzero(self.mask[row], as_tuple=False).flatten()

    def crop(self, length: int) -> "Columns":
        """Keep the first ``length`` columns of every row."""
        if not 0 <= length <= self.length:
            raise ValueError(f"crop length {length} outside [0, {self.length}]")
        self._drop(length)
        self.mask = self.mask[:, :length]
        return self

    def _drop(self, length: int) -> None:
        """Drop the keys and values past column ``length`` (a static arena keeps them: the next forward writes
        over them)."""

    def real_kv(self, layer: int, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values ``row`` holds at its real columns in ``layer``: (H_kv, n_real, D) each."""
        raise NotImplementedError

    def truncate_row(self, row: int, n_real: int) -> "Columns":
        """Make ``row`` keep only its first ``n_real`` real tokens; later columns become holes.

        With one row the columns are cropped for real; with several, masked (then ``trim`` runs).
        """
        cols = self.real_columns(row)
        if n_real >= cols.numel():
            return self
        cut = int(cols[n_real - 1]) + 1 if n_real > 0 else 0
        if self.batch_size == 1:
            return self.crop(cut)
        self.mask[row, cut:] = 0
        return self.trim()

    def trim(self) -> "Columns":
        """Crop trailing columns that are holes in every row."""
        used = self.mask.any(dim=0).nonzero()
        return self.crop(int(used[-1]) + 1 if used.numel() else 0)

    def compact(self) -> "Columns":
        """Remove every column that is a hole in all rows (one gather of the kept columns, ``_gather``)."""
        keep = self.mask.any(dim=0)
        if bool(keep.all()):
            return self
        idx = keep.nonzero().flatten()
        self._gather(idx)
        self.mask = self.mask[:, idx]
        return self


@dataclass
class KVState(Columns):
    """A ``DynamicCache`` and its (B, T) real-token mask (``torch.long``)."""

    cache: DynamicCache
    mask: torch.Tensor

    def real_kv(self, layer: int, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        cols = self.real_columns(row)
        entry = self.cache.layers[layer]
        return entry.keys[row][:, cols.to(entry.keys.device)], entry.values[row][:, cols.to(entry.values.device)]

    # ----------------------------------------------------------------- copies
    def clone(self) -> "KVState":
        """A deep copy: later forwards on either copy leave the other untouched."""
        with torch.no_grad():
            return KVState(copy.deepcopy(self.cache), self.mask.clone())

    def fork(self, k: int) -> "KVState":
        """A new state whose rows are each row of this one repeated ``k`` times (row i -> rows i*k..i*k+k-1).

        The prefix is shared by value: nothing is recomputed, the tensors are copied once.
        """
        if k < 1:
            raise ValueError(f"fork needs k >= 1, got {k}")
        forked = self.clone()
        if k > 1:
            forked.cache.batch_repeat_interleave(k)
            forked._edit_empty_layers(lambda t: t.repeat_interleave(k, dim=0))
            forked.mask = forked.mask.repeat_interleave(k, dim=0)
        return forked

    # ----------------------------------------------------------------- edits
    def select(self, rows: list[int] | torch.Tensor) -> "KVState":
        """Keep only ``rows`` (in that order)."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.mask.device)
        self.cache.batch_select_indices(idx)
        self._edit_empty_layers(lambda t: t[idx.to(t.device)])
        self.mask = self.mask[idx]
        return self

    def _edit_empty_layers(self, edit) -> None:
        """Apply a batch edit to layers cropped to zero tokens: transformers skips those, which would
        leave a (B_old, H, 0, D) tensor that the next forward cannot concatenate with B_new rows."""
        for layer in self.cache.layers:
            keys = getattr(layer, "keys", None)
            if keys is not None and keys.dim() == 4 and keys.shape[-2] == 0:
                layer.keys, layer.values = edit(keys), edit(layer.values)

    def _drop(self, length: int) -> None:
        if length < self.length:
            self.cache.crop(length - self.length)

    def _gather(self, idx: torch.Tensor) -> None:
        """Keep only the columns ``idx`` of every layer's keys and values (:meth:`~Columns.compact`)."""
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys.index_select(-2, idx.to(layer.keys.device))
                layer.values = layer.values.index_select(-2, idx.to(layer.values.device))
