"""Pull the final answer out of a model's output and compare it with the gold answer.

The answer is the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``); without one, the last
number in the text. The comparison itself is math-verify's (``parse`` + ``verify``), so
``\\frac{3}{4}``, ``3/4`` and ``0.75`` agree, as do ``10\\%`` and ``0.1``. Before that, both sides
are tidied the same way: ``$`` signs and thousands commas go, as do trailing punctuation and plain
unit words after a number (``"18 dollars"`` -> ``18``, ``"5 cm"`` -> ``5``).

Threads: math-verify bounds its work with ``signal.alarm``, which only works in the main thread.
Here its timeouts are used in the main thread and switched off elsewhere, so grading works from
worker threads too; there, the only guard against runaway work is the size check below (answers
longer than ``MAX_ANSWER_CHARS`` and numbers like ``9^{9^{9}}`` or ``(10^{10})!`` are graded
wrong without being evaluated). That check runs in the main thread as well, since a timeout cannot
interrupt one huge integer power computed inside C code.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5  # seconds, per math-verify parse / comparison (main thread only)
MAX_ANSWER_CHARS = 1000  # longer "answers" are not parsed at all
MAX_EXPONENT = 10_000  # larger numeric exponents (or factorial arguments) are not evaluated

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# An optional sign (not a hyphen inside a word or range like "3-4"), an optional $ sign, then a
# number: 1,234,567.89 | 1234.5 | .5, optionally over an integer denominator (3/4).
_NUMBER_RE = re.compile(
    r"(?:\\?\$\s*)?(?P<sign>(?<![\w)\]}])[-−](?:\s*\\?\$)?\s*)?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d])|\d+(?:\.\d+)?|\.\d+)(?:/(?P<den>\d+)(?!\d|\.\d))?"
)
_TEXT_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox)\{([^{}]*)\}")
_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_NUMBER_WITH_UNIT_RE = re.compile(r"(?P<num>[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+))\s*(?:[A-Za-z]{2,}\.?\s*)+")


@dataclass
class Grade:
    """The extracted answer (None when there was none), the gold answer, and whether they agree."""

    predicted: str | None
    gold: str
    correct: bool


# ----------------------------------------------------------------------------------------------
# extraction


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """``(content, index after the closing brace)`` of the group opening at ``text[start] == "{"``;
    None when it never closes. Escaped braces (``\\{``, ``\\}``) do not count."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i], i + 1
        i += 1
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces kept, outer whitespace
    stripped), or None if there is none or the last one never closes (a truncated output).

    Boxes inside a box belong to it: in ``\\boxed{\\fbox{1}+1}`` the answer is ``\\fbox{1}+1``.
    ``\\boxed 5`` (no braces) gives ``5``.
    """
    if not isinstance(text, str):
        return None
    last, pos = None, 0
    while (m := _BOX_RE.search(text, pos)) is not None:
        i = m.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            group = _braced(text, i)
            if group is None:
                return None
            last, pos = group[0].strip(), group[1]
        elif i > m.end() and (token := re.match(r"[^\s${}]+", text[i:])) is not None:
            last, pos = token.group(0), i + token.end()  # "\boxed 5": one token
        else:
            pos = m.end()
    return last


def _number(match: re.Match) -> str:
    num = match.group("num").replace(",", "")
    if match.group("den"):
        num += "/" + match.group("den")
    return ("-" if match.group("sign") else "") + num


def extract_answer(text: str) -> str | None:
    """The last boxed answer as written (stripped), else the last number, tidied: commas, ``$`` signs and a
    sentence's final period dropped, a minus sign kept (``"-$1,234."`` -> ``"-1234"``), a plain fraction kept
    whole (``"3/4"``); None when neither is found."""
    if not isinstance(text, str):
        return None
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    last = None
    for last in _NUMBER_RE.finditer(text):
        pass
    return _number(last) if last is not None else None


# ----------------------------------------------------------------------------------------------
# comparison


def normalize_answer(answer: Any) -> str:
    """The tidied form handed to math-verify (see the module docstring); ``""`` for nothing."""
    s = str(answer).strip().replace("−", "-")
    s = s.replace("\\$", "").replace("$", "").replace("{,}", ",")
    s = s.strip().rstrip(".,;:!? \t\n").strip()
    if text := _TEXT_RE.fullmatch(s):  # the whole answer written as text: \text{18 dollars}
        s = text.group(1).strip().rstrip(".,;:!? ").strip()
    if m := _NUMBER_WITH_UNIT_RE.fullmatch(s):
        s = m.group("num")
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    return s


def _timeout_here(timeout: float | None) -> int | None:
    """math-verify's timeout for this thread: None (off) unless this is the main thread of a POSIX
    process, where its signal.alarm works."""
    if not timeout or timeout <= 0 or os.name != "posix" or threading.current_thread() is not threading.main_thread():
        return None
    return max(1, math.ceil(timeout))


def _with_timeout(call: Callable[[int | None], Any], timeout: int | None) -> Any:
    """``call(timeout)``; again with no timeout where math-verify's signal.alarm turns out not to work here
    (not the main interpreter after all)."""
    try:
        return call(timeout)
    except ValueError as e:
        if timeout is not None and "signal" in str(e) and "thread" in str(e):
            return call(None)
        raise


@functools.lru_cache(maxsize=4096)
def _parse(answer: str, timeout: int | None) -> tuple:
    from math_verify import parse

    return _with_timeout(lambda t: tuple(parse(f"${answer}$", parsing_timeout=t)), timeout)


def _too_big(items: tuple) -> bool:
    """True if evaluating a parsed answer could run away: a numeric exponent or factorial argument
    above MAX_EXPONENT. Checked bottom-up, so an inner tower is caught before an outer one is
    evaluated."""
    from sympy import Basic, Pow, postorder_traversal
    from sympy.functions.combinatorial.factorials import factorial, factorial2

    for node in (node for item in items if isinstance(item, Basic) for node in postorder_traversal(item)):
        arg = node.exp if isinstance(node, Pow) else node.args[0] if isinstance(node, (factorial, factorial2)) else None
        if arg is None or not arg.is_number:
            continue
        try:
            if float(abs(arg.evalf(15))) > MAX_EXPONENT:
                return True
        except (TypeError, ValueError, OverflowError):
            return True
    return False


def same_answer(a: Any, b: Any) -> bool:
    """Whether two extracted answers agree (:func:`answers_match`; two missing answers agree too)."""
    return (a is None and b is None) or answers_match(a, b)


def answers_match(predicted: Any, gold: Any, *, timeout: float | None = DEFAULT_TIMEOUT) -> bool:
    """Whether an extracted answer equals the gold one by math-verify; False on any failure."""
    from math_verify import verify
    from math_verify.errors import TimeoutException

    if predicted is None or gold is None:
        return False
    p, g = normalize_answer(predicted), normalize_answer(gold)
    if not p or not g or len(p) > MAX_ANSWER_CHARS or len(g) > MAX_ANSWER_CHARS:
        return False
    if p == g:
        return True
    t = _timeout_here(timeout)
    try:
        gold_parsed, pred_parsed = _parse(g, t), _parse(p, t)
        if not gold_parsed or not pred_parsed or _too_big(gold_parsed) or _too_big(pred_parsed):
            return False
        return bool(_with_timeout(lambda t: verify(list(gold_parsed), list(pred_parsed), timeout_seconds=t), t))
    except (Exception, TimeoutException):  # TimeoutException is a BaseException
        logger.debug("grading %r against %r failed", p, g, exc_info=True)
        return False


def grade(text: str, gold: Any, *, timeout: float | None = DEFAULT_TIMEOUT) -> Grade:
    """Extract the answer of ``text`` and compare it with ``gold``."""
    predicted = extract_answer(text)
    return Grade(predicted, str(gold), answers_match(predicted, gold, timeout=timeout))


def graded(text: str, gold: str) -> dict[str, Any]:
    """What a benchmark record says of an answer: ``gold``, the answer ``text`` gives (``predicted``), whether
    they agree (``correct``), and the ``text``."""
    g = grade(text, gold)
    return {"gold": gold, "predicted": g.predicted, "correct": g.correct, "text": text}


__all__ = ["Grade", "answers_match", "extract_answer", "extract_boxed", "grade", "graded",
           "normalize_answer", "same_answer"]
