"""Each engine is spoken to in its own dialect, found from ``/v1/models``; vLLM is started the way its
CPU build needs. A loopback fake engine plays llama.cpp, vLLM and a plain OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_engine_client import FakeEngine

from lookahead_reasoning.errors import EngineError, PromptError
from lookahead_reasoning.models.placement import cpu_supports_bf16
from lookahead_reasoning.prompts import math_messages
from lookahead_reasoning.sampling import SamplingConfig
from lookahead_reasoning.runtime.engine.client import Endpoint, EngineClient, request_body
from lookahead_reasoning.runtime.engine.dialects import DIALECTS, probe_dialect
from lookahead_reasoning.runtime.engine.pair import EnginePair
from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.runtime.engine.llamacpp import llama_argv
from lookahead_reasoning.runtime.engine.process import ServerConfig
from lookahead_reasoning.runtime.engine.vllm import VLLMServer, served_model, speculative_config, vllm_argv, vllm_environment
from lookahead_reasoning.testing import tiny_tokenizer

LLAMA_CPP_ONLY = {"cache_prompt", "n_probs", "verbose", "return_tokens"}
SRC = Path(__file__).resolve().parents[1] / "src" / "lookahead_reasoning"


def test_the_dialect_is_read_from_the_owner_of_the_served_model():
    assert probe_dialect({"data": [{"id": "m", "owned_by": "llamacpp"}]}).name == "llama.cpp"
    assert probe_dialect({"data": [{"id": "m", "owned_by": "vllm"}]}).name == "vllm"
    assert probe_dialect({"data": [{"id": "m", "owned_by": "sglang"}]}).name == "openai"
    assert probe_dialect({"object": "error"}).name == "openai"
    with pytest.raises(EngineError, match="unknown engine kind 'tgi'"):
        Endpoint("http://127.0.0.1:1", engine="tgi")


def test_llama_cpp_fields_go_to_llama_cpp_only():
    for name, dialect in DIALECTS.items():
        body = request_body([1, 2], 8, ("\n\n",), SamplingConfig(), None, 2, dialect)
        assert body["logprobs"] == 2 and body["prompt"] == [1, 2]
        assert bool(set(body) & LLAMA_CPP_ONLY) == (name == "llama.cpp"), name


def test_sampling_reaches_every_engine_with_one_meaning():
    """temperature, top_p and top_k go into every body; an unset top_k cuts no token on any engine
    (llama.cpp's server would keep its 40 likeliest if the field were left out); the seed goes where given."""
    sampled = SamplingConfig(temperature=0.7, top_k=5, top_p=0.9)
    for name, dialect in DIALECTS.items():
        body = request_body([1], 8, (), sampled, 11, 0, dialect)
        assert (body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (0.7, 0.9, 5, 11), name
        plain = request_body([1], 8, (), SamplingConfig(), 11, 0, dialect)
        assert plain["temperature"] == 0 and "seed" not in plain, name  # a greedy request needs none
        assert plain.get("top_k", 0) == 0 and ("top_k" in plain) == (name == "llama.cpp"), name


@pytest.mark.parametrize("flavour, route", [("llama.cpp", "/apply-template"), ("vllm", "/tokenize")])
def test_chat_prompts_take_each_engines_own_template_route(flavour, route):
    with FakeEngine(flavour=flavour) as engine:
        pair = EnginePair(engine.url)
        ids = pair.prompt_ids([{"role": "user", "content": "Hi"}])
        assert ids == [ord(c) for c in "Hi"]
        asked = [p for p in engine.paths if p in ("/apply-template", "/tokenize")]
        assert route in asked and (flavour == "llama.cpp" or "/apply-template" not in asked)
        sent = pair.target.client.complete(ids, 4)
        assert sent.text == "Step one."
        assert bool(set(engine.requests[-1]) & LLAMA_CPP_ONLY) == (flavour == "llama.cpp")
        assert pair.prompt_ids("Hi") == [ord("H"), ord("i")]
        texts = [body for route, body in engine.posts if route == "/tokenize" and "messages" not in body]
        assert texts and all(("content" in body) == (flavour == "llama.cpp") for body in texts)
        pair.close()


def test_an_engine_without_a_template_route_uses_a_local_tokenizer_or_says_how_to_name_one():
    messages = [{"role": "user", "content": "Hi"}]
    with FakeEngine(flavour="openai") as engine:
        with pytest.raises(PromptError, match="--template"):
            EnginePair(engine.url).prompt_ids(messages)
        tokenizer = tiny_tokenizer()
        expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert EnginePair(engine.url, template=tokenizer).prompt_ids(messages) == [ord(c) for c in expected]
        assert "/apply-template" not in engine.paths


def test_a_template_named_by_path_is_loaded_as_a_tokenizer(tmp_path):
    """``--template DIR`` (``template=`` a path, an offline name or a hub id) loads that tokenizer."""
    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(tmp_path / "tok")
    messages = [{"role": "user", "content": "Hi"}]
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    with FakeEngine(flavour="openai") as engine:
        assert EnginePair(engine.url, template=str(tmp_path / "tok")).prompt_ids(messages) == [ord(c) for c in expected]
    with pytest.raises(Exception, match="tokenizer"):
        EnginePair("http://127.0.0.1:1", template=str(tmp_path / "missing"))


def test_only_the_llama_cpp_dialect_names_llama_cpp_routes():
    """No module but the llama.cpp dialect sends /apply-template (the rest of the library is engine-neutral)."""
    users = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if '"/apply-template"' in p.read_text())
    assert users == ["runtime/engine/dialects.py"]


def test_vllm_is_started_by_module_on_loopback_with_both_cores(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    config = ServerConfig(str(model), "vllm", threads=2, spec="ngram", spec_tokens=3)
    argv = vllm_argv(config, Path("/venv/bin/python"), 8123)
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8123"
    assert "--enable-prefix-caching" in argv and "--enforce-eager" in argv
    assert argv[argv.index("--block-size") + 1] == "32"  # not the CPU default of 128: LR's prompts differ at the end
    assert argv[argv.index("--dtype") + 1] == ("bfloat16" if cpu_supports_bf16() else "float32")
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    assert argv[argv.index("--max-model-len") + 1] == "4096"  # vLLM's default context, not llama.cpp's
    assert vllm_environment(config) == {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "0-1",
                                    "OMP_NUM_THREADS": "2"}
    draft = speculative_config(ServerConfig(str(model), "vllm", spec="draft", draft=str(model)))
    assert draft["method"] == "draft_model" and draft["model"] == str(model)
    assert served_model("org/some-model") == ("org/some-model", "org/some-model")


def test_vllm_settings_and_models_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="spec 'draft' needs a draft"):
        ServerConfig("m", "vllm", spec="draft")
    with pytest.raises(ConfigError, match="context must be an integer >= 256"):
        ServerConfig("m", "vllm", context=16)
    with pytest.raises(ConfigError, match="block_size must be a multiple of 16"):
        ServerConfig("m", "vllm", block_size=24)
    (tmp_path / "weights.bin").write_text("")
    with pytest.raises(EngineError, match="a file"):
        served_model(tmp_path / "weights.bin")
    with pytest.raises(EngineError, match="without config.json"):
        served_model(tmp_path)


def test_a_vllm_server_that_dies_while_loading_is_reported_with_its_log(tmp_path, monkeypatch):
    """The process handling vLLM shares with llama.cpp: a server that exits while loading is named with
    the tail of its log (here a stand-in that prints one line and exits)."""
    monkeypatch.setattr(VLLMServer, "argv", lambda self, port: [sys.executable, "-c",
                                                                 "print('no model here'); raise SystemExit(3)"])
    server = VLLMServer(ServerConfig("org/m", "vllm"), startup_s=30)
    with pytest.raises(EngineError, match=r"vLLM server exited with code 3 while loading org/m:\nno model here"):
        server.start()
    assert not server.alive()


def test_a_server_alive_but_failed_is_reported_at_once_with_its_log(monkeypatch):
    """A start that can never succeed (the process lives on, never healthy, after a fatal error in its
    log) ends a few seconds after the error, not at the end of the whole start time, and names it."""
    script = ("import sys, time; print('Traceback (most recent call last):'); print('RuntimeError: no weights'); "
              "sys.stdout.flush(); time.sleep(120)")
    monkeypatch.setattr(VLLMServer, "argv", lambda self, port: [sys.executable, "-c", script])
    monkeypatch.setattr(VLLMServer, "FATAL_GRACE_S", 1.0)
    server = VLLMServer(ServerConfig("org/m", "vllm"), startup_s=100)
    began = time.monotonic()
    with pytest.raises(EngineError, match=r"wrote an error to its log while loading org/m(.|\n)*no weights"):
        server.start()
    assert time.monotonic() - began < 30 and not server.alive()


def test_a_server_that_logs_no_error_is_waited_for_until_the_start_time_ends(monkeypatch):
    script = "import time; print('loading slowly', flush=True); time.sleep(60)"
    monkeypatch.setattr(VLLMServer, "argv", lambda self, port: [sys.executable, "-c", script])
    server = VLLMServer(ServerConfig("org/m", "vllm"), startup_s=2)
    with pytest.raises(EngineError, match=r"did not become healthy within 2 s:\nloading slowly"):
        server.start()
    assert not server.alive()


def test_serve_engine_refuses_bad_numbers_before_installing_anything(capsys):
    done = subprocess.run([sys.executable, "-m", "lookahead_reasoning", "serve-engine", "--engine", "vllm",
                           "--context", "16", "--build-only"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "context must be an integer >= 256" in done.stderr
    assert "Traceback" not in done.stderr


FAKE_SERVER = """
import http.server, subprocess, sys
port, pidfile = int(sys.argv[1]), sys.argv[2]
worker = subprocess.Popen(["sleep", "120"])  # a process of the server's own, as vLLM's engine and workers are
open(pidfile, "w").write(str(worker.pid))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""

STARTER = """
import sys, time, types
from lookahead_reasoning.runtime.engine.process import ServerProcess
class Fake(ServerProcess):
    label = "fake server"
    def argv(self, port):
        return [sys.executable, "-c", sys.argv[1], str(port), sys.argv[2]]
Fake(types.SimpleNamespace(model="fake", port=None), startup_s=60).start()
print("ready", flush=True)
time.sleep(120)
"""


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_server_and_its_own_processes_die_with_the_process_that_started_them(tmp_path):
    """The starting process is killed outright (no clean-up runs): the watchdog kills the server's
    whole group, the server's own worker process included, as it must for vLLM's engine and workers."""
    pidfile = tmp_path / "worker.pid"
    starter = subprocess.Popen([sys.executable, "-c", STARTER, FAKE_SERVER, str(pidfile)], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert starter.stdout.readline().strip() == "ready"
        worker = int(pidfile.read_text())
        assert not _gone(worker, 0.3)
        starter.kill()
        starter.wait(10)
        assert _gone(worker, 5.0), "the server's worker outlived the process that started the server"
    finally:
        starter.kill()


def test_the_prompt_cache_is_the_servers_own_setting(tmp_path):
    """No request carries ``cache_prompt`` (a per-request value would override the server's), so a server
    started with ``cache_prompt=False`` (``serve-engine --no-prompt-cache``) evaluates every prompt whole."""
    for name, dialect in DIALECTS.items():
        assert "cache_prompt" not in request_body([1, 2], 8, (), SamplingConfig(), None, 2, dialect), name
    binary = Path("/bin/llama-server")
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")  # argv only names the file
    assert "--no-cache-prompt" not in llama_argv(ServerConfig(gguf), binary, 8080)
    argv = llama_argv(ServerConfig(gguf, cache_prompt=False), binary, 8080)
    assert argv.count("--no-cache-prompt") == 1


def test_one_server_config_reads_each_engine_s_own_fields_and_refuses_the_other_s(tmp_path):
    """llama.cpp reads slots, vLLM a dtype, a block size, a KV cache size and eager; a field the engine does not
    read is refused by name, and a field left None takes the engine's own default."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    argv = llama_argv(ServerConfig(gguf, spec="draft", draft=gguf), Path("/bin/llama-server"), 8080)
    assert argv[argv.index("-np") + 1] == "4" and argv[argv.index("-c") + 1] == "16384"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "8"
    assert argv[argv.index("-t") + 1] == str(os.cpu_count() or 2)
    for engine, other in (("llama.cpp", {"dtype": "bf16"}), ("llama.cpp", {"eager": False}),
                          ("vllm", {"parallel": 2}), ("llama.cpp", {"kv_cache_gib": 1})):
        with pytest.raises(ConfigError, match=f"{next(iter(other))}: not a setting of {engine}"):
            ServerConfig("m", engine, **other)
    with pytest.raises(ConfigError, match="engine must be one of llama.cpp, vllm"):
        ServerConfig("m", "sglang")
    with pytest.raises(ConfigError, match="parallel must be an integer >= 1"):
        ServerConfig("m", parallel=0)
    with pytest.raises(ConfigError, match="a vLLM server runs a ServerConfig of engine 'vllm'"):
        VLLMServer(ServerConfig("m"))


def test_no_prompt_cache_is_refused_for_vllm_before_anything_starts(capsys):
    from lookahead_reasoning.cli import main

    assert main(["serve-engine", "--engine", "vllm", "--no-prompt-cache", "--draft", "none"]) == 2
    err = capsys.readouterr().err
    assert "--no-prompt-cache" in err and "vLLM" in err
