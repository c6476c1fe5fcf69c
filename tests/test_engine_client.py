"""The engine client and EngineSteps against a loopback server that misbehaves on purpose.

No model runs here: a small HTTP server on 127.0.0.1 answers /v1/completions as llama.cpp, vLLM or a
plain OpenAI server would, or fails as told (an HTTP status, JSON that is not a completion, bytes that
are not JSON, a reply that never comes). Every fault must come back as one EngineError naming the
endpoint and the cause, after bounded retries where a retry is safe, and nothing may hang.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import tiny_lm
from lr_helpers import ScriptedPolicy

from lookahead_reasoning.errors import ConfigError, EngineError, TokenizerMismatchError
from lookahead_reasoning.runtime.engine.client import (
    Endpoint,
    EngineClient,
    parse_completion,
    request_body,
)
from lookahead_reasoning.runtime.engine.llamacpp import free_port
from lookahead_reasoning.runtime.engine.pair import EnginePair
from lookahead_reasoning.runtime.engine.steps import EngineSteps
from lookahead_reasoning.steps import StepConfig, StepRequest


class FakeEngine:
    """A loopback server whose answers a test scripts: ``script`` is a list of actions, one per
    completion request (the last repeats): "ok", "500", "400", "notjson", "notcompletion", "hang"."""

    def __init__(self, script=("ok",), flavour="llama.cpp", text="Step one.", stop="\n\n", tokens=None, delays=None,
                 fails=()):
        self.script, self.flavour, self.text, self.stop = list(script), flavour, text, stop
        self.tokens = tokens or {}  # text -> ids for /tokenize
        self.delays = delays or {}  # a prompt's first id -> seconds its completions take
        self.fails = set(fails)  # prompts' first ids whose completions of more than 16 tokens answer HTTP 400
        self.requests: list[dict] = []  # completion bodies
        self.paths: list[str] = []  # every route asked for, in order
        self.posts: list[tuple[str, dict]] = []  # every POST: (route, body)
        self.port = free_port()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (the timeout test)
                    pass

            def do_GET(self):
                engine.paths.append(self.path)
                owner = {"llama.cpp": "llamacpp", "vllm": "vllm"}.get(engine.flavour, "someone")
                self._send(200, json.dumps({"status": "ok", "data": [{"id": "fake", "owned_by": owner}]}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                engine.paths.append(self.path)
                engine.posts.append((self.path, body))
                if self.path == "/tokenize":  # each engine's own field; vLLM also takes chat messages
                    if "messages" in body and engine.flavour == "vllm":
                        text = body["messages"][-1]["content"]
                    else:
                        text = body.get("content" if engine.flavour == "llama.cpp" else "prompt")
                    if text is None:
                        return self._send(400, b'{"error": {"message": "no text to tokenize"}}')
                    ids = engine.tokens.get(text, [ord(c) for c in text])
                    return self._send(200, json.dumps({"tokens": ids}).encode())
                if self.path == "/apply-template" and engine.flavour == "llama.cpp":
                    return self._send(200, json.dumps({"prompt": body["messages"][-1]["content"]}).encode())
                if self.path == "/detokenize":
                    return self._send(200, json.dumps({"content": "".join(map(chr, body["tokens"]))}).encode())
                if self.path != "/v1/completions":
                    return self._send(404, b'{"error": {"message": "no such route"}}')
                engine.requests.append(body)
                action = engine.script[min(len(engine.requests) - 1, len(engine.script) - 1)]
                prompt = body.get("prompt")
                time.sleep(engine.delays.get(prompt[0] if isinstance(prompt, list) and prompt else None, 0.0))
                if action == "hang":
                    time.sleep(5)
                    return self._send(200, b"{}")
                if prompt and isinstance(prompt, list) and prompt[0] in engine.fails and body.get("max_tokens", 0) > 16:
                    return self._send(400, b'{"error": {"message": "scripted failure of this prompt"}}')
                if action == "429":
                    self.send_response(429)
                    self.send_header("Retry-After", "0.2")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    return self.wfile.write(b"{}")
                if action == "truncated":  # promises more than it sends, then closes
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "400")
                    self.end_headers()
                    self.wfile.write(b'{"choices": [{"te')
                    self.close_connection = True
                    return None
                if action in ("500", "400"):
                    return self._send(int(action), b'{"error": {"message": "scripted failure"}}')
                if action == "notjson":
                    return self._send(200, b"<html>proxy error</html>")
                if action == "notcompletion":
                    return self._send(200, b'{"object": "error"}')
                self._send(200, json.dumps(engine.reply()).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reply(self) -> dict:
        choice = {"text": self.text, "index": 0, "finish_reason": "stop"}
        data = {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": len(self.text)}}
        ids = [ord(c) for c in self.text + (self.stop or "")]
        if self.flavour == "llama.cpp":
            data["__verbose"] = {"stop_type": "word" if self.stop else "eos", "stopping_word": self.stop or "",
                                 "tokens": ids}
        elif self.flavour == "vllm":
            choice["stop_reason"] = self.stop
            choice["token_ids"] = ids
        return data

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _client(url: str, **kw) -> EngineClient:
    return EngineClient(Endpoint(url, **{"timeout_s": 2.0, "retries": 2, "backoff_s": 0.01, **kw}))


def test_a_stop_string_is_put_back_and_the_engines_ids_kept():
    for flavour in ("llama.cpp", "vllm"):
        with FakeEngine(flavour=flavour) as engine:
            steps = EngineSteps(_client(engine.url), StepConfig(("\n\n",), 50))
            [step] = steps.write([StepRequest((1, 2, 3), 20)])
            assert step.text == "Step one.\n\n" and step.end == "stop_string" and step.boundary
            assert step.ids == [ord(c) for c in "Step one.\n\n"]
            sent = engine.requests[0]
            assert sent["prompt"] == [1, 2, 3] and sent["stop"] == ["\n\n"] and sent["max_tokens"] == 20


def test_end_of_sequence_is_told_apart_from_a_stop_string():
    with FakeEngine(stop=None, text="The answer is 4.") as engine:
        [step] = EngineSteps(_client(engine.url)).write([StepRequest((1,), 20)])
        assert step.end == "eos" and step.text == "The answer is 4." and not step.boundary
    with FakeEngine(flavour="vllm", stop=None, text="Done.") as engine:
        [step] = EngineSteps(_client(engine.url)).write([StepRequest((1,), 20)])
        assert step.end == "eos"


def test_a_plain_openai_server_without_ids_is_tokenized_through_the_endpoint():
    with FakeEngine(flavour="openai", text="Add them.", tokens={"Add them.\n\n": [7, 8, 9]}) as engine:
        [step] = EngineSteps(_client(engine.url)).write([StepRequest((1,), 20)])
        assert step.ids == [7, 8, 9] and step.text == "Add them.\n\n"


def test_a_server_error_is_retried_and_then_succeeds():
    with FakeEngine(script=["500", "500", "ok"]) as engine:
        done = _client(engine.url).complete([1], 5)
        assert done.text == "Step one." and len(engine.requests) == 3


@pytest.mark.parametrize("script, cause", [
    (["500"], "HTTP 500"),
    (["400"], "HTTP 400"),
    (["notjson"], "not JSON"),
    (["notcompletion"], "not a completion"),
])
def test_faults_end_in_one_clear_error_naming_the_endpoint(script, cause):
    with FakeEngine(script=script) as engine:
        client = _client(engine.url)
        with pytest.raises(EngineError, match=cause) as err:
            client.complete([1], 5)
        assert engine.url in str(err.value)
        assert len(engine.requests) == (3 if script == ["500"] else 1)  # only a 5xx is retried


def test_a_reply_that_never_comes_times_out_without_hanging():
    with FakeEngine(script=["hang"]) as engine:
        start = time.monotonic()
        with pytest.raises(EngineError, match="did not answer within 0.5 s"):
            _client(engine.url, timeout_s=0.5, retries=2).complete([1], 5)
        assert time.monotonic() - start < 4
        assert len(engine.requests) == 1  # not sent again: the server may still be computing it


def test_no_server_is_a_clear_error_saying_how_to_start_one():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineError, match="cannot connect .*serve-engine"):
        _client(url, retries=1).complete([1], 5)
    with pytest.raises(EngineError, match="cannot connect"):
        EnginePair(url, url)


def test_async_requests_fail_the_same_way():
    import asyncio

    with FakeEngine(script=["400"]) as engine:
        client = _client(engine.url)
        with pytest.raises(EngineError, match="HTTP 400"):
            asyncio.run(client.acomplete([1], 5))


def test_a_draft_with_another_tokenizer_is_refused():
    with FakeEngine() as target, FakeEngine(tokens={}) as draft:
        probe = "x"
        target.tokens[probe] = [1, 2]
        draft.tokens[probe] = [1, 3]
        from lookahead_reasoning.runtime.vocab import ENGINE_LR_NEEDS, check_same_tokenizer
        with pytest.raises(TokenizerMismatchError, match="tokenize text differently"):
            check_same_tokenizer(EngineSteps(_client(draft.url)), EngineSteps(_client(target.url)), ENGINE_LR_NEEDS, probe)


def test_endpoint_and_request_are_checked():
    with pytest.raises(ConfigError, match="http"):
        Endpoint("localhost:8080")
    with pytest.raises(ConfigError, match="timeout"):
        Endpoint("http://127.0.0.1:1", timeout_s=0)
    with pytest.raises(ConfigError, match="max_tokens"):
        request_body([1], 0, ())
    assert Endpoint("http://127.0.0.1:8080/v1/").url == "http://127.0.0.1:8080"


def test_openai_completion_logprobs_are_read():
    data = {"choices": [{"text": "ab", "finish_reason": "length", "logprobs": {
        "tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2], "top_logprobs": [{"a": -0.1, "c": -2.0}, {"b": -0.2}]}}]}
    done = parse_completion(data, "here")
    assert done.end == "budget" and [t.token for t in done.logprobs] == ["a", "b"]
    assert done.logprobs[0].top[0] == ("a", -0.1)


def test_an_engine_benchmark_stopped_by_a_fault_resumes_with_nothing_lost(tmp_path):
    """The engine fails on the third problem: the two finished records stay on disk, the error names
    the endpoint, and a second run does only what is missing."""
    from lookahead_reasoning.bench.engine import (
        EngineBench,
        run_engine_bench,
    )

    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                            for i in range(3)))
    out = tmp_path / "results.jsonl"
    # the run's warm-up, then per problem a warm-up and the run: the third problem's warm-up fails
    with FakeEngine(script=["ok"] * 5 + ["400"], text="2 \\boxed{2}") as engine:
        bench = EngineBench(str(data), str(out), engine.url, modes=("ar",), max_new_tokens=16)
        with pytest.raises(EngineError, match=f"{engine.url}.*HTTP 400"):
            run_engine_bench(bench, progress=False)
    first = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in first] == [0, 1]
    with FakeEngine(text="4 \\boxed{4}") as engine:
        run_engine_bench(EngineBench(str(data), str(out), engine.url, modes=("ar",), max_new_tokens=16),
                         progress=False)
        assert [r["max_tokens"] for r in engine.requests] == [16, 4, 16]  # warm-ups, then only the missing problem
        assert engine.requests[2]["prompt"] != engine.requests[0]["prompt"]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["index"] for r in records) == [0, 1, 2] and records[2]["engine"] is True


def test_engine_bench_modes_and_urls_are_checked(tmp_path):
    from lookahead_reasoning.bench.engine import (
        EngineBench,
        parse_engine_mode,
    )

    assert parse_engine_mode("lr@k3-async") == ("lr", 3, "async")
    assert parse_engine_mode("auto") == ("auto", None, "sync")
    for bad in ("lr@x", "ar@k2", "auto-async", "magic"):
        with pytest.raises(ConfigError, match="engine mode"):
            parse_engine_mode(bad)
    with pytest.raises(ConfigError, match="needs --draft-url"):
        EngineBench("d.jsonl", "o.jsonl", "http://127.0.0.1:1", modes=("lr@k2",))
    with pytest.raises(ConfigError, match="needs --sd-url"):
        EngineBench("d.jsonl", "o.jsonl", "http://127.0.0.1:1", draft="http://127.0.0.1:2", modes=("sd",))
    with pytest.raises(ConfigError, match="listed twice"):
        EngineBench("d.jsonl", "o.jsonl", "http://127.0.0.1:1", modes=("ar", "ar"))


def test_lookahead_generator_with_engine_urls_is_the_same_class_and_honours_or_refuses_each_option():
    from lookahead_reasoning import LookaheadGenerator, Settings

    with FakeEngine() as engine:
        gen = LookaheadGenerator(target=engine.url, draft=engine.url, verifier="exact", mode="lr", k=1)
        assert type(gen) is LookaheadGenerator and "__new__" not in LookaheadGenerator.__dict__
        ar = gen.generate("What is 2 + 2?", mode="ar", max_new_tokens=16)
        assert ar.text == "Step one." and ar.mode == "engine-ar"
        lr = gen.generate("What is 2 + 2?", k=2, schedule="async", max_new_tokens=30)  # the generator's mode lr
        assert lr.num_tokens == 30 and lr.stop_reason == "budget" and lr.stats.k == 2
        assert all(c.accepted == len(c.drafted) for c in lr.stats.cycles)  # the fake's draft equals its target
        assert all(c.plan.plan.endswith("-async") for c in lr.stats.cycles if c.drafted)
        one = gen.generate("What is 2 + 2?", max_new_tokens=30)  # the generator's own k
        assert one.stats.k == 1
        with pytest.raises(ConfigError, match="mode sd runs token-level SD in this process"):
            gen.generate("x", mode="sd")
        with pytest.raises(ConfigError, match="gamma"):
            gen.generate("x", mode="lr", gamma=4)
        with pytest.raises(ConfigError, match="timeout_s and retries are fixed"):
            gen.generate("x", mode="ar", timeout_s=1.0)
        with pytest.raises(ConfigError, match="planner measures the endpoints"):
            gen.planning()
        gen.close()
        with pytest.raises(ConfigError, match="device, dtype: loading options"):
            LookaheadGenerator(target=engine.url, draft=engine.url, dtype="bf16", device="cpu")
        with pytest.raises(ConfigError, match="precision: loading options"):
            LookaheadGenerator(target=engine.url, precision="int8")
        with pytest.raises(ConfigError, match="tempertaure: not a setting or a loading option"):
            LookaheadGenerator(target=engine.url, tempertaure=0.5)  # a misspelt name is not a loading option
        with pytest.raises(ConfigError, match="the draft must be an engine URL too"):
            LookaheadGenerator(target=engine.url, draft="qwen2.5-coder-0.5b")
        with pytest.raises(ConfigError, match="target-score"):
            LookaheadGenerator(target=engine.url, draft=engine.url, verifier="target-score")
        slow = LookaheadGenerator(target=engine.url, settings=Settings(timeout_s=7.0, retries=0))
        assert slow.engine.pair.target.client.endpoint.timeout_s == 7.0
        assert slow.engine.pair.target.client.endpoint.retries == 0
        slow.close()


def test_engine_names_are_refused_for_models_in_this_process():
    from lookahead_reasoning import LookaheadGenerator

    with pytest.raises(ConfigError, match="template: only for a target served by an engine"):
        LookaheadGenerator(target=tiny_lm("qwen2", 0), template=object())


def test_command_line_over_engines_answers_bad_input_in_one_line(capsys):
    from lookahead_reasoning.cli import main

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["lr", "--target-url", url, "--draft-url", url, "--max-new-tokens", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot connect to the engine at " + url) and "\n" not in err
    assert main(["bench", "--dataset", "x.jsonl", "--target-url", url, "--modes", "lr@k2"]) == 2
    assert capsys.readouterr().err.strip() == "error: engine mode lr@k2 needs --draft-url"
    assert main(["serve-engine", "--parallel", "0", "--build-only"]) == 2
    assert "--parallel: server parallel must be an integer >= 1" in capsys.readouterr().err


def test_command_line_runs_lr_over_an_engine(capsys):
    from lookahead_reasoning.cli import main

    with FakeEngine(text="So 2 + 2 = 4, and the answer is \\boxed{4}.") as engine:
        rc = main(["lr", "--target-url", engine.url, "--draft-url", engine.url, "--mode", "lr", "--schedule", "async",
                   "--prompt", "What is 2 + 2?", "--max-new-tokens", "30"])
        out = capsys.readouterr().out
    assert rc == 0 and '"mode": "engine-lr"' in out and '"speedup_vs_ar"' in out and '=== trace' in out


def test_an_engine_benchmark_refuses_to_resume_into_results_of_other_models(tmp_path):
    from lookahead_reasoning.bench.engine import (
        EngineBench,
        run_engine_bench,
    )

    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "#### 2"}) + "\n")
    out = tmp_path / "results.jsonl"
    out.write_text(json.dumps({"problem_id": "x", "mode": "ar", "target": "another-model"}) + "\n")
    with FakeEngine() as engine:
        with pytest.raises(ConfigError, match="holds results of other models .*'another-model'.*'fake'"):
            run_engine_bench(EngineBench(str(data), str(out), engine.url, modes=("ar",)), progress=False)
        assert engine.requests == []  # refused before any completion


def test_a_run_that_ends_leaves_the_requests_of_runs_beside_it_alone():
    """Runs on one event loop share its connections: a run that ends must not close them under another
    run's request (that request then failed and went out again from scratch: the engine wrote it twice)."""
    from lookahead_reasoning.decoding.stepwise import agenerate_stepwise
    from lookahead_reasoning.settings import CyclePlan
    from lookahead_reasoning.verifiers.registry import make_verifier

    chunks = ScriptedPolicy(lambda position: CyclePlan(0, chunk=16))

    with FakeEngine(text="2 \\boxed{2}", stop=None, delays={7: 1.0}) as engine:
        steps = EngineSteps(_client(engine.url, timeout_s=10.0), StepConfig(("\n\n",), 50))

        async def both():
            exact = make_verifier("exact")
            return await asyncio.gather(agenerate_stepwise(steps, steps, [1, 2], exact, chunks, 16),
                                        agenerate_stepwise(steps, steps, [7, 2], exact, chunks, 16))

        quick, slow = asyncio.run(both())
    assert quick.text == slow.text == "2 \\boxed{2}"
    assert [r["prompt"][0] for r in engine.requests] in ([1, 7], [7, 1])  # each sent once


