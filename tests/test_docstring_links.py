"""Every cross-reference in a docstring (``:class:``, ``:func:``, ``:mod:``, ``:meth:``, ``:attr:``, ``:data:``,
``:exc:``, ``:obj:``) names something that exists, so a docstring never points a reader at where code used
to live. Targets resolve as Sphinx would: relative (``.x`` from the module's package, ``..x`` one up),
absolute, in the module's namespace, in the package, or on the class whose docstring holds them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import lookahead_reasoning

ROLE = re.compile(r":(class|func|mod|meth|data|attr|exc|obj):`([^`]+)`")


def _exists(path: str) -> bool:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        holder = obj
        for name in parts[i:-1]:
            holder = getattr(holder, name, None)
            if holder is None:
                return False
        if i == len(parts):
            return True
        last = parts[-1]
        return hasattr(holder, last) or last in (getattr(holder, "__annotations__", None) or {}) \
            or last in (getattr(holder, "__dataclass_fields__", None) or {})
    return False


def resolves(target: str, module: str, is_package: bool, owner: str | None) -> bool:
    t = target.strip()
    if "<" in t and t.endswith(">"):
        t = t[t.index("<") + 1:-1]
    t = t.lstrip("~").removesuffix("()")
    if t.startswith("."):
        dots = len(t) - len(t.lstrip("."))
        base = module.split(".")[:None if is_package else -1]
        base = base[:len(base) - (dots - 1)]
        return _exists(".".join(base + ([t[dots:]] if t[dots:] else [])))
    candidates = [t, f"{module}.{t}", f"lookahead_reasoning.{t}"] + ([f"{module}.{owner}.{t}"] if owner else [])
    return any(_exists(c) for c in candidates)


def _docstrings(module) -> list[tuple[str, str | None]]:
    """(docstring, the class it belongs to or None) of the module and what it defines."""
    found = [(module.__doc__ or "", None)]
    for name, obj in vars(module).items():
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            found.append((obj.__doc__ or "", None))
        elif inspect.isclass(obj):
            found.append((obj.__doc__ or "", name))
            for member in vars(obj).values():
                member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if callable(member):
                    found.append((getattr(member, "__doc__", None) or "", name))
    return found


def test_every_docstring_reference_resolves():
    broken = []
    for info in pkgutil.walk_packages(lookahead_reasoning.__path__, "lookahead_reasoning."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for doc, owner in _docstrings(module):
            for role, target in ROLE.findall(doc):
                if not resolves(target, info.name, info.ispkg, owner):
                    broken.append(f"{info.name}{'.' + owner if owner else ''}: :{role}:`{target}`")
    assert not broken, "docstring references to nothing:\n" + "\n".join(sorted(set(broken)))


def test_every_all_names_something_the_module_has():
    """``__all__`` holds names (strings) the module defines, so ``from module import *`` works."""
    wrong = []
    for info in pkgutil.walk_packages(lookahead_reasoning.__path__, "lookahead_reasoning."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        wrong += [f"{info.name}: {name!r}" for name in getattr(module, "__all__", ())
                  if not isinstance(name, str) or not hasattr(module, name)]
    assert not wrong, "__all__ entries that are not names of the module:\n" + "\n".join(wrong)


def test_a_reference_to_a_moved_name_is_caught():
    assert resolves("~..settings.Settings", "lookahead_reasoning.decoding.driver", False, None)
    assert not resolves("~.settings.Settings", "lookahead_reasoning.decoding.driver", False, None)
    assert resolves("close", "lookahead_reasoning.decoding.stepwise", False, "StepVerbs")
    assert not resolves("arun", "lookahead_reasoning.decoding.stepwise", False, "StepVerbs")
