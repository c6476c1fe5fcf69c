"""llama.cpp's server is built, started once on a small model, and rebuilt without the kernels at fault
where it dies: stand-in builds (Python scripts in place of the compiled server) die with SIGILL or serve."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import pytest

from lookahead_reasoning.errors import EngineError
from lookahead_reasoning.runtime.engine import build
from lookahead_reasoning.runtime.engine.smoke import death, smoke_test

AMX_CPU = {"fpu", "avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"}
PLAIN_CPU = {"fpu", "avx2", "avx512f", "avx512_bf16"}

DIES = """import os, signal, time
time.sleep(0.2)  # dies while loading the model, as the native build did
os.kill(os.getpid(), signal.SIGILL)
"""
SERVES = """import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
class Handler(BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send({"status": "ok"})
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send({"content": " 42"})
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def _stand_in(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The build's steps replaced: no download, and each recipe's "compile" writes a stand-in server that
    dies with SIGILL (recipes named in ``dies``) or serves. Returns the list of recipes compiled."""
    compiled: list[str] = []
    dies: set[str] = {""}
    model = tmp_path / "small.gguf"
    model.write_bytes(b"GGUF")

    def compile_(source, build_path, recipe, log):
        compiled.append(recipe.name)
        with log.open("a") as out:
            out.write(f"compiled {recipe.name or 'native'} with {' '.join(recipe.cmake_flags())}\n")
        return _stand_in(build_path / "bin" / build.BINARY, DIES if recipe.name in dies else SERVES)

    monkeypatch.setattr(build, "_fetch_source", lambda work, log: work / "source")
    monkeypatch.setattr(build, "_compile", compile_)
    monkeypatch.setattr(build, "smoke_model", lambda cache_dir=None: model)
    monkeypatch.setattr(build, "cpu_flags", lambda: set(AMX_CPU))
    return compiled, dies


def test_a_native_build_that_dies_with_sigill_is_rebuilt_without_amx_and_says_so(builds, tmp_path, caplog):
    compiled, _ = builds
    with caplog.at_level(logging.WARNING):
        binary = build.llama_server_binary(tmp_path / "cache")
    assert compiled == ["", "no-amx"]
    home = binary.parent.parent
    assert home.name.endswith("-no-amx") and home == build.built_server(tmp_path / "cache")
    assert not build.build_dir(tmp_path / "cache").exists()  # the build that died is not kept
    log = (home.parent / f"{build.build_dir(tmp_path / 'cache').name}.log").read_text()
    for said in (log, caplog.text):
        assert "natively (-march=native) died with SIGILL (an illegal instruction)" in said
        assert "rebuilding it without ggml's AMX kernels" in said and "amx_int8" in said
    assert "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in log
    assert "turned off: ggml's AMX kernels" in (home / "VERSION").read_text()
    assert "passed" in log and (home / build.SMOKE_FILE).read_text().startswith("wrote ' 42'")
    assert build.llama_server_binary(tmp_path / "cache") == binary and compiled == ["", "no-amx"]  # found, not rebuilt


def test_a_native_build_that_runs_is_kept_under_the_plain_key(builds, tmp_path):
    compiled, dies = builds
    dies.clear()
    binary = build.llama_server_binary(tmp_path / "cache")
    assert compiled == [""] and binary.parent.parent == build.build_dir(tmp_path / "cache")


def test_a_build_that_dies_without_amx_too_fails_naming_the_engine_and_the_instruction_sets(builds, tmp_path):
    compiled, dies = builds
    dies.add("no-amx")
    with pytest.raises(EngineError, match=r"llama.cpp's llama-server does not run on this CPU: built natively "
                                          r"\(-march=native\) it died with SIGILL .*without ggml's AMX kernels .* "
                                          r"it died with SIGILL .*announces .*amx_int8") as err:
        build.llama_server_binary(tmp_path / "cache")
    assert compiled == ["", "no-amx"] and build.built_server(tmp_path / "cache") is None
    assert "build log is" in str(err.value)


def test_a_cpu_without_amx_is_not_rebuilt_without_it(builds, tmp_path, monkeypatch):
    compiled, _ = builds
    monkeypatch.setattr(build, "cpu_flags", lambda: set(PLAIN_CPU))
    with pytest.raises(EngineError, match="built natively .* died with SIGILL"):
        build.llama_server_binary(tmp_path / "cache")
    assert compiled == [""]  # nothing to turn off: no second build
    assert [r.name for r in build.recipes_for_this_cpu()] == [""]


def test_the_cache_key_differs_by_cpu_and_by_what_was_turned_off(builds, tmp_path, monkeypatch):
    amx = build.build_dir(tmp_path, recipe=build.RECIPES[1])
    monkeypatch.setattr(build, "cpu_flags", lambda: set(PLAIN_CPU))
    plain = build.build_dir(tmp_path)
    assert amx.name.endswith("-no-amx") and plain.name != amx.name.removesuffix("-no-amx")


def test_a_cached_build_made_before_smoke_tests_is_tested_and_replaced_if_it_dies(builds, tmp_path):
    compiled, dies = builds
    dies.clear()
    old = build.build_dir(tmp_path / "cache")
    _stand_in(old / "bin" / build.BINARY, DIES)  # an earlier build: no smoke record
    assert build.built_server(tmp_path / "cache") is None
    binary = build.llama_server_binary(tmp_path / "cache")
    assert compiled == [""] and binary == old / "bin" / build.BINARY  # removed, then built again in its place
    assert "removed, building again" in (old.parent / f"{old.name}.log").read_text()
    assert (old / build.SMOKE_FILE).read_text().startswith("wrote ' 42'")


def test_a_cached_build_made_before_smoke_tests_is_kept_if_it_runs(builds, tmp_path):
    compiled, _ = builds
    old = build.build_dir(tmp_path / "cache")
    _stand_in(old / "bin" / build.BINARY, SERVES)
    assert build.llama_server_binary(tmp_path / "cache") == old / "bin" / build.BINARY
    assert compiled == [] and (old / build.SMOKE_FILE).is_file()


def test_the_smoke_test_names_how_a_server_died_or_failed(tmp_path):
    log = tmp_path / "smoke.log"
    model = tmp_path / "m.gguf"
    seen = smoke_test(_stand_in(tmp_path / "dies", DIES), model, log)
    assert not seen.passed and seen.signal == "SIGILL" and seen.crashed
    exits = smoke_test(_stand_in(tmp_path / "exits", "import sys; sys.exit(1)"), model, log)
    assert not exits.passed and not exits.crashed and exits.reason == "exited with code 1 before it answered"
    assert smoke_test(_stand_in(tmp_path / "serves", SERVES), model, log).passed
    assert death(-signal.SIGSEGV).reason == "died with SIGSEGV (a segmentation fault)"
    assert "smoke test: FAILED: died with SIGILL" in log.read_text()


def test_the_amx_tile_configuration_patch_goes_in_once_or_refuses(tmp_path):
    name, anchor, before = build.PATCHES[0]
    target = tmp_path / name
    target.parent.mkdir(parents=True)
    target.write_text("inline void init() {\n    tc.rows[4] = 16;\n" + anchor + "}\n")
    assert build.patch_source(tmp_path) == [name]
    text = target.read_text()
    assert text.index(before) + len(before) == text.index(anchor) and '"m"(tc)' in before
    with pytest.raises(EngineError, match="occurs 0 times"):
        target.write_text("nothing to patch\n")
        build.patch_source(tmp_path)


def test_the_build_comparison_reads_each_server_s_own_timings(tmp_path):
    """benchmarks/engine_builds.py against a stand-in server: the prefill and one-row figures are the server's
    own timings, four rows are tokens over wall time."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from engine_builds import measure

    from lookahead_reasoning.runtime.engine.process import free_port

    timed = SERVES.replace('self._send({"content": " 42"})', 'self._send({"content": " 42", "tokens_predicted": 8, '
                           '"tokens_evaluated": 460, "timings": {"prompt_per_second": 97.5, "predicted_per_second": 9.5}})')
    got = measure(str(_stand_in(tmp_path / "server", timed)), tmp_path / "m.gguf", free_port(), 8)
    assert got["prefill_tps"] == 97.5 and got["decode_tps"] == 9.5 and got["prompt_tokens"] == 460
    assert got["rows4_tps"] > 0