def test_the_llama_cpp_source_is_checked_against_its_pinned_hash(tmp_path, caplog):
    import hashlib
    import logging

    from lookahead_reasoning.runtime.engine import build

    archive = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    archive.write_bytes(b"not the source this project built")
    with pytest.raises(EngineError, match="not the pinned 832db069"):
        build.check_sdist(archive, "0.3.36")
    with caplog.at_level(logging.WARNING):
        build.check_sdist(archive, "9.9.9")  # no pin: built, with the hash said
    assert hashlib.sha256(archive.read_bytes()).hexdigest() in caplog.text


def test_a_build_key_and_hints_on_machines_without_x86_flags(monkeypatch):
    from lookahead_reasoning.runtime.engine import build

    monkeypatch.setattr(build, "cpu_flags", lambda: None)  # macOS, or a CPU whose cpuinfo lists no flags
    key = build.cpu_key()
    assert len(key) == 8 and int(key, 16) >= 0
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(EngineError, match=r"apt-get install g\+\+"):
        build._tool("c++")


def test_a_busy_engine_is_tried_again_after_the_wait_it_asks_for_then_named():
    with FakeEngine(script=["429", "ok"]) as engine:
        start = time.monotonic()
        assert _client(engine.url, backoff_s=0.0).complete([1], 5).text == "Step one."
        assert time.monotonic() - start >= 0.2 and len(engine.requests) == 2  # waited as asked, then served
    with FakeEngine(script=["429"]) as engine:
        with pytest.raises(EngineError, match=r"HTTP 429 \(busy: it asked to be tried again in 0.2 s\)") as err:
            _client(engine.url, retries=1).complete([1], 5)
        assert engine.url in str(err.value) and len(engine.requests) == 2


