"""Render the notebooks to Markdown pages that a reader sees without running anything.

    .venv/bin/python scripts/render_docs.py          # every notebook in notebooks/
    .venv/bin/python scripts/render_docs.py 05 02    # only the notebooks whose name contains "05" or "02"

For each ``notebooks/<stem>.ipynb`` it executes a copy in memory (nbclient, kernel "python3", working
directory ``notebooks/``; the stored notebook stays without outputs) and writes ``docs/<stem>.md``, with
every figure as ``docs/<stem>_files/<stem>_<n>.png``. Then it rewrites ``docs/README.md``, the index.

The page's text is meant to come out the same when an unchanged notebook is rendered again (the
notebooks fix their seeds): execution counts and timings are not written, memory addresses
(``0x7f...``) and ANSI colour codes are masked, and stderr (library warnings that name local paths) is
left out. The PNG bytes may differ between machines; the page does not depend on them.

Staleness: the page's first line records ``source-sha256``, a hash of the notebook's cell types and
sources only (:func:`source_hash`; outputs and metadata do not count). ``tests/test_docs.py`` compares it
with the notebook, so a notebook edited without re-rendering fails the tests without executing anything.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DOCS = ROOT / "docs"
CELL_TIMEOUT_S = 1800

HASH_LINE = re.compile(r"source-sha256: ([0-9a-f]{64})")
ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# ------------------------------------------------------------------------------------------ facts

def notebook_paths(notebooks: Path = NOTEBOOKS) -> list[Path]:
    """Every notebook in ``notebooks``, by name."""
    return sorted(notebooks.glob("*.ipynb"))


def page_path(notebook: Path, docs: Path = DOCS) -> Path:
    """Where the rendered page of ``notebook`` lives: ``docs/<stem>.md``."""
    return docs / f"{notebook.stem}.md"


def source_hash(notebook: Path | dict) -> str:
    """SHA-256 of the notebook's cells as (cell type, source) pairs: what the reader wrote, not what ran.

    ``notebook`` is a path or an already loaded notebook (the JSON as a dict). Outputs, execution counts
    and metadata do not change the hash; any edit of a cell's text, a new cell or a moved cell does.
    """
    nb = json.loads(Path(notebook).read_text(encoding="utf-8")) if isinstance(notebook, (str, Path)) else notebook
    cells = [[c["cell_type"], _joined(c.get("source", ""))] for c in nb["cells"]]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode("utf-8")).hexdigest()


def recorded_hash(page: Path) -> str | None:
    """The ``source-sha256`` that a rendered page records in its header, or None if it has none."""
    if not page.exists():
        return None
    with open(page, encoding="utf-8") as fh:
        head = fh.read(600)
    found = HASH_LINE.search(head)
    return found.group(1) if found else None


def title(notebook: Path) -> str:
    """The first Markdown heading of the notebook (its stem if it has none)."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in _joined(cell["source"]).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return notebook.stem


def _joined(source: str | list[str]) -> str:
    """A cell's source as one string (the .ipynb format stores it as a string or a list of lines)."""
    return "".join(source) if isinstance(source, list) else source


# ------------------------------------------------------------------------------------------ render

@dataclass
class Page:
    """One rendered notebook: the Markdown text and its figures (file name -> PNG bytes)."""

    markdown: str
    figures: dict[str, bytes]


def execute(notebook: Path) -> dict:
    """Run the notebook top to bottom in a fresh kernel; returns the executed notebook (nbformat node).

    Raises nbclient's CellExecutionError when a cell fails: a page of a broken notebook is not written.
    """
    import nbclient
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(notebook.parent)}})
    client.execute()
    return nb


def to_markdown(nb: dict, stem: str, origin: str) -> Page:
    """Markdown for an executed notebook. Figures are named ``<stem>_files/<stem>_<n>.png``.

    ``origin`` is the notebook's path as the header names it (relative to the repository).
    """
    header = (f"<!-- Rendered from {origin} by scripts/render_docs.py: edit the notebook and render again, "
              f"do not edit this page.\n     source-sha256: {source_hash(nb)} -->\n")
    parts = [header]
    figures: dict[str, bytes] = {}
    for cell in nb["cells"]:
        source = _joined(cell.get("source", "")).strip("\n")
        if cell["cell_type"] == "markdown":
            parts.append(source + "\n")
        elif cell["cell_type"] == "code" and source:
            parts.append(f"```python\n{source}\n```\n")
            parts.extend(_outputs(cell.get("outputs", []), stem, figures))
    return Page("\n".join(parts), figures)


