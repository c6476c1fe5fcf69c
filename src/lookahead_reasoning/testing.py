"""Tiny models and a tiny tokenizer, built in-process, for tests and docs (no download, no files).

    from lookahead_reasoning.testing import tiny_model

    target = tiny_model("qwen2", seed=0)   # a LoadedModel: random weights, float32, sdpa
    draft = tiny_model("qwen2", seed=1)    # another seed: disagrees with the target often
    close = perturbed_copy(LM.from_loaded(target), scale=0.2, seed=2)  # agrees with the target mostly

The tokenizer is byte-level BPE over the 256 bytes plus a few merges ("\\n\\n", "the", ...), so any
text round-trips exactly through encode/decode and the step delimiter "\\n\\n" can hide inside a
larger token, as with real tokenizers. Its special tokens are ``<|endoftext|>`` (pad),
``<|im_start|>`` and ``<|im_end|>`` (eos), with a ChatML chat template, like Qwen2.5.

The models have random weights drawn with a large ``initializer_range`` (0.5), which makes their
next-token distributions peaky: greedy output changes from prompt to prompt and from token to
token instead of repeating one id. Weights depend only on ``seed`` (the caller's global RNG is left
untouched).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from transformers.convert_slow_tokenizer import bytes_to_unicode

from .errors import require
from .models import LoadedModel
from .runtime.graphs import RehearsedGraph
from .runtime.lm import LM

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

# Merges in priority order, as plain text; each merges its two parts into one token.
MERGES = (("\n", "\n"), (".", "\n\n"), ("t", "h"), ("th", "e"), (" ", "the"), ("i", "n"), ("e", "r"),
          (" ", "a"), ("a", "n"), ("=", " "), ("1", "0"), ("o", "u"))

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# (config class, model class) of each architecture; qwen3: query and key norms in every layer
CLASSES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
           "mistral": (MistralConfig, MistralForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}
ARCHITECTURES = tuple(CLASSES)


@functools.cache
def _tokenizer_json() -> str:
    """The serialised ``tokenizers.Tokenizer`` (built once; each call of tiny_tokenizer gets a fresh copy)."""
    byte_char = bytes_to_unicode()  # byte -> printable unicode char, GPT-2's byte-level alphabet

    def as_bytes(text: str) -> str:
        return "".join(byte_char[b] for b in text.encode("utf-8"))

    vocab = {byte_char[b]: b for b in range(256)}
    merges = [(as_bytes(left), as_bytes(right)) for left, right in MERGES]
    for left, right in MERGES:
        vocab.setdefault(as_bytes(left + right), len(vocab))
    tok = Tokenizer(BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()


def tiny_tokenizer():
    """A fresh byte-level BPE ``PreTrainedTokenizerFast``: 256 bytes + merges + 3 special tokens, no bos, no
    space cleanup (``decode(encode(text)) == text``; the module docstring)."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        pad_token=PAD_TOKEN, eos_token=EOS_TOKEN, additional_special_tokens=[BOS_TOKEN],
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


TINY_SHAPE = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "initializer_range": 0.5, "intermediate": None}

