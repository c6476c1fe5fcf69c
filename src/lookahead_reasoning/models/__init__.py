"""Loading models: offline short names, GGUF files, local directories and hub ids -> :class:`LoadedModel`.

    from lookahead_reasoning.models import load_model

    target = load_model("qwen2.5-coder-1.5b")          # offline GGUF packages, cached as bf16 safetensors
    draft = load_model("./my-draft", dtype="float32")  # a local directory with config.json
    other = load_model("Qwen/Qwen2.5-0.5B-Instruct")   # a hub id (needs the network, or the HF cache)

What ``load_model(name_or_path)`` tries, in order:

1. an offline short name (:data:`OFFLINE_MODELS`, case-insensitive, aliases allowed);
2. an existing ``.gguf`` file (model and tokenizer both read from the file, weights dequantised);
3. an existing directory with a ``config.json`` (``from_pretrained`` on it);
4. a string that looks like a path but does not exist -> :class:`ModelLoadError` "no such file or directory";
5. anything else is a hub id (``from_pretrained(id)``); a failure says so and lists the offline names.

Four modules load:

* :mod:`.offline`: the offline models' registry, their part packages, the sha256-checked join,
  the lock and the bf16 safetensors conversion cache;
* :mod:`.placement`: :func:`resolve_device`, :func:`resolve_dtype` (with :func:`cpu_supports_bf16`,
  :func:`~.placement.cpu_supports_int8_dot`) and :func:`resolve_attn_implementation`;
* :mod:`.loading`: :class:`LoadedModel` and :func:`load_model`'s dispatch (with :class:`LoadOptions`);
* :mod:`.gguf`: reading a GGUF file into a dense transformers model.

Four more choose how a loaded model computes: :mod:`.precision` (the weight precision per model),
:mod:`.int8_layers` (the int8 layers it swaps in), :mod:`.kernels` (the CPU's float32 matmul kernel, the
draft's dynamic int8) and :mod:`.hardware` (the CPU's instruction flags they all read).
"""

from .loading import LoadedModel, LoadOptions, load_model
from .offline import (CONVERTED_MARKER, CONVERTED_SUBDIR, OFFLINE_MODELS, OfflineModel, cache_root, convert_offline,
                      offline_gguf, offline_names, offline_spec, part_files)
from .placement import cpu_supports_bf16, resolve_attn_implementation, resolve_device, resolve_dtype

__all__ = [
    "CONVERTED_MARKER", "CONVERTED_SUBDIR", "LoadOptions", "LoadedModel", "OFFLINE_MODELS", "OfflineModel",
    "cache_root", "convert_offline", "cpu_supports_bf16", "load_model", "offline_gguf", "offline_names", "offline_spec",
    "part_files", "resolve_attn_implementation", "resolve_device", "resolve_dtype",
]
