"""What each engine says beyond the OpenAI protocol: its fields, its tokenizer routes, its chat template.

Every engine serves ``/v1/completions``; the rest differs. A :class:`Dialect` holds one engine's
differences, and an :class:`~.client.EngineClient` finds its endpoint's dialect once, from the owner
that ``/v1/models`` names (llama.cpp says ``llamacpp``, vLLM ``vllm``), unless the endpoint names it:

* :class:`LlamaCpp` (llama.cpp's server): asks for ``__verbose`` (why a completion stopped, its token
  ids) and ``n_probs``; tokenizes ``content``; applies the chat template with ``/apply-template``. These
  fields and routes are sent to no other engine. It leaves ``cache_prompt`` to the server: on by default
  (a prompt that shares a slot's cached prefix is evaluated from where they part), off where the server
  was started with ``--no-cache-prompt`` (every prompt evaluated whole: slower, and repeatable).
* :class:`VLLM`: asks for ``return_token_ids``; tokenizes ``prompt``; applies the chat template with
  ``/tokenize`` given ``messages`` (the ids come back directly).
* :class:`Dialect` itself, named "openai" (any other OpenAI-compatible server, SGLang for one): the
  vLLM-style fields, and no chat-template route: the caller applies the served model's template with a
  local tokenizer.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from ...errors import EngineError, require
from ...sampling import SamplingConfig

if TYPE_CHECKING:  # a dialect asks its client for JSON requests, the endpoint's tokenizer and names
    from .client import EngineClient

Messages = Sequence[dict[str, str]]


def token_list(data: Any, where: str) -> list[int]:
    """The ids of a ``/tokenize`` reply (plain ids, or llama.cpp's ``{"id", "piece"}`` objects)."""
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list):
        raise EngineError(f"{where}/tokenize answered no token list: {str(data)[:200]}")
    try:
        return [int(t["id"]) if isinstance(t, dict) else int(t) for t in tokens]
    except (KeyError, TypeError, ValueError):
        raise EngineError(f"{where}/tokenize answered tokens that are not ids: {str(tokens)[:200]}") from None


class Dialect:
    """The OpenAI protocol plus the extensions most engines read: the "openai" dialect, and the base of the others."""

    name = "openai"
    scores_prompts = False  # whether :meth:`score_body` exists: the engine gives prompt log-probabilities

    def completion_fields(self, logprobs: int) -> dict[str, Any]:
        """Extension fields of a ``/v1/completions`` body (``logprobs``: top-N asked for)."""
        return {"return_token_ids": True}

    def sampling_fields(self, sampling: SamplingConfig, seed: int | None) -> dict[str, Any]:
        """How a completion picks its tokens: temperature and top-p, top-k where it is set (an extension
        the engines read; unset, they cut none), and the seed where one is given to a sampled request (a
        greedy one has no use for it)."""
        fields: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p}
        if sampling.top_k:
            fields["top_k"] = sampling.top_k
        if seed is not None and not sampling.greedy:
            fields["seed"] = seed
        return fields

    def tokenize_body(self, text: str) -> dict[str, Any]:
        return {"prompt": text, "add_special_tokens": False}

    def chat_ids(self, client: EngineClient, messages: Messages) -> list[int] | None:
        """Token ids of ``messages`` with the chat template applied and the assistant's turn opened,
        or None where this engine has no route for it."""
        return None

    def score_body(self, ids: Sequence[int]) -> dict[str, Any]:
        """The ``/v1/completions`` body that asks for the model's log-probability of every token of ``ids``."""
        raise EngineError(f"the {self.name} dialect cannot ask for the probabilities of given tokens "
                          "(prompt log-probabilities); a likelihood verifier needs an engine that gives them (vLLM) "
                          "or a scorer (--scorer, scorer=: the target's model loaded in this process)")

    def read_scores(self, data: Any, ids: Sequence[int], start: int, where: str) -> tuple[list[float], list[int]]:
        """(probability, rank) of ``ids[start:]`` from the reply to :meth:`score_body`."""
        raise NotImplementedError


class VLLM(Dialect):
    name = "vllm"
    scores_prompts = True

    def chat_ids(self, client: EngineClient, messages: Messages) -> list[int] | None:
        body = {"messages": list(messages), "add_generation_prompt": True, "add_special_tokens": False}
        if client.endpoint.model is not None:
            body["model"] = client.endpoint.model
        return token_list(client.request("POST", "/tokenize", body), client.where)

    def score_body(self, ids: Sequence[int]) -> dict[str, Any]:
        return {"prompt": [int(t) for t in ids], "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}

    def read_scores(self, data: Any, ids: Sequence[int], start: int, where: str) -> tuple[list[float], list[int]]:
        """vLLM answers ``prompt_logprobs``: per prompt position (None first) a dict keyed by token id of
        ``{"logprob", "rank" (1: the most likely), ...}``, which holds at least the prompt's own token."""
        try:
            per = data["choices"][0]["prompt_logprobs"]
            entries = [per[i][str(int(ids[i]))] for i in range(start, len(ids))]
            probs = [math.exp(float(e["logprob"])) for e in entries]
            ranks = [max(0, int(e["rank"]) - 1) for e in entries]
        except (KeyError, IndexError, TypeError, ValueError):
            raise EngineError(f"{where}/v1/completions answered no prompt log-probabilities for the step's "
                              f"tokens: {str(data)[:200]}") from None
        return probs, ranks


class LlamaCpp(Dialect):
    """llama.cpp's server. It cannot score given tokens: it refuses ``echo`` and reports probabilities
    of generated tokens only, so a likelihood verifier cannot run over it (:meth:`Dialect.score_body`)."""

    name = "llama.cpp"

    def completion_fields(self, logprobs: int) -> dict[str, Any]:
        # no cache_prompt: a per-request value would override the server's --no-cache-prompt
        fields: dict[str, Any] = {"verbose": True, "return_tokens": True}
        if logprobs:
            fields["n_probs"] = logprobs
        return fields

    def sampling_fields(self, sampling: SamplingConfig, seed: int | None) -> dict[str, Any]:
        # unset, llama.cpp's server keeps its 40 likeliest tokens; top_k 0 tells it to cut none
        return {**super().sampling_fields(sampling, seed), "top_k": sampling.top_k or 0}

    def tokenize_body(self, text: str) -> dict[str, Any]:
        return {"content": text, "add_special": False}

    def chat_ids(self, client: EngineClient, messages: Messages) -> list[int] | None:
        data = client.request("POST", "/apply-template", {"messages": list(messages)})
        text = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise EngineError(f"{client.where}/apply-template answered no prompt: {str(data)[:200]}")
        return client.tokenize(text)


DIALECTS = {d.name: d for d in (LlamaCpp(), VLLM(), Dialect())}
OWNERS = {"llamacpp": "llama.cpp", "vllm": "vllm"}  # /v1/models' owned_by -> dialect


def dialect_named(name: str) -> Dialect:
    require(name in DIALECTS, f"unknown engine kind {name!r}: pick one of {', '.join(DIALECTS)}", EngineError)
    return DIALECTS[name]


def probe_dialect(models: Any) -> Dialect:
    """The dialect of an endpoint from its ``/v1/models`` reply: the owner of its first model."""
    try:
        owner = str(models["data"][0].get("owned_by", ""))
    except (KeyError, IndexError, TypeError, AttributeError):
        owner = ""
    return DIALECTS[OWNERS.get(owner.lower(), "openai")]


__all__ = ["DIALECTS", "Dialect", "LlamaCpp", "VLLM", "dialect_named", "probe_dialect", "token_list"]
