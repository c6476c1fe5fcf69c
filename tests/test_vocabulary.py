"""One meaning per name, and the old names still work.

``width`` means drafts per position W and nothing else: the new tokens per row of a forward are n
(``T(R, n)``, ``ForwardTiming.n``, ``CostGrid.seconds(rows, n)``) and padding a forward to a cheaper
measured n is ``CostGrid.padded_n`` / ``LM.pad_to``. The draft's confidence stop is
``draft_stop_below`` everywhere (its candidates in mode auto: ``PlannerConfig.draft_stop_below_choices``).
The old names live on only in :mod:`lookahead_reasoning.deprecation` and the one-line shims that use it;
each still works and warns.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "lookahead_reasoning"

OLD_STOP = re.compile(r"\bstop_below\b|\bcheck_stop_below\b|\bstops=|\.stops\b|\b[Pp]lan\.stop\b"
                      r"|\b(?:Planner|Plan|CyclePlan|FixedK|from_rates|model)\([^)]*\bstop=")
OLD_WIDTH = re.compile(r"\bwidths\b|\.width\(|\bWidthPolicy\b|\b\w*[Tt]iming\.width\b|\bt\.width\b"
                       r"|Timing\([^)]*\bwidth\b|seconds\(\w+, width\b|\bwidth policy\b")


def _shim(line: str) -> bool:
    """A line that keeps an old name working on purpose (a call of a ``renamed_*`` helper)."""
    return "renamed_" in line


def _texts() -> list[tuple[str, str]]:
    """(where, text) of every source file, the READMEs, the notebooks' cell sources and docs pages."""
    texts = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))
             if p.name != "deprecation.py"]
    texts += [(name, (ROOT / name).read_text(encoding="utf-8")) for name in ("README.md", "theory/README.md")]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        texts.append((nb.name, "\n".join("".join(c["source"]) for c in cells)))
    texts += [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in sorted((ROOT / "docs").glob("*.md"))]
    return texts


@pytest.mark.parametrize("pattern", [OLD_STOP, OLD_WIDTH], ids=["draft_stop_below", "width"])
def test_old_names_appear_only_in_the_shims(pattern):
    hits = [f"{where}:{i}: {line.strip()}" for where, text in _texts()
            for i, line in enumerate(text.splitlines(), 1) if pattern.search(line) and not _shim(line)]
    assert not hits, "old names outside the deprecation shims:\n" + "\n".join(hits)


def test_the_readme_has_one_symbol_table_that_the_theory_readme_points_to():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headers = [line for line in readme.splitlines() if re.match(r"\|\s*meaning\s*\|\s*paper\s*\|", line)]
    assert len(headers) == 1 and readme.count("\n## Symbols\n") == 1
    table = readme.split("\n## Symbols\n", 1)[1].split("\n## ", 1)[0]
    assert "| drafts per position | W | - | `width` | `--width` |" in table
    assert "`draft_stop_below`" in table and "`CostGrid.padded_n`" in table
    theory = (ROOT / "theory" / "README.md").read_text(encoding="utf-8")
    assert "../README.md#symbols" in theory and "| meaning |" not in theory


# ------------------------------------------------------------------------------------- the old names work

