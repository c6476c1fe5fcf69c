"""docs/ shows every notebook as it ran, and no page is older than its notebook.

The staleness check executes nothing: each page written by ``scripts/render_docs.py`` records, in its
first lines, a hash of its notebook's cell types and sources (``source_hash``). Edit a notebook, and
its page is stale until ``.venv/bin/python scripts/render_docs.py <part of its name>`` runs again.
The last tests run the two scripts that write docs/ on small inputs, into a temporary folder.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _script(name: str):
    """Import scripts/<name>.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


render_docs = _script("render_docs")
NOTEBOOKS = render_docs.notebook_paths()
IDS = [p.name for p in NOTEBOOKS]


def _rerender_hint(notebook: Path) -> str:
    return f"run `.venv/bin/python scripts/render_docs.py {notebook.stem}`"


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels from the PNG header."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


# ------------------------------------------------------------------------------------------ the pages

@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_every_notebook_has_a_current_page(notebook):
    page = render_docs.page_path(notebook)
    assert page.exists(), f"{notebook.name} has no rendered page {page.relative_to(ROOT)}: {_rerender_hint(notebook)}"
    recorded = render_docs.recorded_hash(page)
    assert recorded is not None, f"{page.relative_to(ROOT)} records no source hash: {_rerender_hint(notebook)}"
    assert recorded == render_docs.source_hash(notebook), \
        f"{page.relative_to(ROOT)} is stale (its notebook changed since it was rendered): {_rerender_hint(notebook)}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_page_figures_exist_and_the_page_has_one(notebook):
    page = render_docs.page_path(notebook)
    if not page.exists():
        pytest.fail(f"{notebook.name} has no rendered page: {_rerender_hint(notebook)}")
    figures = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
    assert figures, f"{page.name} shows no figure"
    missing = [f for f in figures if not (page.parent / f).is_file()]
    assert not missing, f"{page.name} links figures that are not there: {missing}: {_rerender_hint(notebook)}"


def test_every_page_belongs_to_a_notebook():
    pages = [p for p in DOCS.glob("*.md") if p.name != "README.md"]
    orphans = [p.name for p in pages if not (ROOT / "notebooks" / f"{p.stem}.ipynb").exists()]
    assert not orphans, f"pages whose notebook is gone (delete them): {orphans}"


def test_index_links_every_page_and_both_diagrams():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for notebook in NOTEBOOKS:
        assert f"]({notebook.stem}.md)" in index, f"docs/README.md does not link {notebook.stem}.md"
    assert "(out of date)" not in index and "(not rendered yet)" not in index, \
        "docs/README.md was written while a page was missing or stale: run scripts/render_docs.py"
    for name in ("sd_iteration.png", "lr_cycle.png"):
        assert f"(img/{name})" in index
        assert (DOCS / "img" / name).is_file(), f"docs/img/{name} is missing: run scripts/draw_diagrams.py"


# ------------------------------------------------------------------------------------------ the hash

