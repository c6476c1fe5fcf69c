"""A client for OpenAI-compatible ``/v1/completions`` endpoints (llama.cpp's server, vLLM, SGLang).

One :class:`EngineClient` talks to one endpoint, synchronously (:meth:`EngineClient.complete`) or
with asyncio (:meth:`EngineClient.acomplete`): the rows of a Lookahead Reasoning cycle go out as
concurrent requests, which the engine batches and serves from its prefix cache.

The OpenAI protocol says why a completion ended only as ``"stop"`` or ``"length"``; a step writer
must also know whether it stopped at a delimiter or at end-of-sequence, and which tokens it wrote.
Each engine reports that in its own extension fields, asked for by the endpoint's
:class:`~.dialects.Dialect` (found once per client from ``/v1/models``) and all read by
:func:`parse_completion`:

* llama.cpp: ``__verbose.stop_type`` ("word", "eos", "limit"), ``__verbose.stopping_word``,
  ``__verbose.tokens``;
* vLLM: ``choices[0].stop_reason`` (the stop string, a stop token id, or null at EOS) and
  ``choices[0].token_ids``;
* SGLang: ``choices[0].matched_stop``.

Faults come back as :class:`~lookahead_reasoning.errors.EngineError` naming the endpoint and the
cause. A request is retried (at most ``retries`` times, with a short back-off) only where that is safe
(:mod:`.faults`); a reply that is not the JSON the protocol promises is final.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Sequence

import httpx

from ...errors import EngineError, require
from ...presets import ENGINE_RETRIES, ENGINE_TIMEOUT_S
from .dialects import DIALECTS, Dialect, dialect_named, probe_dialect, token_list
from .faults import HTTPStatus, pause, retry_after, retryable
from .load import InFlight

ENDS = ("stop_string", "eos", "budget")  # why a completion ended, in the vocabulary of decoding.steps


@dataclass(frozen=True)
class Endpoint:
    """Where an engine listens and how patiently to talk to it.

    ``url`` is the server's base address (``http://127.0.0.1:8080``; a trailing ``/v1`` is accepted);
    ``model`` names the model for servers that serve several (None: the server's only one).
    ``timeout_s`` bounds one request end to end, ``retries`` the retries of one request. ``engine``
    names the server's kind ("llama.cpp", "vllm", "openai"; None: asked once, from ``/v1/models``).
    """

    url: str
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = ENGINE_TIMEOUT_S
    retries: int = ENGINE_RETRIES
    backoff_s: float = 0.5
    engine: str | None = None

    def __post_init__(self) -> None:
        require(isinstance(self.url, str) and self.url.startswith(("http://", "https://")),
                f"an engine URL must start with http:// or https://, got {self.url!r}")
        require(self.timeout_s > 0, f"an engine timeout must be > 0 seconds, got {self.timeout_s!r}")
        require(isinstance(self.retries, int) and self.retries >= 0,
                f"engine retries must be an integer >= 0, got {self.retries!r}")
        object.__setattr__(self, "url", self.url.rstrip("/").removesuffix("/v1"))
        if self.engine is not None:
            dialect_named(self.engine)


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its id (where the engine says), text, log probability and the top-N."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    id: int | None = None
    bytes: bytes | None = None  # the token's exact bytes, where the engine gives them (llama.cpp)


@dataclass
class Completion:
    """One finished completion. ``end``: "stop_string" (a stop string; ``stop`` names it), "eos" or
    "budget" (``max_tokens`` reached); ``text`` excludes the stop string, as the protocol has it."""

    text: str
    end: str
    stop: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[TokenLogprob] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    seconds: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Sampling:
    """The sampling fields of a request: temperature 0 is greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None


def request_body(endpoint: Endpoint, prompt: str | Sequence[int], max_tokens: int, stop: Sequence[str],
                 sampling: Sampling, logprobs: int = 0, dialect: Dialect = DIALECTS["openai"]) -> dict[str, Any]:
    """The JSON body of one ``/v1/completions`` request, with ``dialect``'s extension fields."""
    require(isinstance(max_tokens, int) and max_tokens >= 1, f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    body: dict[str, Any] = {
        "prompt": prompt if isinstance(prompt, str) else [int(t) for t in prompt],
        "max_tokens": max_tokens, "temperature": sampling.temperature, "top_p": sampling.top_p, "stream": False,
        **dialect.completion_fields(logprobs),
    }
    if endpoint.model is not None:
        body["model"] = endpoint.model
    if stop:
        body["stop"] = list(stop)
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if logprobs:
        body["logprobs"] = logprobs
    return body


def _end_of(choice: dict, verbose: dict) -> tuple[str, str | None]:
    """Why the completion ended, from whichever engine fields are present."""
    stop_type = verbose.get("stop_type")
    if stop_type is not None:  # llama.cpp
        word = verbose.get("stopping_word") or None
        return {"word": "stop_string", "eos": "eos"}.get(stop_type, "budget"), word
    if choice.get("finish_reason") == "length":
        return "budget", None
    for key in ("stop_reason", "matched_stop"):  # vLLM, SGLang
        if key in choice:
            value = choice[key]
            return ("stop_string", value) if isinstance(value, str) else ("eos", None)
    return "stop_string", None  # an engine that says only "stop": a stop string or EOS (see EngineSteps)


def _logprobs_of(choice: dict) -> list[TokenLogprob] | None:
    """Per-token log probabilities in either shape engines use: llama.cpp's ``content`` list, or the
    OpenAI completions arrays (``tokens``, ``token_logprobs``, ``top_logprobs``)."""
    lp = choice.get("logprobs")
    if not lp:
        return None
    if isinstance(lp.get("content"), list):
        return [TokenLogprob(e.get("token", ""), float(e.get("logprob", float("nan"))),
                             tuple((t.get("token", ""), float(t.get("logprob", float("nan"))))
                                   for t in e.get("top_logprobs") or ()), e.get("id"),
                             bytes(e["bytes"]) if isinstance(e.get("bytes"), list) else None) for e in lp["content"]]
    tokens, values, tops = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
    return [TokenLogprob(tok, float("nan") if v is None else float(v),
                         tuple(sorted(((k, float(x)) for k, x in (top or {}).items()), key=lambda kv: -kv[1])))
            for tok, v, top in zip(tokens, values, tops + [None] * (len(tokens) - len(tops)))]


def parse_completion(data: Any, where: str) -> Completion:
    """A :class:`Completion` from a decoded ``/v1/completions`` reply; EngineError if it is not one."""
    try:
        choice = data["choices"][0]
        text = choice["text"]
        require(isinstance(text, str), "text is not a string", EngineError)
    except (KeyError, IndexError, TypeError, EngineError) as exc:
        raise EngineError(f"{where} answered JSON that is not a completion ({exc!r}): {str(data)[:200]}") from None
    verbose = data.get("__verbose") or {}
    end, stop = _end_of(choice, verbose)
    ids = choice.get("token_ids") or verbose.get("tokens") or None
    logprobs = _logprobs_of(choice)
    if ids is None and logprobs and all(t.id is not None for t in logprobs):
        ids = [t.id for t in logprobs]
    usage = data.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Completion(text, end, stop, list(ids) if ids is not None else None, logprobs,
                      int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)), cached, raw=data)