# Real models' sizes: random weights of these shapes time like the real models, on machines the real weights
# do not reach. The offline pair (Qwen2.5-Coder 1.5B and 0.5B, checked against their configs by the tests) and
# targets of the 7B and 32B class (Qwen2.5-7B and Qwen2.5-32B, from their published configs).
REAL_SHAPES = {
    "qwen2.5-coder-1.5b": {"hidden": 1536, "layers": 28, "heads": 12, "kv_heads": 2, "intermediate": 8960},
    "qwen2.5-coder-0.5b": {"hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2, "intermediate": 4864},
    "qwen2.5-7b": {"hidden": 3584, "layers": 28, "heads": 28, "kv_heads": 4, "intermediate": 18944},
    "qwen2.5-32b": {"hidden": 5120, "layers": 64, "heads": 40, "kv_heads": 8, "intermediate": 27648},
}
REAL_VOCAB = 151936  # the offline pair's vocabulary
REAL_VOCABS = {"qwen2.5-coder-1.5b": REAL_VOCAB, "qwen2.5-coder-0.5b": REAL_VOCAB, "qwen2.5-7b": 152064,
               "qwen2.5-32b": 152064}


def tiny_model(arch: str = "qwen2", *, vocab_size: int | None = None, seed: int = 0,
               dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", **shape: Any) -> LoadedModel:
    """A random-weight causal LM of architecture ``arch`` with :func:`tiny_tokenizer`, as a LoadedModel.

    ``vocab_size`` defaults to ``len(tiny_tokenizer())``; a larger one pads the embedding with rows
    no string maps to (as real checkpoints do), whose output logits are set to 0. ``shape`` changes
    :data:`TINY_SHAPE` (``hidden``, ``layers``, ``heads``, ``kv_heads``, ``initializer_range``,
    ``intermediate``: the MLP's size, twice ``hidden`` when None); ``tiny_model(**REAL_SHAPES[name],
    vocab_size=REAL_VOCAB)`` has a real model's shape. The weights are drawn on ``device``, so the same
    seed gives other weights on another device. eos/pad ids are set in the config and the generation
    config; attention is ``sdpa``; eval mode, no grads.
    """
    require(arch in CLASSES, f"arch must be one of {', '.join(ARCHITECTURES)}, got {arch!r}")
    tokenizer = tiny_tokenizer()
    config_class, model_class = CLASSES[arch]
    config = config_class(**_config_kwargs(tokenizer, vocab_size, {**TINY_SHAPE, **shape}))
    if arch == "qwen3":  # its head size is its own setting (128 by default), not hidden // heads
        config.head_dim = config.hidden_size // config.num_attention_heads
    config._attn_implementation = "sdpa"
    device = torch.device(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), device:
        torch.manual_seed(seed)  # fixed weights, and the caller's RNG stream is untouched
        model = model_class(config)
    model.to(dtype)
    with torch.no_grad():
        model.get_output_embeddings().weight[len(tokenizer):] = 0.0
    gen = model.generation_config
    gen.eos_token_id, gen.pad_token_id, gen.bos_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id, None
    model.eval().requires_grad_(False)
    return LoadedModel(model, tokenizer, f"tiny-{arch}-seed{seed}", device, dtype, "memory")


def _config_kwargs(tokenizer: Any, vocab_size: int | None, shape: dict[str, Any]) -> dict[str, Any]:
    """The model config of a tiny model: its sizes checked, its special ids from the tokenizer."""
    unknown = sorted(set(shape) - set(TINY_SHAPE))
    require(not unknown, f"unknown tiny model sizes: {', '.join(unknown)}; known: {', '.join(TINY_SHAPE)}")
    n_real = len(tokenizer)
    vocab_size = n_real if vocab_size is None else vocab_size
    require(vocab_size >= n_real, f"vocab_size must be at least the tokenizer's {n_real} tokens, got {vocab_size}")
    hidden, heads, kv_heads = shape["hidden"], shape["heads"], shape["kv_heads"]
    require(not (hidden % heads or heads % kv_heads),
            f"hidden ({hidden}) must be a multiple of heads ({heads}), heads of kv_heads ({kv_heads})")
    return dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=shape["intermediate"] or 2 * hidden,
                num_hidden_layers=shape["layers"], num_attention_heads=heads, num_key_value_heads=kv_heads,
                max_position_embeddings=4096, initializer_range=shape["initializer_range"], tie_word_embeddings=False,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)


def real_shape_lm(name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
                  **changes: Any) -> LM:
    """Random weights of a real model's shape (:data:`REAL_SHAPES`; ``changes`` alter it, e.g. fewer
    layers for a rehearsal), drawn directly in ``dtype`` on ``device`` (a 32B model never exists in float32)."""
    require(name in REAL_SHAPES, f"unknown shape {name!r}; known: {', '.join(REAL_SHAPES)}")
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        loaded = tiny_model("qwen2", seed=0, device=device, dtype=dtype, vocab_size=REAL_VOCABS[name],
                            **{**REAL_SHAPES[name], "initializer_range": 0.02, **changes})
    finally:
        torch.set_default_dtype(saved)
    return LM(loaded.model, loaded.tokenizer, name=f"{name} (random weights)")


def perturbed_copy(lm: LM, scale: float, seed: int = 0) -> LM:
    """A copy of ``lm`` with Gaussian noise on its output layer: a draft that agrees with it often, not always.

    The noise is ``scale`` times the output weights' standard deviation, drawn from its own generator
    seeded by ``seed`` (the caller's RNG is left untouched); the copy shares nothing with ``lm`` but
    the tokenizer. Around 0.2 the copy's greedy token equals the original's most of the time; the
    larger ``scale``, the more they disagree.
    """
    require(isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale >= 0,
            f"scale must be a number >= 0, got {scale!r}")
    model = copy.deepcopy(lm.model)
    noise = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight = model.get_output_embeddings().weight
        weight += scale * weight.std() * torch.randn(weight.shape, generator=noise).to(weight)
    return LM(model, lm.tokenizer, name=f"{lm.name}-perturbed")


class KernelsOnly(RehearsedGraph):
    """A CUDA graph's stand-in on any device: the rehearsal's input copies and a replay that runs nothing, as
    a real replay launches the recorded kernels and none of the forward's Python code. Its outputs are those
    of the recording (what is checked with it is the host's side of a replay, not the tokens)."""

    runs_python = False

    def _launch(self) -> None:
        pass
