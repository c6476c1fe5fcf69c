"""The one place that calls a transformers model: :class:`LM` and its :meth:`LM.forward`.

Every decoding loop in this library (autoregressive, token-level speculative, Lookahead Reasoning,
the LLM judge) reaches the model through ``LM.forward``. It takes new token ids for B rows, the
rows' :class:`~lookahead_reasoning.cache.KVState`, builds per-row ``position_ids`` from the mask
(real tokens only, so pads in the middle of a row do not shift positions), runs the model with the
cache, and returns float32 logits for the last ``keep`` positions only (``logits_to_keep``).

An LM may carry a padding policy (``LM.pad_to``, a :data:`PadPolicy`, installed for a run by mode
``auto`` from its measured cost table through :meth:`LM.metered`, which also hands every forward's
timing to a listener): where the table says a forward of more new tokens per row (a larger n of
T(R, n)) is cheaper than the one asked for (a BLAS that picks its kernel by the number of rows it
multiplies can run 12 tokens faster than 11), the forward is fed dummy tokens up to that n and the
cache is cropped back afterwards. Positions before the padding never see it
(causal attention), so the logits and the cache are those of the unpadded forward.

With the compiled path on (:meth:`LM.use_fast_path`; by default on a CUDA device), a state made by the
forward is a :class:`~lookahead_reasoning.cache.StaticKVState` and the same ``forward`` hands the model call
to :class:`~.compiled.FastPath` (a static cache, bucket shapes, compiled and recorded); the ids, masks, padding,
timing and logits around it are this method's either way.

Every forward is timed (``LM.stats``, the listeners) by a clock (:mod:`.clock`) that never makes the host
wait: on a GPU two CUDA events around the forward's work, read at a later forward, once the GPU has
reached them; on a CPU the host's clock, handed on at once.

On a CUDA device the forward leaves cuDNN's attention out of PyTorch's choice of attention kernels:
cuDNN builds an execution plan for every new shape (about 2 ms of CPU per layer on an H100), and
decoding changes the key length at every forward, so each token paid that planning again.
"""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from ..cache import KVState, StaticKVState
from ..cache.static import upload
from ..errors import PromptError, require
from .clock import EventClock, ForwardListener, ForwardStats, ForwardTiming, HostClock, Timings, clock_for
from .compiled import FastPath, FastPathConfig, attention_kernels, check_fast_path, default_backend
from .session import Session


PadPolicy = Callable[[int, int], int]  # (rows, new tokens per row n) -> the n to run the forward at (>= n)


