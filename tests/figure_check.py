"""What the figure tests share: what a figure is, how the figures of a page's prose are found, and how a
figure is held to its source (:mod:`test_readme_figures` holds README.md's and theory/README.md's)."""

from __future__ import annotations

import re
from typing import Callable

FIGURE = re.compile(r"(?<![\w.$\\/])(\d+\.\d+(?:x|%)?|\d+(?:x|%))(?![\w.])")
Source = tuple[str, str, Callable[[], str]]  # (context on the figure's line, the figure, what computes it)


def line_figures(line: str) -> list[str]:
    """The figures of one line (a range's both ends), inline code, link targets, comments, arXiv numbers and a
    licence's version aside."""
    clean = re.sub(r"`[^`]*`|\]\([^)]*\)|<!--.*?-->|arXiv \d+\.\d+|Apache-2\.0", " ", line)
    return [m.group(1) for m in FIGURE.finditer(clean)]


def unsourced(found: list[tuple[str, str]], sources: list[Source]) -> list[tuple[str, str]]:
    """The (figure, line start) of ``found`` that no source states: the same figure on a line with its context."""
    return [(figure, line[:100]) for figure, line in found
            if not any(figure == value and context in line for context, value, _ in sources)]


def check_source(text: str, document: str, context: str, figure: str, compute: Callable[[], str]) -> None:
    """``text`` still says ``figure`` beside ``context``, and ``compute`` gives that figure."""
    lines = [line for line in text.splitlines() if context in line and figure in line]
    assert lines, f"{document} no longer says {figure} beside {context!r}: drop the source"
    assert compute() == figure, f"{context!r}: the sources give {compute()}, {document} says {figure}"
