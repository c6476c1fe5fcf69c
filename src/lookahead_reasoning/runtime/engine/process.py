"""One engine server as a child process on a loopback port: started, waited for, stopped.

:class:`ServerProcess` is what :class:`~.llamacpp.LlamaServer` and :class:`~.vllm.VLLMServer` share: a
free port on 127.0.0.1, the process started with its log in a temporary file,
a wait until the engine answers ``/health``, and on exit terminate, then kill, for the whole process
group (vLLM runs its engine and workers as processes of their own). A small watchdog process stands
between this process and the server: when this process dies without stopping the server (killed
outright, a crash), the watchdog kills the server's whole group, so a test run or a benchmark killed
outright leaves no server or worker behind. A server that dies while loading is reported with the last
lines of its log; so is one that stays alive but writes a fatal error to its log (:attr:`ServerProcess.FATAL`)
and does not become healthy within a few seconds after it, instead of waiting out the whole start time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError, EngineError, require
from .client import Endpoint, EngineClient

LOOPBACK = "127.0.0.1"
SPECS = ("draft", "ngram")  # an engine's own token-level speculation: a draft model, or prompt lookup
# What each engine reads beyond the fields every engine reads, with its default (a field left None takes it)
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama.cpp": {"context": 16384, "spec_tokens": 8, "parallel": 4},
    "vllm": {"context": 4096, "spec_tokens": 4, "dtype": "auto", "block_size": 32, "kv_cache_gib": 2, "eager": True},
}
ENGINES = tuple(ENGINE_DEFAULTS)


@dataclass
class ServerConfig:
    """How this project starts one engine server: llama.cpp's ``llama-server`` (:class:`~.llamacpp.LlamaServer`)
    or vLLM's OpenAI-compatible server (:class:`~.vllm.VLLMServer`).

    Every engine reads ``model`` (llama.cpp: an offline name or a GGUF file; vLLM: an offline name, a model
    directory or a hub id), ``context`` (llama.cpp: the KV cache in tokens, shared by the slots; vLLM: the
    longest sequence, ``--max-model-len``), ``threads`` (default: all cores), ``spec`` (the engine's own
    token-level speculation: "draft", where the ``draft`` model proposes up to ``spec_tokens`` tokens, or
    "ngram", prompt lookup), ``port`` (None: a free one), ``cache_prompt``, ``extra`` (appended to its
    command line as is) and ``cache_dir``.

    llama.cpp alone reads ``parallel`` (slots: requests served at once, the rows of a cycle).
    ``cache_prompt`` False starts it with ``--no-cache-prompt``: every prompt is evaluated whole instead
    of from where it parts from a slot's cached prefix, which makes a greedy request repeatable and costs
    the prefix's evaluation on every request (``benchmarks/README.md``, the noise floor).

    vLLM alone reads ``dtype`` ("auto": bf16 on a CPU with native bf16, float32 elsewhere, where vLLM's
    bf16 matmuls fall back to torch's emulation, whose prefill ran at about 5 tokens a second here),
    ``block_size`` (the prefix cache's grain: vLLM's CPU default of 128 tokens leaves a prompt's last 127
    tokens uncached, and a Lookahead Reasoning cycle sends prompts that differ in their last steps; 32 is
    the smallest its CPU attention supports), ``kv_cache_gib`` (``VLLM_CPU_KVCACHE_SPACE``) and ``eager``
    (skip the compile warm-up, 6-10+ minutes on a 2-core CPU). Its prefix cache is always on.

    A field left None takes its engine's default (:data:`ENGINE_DEFAULTS`, read with :meth:`get`); a field
    the engine does not read, given a value, is refused by name, as is every bad number, when the config
    is made: before anything is built or started.
    """

    model: str | os.PathLike
    engine: str = "llama.cpp"
    context: int | None = None
    threads: int | None = None
    spec: str | None = None
    draft: str | os.PathLike | None = None
    spec_tokens: int | None = None
    port: int | None = None
    cache_prompt: bool = True
    extra: tuple[str, ...] = ()
    cache_dir: str | os.PathLike | None = None
    parallel: int | None = None
    dtype: str | None = None
    block_size: int | None = None
    kv_cache_gib: int | None = None
    eager: bool | None = None

    def __post_init__(self) -> None:
        require(self.engine in ENGINES, f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}", ConfigError)
        own = ENGINE_DEFAULTS[self.engine]
        other = sorted(name for name in set().union(*ENGINE_DEFAULTS.values()) - set(own)
                       if getattr(self, name) is not None)
        require(not other, f"{', '.join(other)}: not a setting of {self.engine}'s server "
                f"(it reads {', '.join(sorted(own))} beside the common ones)", ConfigError)
        require(self.cache_prompt or self.engine == "llama.cpp",
                "cache_prompt=False (--no-prompt-cache) is llama.cpp's --no-cache-prompt; vLLM's servers here always "
                "cache prefixes (leave out --enable-prefix-caching when you start vLLM yourself)", ConfigError)
        self._count("context", 256, " tokens")
        self._count("parallel", 1, " (slots: requests served at once)")
        self._count("spec_tokens", 1, " (tokens the engine drafts)")
        self._count("kv_cache_gib", 1, " GiB")
        self._count("threads", 1)
        require(self.port is None or (isinstance(self.port, int) and not isinstance(self.port, bool)
                                      and 1 <= self.port <= 65535), f"server port must be in 1..65535, got {self.port!r}",
                ConfigError)
        size = self.get("block_size")
        require(size is None or (isinstance(size, int) and size >= 16 and size % 16 == 0),
                f"server block_size must be a multiple of 16 tokens, got {size!r}", ConfigError)
        require(self.spec in (None, *SPECS), f"server spec must be None, 'draft' or 'ngram', got {self.spec!r}",
                ConfigError)
        for name, kinds in (("cache_prompt", bool), ("eager", (bool, type(None))), ("model", (str, os.PathLike)),
                            ("draft", (str, os.PathLike, type(None))), ("cache_dir", (str, os.PathLike, type(None))),
                            ("dtype", (str, type(None)))):
            require(isinstance(getattr(self, name), kinds), f"server {name} must be "
                    f"{' or '.join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))}, "
                    f"got {getattr(self, name)!r}", ConfigError)
        require(isinstance(self.extra, (tuple, list)) and all(isinstance(a, str) for a in self.extra),
                f"server extra must be a tuple of command-line words, got {self.extra!r}", ConfigError)
        require(self.spec != "draft" or self.draft is not None, "server spec 'draft' needs a draft model", ConfigError)

    def _count(self, name: str, least: int, unit: str = "") -> None:
        value = self.get(name)
        require(value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= least),
                f"server {name} must be an integer >= {least}{unit}, got {value!r}", ConfigError)

    def get(self, name: str) -> Any:
        """Field ``name``, or its engine's default where it is None."""
        value = getattr(self, name)
        return ENGINE_DEFAULTS[self.engine].get(name) if value is None else value


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


# Runs as ``python -c WATCHDOG <our pid> <server argv...>`` at the head of the server's process group: it
# starts the server in its own group, outlives a SIGTERM (the group gets it too, and it waits for the
# server to exit), and kills the whole group once the process that started it is gone.
WATCHDOG = """
import os, signal, subprocess, sys, time
parent, server = int(sys.argv[1]), subprocess.Popen(sys.argv[2:])
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # after the start: the server keeps the default
while server.poll() is None:
    if os.getppid() != parent:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    time.sleep(0.5)
sys.exit(server.returncode)
"""


class ServerProcess:
    """A running engine server (use as a context manager, or :meth:`start` / :meth:`stop`).

    ``config`` (a :class:`ServerConfig` of the subclass's ``engine``) says what to serve (its ``model`` and
    ``port``, None: a free one). Subclasses say how:
    :meth:`argv` (the command line for a port), :meth:`environment` (extra environment variables),
    :meth:`prepare` (build or install the engine and prepare the model, once), ``label`` (the engine's
    name in messages), ``STARTUP_S`` (how long loading may take) and ``FATAL`` (log lines that mean the
    start has failed: the wait then ends ``FATAL_GRACE_S`` after one unless the server is healthy)."""

    label = "engine server"
    engine = ""
    STARTUP_S = 300.0
    FATAL: tuple[str, ...] = ("Traceback (most recent call last)",)
    FATAL_GRACE_S = 10.0

    def __init__(self, config: ServerConfig, startup_s: float | None = None):
        require(not self.engine or getattr(config, "engine", None) == self.engine, f"a {self.label} runs a ServerConfig "
                f"of engine {self.engine!r}, got {getattr(config, 'engine', config)!r}", ConfigError)
        self.config, self.port = config, config.port
        self.log_path: Path | None = None  # made by start, removed by stop
        self.startup_s = self.STARTUP_S if startup_s is None else startup_s
        self.process: subprocess.Popen | None = None
        self.started_s: float | None = None  # seconds from start to ready

    # what to run (subclasses)
    def argv(self, port: int) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return {}

    def prepare(self) -> str:
        """Build or install what this server runs and prepare its model (once); a line saying where they are."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        require(self.port is not None, f"the {self.label} has not been started", EngineError)
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> "ServerProcess":
        self.port = self.port or free_port()
        argv = self.argv(self.port)
        fd, name = tempfile.mkstemp(prefix=f"{self.label.replace(' ', '-')}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), *argv], stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env={**os.environ, **self.environment()}, start_new_session=True)
        self._wait_healthy()
        self.started_s = time.monotonic() - began
        return self

    def _wait_healthy(self) -> None:
        client, deadline = EngineClient(Endpoint(self.url, retries=0, timeout_s=5.0)), time.monotonic() + self.startup_s
        failed_at, read, carry = None, 0, ""
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise EngineError(f"{self.label} exited with code {self.process.returncode} while loading "
                                      f"{self.config.model}:\n{self.log_tail()}")
                if client.healthy():
                    return
                if failed_at is None:
                    read, carry, fatal = self._log_since(read, carry)
                    if fatal:
                        failed_at = time.monotonic()
                        deadline = min(deadline, failed_at + self.FATAL_GRACE_S)
                time.sleep(0.25)
        finally:
            client.close()
        tail = self.log_tail()
        self.stop()
        if failed_at is not None:
            raise EngineError(f"{self.label} wrote an error to its log while loading {self.config.model} and did "
                              f"not become healthy in the {self.FATAL_GRACE_S:g} s after it:\n{tail}")
        raise EngineError(f"{self.label} did not become healthy within {self.startup_s:g} s:\n{tail}")

    def _log_since(self, offset: int, carry: str = "") -> tuple[int, str, bool]:
        """What the log holds after ``offset``: (its new end, the last characters read, for a marker
        that straddles two reads, and whether ``carry`` + the new text holds a line of :attr:`FATAL`)."""
        if self.log_path is None or not self.log_path.exists():
            return offset, carry, False
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            data = log.read()
        text = carry + data.decode(errors="replace")
        return offset + len(data), text[-200:], any(marker in text for marker in self.FATAL)

    def log_tail(self, lines: int = 12) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """Kill the process group at once (as a crash would)."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self, grace_s: float = 10.0) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["ENGINES", "ENGINE_DEFAULTS", "LOOPBACK", "SPECS", "ServerConfig", "ServerProcess", "free_port"]