class LM:
    """A causal LM with its tokenizer, seen as ``forward(ids, mask, state) -> logits``.

    Build it from a :class:`~lookahead_reasoning.models.LoadedModel` (``LM.from_loaded``) or from a
    model and tokenizer directly.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        self.timings = Timings()  # every forward's counts and times, on their way to stats and the listeners
        self.clock: HostClock | EventClock | None = None  # how forwards are timed; None: by device (runtime.clock)
        self.pad_to: PadPolicy | None = None  # pad forwards to a cheaper n (see the module docstring)
        self.cache_arg = cache_argument(model)  # "cache", or "past_key_values" before transformers 5.24
        self.pad_id = _pad_id(tokenizer, model)
        self.eos_ids = _eos_ids(tokenizer, model)
        self.fast: FastPath | None = None  # the compiled path, when on (use_fast_path)
        self.recorder: Any = None  # (ScheduleRecorder, model name): its sessions' verbs are recorded (runtime.schedule)

    def use_fast_path(self, config: FastPathConfig | str | None = "auto") -> "LM":
        """Run this model's forwards on the compiled path (:mod:`.compiled`), or, with None or "off",
        eagerly over a ``DynamicCache``.

        ``config``: a :class:`~.compiled.FastPathConfig`, a backend name, or "auto" (inductor's kernels
        recorded as CUDA graphs on a GPU, the eager loops on a CPU). Sessions made before keep running on the
        cache they started with only until the next forward: make new ones.
        """
        check_fast_path(config)
        if config == "auto":
            config = default_backend(self.device)
        if config == "off":
            config = None
        if isinstance(config, str):
            config = FastPathConfig(backend=config)
        self.fast = None if config is None else FastPath(self.model, config, self.pad_id, self.cache_arg)
        return self

    def reserve(self, columns: int) -> None:
        """Size the compiled path's cache for sessions of about ``columns`` columns now (a run's prompt and
        budget, where memory allows: :meth:`~.compiled.FastPath.reserve`); nothing on the eager path."""
        if self.fast is not None:
            self.fast.reserve(columns)

    @property
    def listeners(self) -> list[ForwardListener]:
        """Called with every forward's :class:`ForwardTiming` (e.g. a cost table learning); append to it."""
        return self.timings.listeners

    @property
    def stats(self) -> ForwardStats:
        """Every forward's calls, tokens and seconds so far (reading it waits for the forwards' times)."""
        self.settle()
        return self.timings.stats

    def settle(self, wait: bool = True) -> None:
        """Hand the timed forwards to ``stats`` and the listeners (:meth:`.clock.Timings.settle`)."""
        self.timings.settle(wait)

    @contextmanager
    def metered(self, listener: ForwardListener | None = None, pad_to: PadPolicy | None = None) -> Iterator["LM"]:
        """For the block: call ``listener`` with every forward's :class:`ForwardTiming`, and with
        ``pad_to`` run every forward at the n it gives (module docstring). Both leave with the block,
        and what was installed before comes back (blocks nest: the innermost ``pad_to`` holds)."""
        saved, self.pad_to = self.pad_to, self.pad_to if pad_to is None else pad_to
        if listener is not None:
            self.listeners.append(listener)
        try:
            yield self
        finally:
            self.settle()  # the block's last forwards reach its listener
            self.pad_to = saved
            if listener is not None and listener in self.listeners:
                self.listeners.remove(listener)

    @classmethod
    def from_loaded(cls, loaded: Any) -> "LM":
        """Wrap anything with ``.model``, ``.tokenizer`` and optionally ``.name`` (a LoadedModel)."""
        return loaded if isinstance(loaded, LM) else cls(loaded.model, loaded.tokenizer, getattr(loaded, "name", None))

    # ------------------------------------------------------------------ facts
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @functools.cached_property
    def vocab_size(self) -> int:
        """Rows of the output embedding (can exceed ``len(tokenizer)``: padded vocabularies).

        Read once and remembered: an int8 output layer rebuilds its float weight to tell its shape,
        which costs more than a forward pass.
        """
        out = self.model.get_output_embeddings()
        weight = out.weight() if callable(getattr(out, "weight", None)) else out.weight  # int8 linears: a method
        return int(weight.shape[0])

    # ------------------------------------------------------------------ sessions
    def session(self, rows: Sequence[Sequence[int]]) -> Session:
        """A fresh :class:`~lookahead_reasoning.runtime.session.Session` of this model over ``rows`` (B >= 1
        token-id lists, none empty: else ValueError), with an empty cache: its first ``logits(keep=k)`` feeds
        every row and returns (B, k, V) float32 logits. PromptError for a token id outside the model's
        vocabulary (torch's embedding would fail deep inside the forward)."""
        vocab = self.vocab_size
        outside = sorted({t for row in rows for t in row if not 0 <= t < vocab})
        require(not outside, f"token ids {outside[:5]} are outside {self.name}'s vocabulary [0, {vocab})", PromptError)
        return Session(self, rows)

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, state: KVState | None = None, new_mask: torch.Tensor | None = None,
                keep: int = 1, greedy: bool = False) -> tuple[torch.Tensor, KVState]:
        """Run the model on new tokens of B rows, appending them to ``state``'s cache.

        Args:
            input_ids: (B, n) new token ids, pads allowed anywhere (their mask is 0).
            state: the rows' cache and (B, T) mask; None starts an empty cache.
            new_mask: (B, n) 1 for real tokens, 0 for pads; None means all real.
            keep: return logits for the last ``keep`` of the n positions.
            greedy: return the logits' argmax instead (on the compiled path a one-position forward
                computes it inside its recording).

        Returns:
            (logits, state): logits is float32 (B, keep, V), or with ``greedy`` the argmax ids (B, keep)
            long; ``state`` now covers T + n columns.
        """
        require(input_ids.dim() == 2 and input_ids.shape[1] > 0, f"input_ids must be (B, n>0), got {tuple(input_ids.shape)}")
        device = self.device
        input_ids = upload(input_ids, device)  # queued, not waited for (ids on the device already stay there)
        bsz, n = input_ids.shape
        if state is None:
            state = (self.fast.arena.state(bsz) if self.fast is not None else
                     KVState(DynamicCache(config=self.model.config), torch.zeros(bsz, 0, dtype=torch.long, device=device)))
        require(state.batch_size == bsz, f"state has {state.batch_size} rows, input_ids {bsz}")
        real_tokens = bsz * n if new_mask is None else int(new_mask.sum())
        on = state.mask.device  # the mask's own device: the host for the compiled path's states (cache.static)
        new_mask = (torch.ones(bsz, n, dtype=torch.long, device=on) if new_mask is None
                    else new_mask.to(device=on, dtype=torch.long))
        padded = n if self.pad_to is None else max(n, int(self.pad_to(bsz, n)))
        static = isinstance(state, StaticKVState)
        start = self.timings.start(self.clock or clock_for(device))
        if static:  # the compiled path runs n at its bucket (the same dummy tokens as pad_to's)
            padded = self._static_width(state, bsz, padded)
        if padded > n:  # dummy tokens after the real ones (the last one repeated), cropped off below
            input_ids, new_mask = _pad_right(input_ids, new_mask, padded)
        full_mask = torch.cat([state.mask, new_mask], dim=1)
        keep_at = _keep_positions(keep, n, padded, device)
        top = None
        if static:  # the head (and with one new token its argmax) on the compiled path
            raw_logits, top = self.fast.run(input_ids, full_mask, state, keep_at)
        else:
            raw_logits = self._eager_logits(input_ids, full_mask, state, keep_at)
        state.mask = full_mask
        if padded > n:
            state.crop(state.length - (padded - n))
        logits = raw_logits.float()
        if greedy:
            logits = top if top is not None else logits.argmax(dim=-1)
        self.timings.stop(start, ForwardTiming(bsz, padded, full_mask.shape[1] - padded, 0.0), real_tokens)
        return logits, state

    def _static_width(self, state: StaticKVState, rows: int, n: int) -> int:
        """The n a forward of ``rows`` x ``n`` runs at on the compiled path (its bucket), once the state is
        known to fit and holds the working rows."""
        require(self.fast is not None and state.arena is self.fast.arena,
                "this state belongs to another static cache (the model's compiled path was changed)")
        padded = self.fast.shape(rows, n)[1]
        self.fast.make_room(state, padded)
        state.arena.make_resident(state)
        return padded

    def _eager_logits(self, input_ids: torch.Tensor, full_mask: torch.Tensor, state: KVState,
                      keep_at: int | torch.Tensor) -> torch.Tensor:
        """The model's forward over ``state``'s ``DynamicCache`` (which it extends): logits at ``keep_at``."""
        padded = input_ids.shape[1]
        position_ids = (full_mask.cumsum(dim=1) - 1).clamp(min=0)[:, -padded:]
        with attention_kernels(input_ids.device):
            out = self.model(input_ids=input_ids, attention_mask=full_mask, position_ids=position_ids, use_cache=True,
                             logits_to_keep=keep_at, **{self.cache_arg: state.cache})
        returned = getattr(out, self.cache_arg, None)  # the output field is named like the input
        state.cache = state.cache if returned is None else returned
        return out.logits

    # ------------------------------------------------------------------ text
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def chat_prompt(self, prompt: str | list[dict[str, str]], system: str | None = None) -> str:
        """The text the model continues: the chat template applied to ``prompt`` (a string or messages).

        Raises PromptError when the prompt is empty or the tokenizer has no chat template.
        """
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        require(bool(messages) and all(str(m.get("content", "")).strip() for m in messages),
                "the prompt is empty: give a question or a non-empty list of messages", PromptError)
        if system is not None:
            messages = [{"role": "system", "content": system}] + messages
        require(getattr(self.tokenizer, "chat_template", None) is not None,
                f"the tokenizer of {self.name!r} has no chat template; pass raw=True to use the prompt "
                "text as it is, or use an instruction-tuned model", PromptError)
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def prompt_ids(self, prompt: str | list[dict[str, str]], *, raw: bool = False) -> list[int]:
        """Token ids of the prompt: the chat template unless ``raw``, in which case the text as is."""
        if raw:
            require(isinstance(prompt, str) and prompt.strip() != "", "the prompt is empty", PromptError)
        ids = self.encode(prompt if raw else self.chat_prompt(prompt))
        require(len(ids) > 0, "the prompt encodes to no tokens", PromptError)
        return ids


