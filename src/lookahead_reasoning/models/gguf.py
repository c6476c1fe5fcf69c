"""Reading a GGUF file with transformers: every weight dequantised into a plain dense model, and the
GGUF quantizer taken off so that the model saves as an ordinary safetensors checkpoint."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError


def unavailable_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "this model cannot be had here" when transformers reads a checkpoint.

    A missing or unreadable file, a hub lookup that failed or is switched off (huggingface_hub's
    errors are OSErrors), a package that is not installed, content that is no checkpoint this
    transformers can read (bad JSON, an unknown architecture: ValueError; damaged safetensors), or
    too little memory. The loaders turn these into :class:`ModelLoadError`; anything else (TypeError,
    AttributeError, KeyError, RuntimeError, ...) is a bug and propagates unchanged, so that a test
    fails on it instead of skipping a model that "could not be loaded".
    """
    import torch
    from safetensors import SafetensorError

    return (OSError, ImportError, ValueError, MemoryError, torch.cuda.OutOfMemoryError, SafetensorError)


def gguf_unavailable_errors() -> tuple[type[BaseException], ...]:
    """:func:`unavailable_errors`, plus what a truncated or damaged GGUF file makes its reader raise."""
    return (*unavailable_errors(), struct.error, EOFError)


def _strip_gguf_quantizer(model: Any) -> None:
    """Make a dequantised GGUF-loaded model savable as a plain checkpoint.

    transformers 5.x keeps the GGUF quantizer on the model and its config in
    ``config.quantization_config``; ``save_pretrained`` refuses the model while the quantizer is
    set (GGUF is "not serializable"), and a saved ``quantization_config`` would make the reload look
    for a GGUF file. The weights are already dense, so both can go.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def load_gguf(path: Path, **kwargs: Any) -> tuple[Any, Any]:
    """Model and tokenizer from one GGUF file, every weight dequantised to a plain dense model.

    A file that cannot be read as a model (:func:`gguf_unavailable_errors`) raises ModelLoadError;
    any other exception propagates unchanged.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                     quantization_config=GgufConfig(dequantize=True), **kwargs)
    except gguf_unavailable_errors() as exc:
        raise ModelLoadError(f"could not load the GGUF file {path}: {type(exc).__name__}: {exc}") from exc
    return model, tokenizer


__all__ = ["gguf_unavailable_errors", "load_gguf", "unavailable_errors"]
