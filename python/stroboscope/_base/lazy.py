"""The one PEP 562 helper of the package's faces: names loaded on first use, and ``dir()`` equal
to ``__all__``.

A face (a package's ``__init__``) lists its public names in ``__all__`` and, for those it does not
import itself, the module of its own package that defines each::

    __all__ = ["Sampler", "recover"]
    __getattr__, __dir__ = face(__name__, __all__, {"Sampler": ".sampler", "recover": ".spool"})

Targets are relative (``.sampler``, ``.recording.spool``): a face loads only from its own package,
so it hides no import from another room (the room table's checker reads the import lines).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def face(
    package: str,
    public: Iterable[str],
    lazy: Mapping[str, str] | None = None,
    preload: Mapping[str, Iterable[str]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the face of ``package``.

    Parameters
    ----------
    package : str
        The face's ``__name__``.
    public : iterable of str
        Its ``__all__``: what ``dir()`` lists.
    lazy : mapping of str to str, optional
        Public name -> the module, relative to ``package``, that defines it; imported on the
        first access of the name, which is then kept in the face (later lookups skip
        ``__getattr__``).
    preload : mapping of str to iterable of str, optional
        Lazy name -> further modules (relative too) imported when it loads: what its first use
        will need, paid where the user expects a cost (a Sampler's scopes load with the
        Sampler, so a process's first scope costs what any other does).

    Returns
    -------
    (__getattr__, __dir__)
        To assign at the face's module level.

    Raises
    ------
    ValueError
        A lazy name that is not public, or a target that is not relative to ``package``.
    """
    names = sorted(set(public))
    targets = dict(lazy or {})
    also = {name: tuple(mods) for name, mods in (preload or {}).items()}
    hidden = sorted((set(targets) | set(also)) - set(names))
    if hidden:
        raise ValueError(f"{package}: lazy names {hidden} are not in __all__")
    every = [*targets.values(), *(m for mods in also.values() for m in mods)]
    absolute = sorted(t for t in every if not t.startswith("."))
    if absolute:
        raise ValueError(
            f"{package}: lazy targets must be relative to the package (.module), got {absolute}"
        )

    def __getattr__(name: str) -> Any:
        target = targets.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(target, package), name)
        for module in also.get(name, ()):
            importlib.import_module(module, package)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return list(names)

    return __getattr__, __dir__
