"""Start llama.cpp's ``llama-server`` on a loopback port, serving GGUF files as they ship.

:class:`LlamaServer` is a context manager: it builds the server if the cache has none
(:func:`~lookahead_reasoning.runtime.engine.build.llama_server_binary`), picks a free port on 127.0.0.1,
starts the process with its log in a file, waits until ``/health`` says the model is loaded, and
stops the process on exit (terminate, then kill). A server that dies while loading is reported with
the last lines of its log.

Models are GGUF paths or the library's offline names (``qwen2.5-coder-1.5b``): those are joined
from their PyPI parts and checked against their sha256 once, then served quantised as they are.
The server's own token-level speculation (``spec``) uses a draft GGUF in the same process:
``"draft"`` (the draft model proposes tokens) or ``"ngram"`` (prompt lookup).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import EngineError, require
from ...models.offline import offline_gguf, offline_spec
from .build import llama_server_binary
from .client import Endpoint, EngineClient

SPEC_TYPES = {"draft": "draft-simple", "ngram": "ngram-simple"}
LOOPBACK = "127.0.0.1"


def gguf_path(model: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """A GGUF file for ``model``: an offline short name (joined and verified) or a path to a ``.gguf``."""
    if isinstance(model, str) and offline_spec(model) is not None:
        return offline_gguf(model, cache_dir)
    path = Path(model).expanduser()
    if not path.is_file() or path.suffix != ".gguf":
        raise EngineError(f"an engine model must be an offline name or a .gguf file, got {str(model)!r} "
                          f"({'not a .gguf file' if path.is_file() else 'no such file'})")
    return path


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to kill the server when the process that started it dies
    (a test run or a benchmark killed outright leaves no server behind). A no-op elsewhere."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@dataclass
class ServerConfig:
    """How to run one ``llama-server``: the model, its slots, threads, context and speculation.

    ``parallel`` slots serve that many requests at once (the rows of a cycle); ``context`` is the KV
    cache in tokens, shared by the slots; ``spec`` turns on the server's own token-level
    speculation: "draft" (``draft`` GGUF proposes up to ``spec_max`` tokens) or "ngram".
    """

    model: str | os.PathLike
    parallel: int = 4
    context: int = 16384
    threads: int | None = None
    draft: str | os.PathLike | None = None
    spec: str | None = None
    spec_max: int = 8
    port: int | None = None
    extra: tuple[str, ...] = ()
    cache_dir: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        require(isinstance(self.parallel, int) and self.parallel >= 1,
                f"server slots (parallel) must be an integer >= 1, got {self.parallel!r}")
        require(isinstance(self.context, int) and self.context >= 256,
                f"server context must be an integer >= 256 tokens, got {self.context!r}")
        require(self.spec in (None, *SPEC_TYPES), f"server spec must be None, 'draft' or 'ngram', got {self.spec!r}")
        require(self.spec != "draft" or self.draft is not None, "server spec 'draft' needs a draft model")

    def argv(self, binary: Path, port: int) -> list[str]:
        """The command line that starts this server on ``port``."""
        argv = [str(binary), "-m", str(gguf_path(self.model, self.cache_dir)), "--host", LOOPBACK, "--port", str(port),
                "-np", str(self.parallel), "-c", str(self.context), "-t", str(self.threads or os.cpu_count() or 2),
                "--no-webui", "--metrics"]
        if self.spec is not None:
            argv += ["--spec-type", SPEC_TYPES[self.spec]]
            if self.spec == "draft":
                argv += ["-md", str(gguf_path(self.draft, self.cache_dir)), "--spec-draft-n-max", str(self.spec_max)]
        return argv + list(self.extra)


@dataclass
class LlamaServer:
    """A running ``llama-server`` (use as a context manager, or :meth:`start` / :meth:`stop`)."""

    config: ServerConfig
    startup_s: float = 300.0
    log_path: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)
    port: int | None = None

    @property
    def url(self) -> str:
        require(self.port is not None, "the server has not been started", EngineError)
        return f"http://{LOOPBACK}:{self.port}"

    def endpoint(self, **kwargs) -> Endpoint:
        return Endpoint(self.url, **kwargs)

    def start(self) -> "LlamaServer":
        binary = llama_server_binary(self.config.cache_dir)
        self.port = self.config.port or free_port()
        argv = self.config.argv(binary, self.port)
        if self.log_path is None:  # a log of our own, removed again when the server is stopped
            fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
            os.close(fd)
            self.log_path, self._temporary_log = Path(name), True
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, preexec_fn=_die_with_parent)
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        client, deadline = EngineClient(Endpoint(self.url, retries=0, timeout_s=5.0)), time.monotonic() + self.startup_s
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise EngineError(f"llama-server exited with code {self.process.returncode} while loading "
                                      f"{self.config.model}:\n{self.log_tail()}")
                if client.healthy():
                    return
                time.sleep(0.25)
        finally:
            client.close()
        tail = self.log_tail()
        self.stop()
        raise EngineError(f"llama-server did not become healthy within {self.startup_s:g} s:\n{tail}")

    def log_tail(self, lines: int = 12) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """Kill the process at once (as a crash would)."""
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
        if getattr(self, "_temporary_log", False) and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["LlamaServer", "ServerConfig", "free_port", "gguf_path"]