def test_source_hash_follows_sources_and_ignores_outputs():
    nb = json.loads(NOTEBOOKS[-1].read_text(encoding="utf-8"))
    base = render_docs.source_hash(nb)
    ran = copy.deepcopy(nb)
    code = next(c for c in ran["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["42\n"]}]
    code["execution_count"] = 7
    ran["metadata"]["language_info"] = {"name": "python", "version": "3.11.0"}
    assert render_docs.source_hash(ran) == base

    as_lines = copy.deepcopy(nb)  # the .ipynb format may store a source as a list of lines
    for cell in as_lines["cells"]:
        cell["source"] = "".join(cell["source"]).splitlines(keepends=True)
    assert render_docs.source_hash(as_lines) == base

    edited = copy.deepcopy(nb)
    edited["cells"][1]["source"] = "".join(edited["cells"][1]["source"]) + " "
    moved = copy.deepcopy(nb)
    moved["cells"][1], moved["cells"][2] = moved["cells"][2], moved["cells"][1]
    retyped = copy.deepcopy(nb)
    retyped["cells"][1]["cell_type"] = "markdown" if retyped["cells"][1]["cell_type"] == "code" else "code"
    hashes = {render_docs.source_hash(x) for x in (edited, moved, retyped)}
    assert base not in hashes and len(hashes) == 3


# ------------------------------------------------------------------------------------------ the scripts

def test_render_writes_text_figures_and_hash_and_repeats_itself(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# A small page\n\nSome *text*."),
        nbformat.v4.new_code_cell("import sys\nprint('answer', 6 * 7, object())\nprint('a' + ' warning', file=sys.stderr)"),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([0, 1], [1, 0])\nplt.show()"),
        nbformat.v4.new_code_cell("{'shape': (2, 3)}"),
    ])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    source = tmp_path / "nb" / "small_page.ipynb"
    source.parent.mkdir()
    nbformat.write(nb, source)

    page = render_docs.render(source, tmp_path / "docs")
    text = page.read_text(encoding="utf-8")
    assert page == tmp_path / "docs" / "small_page.md"
    assert render_docs.recorded_hash(page) == render_docs.source_hash(source)
    assert text.index("# A small page") < text.index("answer 42 <object object at 0x…>") < text.index("![figure 1]")
    assert "{'shape': (2, 3)}" in text
    assert "a warning" not in text  # stderr is left out
    figure = tmp_path / "docs" / "small_page_files" / "small_page_1.png"
    assert _png_size(figure)[0] > 100
    assert json.loads(source.read_text(encoding="utf-8"))["cells"][1]["outputs"] == []  # the notebook is untouched

    again = render_docs.render(source, tmp_path / "docs")
    assert again.read_text(encoding="utf-8") == text  # a second run (new kernel, new addresses) gives the same page


def test_draw_diagrams_writes_both_pictures(tmp_path):
    draw = _script("draw_diagrams")
    assert draw.main(["--out", str(tmp_path)]) == 0
    for name in ("sd_iteration.png", "lr_cycle.png"):
        width, height = _png_size(tmp_path / name)
        assert width >= 1500 and 0.4 < height / width < 0.9, f"{name} is {width}x{height} pixels"


def test_index_gives_the_reading_order_and_says_where_asynchronous_lr_runs():
    """The index lists the notebooks in the order of their numbers, which is the reading order: list item n
    is the notebook numbered n."""
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    assert index == render_docs.index_markdown(NOTEBOOKS), "docs/README.md is not what render_docs writes: run it"
    items = re.findall(r"^(\d+)\. \[[^\]]*\]\((\d\d)_[^)]*\.md\)", index, re.M)
    assert [int(item) for item, _ in items] == [int(number) for _, number in items] == list(range(1, len(NOTEBOOKS) + 1))
    assert all(render_docs.ABOUT.get(number) for _, number in items), "a notebook without its one-line summary"
    assert "synchronous" in index and "lookahead_reasoning.engine_runtime" in index
    for old in render_docs.RENAMED:  # an earlier name is listed with what replaced it
        assert f"`{old}` is now" in index


# ------------------------------------------------------------------------------------------ the notebooks

MAX_NOTEBOOK_LINES = 350


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_a_notebook_teaches_one_idea_says_what_and_how_long(notebook):
    """At most 350 lines of cell source (prose and code, outputs aside), and an opening that says what the
    reader can do after it and how long it runs."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    lines = sum(len("".join(c["source"]).splitlines()) for c in cells)
    assert lines <= MAX_NOTEBOOK_LINES, f"{notebook.name}: {lines} lines of cell source (split it)"
    first = "".join(cells[0]["source"])
    number = notebook.stem.split("_", 1)[0]
    assert cells[0]["cell_type"] == "markdown" and first.startswith(f"# {number} · "), notebook.name
    assert "**After this notebook** you can " in first, f"{notebook.name} does not say what it teaches"
    assert re.search(r"\*\*Runs in\*\* (about |a few |under )?[\w ,-]*(second|minute)", first), \
        f"{notebook.name} does not say how long it runs"


def test_every_results_figure_is_linked_from_where_a_reader_looks():
    readers = "".join((ROOT / p).read_text(encoding="utf-8") for p in ("README.md", "benchmarks/README.md", "docs/README.md"))
    results = ROOT / "benchmarks" / "results"
    for figure in sorted(results.glob("*.png")) + sorted(results.glob("*-plots/*.png")):
        name = figure.relative_to(results).as_posix()
        assert f"results/{name})" in readers, f"benchmarks/results/{name} is linked from no README"


# A figure in a page's prose: a decimal, possibly a speedup ("2.94x") or a percentage ("16.7%"); formulas ($...$),
# inline code and link targets are not prose.
FIGURE = re.compile(r"(?<![\w.$\\])(\d+\.\d+)(x|%)?(?![\w.])")


def _prose_and_printed(page: str) -> tuple[str, str]:
    """A rendered page split into its prose and what its cells hold or printed (code and output blocks)."""
    prose, printed, block = [], [], None
    for line in page.splitlines():
        if line.startswith("```"):
            block = None if block else (line[3:].strip() or "code")
            continue
        (prose if block is None else printed).append(line)
    text = "\n".join(prose)
    for pattern in (r"\$\$.*?\$\$", r"\$[^$\n]*\$", r"`[^`\n]*`", r"\]\([^)]*\)", r"<!--.*?-->"):
        text = re.sub(pattern, " ", text, flags=re.S)
    return text, "\n".join(printed)


def _is_printed(figure: str, unit: str | None, printed: list[str]) -> bool:
    digits = len(figure.split(".")[1])
    wanted = [float(figure)] + ([float(figure) / 100] if unit == "%" else [])
    for number in printed:
        places = len(number.split(".")[1])
        for value, need in zip(wanted, (digits, digits + 2)):
            if places >= need and round(float(number), need) == round(value, need):
                return True
    return False


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_every_figure_a_page_states_is_one_it_prints(notebook):
    """The prose of a rendered notebook states no decimal, speedup or percentage that the notebook does not
    compute or print itself (rounded as printed, or a printed fraction as a percentage): a figure edited by
    hand, or a notebook rerun to other numbers without its prose, fails here."""
    page = render_docs.page_path(notebook)
    if not page.exists():
        pytest.fail(f"{notebook.name} has no rendered page: {_rerender_hint(notebook)}")
    prose, printed = _prose_and_printed(page.read_text(encoding="utf-8"))
    numbers = re.findall(r"\d+\.\d+", printed)
    stray = sorted({m.group(0) for m in FIGURE.finditer(prose) if not _is_printed(m.group(1), m.group(2), numbers)})
    assert not stray, f"{page.name} states figures its cells do not print: {stray}"


SECTION_HEADING = re.compile(r"^## (\d+)\. ", re.M)
SECTION_REFERENCE = re.compile(r"(?:\b[Ss]ections?|§) ?(\d+)")
ELSEWHERE = re.compile(r"README|[Nn]otebook \d+")  # a section of another page: "theory/README.md, section 2"


def _own_section_references(markdown: str) -> list[tuple[int, str]]:
    """(section number, the words before it) of every reference the text makes to a section of its own page: a
    "section N" or "§N" without another page (a README, "notebook NN") named in the 40 characters before it."""
    flat = " ".join(markdown.split())
    found = []
    for match in SECTION_REFERENCE.finditer(flat):
        before = flat[max(0, match.start() - 40):match.start()]
        if not ELSEWHERE.search(before):
            found.append((int(match.group(1)), before + match.group(0)))
    return found


def test_section_references_read_only_references_to_the_page_itself():
    assert _own_section_references("the ratios of section 2, and §3's table") == [(2, "the ratios of section 2"),
                                                                               (3, "the ratios of section 2, and §3")]
    assert _own_section_references("(theory/README.md, section 8), notebook 12's (section 3)") == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_a_notebooks_sections_run_1_2_3_and_its_references_name_them(notebook):
    """The numbered section headings ("## N. ...") of a notebook's Markdown run 1, 2, 3 ... without a gap, and every
    "section N" or "§N" its Markdown says of itself names one of them."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    markdown = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    numbers = [int(n) for n in SECTION_HEADING.findall(markdown)]
    assert numbers == list(range(1, len(numbers) + 1)), f"{notebook.name}: its sections are numbered {numbers}"
    dangling = [words for number, words in _own_section_references(markdown) if number not in numbers]
    assert not dangling, f"{notebook.name} refers to sections it does not have: {dangling}"
