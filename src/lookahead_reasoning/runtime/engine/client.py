"""A client for OpenAI-compatible ``/v1/completions`` endpoints (llama.cpp's server, vLLM, SGLang).

One :class:`EngineClient` talks to one endpoint, synchronously (:meth:`EngineClient.complete`) or
with asyncio (:meth:`EngineClient.acomplete`): the rows of a Lookahead Reasoning cycle go out as
concurrent requests, which the engine batches and serves from its prefix cache.

The request bodies and the replies' fields, per engine, are :mod:`.wire`'s.

Faults come back as :class:`~lookahead_reasoning.errors.EngineError` naming the endpoint and the
cause. A request is retried (at most ``retries`` times, with a short back-off) only where that is safe
(:func:`retryable`): no connection could be made (in time) or it dropped, the engine answered 5xx, or 429
(busy: tried again after the Retry-After it sent, at most the request timeout). Not: a request that outlived
its timeout (the server may still be computing it, and a long generation would be computed once per try),
any other 4xx, or a reply that is not the JSON the protocol promises.

How busy an endpoint is: an engine batches every request it serves at once, so a cycle's rows share each
forward with the requests of other runs: R rows sent while B others are in flight cost about what R + B
rows cost alone (:func:`~...theory.costed.request_cycle` with ``load=B``). The client counts its requests
as they go out and come back (``EngineClient.in_flight``); a planner reads the count when it plans a
cycle, between its own requests, so what it reads is the others' load. Requests of other processes do not
show here; an engine's own metrics would (llama.cpp's ``/slots``, vLLM's ``/metrics``), at one more request
per plan.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import httpx

from ...errors import EngineError
from ...sampling import SamplingConfig
from .dialects import Dialect, dialect_named, probe_dialect, token_list
from .wire import ENDS, Completion, Endpoint, RequestSpan, TokenLogprob, parse_completion, request_body


def retryable(exc: Exception) -> bool:
    """Whether a request that failed with ``exc`` may be sent again (module docstring)."""
    if isinstance(exc, HTTPStatus):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout
                                                                      | httpx.PoolTimeout)


class HTTPStatus(Exception):
    """An HTTP error status, kept apart from transport failures to decide on a retry."""

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


def _length(prompt: str | Sequence[int]) -> int:
    """A prompt's length in tokens (0 for a text prompt, which the engine tokenizes)."""
    return 0 if isinstance(prompt, str) else len(prompt)


