"""Load dispatch: a name or path -> :class:`LoadedModel` (see the package docstring for the order).

Every loaded model is put in ``eval()`` mode with ``requires_grad_(False)``. A tokenizer without a
pad token gets its eos token as pad (and the model's generation config the matching pad id), because
the batched decoding loops need some pad id; pads are always masked, so which token it is does not
change results.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import ModelLoadError, require
from .kernels import CPU_LINEAR_CHOICES, apply_cpu_linear
from . import offline
from .gguf import unavailable_errors
from .placement import device_map_device, resolve_attn_implementation, resolve_device, resolve_dtype
from .precision import apply_precision, resolve_precision


@dataclass
class LoadedModel:
    """A model ready for inference, with its tokenizer and where it came from.

    ``source`` is ``"offline"`` (a registry name), ``"gguf"`` (a .gguf file), ``"local"`` (a
    directory), ``"hub"`` (a hub id) or ``"memory"`` (models built in this process, such as the tiny test models).
    """

    model: Any  # a transformers PreTrainedModel (causal LM), eval mode, no grads
    tokenizer: Any  # a transformers tokenizer with a pad token
    name: str
    device: torch.device
    dtype: torch.dtype
    source: str


def _prepare(model: Any, tokenizer: Any) -> None:
    model.eval()
    model.requires_grad_(False)
    if getattr(tokenizer, "pad_token", None) is None and getattr(tokenizer, "eos_token", None) is not None:
        tokenizer.pad_token = tokenizer.eos_token
    gen = getattr(model, "generation_config", None)
    if gen is not None and gen.pad_token_id is None and getattr(tokenizer, "pad_token_id", None) is not None:
        gen.pad_token_id = tokenizer.pad_token_id


_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _looks_like_path(text: str) -> bool:
    """A path, not a hub id: starts with / ./ ../ ~, ends with .gguf, has a backslash (Windows) or
    more than one "/" (hub ids are ``name`` or ``org/name``)."""
    return (text.startswith(("/", "./", "../", "~", ".\\", "..\\")) or text.lower().endswith(".gguf")
            or (os.sep != "/" and os.sep in text) or text.count("/") > 1 or os.path.isabs(text)
            or _HUB_ID_RE.match(text) is None)


@dataclass(frozen=True)
class LoadOptions:
    """How :func:`load_model` loads a model (every field may also be passed to it as a keyword).

    Attributes:
        dtype: see :func:`resolve_dtype` ("auto" picks bf16 where the hardware has it, else fp32).
        device: see :func:`resolve_device`; the model is moved there after loading.
        device_map: passed to ``from_pretrained`` (accelerate) for multi-GPU or offloaded loads;
            the model is then left where accelerate puts it. Give ``device`` or ``device_map``, not both.
        attn_implementation: see :func:`resolve_attn_implementation`.
        cache_dir: where offline models are joined and converted (default :func:`~.offline.cache_root`).
        trust_remote_code: passed to ``from_pretrained`` for hub ids and local directories.
        cpu_linear: "auto" (default) runs a float32 CPU model's linear layers through oneDNN, which is
            much faster than the default BLAS for the few-token forwards speculative decoding makes
            (see :mod:`lookahead_reasoning.models.kernels`); "onednn" insists, "default" keeps torch's path.
        precision: None keeps the weights as loaded in ``dtype``; a target's precision ("auto", "float32",
            "bf16", "int8", "w8a8": :mod:`lookahead_reasoning.models.precision`) stores them that way. With
            "int8" or "w8a8" it is read in bf16 (exact for the offline models, half the peak memory) unless
            ``dtype`` says otherwise.
    """

    dtype: str | torch.dtype | None = "auto"
    device: str | torch.device | None = None
    device_map: str | dict | None = None
    attn_implementation: str | None = None
    cache_dir: str | os.PathLike | None = None
    trust_remote_code: bool = False
    cpu_linear: str | None = "auto"
    precision: str | None = None


def load_model(name_or_path: str | os.PathLike, options: LoadOptions | None = None, **settings: Any) -> LoadedModel:
    """Load a causal LM and its tokenizer for inference (see the module docstring for the lookup order).

    ``options`` and keyword ``settings`` (any field of :class:`LoadOptions`, overriding ``options``) say
    how: ``load_model("qwen2.5-coder-1.5b", dtype="bf16", precision="int8")``. Every option is checked
    before anything loads.
    """

    opts = dataclasses.replace(options or LoadOptions(), **settings)
    placement, precision, kwargs = _resolve(opts)
    text = os.fspath(name_or_path)
    require(isinstance(text, str) and text.strip() != "",
            f"model name or path must be a non-empty string, got {name_or_path!r}", ModelLoadError)
    model, tokenizer, source, label = _dispatch(name_or_path, text, kwargs, opts)
    if opts.device_map is None and placement.type != "cpu":
        model.to(placement)
    _prepare(model, tokenizer)
    if precision is not None:  # before the oneDNN wrapper, which then wraps only the float32 linears left
        apply_precision(model, precision, role="target")
    apply_cpu_linear(model, opts.cpu_linear)
    param = next(model.parameters())
    return LoadedModel(model, tokenizer, label, param.device, param.dtype, source)


def _resolve(opts: LoadOptions) -> tuple[torch.device, str | None, dict[str, Any]]:
    """(where the model goes, its concrete precision or None, ``from_pretrained`` keywords); checks every option."""

    require(opts.cpu_linear is None or str(opts.cpu_linear).strip().lower() in CPU_LINEAR_CHOICES,
            f"cpu_linear must be one of {', '.join(CPU_LINEAR_CHOICES)}, got {opts.cpu_linear!r}")
    require(opts.device is None or opts.device_map is None,
            f"give device= or device_map=, not both (got device={opts.device!r}, device_map={opts.device_map!r})")
    placement = resolve_device(opts.device) if opts.device_map is None else device_map_device(opts.device_map)
    precision = None if opts.precision is None else resolve_precision(opts.precision, placement)
    dtype = opts.dtype
    if precision in ("int8", "w8a8") and (dtype is None or str(dtype).strip().lower() == "auto"):
        dtype = torch.bfloat16
    elif precision in ("float32", "bf16"):
        dtype = precision
    kwargs: dict[str, Any] = dict(dtype=resolve_dtype(dtype, placement),
                                  attn_implementation=resolve_attn_implementation(opts.attn_implementation, placement))
    if opts.device_map is not None:
        kwargs["device_map"] = opts.device_map
    return placement, precision, kwargs


def _dispatch(name_or_path: str | os.PathLike, text: str, kwargs: dict[str, Any],
              opts: LoadOptions) -> tuple[Any, Any, str, str]:
    """(model, tokenizer, source, label) for an offline name, a .gguf file, a directory or a hub id."""
    spec = offline.offline_spec(text) if not isinstance(name_or_path, os.PathLike) else None
    path = Path(text).expanduser()
    remote = dict(kwargs, trust_remote_code=opts.trust_remote_code)
    if spec is not None:
        converted = offline.convert_offline(spec.name, opts.cache_dir)
        return (*_from_pretrained(converted, kwargs, f"the cached copy of {spec.name!r} in {converted}"), "offline",
                spec.name)
    if path.is_file():
        require(path.suffix.lower() == ".gguf", f"{path} is a file but not a .gguf file; give a .gguf file, a "
                f"directory with config.json, an offline name ({', '.join(offline.offline_names())}) or a hub id",
                ModelLoadError)
        return (*offline.load_gguf(path, **kwargs), "gguf", path.name)
    if path.is_dir():
        require((path / "config.json").is_file(), f"directory {path} has no config.json: not a transformers "
                f"checkpoint (to load a GGUF file, give the .gguf file's path)", ModelLoadError)
        return (*_from_pretrained(path, remote, f"the local checkpoint {path}"), "local", str(path))
    if isinstance(name_or_path, os.PathLike) or _looks_like_path(text):
        raise ModelLoadError(f"no such file or directory: {text!r} (a model is an offline name "
                             f"({', '.join(offline.offline_names())}), a .gguf file, a directory with config.json, "
                             f"or a hub id like 'Qwen/Qwen2.5-0.5B-Instruct')")
    return (*_from_pretrained(text, remote, None), "hub", text)


def load_tokenizer(name_or_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Any:
    """Only the tokenizer of a model (an offline name, a .gguf file, a directory or a hub id): what a
    client needs to apply the chat template of a model an engine serves. ModelLoadError if there is none."""
    from transformers import AutoTokenizer

    text = os.fspath(name_or_path)
    spec, path = offline.offline_spec(text), Path(text).expanduser()
    if spec is None and not path.exists() and _looks_like_path(text):
        raise ModelLoadError(f"no tokenizer at {text!r}: no such file or directory (a tokenizer is an offline name, "
                             f"a .gguf file, a model directory or a hub id)")
    try:
        if spec is not None:
            return AutoTokenizer.from_pretrained(offline.convert_offline(spec.name, cache_dir))
        if path.is_file() and path.suffix.lower() == ".gguf":
            return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        return AutoTokenizer.from_pretrained(path if path.is_dir() else text)
    except unavailable_errors() as exc:
        raise ModelLoadError(f"could not load a tokenizer for {text!r}: {type(exc).__name__}: {exc}") from exc


def context_window(name_or_path: str | os.PathLike) -> int | None:
    """The context length (``max_position_embeddings``) in a model's config.json, read without loading
    the model: a local directory, or an offline model already converted. None when unknown."""
    text = os.fspath(name_or_path)
    spec = offline.offline_spec(text) if isinstance(text, str) else None
    folder = offline.cache_root() / spec.name / offline.CONVERTED_SUBDIR if spec else Path(text).expanduser()
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _from_pretrained(source: str | Path, kwargs: dict, what: str | None) -> tuple[Any, Any]:
    """Tokenizer and model via transformers' Auto classes from a directory or hub id.

    An exception that means the model cannot be had here (:func:`~.gguf.unavailable_errors`: a missing
    file, a failed or switched-off hub lookup, a missing package, an unreadable checkpoint) becomes a
    ModelLoadError saying it could not load ``what`` (None: the hub id ``source``, :func:`_hub_failed`);
    any other exception is a bug and propagates unchanged.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=kwargs.get("trust_remote_code", False))
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except unavailable_errors() as exc:
        raise ModelLoadError(_hub_failed(str(source), exc) if what is None
                             else f"could not load {what}: {type(exc).__name__}: {exc}") from exc
    return model, tokenizer


def _hub_failed(model_id: str, exc: Exception) -> str:
    """The error for a name that is no offline name, file or directory and failed as a hub id: what
    happened first (transformers' first line), and the offline names last, where the eye lands."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    offline_mode = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    where = ("the hub is switched off here (HF_HUB_OFFLINE is set)" if offline_mode
             else "the hub could not be reached or has no such model")
    return (f"could not load {model_id!r}: it is not an offline model name, a file or a directory, so it was "
            f"tried as a Hugging Face hub id, and {where} ({type(exc).__name__}: {first}). "
            f"The offline model names are: {', '.join(offline.offline_names())}{offline.did_you_mean(model_id)}")


__all__ = ["LoadOptions", "LoadedModel", "context_window", "load_model"]
