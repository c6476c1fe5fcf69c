"""The code stays readable in the shape it has: short functions, few parameters, short files, and
subpackages that import one another in one direction only.

A function is at most 50 lines and takes at most 7 parameters (``self``/``cls`` not counted; ``*args``
and ``**kwargs`` count one each: a settings object or a small frozen options dataclass is how more
travel); a source file is at most 350 lines, and the package at most :data:`MAX_PACKAGE_LINES`. No function
takes a ``**kwargs`` bag, which would hide the names it really takes and dodge the parameter count, except
the public entry points listed in :data:`BAG_FORWARDERS`, each of which forwards its bag to one documented
callee (named there); the names such a function uses itself are parameters of their own, and every listed entry must exist and
still take a bag. Among the subpackages (``runtime``, ``decoding``, ``planning``, ``engines``, ...) the imports,
function-level ones included, form no cycle. The package's top-level modules are left out of the
cycle check: the low-level ones (errors, presets, sampling) are imported from everywhere, and the
front doors (generator, cli) import everything.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lookahead_reasoning"
MAX_FUNCTION_LINES, MAX_PARAMETERS, MAX_FILE_LINES = 50, 7, 350
MAX_PACKAGE_LINES = 18_600  # the whole of src/lookahead_reasoning; new code makes room for itself


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(SRC.rglob("*.py"))]


def _functions():
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(SRC), node


# Public entry points that may keep a ``**bag``: "path.py:function" or "path.py:Class.method" (path relative
# to src/lookahead_reasoning), each forwarding the bag to the callee named in its comment.
BAG_FORWARDERS = {
    "bench/datasets.py:load_hf",  # select(): limit, offset, sample, seed (as for load_jsonl)
    "bench/datasets.py:load_dataset",  # load_jsonl or load_hf, whichever the spec names
    "decoding/speculative.py:generate_sd",  # Settings.with_overrides
    "runtime/pair.py:as_lm",  # models.load_model
    "generator.py:LookaheadGenerator.__init__",  # models.load_model (after the Settings fields it documents)
    "generator.py:LookaheadGenerator.generate",  # Settings.with_overrides
    "models/gguf.py:load_gguf",  # transformers' from_pretrained
    "models/loading.py:load_model",  # LoadOptions (its fields)
    "settings.py:Settings.preset",  # Settings (its fields)
    "settings.py:Settings.with_overrides",  # dataclasses.replace on Settings (its fields)
    "testing.py:tiny_model",  # the architecture's model config (TINY_SHAPE's names)
    "testing.py:real_shape_lm",  # tiny_model (TINY_SHAPE's names, changing a real shape)
    "runtime/attention.py:masked_attention",
    "runtime/attention.py:flex_masked_attention",  # what transformers hands an attention function (dropout, sliding_window, ...): none is read
    "integrations/hf_generate.py:generate",  # GenerationConfig.update (what generate was given), after the library's keywords (OWN)
    "integrations/hf_generate.py:decoding",  # the library's keywords (OWN), checked by options_from
    "integrations/hf_generate.py:decoding.lookahead_decoding",  # the model kwargs generate prepared: only attention_mask is read
    "integrations/harness.py:LookaheadLM.__init__",  # harness_spec (the harness's model_args: the command line's option names)
    "verifiers/registry.py:check_verifier_spec",  # the registered verifier's constructor (names checked only)
    "verifiers/registry.py:make_verifier",  # the registered verifier's constructor
    "verifiers/registry.py:paper_judge",  # OpenAIJudgeVerifier: api_key, timeout
}


def _qualified(tree: ast.Module):
    """(qualified name, node) of every function and lambda: "Class.method", "outer.inner", "<lambda>"."""
    def walk(node: ast.AST, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                yield from walk(child, name + ".")
            elif isinstance(child, ast.Lambda):
                yield prefix + "<lambda>", child
                yield from walk(child, prefix)
            else:
                yield from walk(child, prefix)
    yield from walk(tree, "")


def _bags() -> dict[str, int]:
    """"path.py:qualified.name" -> line of every function or lambda that takes a ``**`` bag."""
    return {f"{path.relative_to(SRC).as_posix()}:{name}": node.lineno for path, tree in _modules()
            for name, node in _qualified(tree) if node.args.kwarg is not None}


def test_only_the_listed_public_forwarders_take_a_keyword_bag():
    hidden = sorted(f"{where} (line {line})" for where, line in _bags().items() if where not in BAG_FORWARDERS)
    assert not hidden, ("these take a **bag: name their parameters (a frozen options dataclass or a Settings "
                        "where there are more than 7), or, for a public entry point that forwards the bag to "
                        "one documented callee, list it in BAG_FORWARDERS:\n" + "\n".join(hidden))


def test_the_forwarder_list_has_no_stale_entries():
    bags = _bags()
    known = {f"{path.relative_to(SRC).as_posix()}:{name}" for path, tree in _modules() for name, _ in _qualified(tree)}
    missing = sorted(entry for entry in BAG_FORWARDERS if entry not in known)
    bagless = sorted(entry for entry in BAG_FORWARDERS if entry in known and entry not in bags)
    assert not missing and not bagless, (f"BAG_FORWARDERS names functions that do not exist: {missing}; "
                                         f"that take no **bag any more: {bagless}")


def test_the_bag_finder_finds_a_planted_bag():
    tree = ast.parse("class A:\n    def m(self, **kw): pass\ndef f(x, *, y=1): return lambda **o: o\n")
    found = {name: node.args.kwarg is not None for name, node in _qualified(tree)}
    assert found == {"A.m": True, "f": False, "f.<lambda>": True}


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


def test_the_package_does_not_grow():
    """The package's lines, all files together, stay under a ceiling: a feature that adds code removes as much
    elsewhere, or lifts the ceiling in the same change where the reason can be read."""
    total = sum(len(p.read_text(encoding="utf-8").splitlines()) for p, _ in _modules())
    assert total <= MAX_PACKAGE_LINES, f"src/lookahead_reasoning has {total} lines, over {MAX_PACKAGE_LINES}"


# Where the drivers read policies and plans: every attribute read there is declared on the protocol
# (decoding.driver.CyclePolicy, settings.CyclePlan), never probed for.
PROBE_FREE = ("decoding", "runtime", "planning", "engine_runtime.py")
_POLICY_LIKE = re.compile(r"(^|_)(policy|plan)$")


def _probes(tree: ast.Module) -> list[int]:
    """Lines of ``getattr(x, ...)`` / ``hasattr(x, ...)`` where x (a name, or an attribute's last name) is
    named like a policy or a plan: ``policy``, ``self.policy``, ``plan``, ``auto_policy``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args:
            owner = node.args[0]
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if _POLICY_LIKE.search(name):
                found.append(node.lineno)
    return found


def test_no_driver_probes_a_policy_for_an_attribute_its_protocol_does_not_declare():
    probes = [f"{path.relative_to(SRC)}:{line}" for path, tree in _modules()
              if path.relative_to(SRC).parts[0] in PROBE_FREE for line in _probes(tree)]
    assert not probes, ("these probe a policy or a plan with getattr/hasattr: declare the attribute on "
                        "CyclePolicy (with its default) or CyclePlan and read it plainly:\n" + "\n".join(probes))


def test_the_probe_finder_finds_a_planted_probe():
    tree = ast.parse("getattr(policy, 'k', 1)\ngetattr(self.policy, 'pads')\nhasattr(plan, 'x')\n"
                     "getattr(planner, 'k')\ngetattr(verifier, 'name')\n")
    assert _probes(tree) == [1, 2, 3]


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


def test_no_module_of_the_package_is_imported_inside_a_function():
    """Every import of the package's own modules stands at the top of its file, where the structure can
    be read (a function-level import hid two import cycles once)."""
    inside = []
    for path, tree in _modules():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                own = (isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("lookahead_reasoning"))
                       or isinstance(node, ast.Import) and any(a.name.startswith("lookahead_reasoning") for a in node.names))
                if own:
                    inside.append(f"{path.relative_to(SRC)}:{node.lineno} in {fn.name}")
    assert not inside, "\n".join(inside)


