"""LLM judges on a local model: the judge's next-token distribution after a question decides.

The judge sees only the two steps, never the problem or the earlier steps (as in the paper). Its
chat template is applied to the question with the assistant turn opened (plus an optional prefill,
e.g. "["), so the next token is the answer. Two ways to read that one token:

* ``rule="share"``: score = P(yes) / (P(yes) + P(no)) over the first tokens of the two answer words;
  accept when score >= ``threshold``. Below ``min_mass`` of answer probability the judge is answering
  something else: rejected as "unclear".
* ``rule="top"``: the judge's single most likely token decides (a greedy one-token answer): accept
  when it starts the yes-word, reject when it starts the no-word; any other token is "unclear" and
  rejected. The score is still the P(yes) share, for the record.

An "unclear" answer or an exception in the forward rejects the pair with ``Verdict.error`` set and
counts in the verifier's ``failures``; ``verify`` never raises.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Sequence

import torch

from ..errors import VerifierError, require
from ..runtime.lm import LM
from .base import BaseVerifier, Pair, Verdict, check_pairs, with_latency

log = logging.getLogger(__name__)

JUDGE_QUESTION = (
    "Here are two reasoning steps, A and B, written for the same problem.\n"
    "Do they express the same reasoning: the same main idea, the same logic and the same numbers? "
    "Different wording is fine.\n\n"
    "Step A:\n{draft}\n\n"
    "Step B:\n{target}\n\n"
    "Answer with one word: {yes} or {no}."
)

# The paper's judge: are the steps "aligned"? Answered in brackets, the "[" already written.
ALIGNED_QUESTION = (
    "Two reasoning steps, A and B, were written at the same point of the solution of one problem.\n"
    "They are aligned when they carry the same main idea, follow the same logic and use the same numbers; "
    "the wording may differ. If the idea, a step of logic or any number differs, they are unaligned.\n\n"
    "Step A:\n{draft}\n\n"
    "Step B:\n{target}\n\n"
    "Reply with [{yes}] or [{no}] and nothing else."
)
ALIGNED_ANSWERS = ("aligned", "unaligned")
ALIGNED_PREFILL = "["

RULES = ("share", "top")


def judge_question(draft: str, target: str, yes: str = "yes", no: str = "no", template: str = JUDGE_QUESTION) -> str:
    """The question a judge asks (the user message; the judge sees nothing else)."""
    return template.format(draft=draft.strip(), target=target.strip(), yes=yes, no=no)


@dataclass(frozen=True)
class JudgeOptions:
    """How a judge is asked and how its answer is read (module docstring), checked once.

    ``threshold``: the least score that accepts, in [0, 1] (rule "share"); ``answers``: the (yes, no)
    words; ``min_mass``: below this P(yes) + P(no) the verdict is "unclear" (rule "share");
    ``question``: the template, with fields {draft}, {target}, {yes}, {no}; ``rule``: "share" or
    "top"; ``prefill``: text put at the start of the answer, before the answer token.
    """

    threshold: float = 0.5
    answers: tuple[str, str] = ("yes", "no")
    min_mass: float = 1e-4
    question: str = JUDGE_QUESTION
    rule: str = "share"
    prefill: str = ""

    def __post_init__(self) -> None:
        """ConfigError naming the first bad option."""
        yes, no = self.answers
        t = self.threshold
        require(isinstance(t, (int, float)) and not isinstance(t, bool) and 0.0 <= t <= 1.0,
                f"judge threshold must be in [0, 1], got {t!r}")
        require(isinstance(self.min_mass, (int, float)) and 0.0 <= self.min_mass < 1.0,
                f"min_mass must be in [0, 1), got {self.min_mass!r}")
        require(bool(yes.strip()) and bool(no.strip()) and yes.strip().lower() != no.strip().lower(),
                f"the two answer words must be different non-empty words, got {yes!r} and {no!r}")
        require(self.rule in RULES, f"judge rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        require(isinstance(self.question, str) and "{draft}" in self.question and "{target}" in self.question,
                "a judge question must contain the fields {draft} and {target}")

    @classmethod
    def given(cls, options: "JudgeOptions | float | None", changes: dict[str, Any]) -> "JudgeOptions":
        """``options`` (a JudgeOptions, a threshold, or None for the defaults) with ``changes`` applied."""
        if options is None or isinstance(options, (int, float)):
            changes = {**({} if options is None else {"threshold": options}), **changes}
            options = cls()
        return replace(options, **changes) if changes else options


JUDGE_OPTION_NAMES = tuple(f.name for f in fields(JudgeOptions))


def first_token_ids(lm: Any, word: str) -> set[int]:
    """First token id of each spelling of ``word`` a model may start with (as is, lower-case, capitalised, each
    with a leading space), skipping leading tokens that decode to whitespace."""
    ids = set()
    for form in (f for w in dict.fromkeys([word, word.lower(), word.capitalize()]) for f in (w, " " + w)):
        tokens = lm.encode(form)
        while tokens and not lm.decode([tokens[0]]).strip():
            tokens = tokens[1:]
        if tokens:
            ids.add(int(tokens[0]))
    return ids


def question_prompt(lm: Any, question: str, system: str | None, prefill: str, plain_suffix: str) -> str:
    """The text a local judge continues: its chat template with the assistant turn opened, then
    ``prefill``; without a chat template, the plain question, ``plain_suffix`` and ``prefill``."""
    if getattr(getattr(lm, "tokenizer", None), "chat_template", None) is not None:
        return lm.chat_prompt(question, system=system) + prefill
    head = f"{system}\n\n" if system else ""
    return f"{head}{question}{plain_suffix}{prefill}"


def next_token_probs(lm: Any, prompts: Sequence[str]):
    """Float32 (B, V) next-token probabilities after each prompt, from ONE left-padded forward.

    The rows go through a fresh :class:`~lookahead_reasoning.runtime.session.Session`, which
    aligns them on the right (pads before the text, positions from the mask) exactly as the
    decoding loops do. Raises whatever the model raises.
    """
    rows = [lm.encode(p) for p in prompts]
    logits = lm.session(rows).logits(keep=1)  # (B, 1, V)
    return torch.softmax(logits[:, -1, :].float(), dim=-1)


def decide(verifier: Any, p_yes: float, p_no: float, top: str | None) -> Verdict:
    """A judge's verdict from P(yes), P(no) and which word the most likely token starts (None: neither).

    ``verifier`` gives ``rule``, ``threshold``, ``min_mass``, ``name`` and ``failed`` (see the module docstring).
    """
    mass = p_yes + p_no
    score = p_yes / mass if math.isfinite(mass) and mass > 0 else None
    if verifier.rule == "top":
        if top is None:
            return verifier.failed("unclear", "unclear: the most likely answer token is neither answer word")
        ok = top == "yes"
        share_text = f", P(yes) share {score:.3f}" if score is not None else ""
        return Verdict(ok, score, f"answered {verifier.answers[0] if ok else verifier.answers[1]}{share_text}",
                       0.0, verifier.name)
    if score is None or mass < verifier.min_mass:
        return verifier.failed("unclear", f"unclear: yes+no probability {mass:.2g} < {verifier.min_mass:g}")
    ok = score >= verifier.threshold
    return Verdict(ok, score, f"P(yes) share {score:.3f} {'>=' if ok else '<'} {verifier.threshold:g}", 0.0,
                   verifier.name)


class BatchedLocalJudge(BaseVerifier):
    """``verify`` in batches of ``batch_size`` pairs; a batch whose judging raises is rejected and logged."""

    batch_size = 16

    def judge_batch(self, pairs: list[Pair]) -> list[Verdict]:  # pragma: no cover - overridden
        raise NotImplementedError

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        pairs = check_pairs(pairs)
        verdicts: list[Verdict] = []
        for lo in range(0, len(pairs), self.batch_size):
            chunk = pairs[lo:lo + self.batch_size]
            try:
                verdicts += self.judge_batch(chunk)
            except Exception as e:
                log.warning("%s (%s) failed on %d pairs, rejecting them: %s: %s", self.name,
                            getattr(getattr(self, "judge", None), "name", "?"), len(chunk), type(e).__name__, e)
                verdicts += [self.failed("exception", f"judge error: {type(e).__name__}: {e}") for _ in chunk]
        return with_latency(verdicts, start)


class LLMJudgeVerifier(BatchedLocalJudge):
    """Ask a local chat model whether the two steps mean the same; the first answer token decides.

    From the judge's float32 next-token distribution, P(yes) is the largest probability over the
    first tokens of the yes-word's spellings ("yes", " yes", "Yes", " Yes"), P(no) likewise; see the
    module docstring for the two rules. A tokenizer without a chat template gets the plain question
    followed by "\\nAnswer:". All pairs of a batch go through one left-padded forward pass.

    Args:
        judge: an :class:`~lookahead_reasoning.runtime.lm.LM` (or a LoadedModel: anything with .model/.tokenizer).
        options: a :class:`JudgeOptions` (or its threshold; None: the defaults). By name,
            :func:`~.registry.make_verifier` takes its fields as options of their own (``threshold=``,
            ``answers=``, ``prefill=``, ``min_mass=``, ``question=``, ``rule=``: ``keyword_options``).
        batch_size: rows per forward pass.
        system: an optional system message for the chat template.

    Measured once (8 hand-made GSM8K-style pairs, bf16, CPU): Qwen2.5-Coder-0.5B-Instruct scored
    0.47-0.59 whether or not the steps matched (useless as a judge); the 1.5B scored 0.90-0.97 on
    matching pairs and 0.47-0.71 on different ones, so with small judges raise ``threshold`` (~0.85).
    """

    name = "judge"
    keyword_options = JUDGE_OPTION_NAMES  # make_verifier folds these into ``options``

    def __init__(self, judge: Any, options: JudgeOptions | float | None = None, *, batch_size: int = 16,
                 system: str | None = None):
        require(judge is not None, "the judge verifier needs judge=LM(...) (a loaded chat model)", VerifierError)
        options = JudgeOptions.given(options, {})
        yes, no = options.answers
        require(isinstance(batch_size, int) and batch_size >= 1, f"batch_size must be >= 1, got {batch_size!r}")
        self.judge = judge if hasattr(judge, "forward") and hasattr(judge, "encode") else LM.from_loaded(judge)
        self.threshold, self.min_mass, self.batch_size = float(options.threshold), float(options.min_mass), batch_size
        self.answers, self.prefill, self.system = (yes, no), options.prefill, system
        self.question, self.rule = options.question, options.rule
        yes_ids, no_ids = first_token_ids(self.judge, yes), first_token_ids(self.judge, no)
        self.yes_ids, self.no_ids = yes_ids - no_ids, no_ids - yes_ids  # a first token both share counts for neither
        require(bool(self.yes_ids) and bool(self.no_ids),
                f"the judge's tokenizer cannot tell {yes!r} from {no!r} by their first token; choose other answers")

    def prompt(self, draft: str, target: str) -> str:
        """The full text the judge continues; its next token is the answer."""
        question = judge_question(draft, target, *self.answers, template=self.question)
        return question_prompt(self.judge, question, self.system, self.prefill, "\nAnswer:")

    def judge_batch(self, pairs: list[Pair]) -> list[Verdict]:
        """From P(yes), P(no) and the word the argmax token starts (or None), per pair: :func:`decide`."""
        probs = next_token_probs(self.judge, [self.prompt(d, t) for d, t in pairs])  # (B, V)
        yes = probs[:, sorted(self.yes_ids)].max(dim=-1).values
        no = probs[:, sorted(self.no_ids)].max(dim=-1).values
        top = probs.argmax(dim=-1).tolist()
        words = ["yes" if t in self.yes_ids else "no" if t in self.no_ids else None for t in top]
        return [decide(self, float(y), float(n), w) for y, n, w in zip(yes, no, words)]


__all__ = ["ALIGNED_ANSWERS", "ALIGNED_PREFILL", "ALIGNED_QUESTION", "JUDGE_OPTION_NAMES", "JUDGE_QUESTION",
           "JudgeOptions", "LLMJudgeVerifier", "judge_question"]