def _pad_right(input_ids: torch.Tensor, new_mask: torch.Tensor, padded: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, n) ids and mask padded to (B, padded) with the last token repeated, counted as real (they
    are cropped off the cache after the forward)."""
    bsz, n = input_ids.shape
    ids = torch.cat([input_ids, input_ids[:, -1:].expand(bsz, padded - n)], dim=1)
    mask = torch.cat([new_mask, torch.ones(bsz, padded - n, dtype=torch.long, device=new_mask.device)], dim=1)
    return ids, mask


def cache_argument(model: Any) -> str:
    """The keyword a model's forward takes its KV cache by: ``cache`` where it has one (transformers
    5.24 and later, where ``past_key_values`` is deprecated), else ``past_key_values``."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # a forward that hides its signature: the older name works everywhere
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _keep_positions(keep: int, n: int, padded: int, device: torch.device) -> int | torch.Tensor:
    """``logits_to_keep`` for the last ``keep`` of the ``n`` real positions of a forward padded to
    ``padded`` positions (``padded - n`` dummy positions after them), as an index tensor unless it is all of them.

    transformers slices ``hidden[:, -keep:, :]`` for an int; that view keeps the (n * H) batch stride,
    and torch's bf16 CPU matmul routes such an input to a batched product that first copies the
    whole (V, H) output matrix: the LM head of one position then costs 40x more (430 ms instead of
    10 ms for the 0.5B, over a second for the 1.5B), on every forward that feeds several tokens but
    keeps one (branch starts, a draft catching up after an accepted block). Indexing with a tensor
    gives a compact copy. ``tests/test_forward.py`` checks the LM head sees compact strides.
    """
    if keep >= n and padded == n:
        return n
    return torch.arange(max(0, n - keep), n, device=device)


def _pad_id(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel) -> int:
    candidates = (tokenizer.pad_token_id, getattr(model.config, "pad_token_id", None), tokenizer.eos_token_id)
    found = next((c for c in candidates if c is not None), 0)
    return int(found[0] if isinstance(found, list) else found)


def _eos_ids(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel) -> frozenset[int]:
    sources = (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None))
    return frozenset(int(i) for s in sources if s is not None for i in (s if isinstance(s, (list, tuple)) else [s]))
