"""Old public names that still work: each use warns (:class:`DeprecationWarning`) and names the new one.

* :func:`renamed_keywords`  ``f(old=x)`` runs as ``f(new=x)`` (on a class: its constructor);
* :func:`renamed_attribute` ``obj.old`` reads (and, where allowed, writes) ``obj.new``;
* :func:`renamed_method`    ``obj.old(...)`` calls ``obj.new(...)``;
* :func:`renamed_function`  a module-level ``old(...)`` calls ``new(...)``;
* :func:`renamed_globals`   a module ``__getattr__`` that serves ``module.old`` as ``module.new``.

The old names, in one place: ``ModelDrafter(stop_below=)`` / ``.stop_below`` and
``check_stop_below`` (now ``draft_stop_below`` / ``check_draft_stop_below``); ``Plan.stop``,
``CyclePlan(stop=)`` / ``.stop``, ``FixedK(stop=)``, ``Planner(stop=)``, ``TokenBook.model(stop=)`` and
``TokenBook.from_rates(stop=)`` (now ``draft_stop_below``); ``PlannerConfig(stops=)`` / ``.stops`` (now
``draft_stop_below_choices``); ``LM.widths`` (now ``LM.pad_to``), ``WidthPolicy`` (now ``PadPolicy``),
``CostGrid.width`` (now ``CostGrid.padded_n``) and ``ForwardTiming.width`` (now ``ForwardTiming.n``).
"""

from __future__ import annotations

import functools
import sys
import warnings
from typing import Any, Callable


def warn_renamed(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (``stacklevel`` 3: the caller's caller)."""
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=stacklevel)


def renamed_keywords(**renames: str) -> Callable[[Any], Any]:
    """Decorator of a function or class: each keyword ``old`` in ``renames`` (old="new") is passed on
    as ``new``, with a warning. Passing both is a TypeError."""
    def wrap(target: Any) -> Any:
        func = target.__init__ if isinstance(target, type) else target
        owner = target.__qualname__

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{owner}() got both {old}= (deprecated) and {new}=")
                    warn_renamed(f"{owner}({old}=...)", f"{new}=")
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)
        if isinstance(target, type):
            target.__init__ = call
            return target
        return call
    return wrap


def renamed_attribute(new: str, old: str) -> property:
    """A property (``old``, e.g. "LM.widths") that reads and writes the attribute ``new``, with a warning."""
    def get(self: Any) -> Any:
        warn_renamed(old, new)
        return getattr(self, new)

    def set_(self: Any, value: Any) -> None:
        warn_renamed(old, new)
        setattr(self, new, value)
    return property(get, set_, doc=f"Deprecated alias of ``{new}``.")


def renamed_method(new: str, old: str) -> Callable[..., Any]:
    """A method (``old``, e.g. "CostGrid.width") that calls the method ``new``, with a warning."""
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        warn_renamed(old, new)
        return getattr(self, new)(*args, **kwargs)
    method.__doc__ = f"Deprecated alias of :meth:`{new}`."
    return method


def renamed_function(new: Callable[..., Any], old: str) -> Callable[..., Any]:
    """A function named ``old`` that calls ``new``, with a warning."""
    @functools.wraps(new)
    def call(*args: Any, **kwargs: Any) -> Any:
        warn_renamed(old, new.__name__)
        return new(*args, **kwargs)
    call.__name__ = call.__qualname__ = old
    call.__doc__ = f"Deprecated alias of :func:`{new.__name__}`."
    return call


def renamed_globals(module: str, **renames: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving each old global name in ``renames`` (old="new") as the new one."""
    def getattr_(name: str) -> Any:
        if name in renames:
            warn_renamed(f"{module}.{name}", renames[name])
            return getattr(sys.modules[module], renames[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return getattr_


__all__ = ["renamed_attribute", "renamed_function", "renamed_globals", "renamed_keywords", "renamed_method",
           "warn_renamed"]