def test_old_stop_keywords_and_attributes_warn_and_work():
    from lookahead_reasoning.decoding.cycle import CyclePlan
    from lookahead_reasoning.decoding.driver import FixedK
    from lookahead_reasoning.planning import Plan, PlannerConfig, TokenBook

    with pytest.warns(DeprecationWarning, match="draft_stop_below_choices"):
        config = PlannerConfig(stops=(0.3,))
    assert config.draft_stop_below_choices == (0.3,)
    with pytest.warns(DeprecationWarning, match="PlannerConfig.stops"):
        assert config.stops == (0.3,)
    with pytest.warns(DeprecationWarning, match="Plan"):
        plan = Plan(0, 8, stop=0.4)
    assert plan == Plan(0, 8, 0.4) and plan.label == "sd@g8s0.4"
    with pytest.warns(DeprecationWarning, match="Plan.stop"):
        assert plan.stop == 0.4
    with pytest.warns(DeprecationWarning, match="CyclePlan"):
        cycle = CyclePlan(1, stop=0.5)
    assert cycle.draft_stop_below == 0.5
    with pytest.warns(DeprecationWarning, match="CyclePlan.stop"):
        assert cycle.stop == 0.5
    with pytest.warns(DeprecationWarning, match="FixedK"):
        assert FixedK(2, stop=0.6).draft_stop_below == 0.6
    with pytest.warns(DeprecationWarning, match="from_rates"):
        book = TokenBook.from_rates(0.7, 0.9, 0.3, stop=0.4)
    assert book == TokenBook.from_rates(0.7, 0.9, 0.3, draft_stop_below=0.4)
    with pytest.warns(DeprecationWarning, match="model"):
        assert book.model(stop=0.4) == book.model(0.4)
    with pytest.raises(TypeError, match="both"):
        PlannerConfig(stops=(0.3,), draft_stop_below_choices=(0.4,))


def test_old_planner_keyword_warns_and_works():
    from lookahead_reasoning.planning import Book, CostGrid, CostTable, Planner, PlannerConfig

    grid = CostGrid({1: {1: 0.1, 2: 0.2}})
    with pytest.warns(DeprecationWarning, match="Planner"):
        planner = Planner(CostTable(grid, grid), Book(), PlannerConfig(draft_stop_below_choices=()), stop=0.4)
    assert planner.draft_stop_below_choices == (0.4,)


def test_old_drafter_names_warn_and_work():
    from lookahead_reasoning.decoding.drafters import ModelDrafter
    from lookahead_reasoning.decoding.settings import check_stop_below
    from lookahead_reasoning.errors import ConfigError
    from lookahead_reasoning.sampling import SamplingConfig
    from conftest import tiny_lm

    with pytest.warns(DeprecationWarning, match="stop_below"):
        drafter = ModelDrafter(tiny_lm("qwen2", seed=1), SamplingConfig(), stop_below=0.5)
    assert drafter.draft_stop_below == 0.5
    with pytest.warns(DeprecationWarning, match="ModelDrafter.stop_below"):
        drafter.stop_below = 0.3
    assert drafter.draft_stop_below == 0.3
    with pytest.warns(DeprecationWarning, match="ModelDrafter.stop_below"):
        assert drafter.stop_below == 0.3
    with pytest.warns(DeprecationWarning, match="check_draft_stop_below"):
        check_stop_below(0.5)
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="draft_stop_below"):
        check_stop_below(1.5)


def test_old_width_names_warn_and_work():
    import lookahead_reasoning.lm as lm_module
    from lookahead_reasoning.lm import ForwardTiming, PadPolicy
    from lookahead_reasoning.planning import CostGrid
    from conftest import tiny_lm

    grid = CostGrid({1: {1: 1.0, 2: 0.5}})
    with pytest.warns(DeprecationWarning, match="padded_n"):
        assert grid.width(1, 1) == grid.padded_n(1, 1) == 2
    timing = ForwardTiming(1, 3, 10, 0.1)
    with pytest.warns(DeprecationWarning, match="ForwardTiming.width"):
        assert timing.width == timing.n == 3
    lm = tiny_lm("qwen2", seed=1)
    with pytest.warns(DeprecationWarning, match="LM.widths"):
        lm.widths = grid.padded_n
    assert lm.pad_to == grid.padded_n
    with pytest.warns(DeprecationWarning, match="LM.widths"):
        assert lm.widths == grid.padded_n
    lm.pad_to = None
    with pytest.warns(DeprecationWarning, match="PadPolicy"):
        assert lm_module.WidthPolicy is PadPolicy
    with pytest.raises(AttributeError):
        lm_module.NoSuchName  # noqa: B018
