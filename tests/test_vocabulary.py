"""One meaning per name, and no old spelling kept beside it.

``width`` means drafts per position W and nothing else: the new tokens per row of a forward are n
(``T(R, n)``, ``ForwardTiming.n``, ``CostGrid.seconds(rows, n)``) and padding a forward to a cheaper
measured n is ``CostGrid.padded_n`` / ``LM.pad_to``. The draft's confidence stop is
``draft_stop_below`` everywhere (its candidates in mode auto: ``PlannerConfig.draft_stop_below_choices``).
The old names are gone (0.1.0 was never released).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "lookahead_reasoning"

OLD_STOP = re.compile(r"\bstop_below\b|\bcheck_stop_below\b|\bstops=|\.stops\b|\b[Pp]lan\.stop\b"
                      r"|\b(?:Planner|Plan|CyclePlan|FixedPolicy|from_rates|model)\([^)]*\bstop=")
OLD_WIDTH = re.compile(r"\bwidths\b|\.width\(|\bWidthPolicy\b|\b\w*[Tt]iming\.width\b|\bt\.width\b"
                       r"|Timing\([^)]*\bwidth\b|seconds\(\w+, width\b|\bwidth policy\b")


def _texts() -> list[tuple[str, str]]:
    """(where, text) of every source file, the READMEs, the notebooks' cell sources and docs pages."""
    texts = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))]
    texts += [(name, (ROOT / name).read_text(encoding="utf-8")) for name in ("README.md", "theory/README.md")]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        texts.append((nb.name, "\n".join("".join(c["source"]) for c in cells)))
    texts += [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in sorted((ROOT / "docs").glob("*.md"))]
    return texts


@pytest.mark.parametrize("pattern", [OLD_STOP, OLD_WIDTH], ids=["draft_stop_below", "width"])
def test_old_names_appear_nowhere(pattern):
    hits = [f"{where}:{i}: {line.strip()}" for where, text in _texts()
            for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert not hits, "old names:\n" + "\n".join(hits)


def test_the_readme_has_one_symbol_table_that_the_theory_readme_points_to():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headers = [line for line in readme.splitlines() if re.match(r"\|\s*meaning\s*\|\s*paper\s*\|", line)]
    assert len(headers) == 1 and readme.count("\n## Symbols\n") == 1
    table = readme.split("\n## Symbols\n", 1)[1].split("\n## ", 1)[0]
    assert "| drafts per position | W | - | `width` | `--width` |" in table
    assert "`draft_stop_below`" in table and "`CostGrid.padded_n`" in table
    theory = (ROOT / "theory" / "README.md").read_text(encoding="utf-8")
    assert "../README.md#symbols" in theory and "| meaning |" not in theory


# ------------------------------------------------------------------------------------- no old names

def test_no_deprecation_module_and_no_old_spelling_kept():
    """0.1.0 was never released: old spellings are gone, not kept behind warnings."""
    assert not (SRC / "deprecation.py").exists() and not (SRC / "lm.py").exists()
    hits = [p.name for p in SRC.rglob("*.py") if "DeprecationWarning" in p.read_text(encoding="utf-8")]
    assert not hits, hits
