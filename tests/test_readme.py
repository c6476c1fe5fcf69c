"""The README keeps its promises: its verifier example runs, its Python example restates no default,
its pictures exist, every number of its "what to expect" table is what the linked results file gives,
it stays a front page (short, no run history), and it speaks to users about the library only."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from lookahead_reasoning import LookaheadGenerator, StepConfig
from lookahead_reasoning.decoding import generate

from lr_helpers import tiny_lm

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    """The text of the README section whose heading contains ``title``."""
    match = re.search(rf"^##+ [^\n]*{re.escape(title)}[^\n]*\n(.*?)(?=^## )", README, re.S | re.M)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_custom_verifier_example_runs():
    [code] = python_blocks(section("Your own verifier"))
    setup = code[:code.index("gen = ")]  # the class; the models it names are swapped for tiny ones here
    namespace: dict = {"__name__": "readme"}
    exec(compile(setup, "README.md", "exec"), namespace)
    [verifier_cls] = [v for v in namespace.values() if inspect.isclass(v) and v.__module__ == "readme"]
    verifier = verifier_cls()
    same, different = verifier.verify([("so 3 + 4 = 7", "3 plus 4 gives 7"), ("so 3 + 4 = 7", "it is 8")])
    assert same.accepted and not different.accepted
    target = tiny_lm(0)
    prompt = [5, 6, 7]
    steps = StepConfig(("e",), 12)
    # A random pair rarely meets one delimiter inside 12 tokens, so the other pair splits at several;
    # and a random draft doubts every step it writes, so it is not stopped for that.
    other = LookaheadGenerator(target=target, draft=tiny_lm(1), verifier=verifier, mode="lr", k=2,
                               steps=StepConfig(tuple("aeiouGWN"), 12), draft_stop_below=None)
    assert other.generate(prompt, max_new_tokens=80).stats.judged > 0  # the README's verifier judged the pairs
    same_pair = LookaheadGenerator(target=target, draft=tiny_lm(0), verifier=verifier, mode="lr", k=2, steps=steps)
    result = same_pair.generate(prompt, max_new_tokens=30)
    assert result.token_ids == generate(target, prompt, max_new_tokens=30).token_ids  # draft == target: kept


def test_the_python_example_restates_no_default():
    code = python_blocks(section("Python API"))[0]
    defaults = {name: p.default for name, p in inspect.signature(LookaheadGenerator).parameters.items()
                if p.default is not inspect.Parameter.empty}
    calls = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
             and getattr(n.func, "id", None) == "LookaheadGenerator"]
    assert calls
    for call in calls:
        for kw in call.keywords:
            if kw.arg in defaults and isinstance(kw.value, ast.Constant):
                assert kw.value.value != defaults[kw.arg], f"the README restates the default {kw.arg}={kw.value.value!r}"


def test_pictures_exist_and_the_readme_speaks_about_the_library_only():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert {"docs/img/sd_iteration.png", "docs/img/lr_cycle.png"} <= set(images)  # the two diagrams
    for image in images:
        assert (ROOT / image).is_file(), image
    assert not re.search(r"\bissues?\b|this task", README, re.I)
    assert not re.search(r"\bsessions?\b", README)  # the class `Session` is the library's own word


@pytest.mark.parametrize("title", ["How it works", "Quick start", "Python API", "Modes", "Verifiers",
                                   "What to expect", "Serving engines", "Your models on a GPU", "Symbols",
                                   "Layout", "Tests"])
def test_sections_a_user_needs_are_there(title):
    assert section(title).strip()
    assert "PLACEHOLDER" not in section(title)


def test_the_quick_start_keeps_its_two_commands():
    quick = section("Quick start")
    assert "bash scripts/main.sh" in quick and "bash .ci/run" in quick


def test_the_readme_is_a_front_page():
    lines = README.count("\n")
    assert lines <= 220, f"README.md has {lines} lines: move run details to benchmarks/README.md"
    assert "## Results" not in README  # runs and their history live in benchmarks/README.md
    assert (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8").count("## What to expect") == 1


def _expect_rows() -> list[str]:
    table = [line for line in section("What to expect").splitlines() if line.startswith("|")]
    assert len(table) >= 4, "the what-to-expect table is missing"
    return table[2:]  # past the header and its rule


def test_every_what_to_expect_number_is_in_its_results_file():
    """Each measured row links one committed results file; every decimal in the row must be a median
    tokens/s or a speedup (ratio of medians) that `lookahead-reasoning report` computes from that file."""
    from lookahead_reasoning.bench.report import load_results, summarize

    measured = 0
    for row in _expect_rows():
        links = re.findall(r"\]\((benchmarks/results/[^)]+\.jsonl)\)", row)
        numbers = re.findall(r"(?<![\d.])(\d+\.\d+)(?=x\b|\b)", row)  # speedups ("2.94x") too
        if not links:
            assert not numbers, f"a row with numbers but no results file: {row}"
            continue
        [link] = links
        rows = summarize(load_results(ROOT / link))
        known = {f"{r.tps_median:.2f}" for r in rows} | {f"{r.speedup_of_medians:.2f}" for r in rows
                                                          if r.speedup_of_medians is not None}
        assert numbers, row
        stray = [n for n in numbers if n not in known]
        assert not stray, f"{link} gives none of {stray} (row: {row})"
        best = re.search(r"\| `([^`]+)` \| (\d+\.\d+) \|", row)
        assert best, f"no best mode and speed in {row}"
        mode = next(r for r in rows if r.mode == best.group(1))
        assert f"{mode.tps_median:.2f}" == best.group(2), f"{best.group(1)} in {link} is not {best.group(2)} tok/s"
        measured += 1
    assert measured >= 4


def test_emulated_numbers_are_marked():
    for row in _expect_rows():
        if "avx2emu" in row:
            assert "emulated" in row, f"an emulated run shown without saying so: {row}"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", ["README.md", "benchmarks/README.md", "docs/README.md", "theory/README.md"])
def test_every_relative_link_resolves(page):
    """Every link to a file in the repository points at one that exists, and every #anchor at a heading."""
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{page} links {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.M)
            assert anchor in {_anchor(h) for h in headings}, f"{page} links {target}: no such heading"
