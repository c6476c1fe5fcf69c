"""Start a freshly built ``llama-server`` once and ask it for a few tokens: does it run on this CPU?

A native build (``-march=native``) compiles every kernel the CPU's flags announce, and a kernel that
faults is found only when a model runs through it: ggml's AMX kernels died here with an illegal
instruction at the first prompt (``runtime/engine/build.py`` says why, and what the build does about it).
:func:`smoke_test` is that first run, made by the build itself: the server loads a small GGUF model on
a free loopback port, answers ``/health`` and writes a few tokens of a prompt several tokens long (so the
batched matrix kernels run, as every prompt and every Lookahead Reasoning cycle runs them). It returns
a :class:`Smoke`: passed, or how the server died (the signal by name) or failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from .process import LOOPBACK, free_port

PROMPT = "Question: what is 12 + 30? Answer step by step.\nStep 1:"
TOKENS = 4
SIGNAL_MEANING = {"SIGILL": "an illegal instruction", "SIGSEGV": "a segmentation fault", "SIGBUS": "a bus error",
                  "SIGFPE": "an arithmetic fault", "SIGABRT": "an abort"}


@dataclass(frozen=True)
class Smoke:
    """What one smoke test saw: ``passed``, else ``signal`` (the name a crash died of, e.g. "SIGILL"), and
    ``reason``, one line for the build log and the terminal."""

    passed: bool
    reason: str
    signal: str | None = None

    @property
    def crashed(self) -> bool:
        return self.signal is not None


def death(returncode: int) -> Smoke:
    """A :class:`Smoke` for a server that exited with ``returncode`` before it had answered."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        meaning = SIGNAL_MEANING.get(name)
        return Smoke(False, f"died with {name}" + (f" ({meaning})" if meaning else ""), signal=name)
    return Smoke(False, f"exited with code {returncode} before it answered")


def _ask(port: int, process: subprocess.Popen, deadline: float) -> Smoke:
    url = f"http://{LOOPBACK}:{port}"
    with httpx.Client(timeout=10.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return death(process.returncode)
            try:
                if client.get(f"{url}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            return Smoke(False, "did not answer /health in time")
        try:
            reply = client.post(f"{url}/completion", json={"prompt": PROMPT, "n_predict": TOKENS,
                                                           "temperature": 0.0, "cache_prompt": False},
                                timeout=max(1.0, deadline - time.monotonic()))
        except httpx.HTTPError as exc:
            process.poll()
            return death(process.returncode) if process.returncode is not None else \
                Smoke(False, f"the completion request failed: {type(exc).__name__}")
    if reply.status_code != 200:
        return Smoke(False, f"answered HTTP {reply.status_code} to a completion request")
    text = reply.json().get("content")
    if not isinstance(text, str):
        return Smoke(False, "answered a completion request without text")
    return Smoke(True, f"wrote {text!r} for a {TOKENS}-token request")


def smoke_test(binary: Path, model: Path, log: Path, timeout_s: float = 180.0) -> Smoke:
    """Start ``binary`` on ``model`` (a small GGUF file), ask it for :data:`TOKENS` tokens, stop it.

    Its output is appended to ``log``; the server runs on one slot, a short context and up to two
    threads, for at most ``timeout_s`` seconds, and is killed with its process group at the end."""
    port = free_port()
    argv = [str(binary), "-m", str(model), "--host", LOOPBACK, "--port", str(port), "-np", "1", "-c", "512",
            "-t", str(min(2, os.cpu_count() or 1)), "--no-webui"]
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}   # smoke test\n")
        out.flush()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    try:
        seen = _ask(port, process, time.monotonic() + timeout_s)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    with log.open("a") as out:
        out.write(f"smoke test: {'passed' if seen.passed else 'FAILED'}: {seen.reason}\n")
    return seen
