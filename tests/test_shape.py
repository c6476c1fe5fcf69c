"""The code stays readable in the shape it has: short functions, few parameters, short files, and
subpackages that import one another in one direction only.

A function is at most 50 lines and takes at most 7 parameters (``self``/``cls`` not counted; ``*args``
and ``**kwargs`` count one each: a settings object is how more travel); a source file is at most 350
lines. Among the subpackages (``runtime``, ``decoding``, ``planning``, ``engines``, ...) the imports,
function-level ones included, form no cycle. The package's top-level modules are left out of the
cycle check: the low-level ones (errors, presets, sampling) are imported from everywhere, and the
front doors (generator, cli) import everything.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lookahead_reasoning"
MAX_FUNCTION_LINES, MAX_PARAMETERS, MAX_FILE_LINES = 50, 7, 350


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(SRC.rglob("*.py"))]


def _functions():
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(SRC), node


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def test_functions_are_short_and_take_few_parameters():
    long = [f"{p}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)" for p, fn in _functions()
            if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES]
    wide = [f"{p}:{fn.lineno} {fn.name} ({_parameters(fn)} parameters)" for p, fn in _functions()
            if _parameters(fn) > MAX_PARAMETERS]
    assert not long and not wide, "\n".join(long + wide)


def test_source_files_are_short():
    long = [f"{p.relative_to(SRC)} ({n} lines)" for p, _ in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]
    assert not long, "\n".join(long)


def _subpackage_imports() -> dict[str, set[str]]:
    """subpackage -> the subpackages its modules import (relative imports, at any depth in the code)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path, tree in _modules():
        parts = path.parent.relative_to(SRC).parts
        if not parts:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.level > 0):
                continue
            base = list(parts)[:len(parts) - node.level + 1]
            target = base + (node.module.split(".") if node.module else [])
            if target and target[0] != parts[0] and (SRC / target[0]).is_dir():
                edges[parts[0]].add(target[0])
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the subpackages, or None (depth-first search with a path stack)."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [])):
            return found
    return None


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


def test_subpackages_import_one_another_in_one_direction():
    edges = _subpackage_imports()
    assert "decoding" in edges.get("planning", set())  # the walk sees the imports at all
    assert _cycle(edges) is None, f"import cycle between subpackages: {' -> '.join(_cycle(edges))}"