def _outputs(outputs: list, stem: str, figures: dict[str, bytes]) -> list[str]:
    """Markdown blocks for one code cell's outputs (consecutive stdout chunks are merged)."""
    blocks: list[str] = []
    text: list[str] = []

    def flush() -> None:
        if text:
            blocks.append(_text_block("".join(text)))
            text.clear()

    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            if out.get("name") == "stdout":
                text.append(_joined(out.get("text", "")))
            continue  # stderr: warnings, not part of the lesson
        if kind not in ("execute_result", "display_data"):
            continue
        flush()
        data = out.get("data", {})
        if "image/png" in data:
            name = f"{stem}_files/{stem}_{len(figures) + 1}.png"
            figures[name] = base64.b64decode(_joined(data["image/png"]))
            blocks.append(f"![figure {len(figures)}]({name})\n")
        elif "text/markdown" in data:
            blocks.append(_clean(_joined(data["text/markdown"])).strip("\n") + "\n")
        elif "text/plain" in data:
            blocks.append(_text_block(_joined(data["text/plain"])))
    flush()
    return blocks


def _clean(text: str) -> str:
    """Mask what changes from run to run without changing the lesson: addresses, colour codes, local paths."""
    text = ANSI.sub("", text)
    text = ADDRESS.sub("0x…", text)
    return text.replace(str(ROOT) + "/", "").replace(str(ROOT), ".")


def _text_block(text: str) -> str:
    lines = [line.rstrip() for line in _clean(text).strip("\n").splitlines()]
    return "```text\n" + "\n".join(lines) + "\n```\n"


def write_page(page: Page, target: Path) -> None:
    """Write ``target`` and its figures, replacing the figures of an earlier rendering."""
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = target.parent / f"{target.stem}_files"
    if folder.is_dir():
        shutil.rmtree(folder)  # figures of an earlier rendering
    for name, png in page.figures.items():
        path = target.parent / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
    target.write_text(page.markdown, encoding="utf-8")


def render(notebook: Path, docs: Path = DOCS) -> Path:
    """Execute ``notebook`` and write its page under ``docs``; returns the page's path."""
    nb = execute(notebook)
    try:
        origin = notebook.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        origin = notebook.name
    target = page_path(notebook, docs)
    write_page(to_markdown(nb, notebook.stem, origin), target)
    return target


# ------------------------------------------------------------------------------------------ index

DIAGRAMS = """\
## How it works, in two pictures

Drawn by `scripts/draw_diagrams.py` (no model needed).

One token-level speculative decoding iteration: the draft proposes gamma tokens, the target scores them
in one forward pass, the longest accepted prefix is kept and the target adds one token of its own.

![one speculative decoding iteration](img/sd_iteration.png)

One Lookahead Reasoning cycle: the draft writes k steps, the target writes its own step on k + 1 rows
forked from the shared prefix's KV cache in one batched pass, a verifier compares each pair, and the
drafted steps are kept up to the first mismatch, which the target's step replaces.

![one Lookahead Reasoning cycle](img/lr_cycle.png)
"""


# What each notebook teaches, by the number its file name starts with: the numbers are the reading order
# (the loop before its formula, measurements last).
ABOUT: dict[str, str] = {
    "01": "one token-level SD iteration opened up on tiny models: drafting, one scoring forward, rejection "
          "sampling, the correction or bonus token, the KV cache after it.",
    "02": "the same iteration ten thousand times: the emitted token is distributed as the target's p, "
          "whatever the draft's q, and greedy SD emits the target's argmax.",
    "03": "the closed form S(alpha, gamma, c) of token SD and its ceiling 1/(1 - alpha), checked by simulation.",
    "04": "Algorithm 1 on one screen, then one Lookahead Reasoning cycle stage by stage (draft k steps, target "
          "rows in one batch, verify, accept), checked against it.",
    "05": "the same cycle over llama.cpp's server, request by request: the sync and async schedules in time, "
          "and the planner's price of each.",
    "06": "the step-level formulas f_sync and f_async: when speculating whole steps pays, in units of target steps.",
    "07": "both layers at once: how to split a parallel budget between drafted steps and drafted tokens.",
    "08": "the compiled path a GPU runs: a static KV cache through every fork, selection and rollback beside a "
          "DynamicCache, bucket shapes, CUDA graphs, and real runs' forward schedules priced for an H100.",
    "09": "the committed benchmark runs against `theory.costed`: predicted and measured speeds, the step "
          "formula with the batch's measured cost, and how close acceptance comes to a geometric law.",
    "10": "a measured cost table T(R, n), every plan `auto` may run priced with it, an `auto` trace, and the "
          "real pair's rates on a model of spare compute.",
    "11": "the step acceptance above which a drafted step pays, against `ar` and against the best token-SD "
          "plan, derived and computed for every runtime measured here, against what every verifier reached.",
    "12": "the verifiers on one real step pair, the acceptance / harm-proxy frontier of the pair bank, and a "
          "drafted step that an embedding accepts and that changes the answer.",
    "13": "harm measured by the answer: flips of continued pairs, a prediction checked against a run, and the "
          "end-to-end runs over llama.cpp.",
}

