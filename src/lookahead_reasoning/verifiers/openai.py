"""The judge's question asked of an OpenAI-compatible completions server (vLLM, llama.cpp, SGLang, ...).

Only the standard library is used (``urllib.request``, ``json``).
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Sequence

from ..errors import VerifierError, require
from .base import BaseVerifier, Pair, Verdict, check_pairs, with_latency
from .judge import JUDGE_OPTION_NAMES, JudgeOptions, decide, judge_question

log = logging.getLogger(__name__)


class OpenAIJudgeVerifier(BaseVerifier):
    """The judge's question, asked of an OpenAI-compatible server.

    Uses the *completions* endpoint, not chat completions: it lets us write the whole prompt,
    including an open assistant turn with a pre-filled start, so the single generated token is the
    answer; and it takes all pairs of a call in one request (``prompt`` is a list). One POST to
    ``{base_url}/completions`` with ``max_tokens=1``, ``temperature=0``, ``logprobs=top_logprobs``.
    From each choice's ``logprobs.top_logprobs[0]`` (``{token: logprob}``), P(yes) is the largest
    probability of a token that is the yes-word or a start of it of 2 characters or more (after
    stripping and lower-casing; a start shared by both words counts for neither), P(no) likewise;
    a word missing from the top list counts as probability 0. The rules "share" and "top" are those
    of :class:`~lookahead_reasoning.verifiers.judge.LLMJudgeVerifier` ("top": the token with the
    highest log-probability decides).

    ``verify`` never raises: a timeout, refused connection, HTTP error, unparsable JSON or a missing
    choice rejects the pairs concerned, with ``Verdict.error`` set and ``failures`` counted.

    Args:
        base_url: the API root including ``/v1``, e.g. ``"http://localhost:8000/v1"``.
        model: the served model name; None asks ``{base_url}/models`` now and takes the one model
            it serves (VerifierError when it serves none or several).
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        timeout: seconds per request.
        options: a :class:`~.judge.JudgeOptions` (or its threshold; None: the defaults), taken by
            name as for :class:`~.judge.LLMJudgeVerifier`.
        format_prompt: turns the question into the text sent, e.g. a chat template applied locally
            (``lambda q: lm.chat_prompt(q)``); default: the plain question followed by "\\nAnswer:".
        top_logprobs: how many alternatives the server returns for the answer token.
    """

    name = "openai-judge"
    keyword_options = JUDGE_OPTION_NAMES  # make_verifier folds these into ``options``

    def __init__(self, base_url: str, model: str | None, options: JudgeOptions | float | None = None, *,
                 api_key: str | None = None, timeout: float = 10.0,
                 format_prompt: Callable[[str], str] | None = None, top_logprobs: int = 5):
        require(isinstance(base_url, str) and base_url.startswith(("http://", "https://")),
                f"base_url must be an http(s) URL such as 'http://localhost:8000/v1', got {base_url!r}", VerifierError)
        require(model is None or (isinstance(model, str) and model.strip() != ""),
                "the openai judge needs a model name (or None to ask the server)", VerifierError)
        require(isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0,
                f"timeout must be > 0 seconds, got {timeout!r}")
        require(isinstance(top_logprobs, int) and 1 <= top_logprobs <= 20,
                f"top_logprobs must be in 1..20, got {top_logprobs!r}")
        options = JudgeOptions.given(options, {})
        self.base_url, self.model, self.api_key = base_url.rstrip("/"), model, api_key
        self.timeout, self.threshold, self.min_mass = float(timeout), float(options.threshold), float(options.min_mass)
        self.answers, self.top_logprobs = tuple(word.strip().lower() for word in options.answers), top_logprobs
        self.question, self.rule, self.prefill = options.question, options.rule, options.prefill
        self.format_prompt = format_prompt or (lambda text: f"{text}\nAnswer:")
        if model is None:
            served = self.served_models()
            require(len(served) == 1, f"judge endpoint {self.base_url} serves {served or 'no models'}; "
                    "name the judge model (--judge-name / model=)", VerifierError)
            self.model = served[0]

    # ----------------------------------------------------------------- http
    def _request(self, path: str, body: dict | None = None) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers)  # POST with data, else GET
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read().decode("utf-8"))

    def served_models(self) -> list[str]:
        """GET ``{base_url}/models``: the served model ids. Raises VerifierError on failure."""
        where = f"{self.base_url}/models"
        try:
            answer = self._request("/models")
        except urllib.error.HTTPError as e:
            raise VerifierError(f"judge endpoint unreachable: {where} answered HTTP {e.code} {e.reason}") from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise VerifierError(f"judge endpoint unreachable: cannot connect to {where} ({reason})") from e
        except ValueError as e:
            raise VerifierError(f"judge endpoint unreachable: {where} did not answer JSON ({e})") from e
        listed = answer.get("data", []) if isinstance(answer, dict) else []
        return [m.get("id") for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []

    # ----------------------------------------------------------------- judging
    def _word(self, token: Any) -> str | None:
        """"yes" or "no" when ``token`` is one answer word, or a start of it (2 characters or more) that
        starts no other: the server's tokenizer may split "unaligned" into "un" + "aligned"."""
        text = str(token).strip().lower()
        yes, no = ((w == text or (len(text) >= 2 and w.startswith(text))) for w in self.answers)
        return "yes" if yes and not no else "no" if no and not yes else None

    def _read(self, top: dict) -> tuple[float, float, str | None]:
        """(P(yes), P(no), the word the most likely token starts) from one ``{token: logprob}`` mapping."""
        p = {"yes": 0.0, "no": 0.0}
        for token, logprob in top.items():
            word = self._word(token)
            if word is not None:
                p[word] = max(p[word], math.exp(float(logprob)))
        best = max(top, key=lambda t: float(top[t])) if top else None
        return p["yes"], p["no"], self._word(best) if best is not None else None

    def _parse(self, answer: Any, n: int) -> list[Verdict]:
        """Verdicts from a completions response for n prompts; a missing or malformed choice is rejected."""
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list):
            raise ValueError(f"no 'choices' list in the answer: {str(answer)[:200]}")
        by_index = {choice.get("index", i): choice for i, choice in enumerate(choices) if isinstance(choice, dict)}
        verdicts = []
        for i in range(n):
            choice = by_index.get(i)
            try:
                top = choice["logprobs"]["top_logprobs"][0]
                if not isinstance(top, dict):
                    raise TypeError(f"top_logprobs[0] is {type(top).__name__}, not a mapping")
                verdicts.append(decide(self, *self._read(top)))
            except (KeyError, IndexError, TypeError, ValueError) as e:
                verdicts.append(self.failed("unparsable", f"unparsable judge answer for pair {i}: "
                                                          f"{type(e).__name__}: {e}"))
        return verdicts

    def prompt(self, draft: str, target: str) -> str:
        """The text sent for one pair."""
        return self.format_prompt(judge_question(draft, target, *self.answers, template=self.question)) + self.prefill

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        pairs = check_pairs(pairs)
        if not pairs:
            return []
        body = {"model": self.model, "prompt": [self.prompt(d, t) for d, t in pairs], "max_tokens": 1,
                "temperature": 0.0, "logprobs": self.top_logprobs}
        try:
            verdicts = self._parse(self._request("/completions", body), len(pairs))
        except Exception as e:
            kind, reason = http_failure(e, self.timeout)
            log.warning("openai judge at %s failed on %d pairs, rejecting them: %s", self.base_url, len(pairs), reason)
            verdicts = [self.failed(kind, reason) for _ in pairs]
        return with_latency(verdicts, start)


def http_failure(e: BaseException, timeout: float) -> tuple[str, str]:
    """(failure kind, one-line reason) for a failed judge request."""
    reason = getattr(e, "reason", None) if isinstance(e, urllib.error.URLError) else None
    if isinstance(e, TimeoutError) or isinstance(reason, TimeoutError):
        return "timeout", f"judge timeout after {timeout:g}s"
    if isinstance(e, urllib.error.HTTPError):
        return "http", f"judge HTTP error {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return "connection", f"judge connection failed: {reason}"
    if isinstance(e, ValueError):  # json.JSONDecodeError included
        return "unparsable", f"unparsable judge answer: {e}"
    return "exception", f"judge error: {type(e).__name__}: {e}"


__all__ = ["OpenAIJudgeVerifier"]