def test_a_truncated_reply_is_a_clear_error_naming_the_endpoint():
    with FakeEngine(script=["truncated"]) as engine:
        with pytest.raises(EngineError, match="failed: RemoteProtocolError") as err:
            _client(engine.url, retries=1).complete([1], 5)
        assert engine.url in str(err.value)


def test_a_failed_build_or_install_step_names_itself_and_shows_its_log(tmp_path):
    """One runner for the llama.cpp build's and the vLLM install's commands: the output goes to the log,
    and a command that fails ends in one error naming the step, with the log's last lines."""
    import sys

    from lookahead_reasoning.runtime.engine.build import run_logged

    log = tmp_path / "install.log"
    run_logged([sys.executable, "-c", "print('step one done')"], log, "installing vLLM: step one")
    with pytest.raises(EngineError, match=r"installing vLLM: step two failed \(exit 3\); full log in .*\n"
                                          r"(.*\n)*no wheel for this CPU"):
        run_logged([sys.executable, "-c", "import sys; print('no wheel for this CPU'); sys.exit(3)"], log,
                   "installing vLLM: step two")
    assert "step one done" in log.read_text()


def test_spans_record_each_completion_in_time_and_a_cancelled_one_as_cancelled():
    with FakeEngine(script=("ok", "hang")) as engine:
        client = EngineClient(Endpoint(engine.url, timeout_s=10))
        assert client.spans is None  # records nothing unless asked
        client.spans = []
        client.complete([1, 2, 3], 8)

        async def cancel_one() -> None:
            task = asyncio.ensure_future(client.acomplete([4, 5], 8))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.aclose()

        asyncio.run(cancel_one())
        done, cancelled = client.spans
        assert (done.prompt_tokens, done.max_tokens, done.cancelled) == (3, 8, False) and done.new_tokens > 0
        assert done.end > done.start and cancelled.start >= done.end
        assert (cancelled.prompt_tokens, cancelled.new_tokens, cancelled.cancelled) == (2, 0, True)
        assert 0.25 < cancelled.end - cancelled.start < 5
        client.close()