# The notebooks' earlier names, for links kept elsewhere: old name -> new file stem(s).
RENAMED: dict[str, str] = {
    "01_token_sd_ceiling": "03_token_sd_ceiling", "02_step_speculation": "06_step_speculation",
    "03_budget_split": "07_budget_split", "04_theory_meets_measurement": "09_theory_meets_measurement",
    "05_inside_one_sd_iteration": "01_inside_one_sd_iteration, 02_sd_is_lossless",
    "06_inside_one_lr_cycle": "04_inside_one_lr_cycle, 05_lr_over_an_engine",
    "07_when_each_layer_pays": "10_a_cost_table_and_the_planner, 11_when_each_layer_pays",
    "08_verifiers": "12_what_a_verifier_accepts, 13_what_a_verifier_costs",
}

SYNC_NOTE = """\
The local loops in this library (and so every notebook) run **synchronous** Lookahead Reasoning: a
cycle drafts its k steps, then the target's rows run, then the verifier judges. The asynchronous
variant, in which a target step starts as soon as its drafted prefix exists while drafting goes on,
runs over serving engines (module `lookahead_reasoning.engine_runtime`), not in these loops.
"""

FIGURES = """\
## Benchmark figures

- [auto-regimes-bf16.png](../benchmarks/results/auto-regimes-bf16.png): the CPU with native bf16, bf16,
  float32, int8 and w8a8 runs side by side: each mode's speedup over its own `ar`, and the plans `auto` chose.
- [auto-regimes.png](../benchmarks/results/auto-regimes.png): the AVX2-only CPU, float32 with oneDNN and
  with the default linears, the same two panels.
- [verifier-ablation.png](../benchmarks/results/verifier-ablation.png): every verifier on the step-pair
  bank, acceptance against the share of accepted pairs whose numbers differ (notebook 12 redraws it).
- Per-run plots (`speedup.png`, `accept_hist.png`, `predicted.png`) sit in `benchmarks/results/*-plots/`;
  [benchmarks/README.md](../benchmarks/README.md#every-figure-in-results) lists and explains them.
"""




def index_markdown(notebooks: list[Path], docs: Path = DOCS) -> str:
    """docs/README.md: the notebooks in reading order, one line each, a page marked when missing or stale."""
    lines = ["# Walkthroughs", "",
             "Each notebook runs on tiny random-weight models or on committed benchmark runs, most in under a",
             "minute on two CPU cores (05 serves the offline pair with llama.cpp's server, where it is built: a",
             "minute or two more); each opens with what it teaches and how long it runs, and the pages below show",
             "them as they ran, with their printed results and figures. Their numbers are the reading order: a",
             "loop first, then its formula (01-03 token SD, 04-07 Lookahead Reasoning), then the compiled path a",
             "GPU runs (08), then the measurements (09-13).", ""]
    for n, nb in enumerate(sorted(notebooks), start=1):
        page = page_path(nb, docs)
        state = ""
        if recorded_hash(page) is None:
            state = " (not rendered yet)"
        elif recorded_hash(page) != source_hash(nb):
            state = " (out of date)"
        about = ABOUT.get(nb.stem.split("_", 1)[0], "")
        lines.append(f"{n}. [{title(nb)}]({page.name}){state}: {about}")
    lines += ["", SYNC_NOTE,
              "The notebooks in `notebooks/` are stored without outputs. Re-render after editing one:", "",
              "    .venv/bin/python scripts/render_docs.py            # all notebooks",
              "    .venv/bin/python scripts/render_docs.py 05         # one of them", "",
              "`tests/test_docs.py` fails when a page is missing or older than its notebook (each page records",
              "a hash of the notebook's cells in its first line).", "",
              "Earlier names of the notebooks (links elsewhere may still use them): " +
              "; ".join(f"`{old}` is now `{new}`" for old, new in RENAMED.items()) + ".", ""]
    return "\n".join(lines) + "\n" + FIGURES + "\n" + DIAGRAMS


def write_index(notebooks: list[Path], docs: Path = DOCS) -> Path:
    path = docs / "README.md"
    docs.mkdir(parents=True, exist_ok=True)
    path.write_text(index_markdown(notebooks, docs), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="render only notebooks whose file name contains one of these")
    parser.add_argument("--out", type=Path, default=DOCS, help="folder for the pages (default docs/)")
    args = parser.parse_args(argv)
    notebooks = notebook_paths()
    chosen = [nb for nb in notebooks if not args.only or any(s in nb.name for s in args.only)]
    if not chosen:
        print(f"no notebook in {NOTEBOOKS} matches {args.only}", file=sys.stderr)
        return 2
    for nb in chosen:
        start = time.perf_counter()
        print(f"rendering {nb.name} ...", flush=True)
        page = render(nb, args.out)
        print(f"  wrote {page} in {time.perf_counter() - start:.0f} s", flush=True)
    print(f"wrote {write_index(notebooks, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