def _table_classes() -> set[str]:
    """The class names in the first column of ARCHITECTURE.md's table of settings-like classes."""
    text = (SRC.parents[1] / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("## Settings-like classes", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return {name.strip(" `") for cell in rows for name in cell.split(",")}


def test_the_architecture_notes_list_every_settings_class_and_no_other():
    defined = {node.name for _, tree in _modules() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    settings_like = {name for name in defined if name.endswith(("Config", "Settings", "Options", "Spec", "Bench"))}
    listed = _table_classes()
    assert settings_like <= listed, f"add to ARCHITECTURE.md's table: {sorted(settings_like - listed)}"
    assert listed <= defined, f"ARCHITECTURE.md's table names classes that are gone: {sorted(listed - defined)}"


SETTINGS_LIKE = ("Config", "Settings", "Options", "Spec", "Preset", "Plan")  # what a class of knobs is called
MAX_SETTINGS_LIKE = 12


def test_the_settings_like_classes_are_few():
    """transformers has one GenerationConfig and vLLM one SpeculativeConfig: a knob has one home here too (a
    class of knobs that another one duplicates is folded into it, not added beside it)."""
    defined = {node.name for _, tree in _modules() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    settings_like = sorted(name for name in defined if name.endswith(SETTINGS_LIKE))
    assert len(settings_like) <= MAX_SETTINGS_LIKE, f"{len(settings_like)} settings-like classes: {settings_like}"


def _unit(path: Path) -> str:
    """The unit a source file belongs to: its subpackage, or for a top-level file its module's name."""
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else path.stem


def _unit_imports() -> dict[str, set[str]]:
    """unit -> the other units its files import (relative and absolute imports, at any depth in the code)."""
    units = {_unit(p) for p, _ in _modules()}
    edges: dict[str, set[str]] = defaultdict(set)
    for path, tree in _modules():
        parts = path.relative_to(SRC).parts[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                target = list(parts)[:len(parts) - node.level + 1] + (node.module.split(".") if node.module else [])
                names = [target[0]] if target else [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lookahead_reasoning."):
                names = [node.module.split(".")[1]]
            else:
                continue
            edges[_unit(path)].update(n for n in names if n in units and n != _unit(path))
    return edges


def _floors() -> list[tuple[str, set[str]]]:
    """ARCHITECTURE.md's floors, bottom first: (floor, its units)."""
    text = (SRC.parents[1] / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| ") and "`" in line]
    return [(row[1].strip(), set(re.findall(r"`([\w.]+)`", row[2]))) for row in rows]


def test_the_architecture_floors_are_the_code_s():
    """Every unit of the package is on exactly one floor of ARCHITECTURE.md, and none imports a unit on a
    floor above its own (the package's __init__ and __main__, which wire it, aside)."""
    floors = _floors()
    level = {unit: i for i, (_, units) in enumerate(floors) for unit in units}
    units = {_unit(p) for p, _ in _modules()} - {"__init__", "__main__"}
    counted = [unit for _, names in floors for unit in names]
    assert sorted(units) == sorted(counted), (f"not on a floor: {sorted(units - set(counted))}; on one that is not a "
                                              f"unit, or twice: {sorted(u for u in counted if counted.count(u) > 1 or u not in units)}")
    upward = [f"{unit} ({floors[level[unit]][0]}) imports {dep} ({floors[level[dep]][0]})"
              for unit, deps in _unit_imports().items() if unit in level for dep in deps if level[dep] > level[unit]]
    assert not upward, "\n".join(upward)


# One home per decision: mode -> plan is decoding.driver.mode_plan, for every entry and both runtimes; the
# width rule of mode auto is decoding.driver.check_auto_width; nothing else builds a mode's fixed policy.
PLAN_HOME = ("decoding/driver.py", "mode_plan")
WIDTH_HOME = ("decoding/driver.py", "check_auto_width")
# The fixed policies built elsewhere are no mode: a window of plain decoding timed by the engine benchmark, and
# the step-model runtime's default for its teaching entry.
OTHER_FIXED_POLICIES = {("engine_runtime.py", "window_plan"), ("decoding/stepwise.py", "generate_stepwise")}


def _calls_by_function(name_test) -> set[tuple[str, str]]:
    """(file, enclosing function) of every call or comparison ``name_test(node)`` accepts."""
    found = set()
    for path, tree in _modules():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if name_test(node):
                        found.add((path.relative_to(SRC).as_posix(), fn.name))
    return found


def _builds_fixed_policy(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "FixedPolicy"


def _compares_width_to_one(node: ast.AST) -> bool:
    return (isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "width"
            and any(isinstance(c, ast.Constant) and c.value == 1 for c in node.comparators)
            and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops))


def _requires_width_one(node: ast.AST) -> bool:
    """A rule (``require(...)``) whose condition compares a width with 1."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "require" and node.args
            and any(_compares_width_to_one(n) for n in ast.walk(node.args[0])))


def test_mode_to_plan_has_one_home():
    builders = _calls_by_function(_builds_fixed_policy)
    assert builders == {PLAN_HOME} | OTHER_FIXED_POLICIES, (
        "a mode's fixed policy is built by decoding.driver.mode_plan alone; call it instead of building one: "
        f"{sorted(builders - {PLAN_HOME} - OTHER_FIXED_POLICIES)}")


def test_autos_width_rule_has_one_home():
    rules = _calls_by_function(_requires_width_one)
    assert rules == {WIDTH_HOME}, f"auto's width rule lives in check_auto_width alone; found it in {sorted(rules)}"


def test_the_home_finders_find_planted_copies():
    tree = ast.parse("def f(settings):\n    require(settings.width == 1)\n    return FixedPolicy(0, mode='ar')\n")
    assert [n for n in ast.walk(tree) if _requires_width_one(n)] and [n for n in ast.walk(tree) if _builds_fixed_policy(n)]


def test_gamma_has_one_meaning_in_every_plan_a_mode_makes():
    """gamma is the drafted tokens per SD iteration of a plan that runs token SD, and 0 in a plan that runs none:
    never None ("someone else's"), in every fixed mode's plans, at a step boundary and mid-step, on both runtimes."""
    from lookahead_reasoning.decoding.driver import ENGINE_FIXED_MODES, FIXED_MODES, Position, mode_plan
    from lookahead_reasoning.settings import Settings

    cases = [(mode, False) for mode in FIXED_MODES] + [(mode, True) for mode in ENGINE_FIXED_MODES]
    for mode, engine in cases:
        settings, policy = mode_plan(mode, Settings(), engine=engine)
        runs_sd = not engine and settings.token_sd is not None
        assert policy.gamma == (settings.token_sd.gamma if runs_sd else 0), (mode, engine, policy.gamma)
        for at_boundary in (True, False):
            plan = policy.plan(Position(0, 64, at_boundary, 10))
            assert isinstance(plan.gamma, int) and plan.gamma == policy.gamma, (mode, engine, at_boundary, plan)
            assert plan.label.startswith(("sd@", "lr-sd@")) == runs_sd, plan.label
