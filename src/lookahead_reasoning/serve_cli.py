"""``lookahead-reasoning serve-engine``: build llama.cpp's server (or install vLLM) once and serve the offline models on
loopback.

It starts, on loopback ports, the target (plain), the draft, and with ``--with-sd`` the target twice more with the
engine's own token-level speculation (draft model, n-gram), prints their URLs and the commands that use them, and
stops them all on Ctrl-C. ``--engine`` picks llama.cpp's server (GGUF, the default) or vLLM (the bf16 safetensors
cache); ``--draft-engine`` lets the draft run on the other one (their tokenizers match for the offline models).
Every option is checked, naming it, before anything is built: one an engine does not read (``--parallel`` and
``--no-prompt-cache`` are llama.cpp's) is refused where no server runs that engine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

from .errors import ConfigError, require
from .presets import DEFAULT_DRAFT, DEFAULT_TARGET, no_model
from .runtime.engine.llamacpp import LlamaServer
from .runtime.engine.process import ServerConfig
from .runtime.engine.vllm import VLLMServer

ENGINES = ("llama.cpp", "vllm")


def add_serve_command(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve-engine", help="start llama.cpp's server (built once) or vLLM (installed once) on "
                                            "loopback, serving the offline models")
    s.add_argument("--engine", default="llama.cpp", choices=ENGINES,
                   help="llama.cpp: GGUF files as shipped (built from source, 8-10 min once); vllm: the bf16 "
                        "safetensors cache (vLLM's CPU build, installed into its own environment, 2.5-5 min once)")
    s.add_argument("--draft-engine", choices=ENGINES, help="the draft's engine (default: --engine; not with --draft none)")
    s.add_argument("--target", default=DEFAULT_TARGET, help="offline name, .gguf file (llama.cpp), model directory "
                                                            "or hub id (vllm)")
    s.add_argument("--draft", default=DEFAULT_DRAFT, help="the same for the draft ('none': no draft server)")
    s.add_argument("--with-sd", action="store_true",
                   help="also start the target with the engine's own draft-model SD and with its n-gram SD (not with "
                        "--draft none)")
    s.add_argument("--parallel", type=int, default=None,
                   help="llama.cpp: slots per server, requests served at once (default 4; refused where no server is "
                        "llama.cpp's)")
    s.add_argument("--context", type=int, default=None,
                   help="llama.cpp: KV cache tokens per server, shared by its slots (16384); vllm: max model length "
                        "(4096)")
    s.add_argument("--threads", type=int, default=None, help="CPU threads per server (default: all cores)")
    s.add_argument("--no-prompt-cache", action="store_true",
                   help="llama.cpp: evaluate every prompt whole (--no-cache-prompt): greedy requests repeat their "
                        "text, at the cost of the prefix's evaluation on every request (refused where no server is "
                        "llama.cpp's: vLLM's here always cache prefixes)")
    s.add_argument("--port", type=int, default=None, help="the target's port (others: free ports)")
    s.add_argument("--build-only", action="store_true",
                   help="build llama-server (or install vLLM) and prepare the models, then exit")
    s.set_defaults(func=cmd_serve)


def _server(engine: str, model: str, args: argparse.Namespace, port: int | None = None, spec: str | None = None):
    """One server of ``engine`` for ``model`` (``spec``: the engine's own SD, "draft" or "ngram"); the llama.cpp-only
    options go to llama.cpp's servers, and a refusal of the config names the command's options."""
    draft = args.draft if spec == "draft" else None
    llama = engine == "llama.cpp"
    try:
        config = ServerConfig(model, engine, context=args.context, threads=args.threads, port=port, spec=spec,
                              draft=draft, cache_prompt=not (args.no_prompt_cache and llama),
                              parallel=args.parallel if llama else None)
    except ConfigError as exc:
        flags = [flag for field, flag in SERVE_FLAGS.items() if field in str(exc)]
        raise ConfigError(f"{', '.join(flags) or '--' + engine}: {exc}") from None
    return (VLLMServer if engine == "vllm" else LlamaServer)(config)


SERVE_FLAGS = {"context": "--context", "threads": "--threads", "parallel": "--parallel", "port": "--port",
               "model": "--target/--draft"}


def _servers(args: argparse.Namespace) -> dict:
    """The servers the options ask for, every option checked first (:func:`_server`), none built or started."""
    require(not no_model(args.target), "--target none: the target server is the one every command talks to; name one")
    drafted = {"--draft-engine": args.draft_engine is not None, "--with-sd": args.with_sd}
    given = [flag for flag, on in drafted.items() if on]
    require(not no_model(args.draft) or not given, f"{', '.join(given)}: not with --draft none (no draft server)")
    engines = {args.engine} | ({args.draft_engine or args.engine} if not no_model(args.draft) else set())
    llama_only = [flag for flag, on in (("--parallel", args.parallel is not None),
                                        ("--no-prompt-cache", args.no_prompt_cache)) if on]
    require("llama.cpp" in engines or not llama_only, f"{', '.join(llama_only)}: llama.cpp's servers read it, and "
            f"every server here is vLLM's (--engine {args.engine})")
    servers = {"target": _server(args.engine, args.target, args, args.port)}
    if not no_model(args.draft):
        servers["draft"] = _server(args.draft_engine or args.engine, args.draft, args)
        if args.with_sd:
            servers["sd"] = _server(args.engine, args.target, args, spec="draft")
            servers["ngram"] = _server(args.engine, args.target, args, spec="ngram")
    return servers


def _prepare(servers: dict) -> None:
    """Build or install each engine and prepare each model, saying where they are and how long it took."""
    for role, server in servers.items():
        start = time.perf_counter()
        where = server.prepare()
        print(f"{role}: {where} ({time.perf_counter() - start:.0f} s)", file=sys.stderr)


def cmd_serve(args: argparse.Namespace) -> int:
    servers = _servers(args)  # checks every number before anything is built
    _prepare(servers)
    if args.build_only:
        return 0
    with contextlib.ExitStack() as stack:
        urls = {}
        for role, server in servers.items():
            urls[role] = stack.enter_context(server).url
            print(f"{role}: {server.label} ready at {urls[role]} after {server.started_s:.0f} s", file=sys.stderr)
        print(json.dumps(urls))
        flags = " ".join(f"--{r}-url {u}" for r, u in urls.items())
        print(f"serving on loopback; try:\n  lookahead-reasoning lr {flags}\n(Ctrl-C stops the servers)",
              file=sys.stderr, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping the servers", file=sys.stderr)
    return 0


__all__ = ["ENGINES", "add_serve_command", "cmd_serve"]
