"""The OpenAI completion protocol on the wire: where an engine listens (:class:`Endpoint`), what a
request asks (:func:`request_body`) and what its reply says (:func:`parse_completion`).

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ...errors import EngineError, require
from ...presets import ENGINE_RETRIES, ENGINE_TIMEOUT_S
from ...sampling import SamplingConfig
from .dialects import DIALECTS, Dialect, dialect_named


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
    seconds: float = 0.0


def request_body(prompt: str | Sequence[int], max_tokens: int, stop: Sequence[str],
                 sampling: SamplingConfig = SamplingConfig(), seed: int | None = None, logprobs: int = 0,
                 dialect: Dialect = DIALECTS["openai"]) -> dict[str, Any]:
    """The JSON body of one ``/v1/completions`` request (temperature 0 is greedy), with ``dialect``'s
    extension fields; the client adds the endpoint's model name."""
    require(isinstance(max_tokens, int) and max_tokens >= 1, f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    body: dict[str, Any] = {
        "prompt": prompt if isinstance(prompt, str) else [int(t) for t in prompt],
        "max_tokens": max_tokens, "stream": False, **dialect.sampling_fields(sampling, seed),
        **dialect.completion_fields(logprobs),
    }
    if stop:
        body["stop"] = list(stop)
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
    return Completion(text, end, stop, list(ids) if ids is not None else None, logprobs,
                      int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))


@dataclass(frozen=True)
class RequestSpan:
    """One completion request in time (``time.perf_counter`` seconds): when it was sent and answered (or
    given up: ``cancelled``, a row whose step the cycle no longer needed), the prompt's length, the tokens
    asked for and the tokens written."""

    start: float
    end: float
    prompt_tokens: int
    max_tokens: int
    new_tokens: int
    cancelled: bool = False


__all__ = ["ENDS", "Completion", "Endpoint", "RequestSpan", "TokenLogprob", "parse_completion", "request_body"]
