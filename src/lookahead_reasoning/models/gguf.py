"""Reading a GGUF file with transformers: every weight dequantised into a plain dense model, and the
GGUF quantizer taken off so that the model saves as an ordinary safetensors checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ModelLoadError


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


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
    model.is_quantized = False


def load_gguf(path: Path, **kwargs: Any) -> tuple[Any, Any]:
    """Model and tokenizer from one GGUF file, every weight dequantised to a plain dense model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    path = Path(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                     quantization_config=GgufConfig(dequantize=True), **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"could not load the GGUF file {path}: {type(exc).__name__}: {exc}") from exc
    return model, tokenizer


__all__ = ["load_gguf"]