class EngineClient:
    """Sync and async ``/v1/completions`` (plus ``/tokenize``, ``/health``) for one :class:`Endpoint`."""

    def __init__(self, endpoint: Endpoint | str):
        self.endpoint = endpoint if isinstance(endpoint, Endpoint) else Endpoint(endpoint)
        self._headers = {"Authorization": f"Bearer {self.endpoint.api_key}"} if self.endpoint.api_key else {}
        self._sync: httpx.Client | None = None
        self._async: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its client
        self.load = InFlight()  # completions under way from this process (what a planner prices load by)
        self._dialect: Dialect | None = None if self.endpoint.engine is None else dialect_named(self.endpoint.engine)

    def __repr__(self) -> str:
        return f"EngineClient({self.endpoint.url!r})"

    # ------------------------------------------------------------------------------- transport
    def _timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.endpoint.timeout_s, connect=min(10.0, self.endpoint.timeout_s))

    def _client(self) -> httpx.Client:
        if self._sync is None:
            self._sync = httpx.Client(timeout=self._timeout(), headers=self._headers,
                                      limits=httpx.Limits(max_connections=64))
        return self._sync

    def _aclient(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if loop not in self._async:
            self._async[loop] = httpx.AsyncClient(timeout=self._timeout(), headers=self._headers,
                                                  limits=httpx.Limits(max_connections=64))
        return self._async[loop]

    def _decode(self, response: httpx.Response, path: str) -> Any:
        where = f"the engine at {self.endpoint.url}{path}"
        if response.status_code >= 400:
            detail, wait = response.text[:300].strip(), retry_after(response)
            busy = f" (busy: it asked to be tried again in {wait:g} s)" if wait is not None else ""
            raise HTTPStatus(response.status_code, f"{where} answered HTTP {response.status_code}{busy}: {detail}", wait)
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise EngineError(f"{where} answered something that is not JSON: {response.text[:200]!r}") from None

    def _failure(self, path: str, exc: Exception) -> EngineError:
        where = f"the engine at {self.endpoint.url}{path}"
        if isinstance(exc, httpx.ConnectError):
            return EngineError(f"cannot connect to {where} ({exc}): is the server running? "
                               f"(`lookahead-reasoning serve-engine` starts a local llama.cpp server)")
        if isinstance(exc, httpx.TimeoutException):
            return EngineError(f"{where} did not answer within {self.endpoint.timeout_s:g} s "
                               f"({type(exc).__name__}); raise the timeout or check the server's load")
        if isinstance(exc, HTTPStatus):
            return EngineError(str(exc))
        return EngineError(f"{where} failed: {type(exc).__name__}: {exc}")

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        """One JSON request with bounded retries; EngineError naming the endpoint and cause on failure."""
        for attempt in range(self.endpoint.retries + 1):
            try:
                response = self._client().request(method, self.endpoint.url + path, json=body)
                return self._decode(response, path)
            except (httpx.HTTPError, HTTPStatus) as exc:
                if attempt == self.endpoint.retries or not retryable(exc):
                    raise self._failure(path, exc) from None
                time.sleep(pause(exc, self.endpoint.backoff_s, attempt, self.endpoint.timeout_s))
        raise AssertionError("unreachable")

    async def arequest(self, method: str, path: str, body: dict | None = None) -> Any:
        """:meth:`request` for asyncio."""
        for attempt in range(self.endpoint.retries + 1):
            try:
                response = await self._aclient().request(method, self.endpoint.url + path, json=body)
                return self._decode(response, path)
            except (httpx.HTTPError, HTTPStatus) as exc:
                if attempt == self.endpoint.retries or not retryable(exc):
                    raise self._failure(path, exc) from None
                await asyncio.sleep(pause(exc, self.endpoint.backoff_s, attempt, self.endpoint.timeout_s))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------------------- the protocol
    def complete(self, prompt: str | Sequence[int], max_tokens: int, stop: Sequence[str] = (),
                 sampling: Sampling = Sampling(), logprobs: int = 0) -> Completion:
        """One completion of ``prompt`` (text, or token ids in the engine's tokenizer)."""
        body = request_body(self.endpoint, prompt, max_tokens, stop, sampling, logprobs, self.dialect)
        start = time.perf_counter()
        with self.load.request():
            done = parse_completion(self.request("POST", "/v1/completions", body), self.where)
        done.seconds = time.perf_counter() - start
        return done

    async def acomplete(self, prompt: str | Sequence[int], max_tokens: int, stop: Sequence[str] = (),
                        sampling: Sampling = Sampling(), logprobs: int = 0) -> Completion:
        """:meth:`complete` for asyncio: gather several to have the engine batch them."""
        body = request_body(self.endpoint, prompt, max_tokens, stop, sampling, logprobs, await self.adialect())
        start = time.perf_counter()
        with self.load.request():
            done = parse_completion(await self.arequest("POST", "/v1/completions", body), self.where)
        done.seconds = time.perf_counter() - start
        return done

    def _score_body(self, ids: Sequence[int], dialect: Dialect) -> dict:
        body = dialect.score_body(ids)
        if self.endpoint.model is not None:
            body["model"] = self.endpoint.model
        return body

    def score(self, ids: Sequence[int], start: int) -> tuple[list[float], list[int]]:
        """The model's probability and rank (0: its most likely token) of each of ``ids[start:]`` after
        the ids before it: one prefill request (``start`` >= 1)."""
        dialect = self.dialect
        data = self.request("POST", "/v1/completions", self._score_body(ids, dialect))
        return dialect.read_scores(data, ids, start, self.where)

    async def ascore(self, ids: Sequence[int], start: int) -> tuple[list[float], list[int]]:
        """:meth:`score` for asyncio."""
        dialect = await self.adialect()
        data = await self.arequest("POST", "/v1/completions", self._score_body(ids, dialect))
        return dialect.read_scores(data, ids, start, self.where)

    @property
    def in_flight(self) -> int:
        """Completion requests this process has under way at the endpoint now."""
        return self.load.now

    @property
    def where(self) -> str:
        return f"the engine at {self.endpoint.url}"

    @property
    def dialect(self) -> Dialect:
        """The endpoint's :class:`~.dialects.Dialect`: named by the endpoint, or asked of ``/v1/models`` once."""
        if self._dialect is None:
            self._dialect = probe_dialect(self.request("GET", "/v1/models"))
        return self._dialect

    async def adialect(self) -> Dialect:
        if self._dialect is None:
            self._dialect = probe_dialect(await self.arequest("GET", "/v1/models"))
        return self._dialect

    def tokenize(self, text: str) -> list[int]:
        """The engine's token ids of ``text`` (``/tokenize``, in the endpoint's dialect)."""
        body = self.dialect.tokenize_body(text)
        if self.endpoint.model is not None:
            body["model"] = self.endpoint.model
        return token_list(self.request("POST", "/tokenize", body), self.where)

    def chat_ids(self, messages) -> list[int] | None:
        """Token ids of chat ``messages`` with the served model's template applied by the engine, or None
        where the engine has no route for it (:meth:`.dialects.Dialect.chat_ids`)."""
        return self.dialect.chat_ids(self, messages)

    def model_name(self) -> str:
        """The model the endpoint serves (``/v1/models``), or the one this client names."""
        if self.endpoint.model is not None:
            return self.endpoint.model
        data = self.request("GET", "/v1/models")
        try:
            return str(data["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise EngineError(f"{self.where}/v1/models named no model: {str(data)[:200]}") from None

    def healthy(self) -> bool:
        """True when the engine answers ``/health`` (llama.cpp, vLLM) with 200: its model is loaded."""
        try:
            return self._client().get(self.endpoint.url + "/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    async def aclose(self) -> None:
        client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None


__all__ = ["Completion", "Endpoint", "EngineClient", "Sampling", "TokenLogprob", "parse_completion", "request_body"]
