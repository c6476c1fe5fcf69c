"""Shared test helpers: tiny random-weight Llama / Qwen2 models over the library's tiny byte-level
tokenizer (:mod:`lookahead_reasoning.testing`), a second tokenizer with another vocabulary, and lazy
access to the real offline models for the ``real``-marked tests.

The tiny tokenizer is byte-level BPE over the 256 bytes plus a few merges ("\\n\\n", ".\\n\\n",
"the", ...): any text round-trips, a multi-byte character spans several tokens, and the step
delimiter "\\n\\n" sometimes hides inside a larger token, as with real tokenizers. The models have
random weights with a large ``initializer_range`` so their greedy output varies from token to
token. Everything is float32: the equality tests compare token for token.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import itertools
import json
import os
from pathlib import Path
from typing import NoReturn

import pytest
import torch
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from lookahead_reasoning.models.offline import (CONVERTED_SUBDIR, _converted_ok, _hash_marker, _verified, cache_root,
                                                offline_names, offline_spec)
from lookahead_reasoning.models.placement import resolve_dtype
from lookahead_reasoning.runtime.engine.build import built_server
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.testing import perturbed_copy, tiny_model, tiny_tokenizer

GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "train.jsonl"
N_TOKENS = len(tiny_tokenizer())  # ids 0..N_TOKENS-4 are bytes and merges, the last 3 special tokens
ORDINARY_IDS = range(0, N_TOKENS - 3)


def shifted_tokenizer(offset: int = 3) -> PreTrainedTokenizerFast:
    """The tiny tokenizer with every id moved up by ``offset`` (filler tokens below): same strings,
    another vocabulary, as two unrelated model families would have."""
    base = tiny_tokenizer()
    spec = json.loads(base.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    spec["model"]["vocab"] = {**{f"<filler{i}>": i for i in range(offset)},
                              **{token: i + offset for token, i in vocab.items()}}
    for added in spec.get("added_tokens", []):
        added["id"] += offset
    hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                 pad_token=base.pad_token, eos_token=base.eos_token,
                                 additional_special_tokens=["<|im_start|>"],
                                 clean_up_tokenization_spaces=False)
    hf.chat_template = base.chat_template
    return hf


@functools.cache
def _tiny(arch: str, seed: int, vocab_size: int):
    return tiny_model(arch, seed=seed, vocab_size=vocab_size)


def tiny_lm(arch: str = "qwen2", seed: int = 0, tokenizer: PreTrainedTokenizerFast | None = None,
            extra_vocab: int = 0) -> LM:
    """A fresh LM wrapper (own forward counters) around a cached tiny random model.

    Two calls with the same arguments share the weights but not the counters: use two calls
    when the draft is the target itself. ``extra_vocab`` pads the embedding beyond the tokenizer
    (as real checkpoints do: ids no string maps to, logit 0). ``tokenizer`` swaps in another
    tokenizer (the embedding grows to fit it).
    """
    n_tok = N_TOKENS if tokenizer is None else len(tokenizer)
    loaded = _tiny(arch, seed, max(n_tok, N_TOKENS) + extra_vocab)
    return LM(loaded.model, tokenizer or loaded.tokenizer, name=f"tiny-{arch}-{seed}")


def perturbed_lm(lm: LM, scale: float, seed: int = 0) -> LM:
    """A copy of ``lm`` with Gaussian noise (``scale`` times the weights' std) on its output layer: a
    draft that agrees with the target often but not always (:func:`lookahead_reasoning.testing.perturbed_copy`)."""
    return perturbed_copy(lm, scale, seed)


def set_eos(lm: LM, eos_ids) -> LM:
    """Make ``eos_ids`` the LM's end-of-sequence tokens (the model is shared, so only the LM changes)."""
    lm.eos_ids = frozenset(int(i) for i in eos_ids)
    return lm


def reference_logits(lm: LM, row) -> torch.Tensor:
    """(len(row), V) float32 logits of one row run alone, no padding, no cache: the slow reference."""
    with torch.no_grad():
        return lm.model(torch.tensor([list(row)], dtype=torch.long)).logits[0].float()


# Logits of the tiny models are O(10); batching, padding and caching change the float32 summation
# order, which moves them by ~1e-4 on rows of ~50 tokens. A real bug (a wrong position, a leaked pad)
# moves them by O(1).
LOGIT_ATOL = 5e-4


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


# The user's cache, read before the session fixture below points the library elsewhere: the real-model
# tests read the offline models converted there, and write nothing to it.
USER_CACHE = cache_root()


@pytest.fixture(autouse=True, scope="session")
def test_cache(tmp_path_factory) -> Path:
    """Every cache the library writes (cost tables, learned rates, engines, model conversions) goes to
    a temporary folder for the whole session, subprocesses included, so a test run leaves the user's
    cache as it found it. An offline model already converted in the user's cache is linked in, read-only
    in spirit: the tests load it from there instead of converting it again (a minute per model)."""
    root = tmp_path_factory.mktemp("lookahead-cache")
    for name in offline_names():
        spec = offline_spec(name)
        converted = USER_CACHE / name / CONVERTED_SUBDIR
        if _converted_ok(converted, spec):
            (root / name).mkdir(exist_ok=True)
            (root / name / CONVERTED_SUBDIR).symlink_to(converted, target_is_directory=True)
        gguf = USER_CACHE / name / spec.gguf_file
        if _verified(gguf, spec):  # the joined GGUF and its hash marker, for the engines a notebook starts
            (root / name).mkdir(exist_ok=True)
            for path in (gguf, _hash_marker(gguf)):
                (root / name / path.name).symlink_to(path)
    server = built_server(USER_CACHE)  # llama.cpp's server that ran its smoke test: an 8-10 minute build, not redone
    if server is not None:
        (root / "engines").mkdir()
        (root / "engines" / server.name).symlink_to(server, target_is_directory=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("LOOKAHEAD_REASONING_CACHE", str(root))
    # torch's compiled kernels too: a kernel cached under one ATEN_CPU_CAPABILITY and loaded under another
    # was seen to write NaN or corrupt memory (torch 2.13, a machine tested in both regimes); a fresh cache
    # per run makes the compiled-path tests check kernels built now, for this CPU.
    patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    yield root
    patch.undo()


@pytest.fixture(autouse=True)
def _one_thread_for_tiny_models(request):
    """Tiny models run on one thread: their ops are too small to split, and with more threads than
    free cores (a busy machine) every op waits for its slowest thread. Real-model tests keep torch's
    own setting."""
    if request.node.get_closest_marker("real"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------------------------- real models

@pytest.fixture(autouse=True)
def _real_tests_give_memory_back(request):
    """After each real-model test, :func:`give_memory_back`."""
    yield
    if request.node.get_closest_marker("real"):
        give_memory_back()


def give_memory_back() -> None:
    """Free what a real-model test left behind: models a test loaded for itself sit in reference cycles
    (modules, hooks, generators) that only the cyclic collector frees, and glibc keeps freed heap pages
    unless asked to trim. Without this the suite's memory grows by whole models from test to test (the
    float32 1.5B is 6 GB) until the machine kills it."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()


def in_ci() -> bool:
    """True under ``CI=true`` (what CI services set): there the real models must be available."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(reason: str) -> NoReturn:
    """A real-model test cannot run here: skip it, but fail it under CI, where a model or data file
    that does not load means a broken install or a broken loader, not a machine without the models."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: the real models and data must be available)", pytrace=False)
    pytest.skip(reason)


@functools.cache
def _real(name: str, dtype: torch.dtype):
    try:
        from lookahead_reasoning import models
        from lookahead_reasoning.errors import ModelLoadError
    except ImportError as exc:
        unavailable(f"lookahead_reasoning.models is not available: {exc}")
    try:
        return models.load_model(name, dtype=dtype)
    except ModelLoadError as exc:  # the offline model packages are not installed, or not convertible here
        unavailable(f"cannot load {name}: {exc}")


def real_lm(name: str, dtype: str = "float32") -> LM:
    """A fresh LM (own counters) over a real model loaded once per test run and dtype (``"auto"`` is the
    dtype it resolves to here, so it shares float32's copy on a CPU without bf16); skips if unavailable
    (fails under CI, see :func:`unavailable`). Every real-model test shares these copies: the suite never
    holds more than one copy of a model per dtype."""
    loaded = _real(name, resolve_dtype(dtype, "cpu"))
    return LM(loaded.model, loaded.tokenizer, name=getattr(loaded, "name", name))


def gsm8k_questions(n: int, start: int = 0) -> list[str]:
    """``n`` GSM8K training questions from index ``start``; skips when the file is not there (fails
    under CI, see :func:`unavailable`)."""
    if not GSM8K.exists():
        unavailable(f"GSM8K file not found at {GSM8K}")
    with open(GSM8K, encoding="utf-8") as fh:
        lines = itertools.islice(fh, start, start + n)
        return [json.loads(line)["question"] for line in lines]


def hf_greedy_ids(lm: LM, prompt, n: int, eos=None) -> list[int]:
    """transformers' own greedy search (``model.generate``), the reference. Returns the new token ids."""
    ids = torch.tensor([list(prompt)], device=lm.device)
    eos = sorted(lm.eos_ids) if eos is None else eos
    kwargs = dict(do_sample=False, max_new_tokens=n, pad_token_id=lm.pad_id, temperature=None, top_p=None,
                  top_k=None, eos_token_id=eos)
    with torch.no_grad():
        out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    return out[0, ids.shape[1]:].tolist()


@functools.cache
def real_greedy_reference(name: str, question_index: int, n: int) -> tuple[list[int], list[int]]:
    """(prompt ids, transformers' greedy new ids) for one GSM8K question on a real fp32 model, computed once."""
    lm = real_lm(name)
    prompt = lm.prompt_ids(gsm8k_questions(question_index + 1)[question_index])
    return prompt, hf_greedy_ids(lm, prompt, n)


def feed_chunks(lm, rows):
    """Feed chunk i of every row in forward i, right-aligned; return each row's logits per real token."""
    state, got = None, [[] for _ in rows]
    for i in range(max(len(r) for r in rows)):
        chunks = [r[i] if i < len(r) else [] for r in rows]
        width = max(len(c) for c in chunks)
        if width == 0:
            continue
        ids = torch.full((len(rows), width), lm.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, c in enumerate(chunks):
            if c:
                ids[b, width - len(c):] = torch.tensor(c)
                mask[b, width - len(c):] = 1
        logits, state = lm.forward(ids, state, mask, keep=width)
        assert logits.shape == (len(rows), width, lm.vocab_size)
        for b, c in enumerate(chunks):
            if c:
                got[b].append(logits[b, width - len(c):])
    return [torch.cat(g) for g in got], state


# ------------------------------------------------------------------------------------- vLLM

VLLM_MODEL = "qwen2.5-coder-0.5b"  # the target vLLM serves in the tests (the smaller model: vLLM is slow on CPUs)


@pytest.fixture(scope="module")
def vllm_server():
    """One vLLM server per test module (1-1.5 minutes to start on 2 cores): the 0.5B's bf16 cache, eager,
    both cores. Module-scoped so that its memory (several GiB) is given back before the tests that load
    the real models in this process. Skips where vLLM is not installed (fails under CI, where .ci/run installs it
    with ``serve-engine --engine vllm --build-only``)."""
    from lookahead_reasoning.runtime.engine.process import ServerConfig
    from lookahead_reasoning.runtime.engine.vllm import READY, VLLMServer, vllm_home

    if not (vllm_home(USER_CACHE) / READY).is_file():
        unavailable("vLLM is not installed: `lookahead-reasoning serve-engine --engine vllm --build-only` installs it")
    if not _converted_ok(USER_CACHE / VLLM_MODEL / CONVERTED_SUBDIR, offline_spec(VLLM_MODEL)):
        unavailable(f"{VLLM_MODEL} is not converted: `lookahead-reasoning serve-engine --engine vllm --build-only`")
    with VLLMServer(ServerConfig(VLLM_MODEL, "vllm", threads=2, cache_dir=USER_CACHE)) as server:
        yield server
