"""A loopback engine that serves a tiny model with this library's own decoding loop, in llama.cpp's
dialect: what the tests need to run the same model in this process and over an engine, and compare."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lookahead_reasoning.decoding import generate
from lookahead_reasoning.runtime.engine.process import free_port
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.sampling import SamplingConfig


class QuietJSONHandler(BaseHTTPRequestHandler):
    """What the tests' loopback servers share: JSON answers, and no request log on stderr."""

    def log_message(self, *args):
        pass

    def _send(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ModelEngine:
    """``/v1/completions`` (token ids in, llama.cpp's ``__verbose`` out: why it stopped, the ids),
    ``/tokenize``, ``/detokenize``, ``/health`` and ``/v1/models`` over ``lm``; one completion at a time."""

    def __init__(self, lm: LM):
        self.lm, self.port, self.completions = lm, free_port(), 0
        self.lock = threading.Lock()
        engine = self

        class Handler(QuietJSONHandler):
            def do_GET(self):
                self._send({"status": "ok", "data": [{"id": engine.lm.name, "owned_by": "llamacpp"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                if self.path == "/tokenize":
                    return self._send({"tokens": engine.lm.encode(body["content"])})
                if self.path == "/detokenize":
                    return self._send({"content": engine.lm.decode(body["tokens"], skip_special_tokens=False)})
                return self._send(engine.complete(body))

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def complete(self, body: dict) -> dict:
        stops = tuple(body.get("stop") or ())
        temperature = float(body.get("temperature", 0.0))
        sampling = SamplingConfig(temperature=temperature, top_p=float(body.get("top_p", 1.0))) if temperature else None
        with self.lock:
            self.completions += 1
            done = generate(self.lm, body["prompt"], max_new_tokens=int(body["max_tokens"]), sampling=sampling,
                            stop_strings=stops, seed=body.get("seed", 0))
        kind = {"stop_string": "word", "eos": "eos"}.get(done.stop_reason, "limit")
        text = self.lm.decode(done.token_ids, skip_special_tokens=kind == "eos")  # llama.cpp leaves EOS out
        word = next((s for s in stops if text.endswith(s)), "") if kind == "word" else ""
        return {"choices": [{"text": text[:len(text) - len(word)], "index": 0,
                             "finish_reason": "length" if kind == "limit" else "stop"}],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(done.token_ids)},
                "__verbose": {"stop_type": kind, "stopping_word": word, "tokens": list(done.token_ids)}}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ModelEngine":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
