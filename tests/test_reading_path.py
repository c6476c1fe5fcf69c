"""ARCHITECTURE.md's "How to read the code" map, held to the code: every function it names lives in the file it
names, and one `ar` token runs through exactly the calls of its first table, at most seven from
`LookaheadGenerator.generate` to the model's forward (a layer added on that path, or a function moved, fails here)."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest

from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.testing import tiny_model

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "lookahead_reasoning"
MOST_CALLS = 7  # from generate to the model's forward


def section() -> str:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    start = text.index("## How to read the code")
    return text[start:text.index("\n## ", start + 1)]


def table_after(marker: str) -> list[list[str]]:
    """The rows of the first Markdown table after ``marker``, cells stripped (header and rule left out)."""
    body = section()
    lines = body[body.index(marker):].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def ar_path() -> list[tuple[str, str]]:
    """(qualified name, file) of the first table, in order."""
    return [(names(call)[0], names(where)[0]) for call, where, _ in table_after("**One `ar` token")]


def resolve(qualname: str, file: str):
    module = importlib.import_module("lookahead_reasoning." + file.removesuffix(".py").replace("/", "."))
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)


def test_every_name_in_the_map_lives_in_the_file_it_names():
    named = ar_path() + [(name, names(row[0])[0]) for row in table_after("**One `lr` cycle")
                         for name in names(row[1])]
    assert len(named) >= 15
    for qualname, file in named:
        fn = resolve(qualname, file)
        assert Path(inspect.getsourcefile(fn)) == PACKAGE / file, f"{qualname} is not in {file}"


def test_the_lr_cycle_reads_in_four_files():
    files = [names(row[0])[0] for row in table_after("**One `lr` cycle")]
    assert len(files) == len(set(files)) <= 4


def calls_to_the_forward(mode: str) -> list[tuple[str, str]]:
    """(qualified name, file under the package) of every package frame from generate down to the first
    ``LM.forward`` of a ``mode`` run on tiny models."""
    gen = LookaheadGenerator(tiny_model(seed=0), tiny_model(seed=1), verifier="exact")
    seen: list[list[tuple[str, str]]] = []
    real = LM.forward

    def forward(self, *args, **kwargs):
        if not seen:
            frames, frame = [], sys._getframe(0)
            while frame is not None:
                path = Path(frame.f_code.co_filename)
                if PACKAGE in path.parents:
                    frames.append((frame.f_code.co_qualname, path.relative_to(PACKAGE).as_posix()))
                frame = frame.f_back
            seen.append([("LM.forward", "runtime/lm.py")] + frames)
        return real(self, *args, **kwargs)

    LM.forward = forward
    try:
        gen.generate([5, 6, 7], mode=mode, max_new_tokens=6)
    finally:
        LM.forward = real
    path = list(reversed(seen[0]))
    start = max(i for i, (name, _) in enumerate(path) if name == "LookaheadGenerator.generate")
    return path[start:]


def test_an_ar_token_runs_the_maps_calls_and_no_more_than_seven():
    path = calls_to_the_forward("ar")
    assert path == ar_path(), "the ar path differs from ARCHITECTURE.md's map:\n" + "\n".join(map(str, path))
    assert len(path) - 1 <= MOST_CALLS


@pytest.mark.parametrize("mode", ["sd", "lr"])
def test_the_other_fixed_modes_run_the_same_spine(mode):
    """``sd`` and ``lr`` reach the forward through the same loop and cycle (the spine's first three calls)."""
    assert [name for name, _ in calls_to_the_forward(mode)[:3]] == ["LookaheadGenerator.generate", "drive",
                                                                   "run_cycle"]
