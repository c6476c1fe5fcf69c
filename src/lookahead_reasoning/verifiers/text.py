"""Verifiers and helpers that read the text alone: exact match and the numbers a step writes."""

from __future__ import annotations

import re
import time
from fractions import Fraction
from typing import Sequence

from .base import BaseVerifier, Pair, Verdict, check_pairs, with_latency


def normalize_step(text: str) -> str:
    """The form exact matching compares: ``text.lower()`` with every whitespace character removed.

    "Whitespace" is what ``str.split()`` splits on (spaces, tabs, newlines, carriage returns, form
    feeds, vertical tabs, and Unicode spaces such as U+00A0). Punctuation, digits and every other
    character are kept, so ``"x = 2."`` and ``"X=2."`` match but ``"x = 2"`` and ``"x = 2."`` do not.
    """
    return "".join(text.lower().split())


class ExactMatchVerifier(BaseVerifier):
    """Accept when :func:`normalize_step` of both steps is equal; score 1.0 or 0.0.

    With greedy decoding it keeps only steps the target would have written itself up to case and
    spacing: the output is the target's own text up to case and spacing, and token for token when
    the draft is the target (what the equivalence tests use).
    """

    name = "exact"

    def verify(self, pairs: Sequence[Pair]) -> list[Verdict]:
        start = time.perf_counter()
        same = [normalize_step(draft) == normalize_step(target) for draft, target in check_pairs(pairs)]
        return with_latency([Verdict(s, float(s), "equal after normalisation" if s else "texts differ", 0.0, self.name)
                             for s in same], start)


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
    return frozenset(Fraction(m.group(0).replace(",", "")) for m in _NUMBER_RE.finditer(_LABEL_RE.sub(" ", text)))


def numbers_mismatch(draft: str, target: str) -> str | None:
    """None when both steps hold the same set of numbers, else a reason naming (up to 3 of) each side's extras."""
    d, t = step_numbers(draft), step_numbers(target)
    if d == t:
        return None
    only_d = [str(x) for x in sorted(d - t)[:3]]
    only_t = [str(x) for x in sorted(t - d)[:3]]
    return f"numbers differ (draft only {only_d}, target only {only_t})"


__all__ = ["ExactMatchVerifier", "normalize_step", "numbers_mismatch", "step_numbers"]