class EngineClient:
    """Sync and async ``/v1/completions`` (plus ``/tokenize``, ``/health``) for one :class:`Endpoint`.

    ``spans``: set it to a list and every completion request appends its :class:`RequestSpan` (how a
    notebook draws a cycle's requests on a time axis); None (the default) records nothing.
    """

    def __init__(self, endpoint: Endpoint | str):
        self.endpoint = endpoint if isinstance(endpoint, Endpoint) else Endpoint(endpoint)
        self._sync: httpx.Client | None = None
        self._async: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its client
        self.in_flight = 0  # completions under way from this process at the endpoint (what a planner prices load by)
        self._counting = threading.Lock()
        self._dialect: Dialect | None = None if self.endpoint.engine is None else dialect_named(self.endpoint.engine)
        self.spans: list[RequestSpan] | None = None

    def __repr__(self) -> str:
        return f"EngineClient({self.endpoint.url!r})"

    @contextmanager
    def _counted(self) -> Iterator[None]:
        """Count one completion in ``in_flight`` while the block runs (until it returns or fails), safe across
        threads (plain modes run requests in threads) and coroutines (module docstring: how busy an endpoint is)."""
        with self._counting:
            self.in_flight += 1
        try:
            yield
        finally:
            with self._counting:
                self.in_flight -= 1

    # ------------------------------------------------------------------------------- transport
    def _options(self) -> dict[str, Any]:
        """What both transports are made with: the endpoint's timeouts and key, up to 64 connections."""
        key = self.endpoint.api_key
        return {"timeout": httpx.Timeout(self.endpoint.timeout_s, connect=min(10.0, self.endpoint.timeout_s)),
                "headers": {"Authorization": f"Bearer {key}"} if key else {},
                "limits": httpx.Limits(max_connections=64)}

    def _client(self) -> httpx.Client:
        if self._sync is None:
            self._sync = httpx.Client(**self._options())
        return self._sync

    def _aclient(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if loop not in self._async:
            self._async[loop] = httpx.AsyncClient(**self._options())
        return self._async[loop]

    def _decode(self, response: httpx.Response, path: str) -> Any:
        where = f"{self.where}{path}"
        if response.status_code >= 400:
            try:  # the seconds a Retry-After header asks for (a number; a date is not read)
                wait = max(0.0, float(response.headers["Retry-After"]))
            except (KeyError, ValueError):
                wait = None
            detail = response.text[:300].strip()
            busy = f" (busy: it asked to be tried again in {wait:g} s)" if wait is not None else ""
            raise HTTPStatus(response.status_code, f"{where} answered HTTP {response.status_code}{busy}: {detail}", wait)
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise EngineError(f"{where} answered something that is not JSON: {response.text[:200]!r}") from None

    def _failure(self, path: str, exc: Exception) -> EngineError:
        where = f"{self.where}{path}"
        if isinstance(exc, httpx.ConnectError):
            return EngineError(f"cannot connect to {where} ({exc}): is the server running? "
                               f"(`lookahead-reasoning serve-engine` starts a local llama.cpp server)")
        if isinstance(exc, httpx.TimeoutException):
            return EngineError(f"{where} did not answer within {self.endpoint.timeout_s:g} s "
                               f"({type(exc).__name__}); raise the timeout or check the server's load")
        if isinstance(exc, HTTPStatus):
            return EngineError(str(exc))
        return EngineError(f"{where} failed: {type(exc).__name__}: {exc}")

    def _pause(self, path: str, exc: Exception, attempt: int) -> float:
        """Seconds to wait before try ``attempt + 1`` after ``exc``: what the server asked for (at most the
        timeout), else the back-off; the EngineError of the failure where no try is left or it is not retryable."""
        if attempt == self.endpoint.retries or not retryable(exc):
            raise self._failure(path, exc) from None
        asked = getattr(exc, "retry_after", None)
        return min(asked, self.endpoint.timeout_s) if asked is not None else self.endpoint.backoff_s * (attempt + 1)

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        """One JSON request with bounded retries; EngineError naming the endpoint and cause on failure."""
        for attempt in itertools.count():
            try:
                return self._decode(self._client().request(method, self.endpoint.url + path, json=body), path)
            except (httpx.HTTPError, HTTPStatus) as exc:
                time.sleep(self._pause(path, exc, attempt))

    async def arequest(self, method: str, path: str, body: dict | None = None) -> Any:
        """:meth:`request` for asyncio."""
        for attempt in itertools.count():
            try:
                return self._decode(await self._aclient().request(method, self.endpoint.url + path, json=body), path)
            except (httpx.HTTPError, HTTPStatus) as exc:
                await asyncio.sleep(self._pause(path, exc, attempt))

    # ------------------------------------------------------------------------------- the protocol
    def complete(self, prompt: str | Sequence[int], max_tokens: int, stop: Sequence[str] = (),
                 sampling: SamplingConfig = SamplingConfig(), seed: int | None = None, logprobs: int = 0) -> Completion:
        """One completion of ``prompt`` (text, or token ids in the engine's tokenizer); greedy unless
        ``sampling`` has a temperature, ``seed`` for a sampled one to be repeated."""
        body = self._body(request_body(prompt, max_tokens, stop, sampling, seed, logprobs, self.dialect))
        start = time.perf_counter()
        with self._counted():
            done = parse_completion(self.request("POST", "/v1/completions", body), self.where)
        return self._timed(start, prompt, max_tokens, done)

    async def acomplete(self, prompt: str | Sequence[int], max_tokens: int, stop: Sequence[str] = (),
                        sampling: SamplingConfig = SamplingConfig(), seed: int | None = None,
                        logprobs: int = 0) -> Completion:
        """:meth:`complete` for asyncio: gather several to have the engine batch them."""
        body = self._body(request_body(prompt, max_tokens, stop, sampling, seed, logprobs, await self.adialect()))
        start = time.perf_counter()
        try:
            with self._counted():
                done = parse_completion(await self.arequest("POST", "/v1/completions", body), self.where)
        except asyncio.CancelledError:
            if self.spans is not None:
                self.spans.append(RequestSpan(start, time.perf_counter(), _length(prompt), max_tokens, 0, True))
            raise
        return self._timed(start, prompt, max_tokens, done)

    def _body(self, body: dict) -> dict:
        """``body`` naming the endpoint's model, where one is set."""
        return body if self.endpoint.model is None else {**body, "model": self.endpoint.model}

    def score(self, ids: Sequence[int], start: int) -> tuple[list[float], list[int]]:
        """The model's probability and rank (0: its most likely token) of each of ``ids[start:]`` after
        the ids before it: one prefill request (``start`` >= 1)."""
        dialect = self.dialect
        data = self.request("POST", "/v1/completions", self._body(dialect.score_body(ids)))
        return dialect.read_scores(data, ids, start, self.where)

    async def ascore(self, ids: Sequence[int], start: int) -> tuple[list[float], list[int]]:
        """:meth:`score` for asyncio."""
        dialect = await self.adialect()
        data = await self.arequest("POST", "/v1/completions", self._body(dialect.score_body(ids)))
        return dialect.read_scores(data, ids, start, self.where)

    def _timed(self, start: float, prompt: str | Sequence[int], max_tokens: int, done: Completion) -> Completion:
        """``done`` with its seconds since ``start``, its span recorded where ``spans`` is set."""
        done.seconds = time.perf_counter() - start
        if self.spans is not None:
            written = len(done.token_ids) if done.token_ids is not None else len(done.logprobs or ())
            self.spans.append(RequestSpan(start, start + done.seconds, _length(prompt), max_tokens, written))
        return done

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
        return token_list(self.request("POST", "/tokenize", self._body(self.dialect.tokenize_body(text))), self.where)

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


__all__ = ["ENDS", "Completion", "Endpoint", "EngineClient", "HTTPStatus", "RequestSpan", "TokenLogprob",
           "parse_completion", "request_body", "retryable"]
